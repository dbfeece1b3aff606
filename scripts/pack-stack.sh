#!/usr/bin/env bash
# Pack this clone's built stack into one relocatable tarball, so that `h5flow bench transit` (and the other
# in-transit commands) run on another x86-64 Linux machine with the same or a newer glibc and no build:
# a bigger node than the development box, where M producers and N consumers each get a core of their own.
#
#   scripts/pack-stack.sh OUT.tar.xz        # after `make setup`, in the clone's root
#   # on the other machine, in a copy of the same source tree:
#   tar xf OUT.tar.xz -C /tmp && source /tmp/h5flow-stack/env.sh && h5flow bench transit ...
#
# What goes in: the Python interpreter the virtual environment was made from (standard library without its
# tests and GUI modules), the packages h5flow's in-transit commands and their figures import (numpy, h5py,
# mpi4py, pyzmq, psutil, rich, matplotlib and their dependencies), HDF5's shared libraries, the HDF5 plugins
# built here, MPICH's launcher (hydra) and every shared library these need that is not glibc itself
# (MPICH, UCX and UCX's transport modules, hwloc, ...). ADIOS2 is left out (the wheel alone is ~60 MiB).
# h5flow itself is not packed: env.sh puts the source tree in H5FLOW_SRC (default: ./src of the current
# directory) on PYTHONPATH.
set -euo pipefail

out=${1:?usage: scripts/pack-stack.sh OUT.tar.xz}
[[ -f build/stack.env ]] || { echo "pack-stack: build/stack.env missing; run make setup first" >&2; exit 2; }
# shellcheck disable=SC1091
source build/stack.env
out=$(realpath -m "$out")

py=$(readlink -f .venv/bin/python3)
ver=$(.venv/bin/python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
base=$(.venv/bin/python3 -c 'import sys; print(sys.base_prefix)')
site=$(.venv/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage=$work/h5flow-stack
mkdir -p "$stage"/{bin,lib/ucx,py/bin,py/lib/python$ver/site-packages,plugins}

# -- the interpreter and its standard library --
cp "$py" "$stage/py/bin/python$ver"
ln -s "python$ver" "$stage/py/bin/python3"
ln -s "python$ver" "$stage/py/bin/python"
cp -a "$base"/lib/libpython"$ver"*.so* "$stage/py/lib/" 2>/dev/null || true
tar -C "$base/lib/python$ver" \
    --exclude=./test --exclude=./idlelib --exclude=./tkinter --exclude=./turtledemo --exclude=./ensurepip \
    --exclude=./lib2to3 --exclude='./config-*' --exclude=./site-packages --exclude='*/tests' -cf - . |
    tar -C "$stage/py/lib/python$ver" -xf -

# -- the packages the in-transit commands import (see the bench's import list) --
pkgs=(numpy numpy.libs h5py h5py.libs mpi4py psutil zmq pyzmq.libs rich markdown_it mdurl
      matplotlib mpl_toolkits PIL pillow.libs dateutil pyparsing fontTools kiwisolver packaging cycler contourpy
      six.py typing_extensions.py)
for p in "${pkgs[@]}"; do
    if [[ -e "$site/$p" ]]; then
        cp -a "$site/$p" "$stage/py/lib/python$ver/site-packages/"
    fi
done
find "$stage/py" \( -name tests -o -name __pycache__ \) -type d -prune -exec rm -rf {} +
rm -f "$stage/py/lib/python$ver/lib-dynload"/_tkinter*.so

# -- HDF5, the plugins, MPICH's launcher --
cp -a "$H5FLOW_HDF5_DIR"/lib/*.so* "$stage/lib/"
cp -a build/plugins/. "$stage/plugins/" 2>/dev/null || true
for b in mpiexec.hydra hydra_pmi_proxy; do cp "$(command -v $b)" "$stage/bin/"; done
ln -s mpiexec.hydra "$stage/bin/mpiexec"
ucxmods=$(dirname "$(ldconfig -p | awk '/libucs.so.0 /{print $NF; exit}')")/ucx
cp -a "$ucxmods"/*.so* "$stage/lib/ucx/" 2>/dev/null || true

# -- every shared library these load that is not glibc's own --
is_glibc() { [[ $1 =~ /(libc|libm|libpthread|libdl|librt|libresolv|libutil|ld-linux-x86-64)\.so ]]; }
mapfile -t objs < <(find "$stage" -type f \( -name '*.so*' -o -perm -u+x \) -print)
declare -A seen=()
for o in "${objs[@]}"; do
    file -b "$o" | grep -q ELF || continue
    while read -r lib; do
        [[ -n $lib && -z ${seen[$lib]:-} ]] || continue
        seen[$lib]=1
        is_glibc "$lib" && continue
        case $lib in "$stage"/*) continue;; esac
        [[ -e "$stage/lib/$(basename "$lib")" ]] || cp -L "$lib" "$stage/lib/"
    done < <(LD_LIBRARY_PATH="$stage/lib:$stage/py/lib:$stage/lib/ucx:${LD_LIBRARY_PATH:-}" ldd "$o" 2>/dev/null |
             awk '/=> \//{print $3}')
done

# debug sections are most of the bytes (libpython alone 23 MiB); the symbols the loader needs stay. Only what
# was built from source is stripped: a wheel's libraries were rewritten by auditwheel/patchelf, and strip
# breaks their load commands ("ELF load command address/offset not page-aligned")
sp="$stage/py/lib/python$ver/site-packages"
find "$stage/bin" "$stage/lib" "$stage/py/bin" "$stage/py/lib"/*.so* "$stage/py/lib/python$ver/lib-dynload" \
     "$sp/h5py" "$sp/mpi4py" -type f \( -name '*.so*' -o -perm -u+x \) -print0 |
    while IFS= read -r -d '' o; do file -b "$o" | grep -q ELF && strip --strip-unneeded "$o" 2>/dev/null || true; done

cat > "$stage/env.sh" <<'EOF'
# source me: puts the packed h5flow stack first on PATH and the loader's path; h5flow's sources come from
# H5FLOW_SRC (default: ./src of the current directory)
_h5s=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH="$_h5s/py/bin:$_h5s/bin:$PATH"
export LD_LIBRARY_PATH="$_h5s/lib:$_h5s/py/lib:$_h5s/lib/ucx${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UCX_MODULE_DIR="$_h5s/lib/ucx"
export HDF5_PLUGIN_PATH="$_h5s/plugins"
export H5FLOW_HDF5_DIR="$_h5s"
export H5FLOW_BUILD_DIR="$_h5s"  # holds plugins/ (the h5flow_log connector for layout="log")
export PYTHONPATH="${H5FLOW_SRC:-$PWD/src}${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONNOUSERSITE=1
EOF
printf '%s\n' '#!/bin/sh' '# h5flow from the sources on PYTHONPATH (see env.sh)' 'exec python3 -m h5flow.cli "$@"' > "$stage/bin/h5flow"
chmod +x "$stage/bin/h5flow"
# bytecode is left out (it doubles the size): compile it once there, before timing anything
cat >> "$stage/env.sh" <<'EOF'
[[ -e "$_h5s/.compiled" ]] || { python3 -m compileall -q -j 0 "$_h5s/py/lib" >/dev/null 2>&1; touch "$_h5s/.compiled"; }
EOF
tar -C "$work" -I 'xz -T0' -cf "$out" h5flow-stack
echo "pack-stack: wrote $out ($(du -h "$out" | cut -f1))"
