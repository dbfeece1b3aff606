#!/usr/bin/env bash
# h5flow dependency build: MPICH (Debian), parallel HDF5 1.14.5 (Debian source package + our patches),
# mpi4py and h5py built from their sdists, and the project virtual environment.
#
# Idempotent: every built artefact lives in a cache outside the clone, keyed by the versions, the patch
# hashes and the compiler, so a second run (or a fresh clone on the same machine) takes seconds.
#
#   scripts/setup.sh            build what is missing, then write .venv and build/stack.env
#   scripts/setup.sh --print-key  print the cache key and exit
#
# Environment knobs: H5FLOW_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/h5flow),
# H5FLOW_THREADSAFE=ON|OFF (default ON, see docs/BUILD.md), H5FLOW_JOBS (default: nproc).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

# ---- pinned versions ------------------------------------------------------------------------------
HDF5_DEB_VERSION="1.14.5+repack-3"
HDF5_VERSION="1.14.5"
HDF5_ORIG="hdf5_1.14.5+repack.orig.tar.gz"
HDF5_ORIG_SHA256="71cdb04c151ef4e8a7f88907adfc4f3b75afd44e96fbd55775e1c9d7c4e7c112"
HDF5_DEB_SUITE="trixie"
DEBIAN_MIRROR="${H5FLOW_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
MPI4PY_VERSION="4.1.2"
H5PY_VERSION="3.16.0"
PY_BUILD_REQS=("setuptools>=77" "wheel" "Cython>=3.0.2,<4" "numpy>=2,<3" "pkgconfig")
ADIOS2_REQ="adios2>=2.12.1,<2.13"   # optional extra: the adios2 transport (PyPI wheel, built without MPI)
# h5flow advise: Darshan logs as input (PyDarshan, a manylinux wheel with libdarshan-util inside); the trace
# notebook run by the tests (nbclient, nbformat, ipykernel)
PY_ADVISE_REQS=("darshan>=3.4" "nbclient>=0.10" "nbformat>=5.9" "ipykernel>=6.29")
PY_RUNTIME_REQS=("numpy>=2,<3" "pyzmq>=25" "psutil>=5.9" "matplotlib>=3.7" "rich>=13" "pandas>=2" "pytest>=8" "pytest-timeout>=2.2" "pytest-xdist>=3.5" "pyroaring>=1.0" "hypothesis>=6.100")
THREADSAFE="${H5FLOW_THREADSAFE:-ON}"
JOBS="${H5FLOW_JOBS:-$(nproc)}"
APT_PACKAGES=(libmpich-dev mpich cmake ninja-build pkg-config zlib1g-dev libxml2-dev gcc make patch xz-utils ca-certificates curl)

CACHE_ROOT="${H5FLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/h5flow}"
LOGDIR="$ROOT/build/logs"
mkdir -p "$LOGDIR"

# ---- helpers --------------------------------------------------------------------------------------
c_bold=""; c_red=""; c_off=""
if [ -t 1 ]; then c_bold=$'\e[1m'; c_red=$'\e[31m'; c_off=$'\e[0m'; fi
say()  { printf '%s[setup]%s %s\n' "$c_bold" "$c_off" "$*"; }
die()  { printf '%s[setup] ERROR:%s %s\n' "$c_red" "$c_off" "$*" >&2; exit 1; }

# run STEP LOGFILE CMD... : run a command with its output in a log file; on failure name the step and
# show the end of the log.
run() {
  local step=$1 log=$2; shift 2
  if ! "$@" >"$log" 2>&1; then
    printf '%s[setup] ERROR:%s step "%s" failed; full log: %s\n--- last 30 lines ---\n' \
      "$c_red" "$c_off" "$step" "$log" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# ---- step 1: system packages ----------------------------------------------------------------------
need_apt=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$p")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  say "installing Debian packages: ${need_apt[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "missing Debian packages (${need_apt[*]}) and not root: install them with apt-get, then re-run"
    SUDO="sudo"
  fi
  run "apt-get update" "$LOGDIR/apt-update.log" $SUDO apt-get update
  run "apt-get install" "$LOGDIR/apt-install.log" env DEBIAN_FRONTEND=noninteractive \
    $SUDO apt-get install -y --no-install-recommends "${need_apt[@]}"
fi
command -v mpicc >/dev/null || die "mpicc not found after installing libmpich-dev"
# A shell that sourced build/stack.env has this clone's .venv first on PATH; the venv may be rebuilt below,
# so the base interpreter must come from outside it.
PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -vxF "$ROOT/.venv/bin" | paste -sd: -)
unset VIRTUAL_ENV
python3 -c 'import venv, ensurepip' 2>/dev/null || die "python3 cannot create virtual environments: install python3-venv (Debian) or use a Python with ensurepip"

CC_ID="$(mpicc -show 2>/dev/null | awk '{print $1}') $(gcc -dumpfullversion 2>/dev/null) mpich-$(dpkg-query -W -f='${Version}' libmpich-dev)"
PATCH_HASH=$(for p in third_party/hdf5/patches/*.patch; do [ -e "$p" ] || continue; sha256sum "$p"; done | sha256sum | cut -c1-12)
PYVER=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
SCRIPT_REV=4   # bump when this script changes how artefacts are built
KEY_TEXT="rev=$SCRIPT_REV hdf5=$HDF5_DEB_VERSION patches=$PATCH_HASH ts=$THREADSAFE cc=$CC_ID mpi4py=$MPI4PY_VERSION h5py=$H5PY_VERSION py=$PYVER"
KEY="hdf5-${HDF5_VERSION}-$(printf '%s' "$KEY_TEXT" | sha256sum | cut -c1-16)"
if [ "${1:-}" = "--print-key" ]; then echo "$KEY"; echo "$KEY_TEXT"; exit 0; fi

CACHE="$CACHE_ROOT/$KEY"
PREFIX="$CACHE/hdf5"
WHEELS="$CACHE/wheels"
mkdir -p "$CACHE" "$CACHE_ROOT/src"

# A concurrent setup (two clones at once) waits instead of corrupting the cache.
exec 9>"$CACHE/.lock"
flock 9

# ---- step 2: HDF5 from Debian's source package ----------------------------------------------------
fetch_hdf5_source() {
  local dst="$CACHE_ROOT/src/$HDF5_ORIG"
  if [ -f "$dst" ] && [ "$(sha256_of "$dst")" = "$HDF5_ORIG_SHA256" ]; then return 0; fi
  rm -f "$dst"
  say "fetching HDF5 $HDF5_DEB_VERSION source package (suite $HDF5_DEB_SUITE)"
  local apt_dir="$CACHE_ROOT/src/apt" tmp
  mkdir -p "$apt_dir/lists/partial"
  # A private deb-src list: the system's sources are left alone.
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $DEBIAN_MIRROR $HDF5_DEB_SUITE main" \
    > "$apt_dir/sources.list"
  local aptopt=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o "Dir::Etc::sourceparts=-"
                -o "Dir::State::Lists=$apt_dir/lists" -o "APT::Get::List-Cleanup=0"
                -o "APT::Sandbox::User=root")
  tmp=$(mktemp -d "$CACHE_ROOT/src/dl.XXXXXX")
  if apt-get "${aptopt[@]}" update >"$LOGDIR/hdf5-fetch.log" 2>&1 &&
     (cd "$tmp" && apt-get "${aptopt[@]}" source --download-only "hdf5=$HDF5_DEB_VERSION") >>"$LOGDIR/hdf5-fetch.log" 2>&1; then
    :
  else
    # The suite moved on (or apt-get source is unavailable): take the same orig tarball from the pool.
    say "apt-get source failed (see $LOGDIR/hdf5-fetch.log); trying the Debian pool directly"
    run "download HDF5 orig tarball" "$LOGDIR/hdf5-fetch-pool.log" \
      curl -fsSL --retry 3 -o "$tmp/$HDF5_ORIG" "$DEBIAN_MIRROR/pool/main/h/hdf5/$HDF5_ORIG"
  fi
  [ -f "$tmp/$HDF5_ORIG" ] || die "HDF5 source tarball $HDF5_ORIG was not downloaded; see $LOGDIR/hdf5-fetch.log"
  local got; got=$(sha256_of "$tmp/$HDF5_ORIG")
  [ "$got" = "$HDF5_ORIG_SHA256" ] || die "sha256 of $HDF5_ORIG is $got, expected $HDF5_ORIG_SHA256: refusing to build an unverified source"
  mv "$tmp/$HDF5_ORIG" "$dst"
  rm -rf "$tmp"
}

# HDF5's own VOL API test suite (test/API, `h5_api_test`), which `h5flow conformance` runs against a
# connector. The library above is built and installed with BUILD_TESTING=OFF; only then is the same build
# tree reconfigured with the tests enabled and the one target built, so the installed library is exactly
# the one built without tests. The executable and its test library go to <prefix>/libexec/: HDF5 gives
# its executables the runpath $ORIGIN/../lib:$ORIGIN, which from there is the installed libhdf5.
build_api_test() {
  local bdir=$1 dest="$PREFIX/libexec"
  say "building HDF5's VOL API test (h5_api_test); log: $LOGDIR/hdf5-api-test.log"
  run "configure HDF5 API tests" "$LOGDIR/hdf5-api-test-configure.log" cmake "$bdir" \
    -DBUILD_TESTING=ON -DHDF5_TEST_API=ON -DHDF5_TEST_API_INSTALL=OFF \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON
  run "build h5_api_test" "$LOGDIR/hdf5-api-test.log" cmake --build "$bdir" --parallel "$JOBS" --target h5_api_test
  mkdir -p "$dest"
  cp "$bdir/bin/h5_api_test" "$dest/"
  cp -P "$bdir"/bin/libhdf5_test.so* "$dest/"
  local resolved
  resolved=$(env -u LD_LIBRARY_PATH ldd "$dest/h5_api_test" | awk '$1 ~ /^libhdf5\.so/ {print $3}')
  [ -n "$resolved" ] && [ "$(realpath "$resolved")" = "$(realpath "$PREFIX/lib/$(basename "$resolved")")" ] \
    || die "h5_api_test does not resolve libhdf5 to $PREFIX/lib (ldd $dest/h5_api_test)"
}

build_hdf5() {
  if [ -f "$PREFIX/.complete" ]; then say "HDF5 $HDF5_VERSION: cached ($PREFIX)"; return 0; fi
  fetch_hdf5_source
  local work="$CACHE/hdf5-build"
  rm -rf "$work" "$PREFIX"; mkdir -p "$work"
  say "unpacking HDF5 and applying $(ls third_party/hdf5/patches/*.patch 2>/dev/null | wc -l) project patch(es)"
  tar xzf "$CACHE_ROOT/src/$HDF5_ORIG" -C "$work"
  local src; src=$(find "$work" -maxdepth 1 -mindepth 1 -type d -name 'hdf5-*' | head -n1)
  for p in third_party/hdf5/patches/*.patch; do
    [ -e "$p" ] || continue
    run "apply patch $(basename "$p")" "$LOGDIR/hdf5-patch-$(basename "$p").log" patch -d "$src" -p1 -N -i "$ROOT/$p"
  done
  say "configuring HDF5 (parallel, subfiling, HL, tools, threadsafe=$THREADSAFE); log: $LOGDIR/hdf5-configure.log"
  run "configure HDF5" "$LOGDIR/hdf5-configure.log" cmake -G Ninja -S "$src" -B "$work/build" \
    -DCMAKE_C_COMPILER=mpicc -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_INSTALL_RPATH="$PREFIX/lib" \
    -DBUILD_SHARED_LIBS=ON -DBUILD_STATIC_LIBS=OFF -DONLY_SHARED_LIBS=ON \
    -DHDF5_ENABLE_PARALLEL=ON -DHDF5_ENABLE_SUBFILING_VFD=ON \
    -DHDF5_BUILD_HL_LIB=ON -DHDF5_BUILD_TOOLS=ON -DHDF5_BUILD_UTILS=ON \
    -DHDF5_BUILD_FORTRAN=OFF -DHDF5_BUILD_JAVA=OFF -DHDF5_BUILD_CPP_LIB=OFF \
    -DBUILD_TESTING=OFF -DHDF5_BUILD_EXAMPLES=OFF \
    -DHDF5_ENABLE_Z_LIB_SUPPORT=ON -DHDF5_ENABLE_SZIP_SUPPORT=OFF \
    -DHDF5_ENABLE_THREADSAFE="$THREADSAFE" -DALLOW_UNSUPPORTED="$THREADSAFE"
  say "building HDF5 with $JOBS jobs (about 3-4 minutes on 2 cores); log: $LOGDIR/hdf5-build.log"
  run "build HDF5" "$LOGDIR/hdf5-build.log" cmake --build "$work/build" --parallel "$JOBS"
  run "install HDF5" "$LOGDIR/hdf5-install.log" cmake --install "$work/build"
  build_api_test "$work/build"
  [ -x "$PREFIX/bin/h5fuse" ] || [ -f "$PREFIX/bin/h5fuse.sh" ] || [ -f "$PREFIX/bin/h5fuse" ] \
    || die "HDF5 installed without h5fuse; see $LOGDIR/hdf5-install.log"
  rm -rf "$work"
  printf '%s\n' "$KEY_TEXT" > "$PREFIX/.complete"
}

# ---- step 3: mpi4py and h5py wheels from sdists ----------------------------------------------------
build_wheels() {
  if [ -f "$WHEELS/.complete" ]; then say "mpi4py $MPI4PY_VERSION + h5py $H5PY_VERSION wheels: cached"; return 0; fi
  local benv="$CACHE/build-venv"
  rm -rf "$benv" "$WHEELS"; mkdir -p "$WHEELS"
  run "create build venv" "$LOGDIR/wheels-venv.log" python3 -m venv "$benv"
  run "install build requirements" "$LOGDIR/wheels-reqs.log" "$benv/bin/pip" install "${PY_BUILD_REQS[@]}"
  # --no-cache-dir: pip's wheel cache keys a wheel built from an sdist by the sdist's URL only, so without
  # it a new cache key (new patches) would get the h5py built against the previous key's HDF5 (its
  # runpath pointing there) instead of one built against this key's.
  say "building mpi4py $MPI4PY_VERSION from its sdist against MPICH; log: $LOGDIR/wheels-mpi4py.log"
  run "build mpi4py" "$LOGDIR/wheels-mpi4py.log" env CC=mpicc MPICC=mpicc \
    "$benv/bin/pip" wheel --no-cache-dir --no-deps --no-binary mpi4py --no-build-isolation -w "$WHEELS" "mpi4py==$MPI4PY_VERSION"
  run "install mpi4py into build venv" "$LOGDIR/wheels-mpi4py-install.log" \
    "$benv/bin/pip" install --no-deps "$WHEELS"/mpi4py-*.whl
  say "building h5py $H5PY_VERSION from its sdist against parallel HDF5; log: $LOGDIR/wheels-h5py.log"
  run "build h5py" "$LOGDIR/wheels-h5py.log" env CC=mpicc HDF5_MPI=ON HDF5_DIR="$PREFIX" \
    LDFLAGS="-Wl,-rpath,$PREFIX/lib" \
    "$benv/bin/pip" wheel --no-cache-dir --no-deps --no-binary h5py --no-build-isolation -w "$WHEELS" "h5py==$H5PY_VERSION"
  rm -rf "$benv"
  printf '%s\n' "$KEY_TEXT" > "$WHEELS/.complete"
}

# ---- step 4: the project venv ---------------------------------------------------------------------
VENV="$ROOT/.venv"
STAMP_TEXT="$KEY $(sha256sum pyproject.toml | cut -c1-16)"
make_venv() {
  if [ -f "$VENV/.h5flow-stamp" ] && [ "$(cat "$VENV/.h5flow-stamp")" = "$STAMP_TEXT" ] && [ -x "$VENV/bin/python" ]; then
    say ".venv: up to date"; return 0
  fi
  say "creating .venv (h5py/mpi4py from the cached wheels, h5flow editable)"
  rm -rf "$VENV"
  run "create .venv" "$LOGDIR/venv.log" python3 -m venv "$VENV"
  run "install runtime requirements" "$LOGDIR/venv-reqs.log" "$VENV/bin/pip" install "setuptools>=77" "${PY_RUNTIME_REQS[@]}" \
    "${PY_ADVISE_REQS[@]}"
  run "install mpi4py/h5py wheels" "$LOGDIR/venv-wheels.log" "$VENV/bin/pip" install --no-deps --no-index \
    "$WHEELS"/mpi4py-*.whl "$WHEELS"/h5py-*.whl
  run "install h5flow (editable)" "$LOGDIR/venv-h5flow.log" "$VENV/bin/pip" install --no-deps --no-build-isolation -e "$ROOT"
  printf '%s\n' "$STAMP_TEXT" > "$VENV/.h5flow-stamp"
}

# ---- step 4b: optional extras (never fatal) ---------------------------------------------------------
install_optional() {
  if "$VENV/bin/python" -c 'import adios2' >/dev/null 2>&1; then
    say ".venv: adios2 present (optional extra)"; return 0
  fi
  if "$VENV/bin/pip" install "$ADIOS2_REQ" >"$LOGDIR/venv-adios2.log" 2>&1; then
    say ".venv: installed $ADIOS2_REQ (optional extra: the adios2 transport)"
  else
    printf '%s[setup] WARNING:%s the optional adios2 wheel (%s) could not be installed (log: %s);\n' \
      "$c_red" "$c_off" "$ADIOS2_REQ" "$LOGDIR/venv-adios2.log" >&2
    printf '[setup]          the adios2 transport and its tests are skipped; everything else works.\n' >&2
  fi
}

# ---- step 5: native code (C, CMake) ---------------------------------------------------------------
build_native() {
  # A build tree configured against another HDF5 (another cache key, e.g. after a new patch) would keep
  # using it: CMake caches HDF5_DIR and ignores the new HDF5_ROOT. Start such a tree over.
  if [ -f build/native/CMakeCache.txt ] && ! grep -q "^HDF5_DIR:PATH=$PREFIX/" build/native/CMakeCache.txt; then
    say "build/native was configured against another HDF5: reconfiguring from scratch"
    rm -rf build/native
  fi
  say "building native/ (C11, -Wall -Wextra -Werror); log: $LOGDIR/native.log"
  run "configure native" "$LOGDIR/native-configure.log" cmake -G Ninja -S native -B build/native \
    -DCMAKE_C_COMPILER=mpicc -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHDF5_ROOT="$PREFIX" \
    -DH5FLOW_PLUGIN_DIR="$ROOT/build/plugins" -DH5FLOW_SANITIZE="${H5FLOW_SANITIZE:-OFF}"
  run "build native" "$LOGDIR/native.log" cmake --build build/native --parallel "$JOBS"
}

t0=$(date +%s)
build_hdf5
build_wheels
flock -u 9
make_venv
install_optional
# h5flow's own bytecode, up to date before any run: with PYTHONDONTWRITEBYTECODE set (CI images, some
# clusters) every process of every MPI job would otherwise compile ~30 modules anew (~40 ms of start-up
# per rank, on the critical path of `h5flow run`); compileall only rewrites what changed.
"$VENV/bin/python" -m compileall -q -j 0 "$ROOT/src/h5flow" >"$LOGDIR/compileall.log" 2>&1 ||
  say "WARNING: compiling h5flow's bytecode failed (log: $LOGDIR/compileall.log); it still runs, only starts slower"
# Environment every command of the project runs under (sourced by the Makefile and the tests).
mkdir -p build/plugins
cat > build/stack.env <<ENV
# written by scripts/setup.sh — the stack this clone runs on
export H5FLOW_HDF5_DIR="$PREFIX"
export H5FLOW_CACHE_KEY="$KEY"
export PATH="$VENV/bin:$PREFIX/bin:\$PATH"
export LD_LIBRARY_PATH="$PREFIX/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export HDF5_PLUGIN_PATH="\${HDF5_PLUGIN_PATH:-$ROOT/build/plugins}"
ENV
build_native
say "stack ready in $(( $(date +%s) - t0 )) s: HDF5 $HDF5_VERSION at $PREFIX, venv at $VENV"
