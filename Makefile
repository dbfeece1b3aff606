# h5flow — the two commands a newcomer needs: `make demo` and `make test`. Both do their own setup.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
STACK := build/stack.env
PYTEST_ARGS ?=
# Two pytest workers (pytest-xdist): much of the suite's time is spent waiting on subprocesses, MPI jobs
# and streams, so a second worker overlaps that waiting with the other's work; the tests marked slow are
# scheduled first so that both end together (tests/conftest.py).
# `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 2

.PHONY: help setup demo test test-full tsan clean distclean

help:
	@echo "make demo   build/reuse the stack, then run the main job (h5flow info + the in-transit demo: oscillator -> hdf5 stream -> histogram)"
	@echo "make test   build/reuse the stack, then run the test suite (MPI tests under mpiexec)"
	@echo "make test-full  make test with the full variants: every connector's C tests under ASan/UBSan and TSan, the whole tools matrix under ASan"
	@echo "make setup  only build/reuse the stack (HDF5 1.14.5 parallel, mpi4py, h5py, .venv, native/)"
	@echo "make tsan   the threaded connectors (pass-through core, h5flow_async, h5flow_cache) and their C tests under ThreadSanitizer"
	@echo "make clean  remove this clone's build products (.venv, build/); the shared cache stays"
	@echo "make distclean  also remove the shared dependency cache of this stack's key"

setup:
	@bash scripts/setup.sh

demo: setup
	@source $(STACK) && h5flow info && h5flow demo

test: setup
	@source $(STACK) && { python -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS) || { rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: pytest collected no test (exit 5): failing" >&2; fi; exit $$rc; }; }

# the tests marked full_only and the full variants of those with a quick subset (tests/conftest.py: --full)
test-full:
	@$(MAKE) --no-print-directory test PYTEST_ARGS="--full $(PYTEST_ARGS)"

# ThreadSanitizer: its own build tree (build/native-tsan, plugins in build/native-tsan/plugins); the C tests of
# the connectors that run threads. HDF5 and MPI are not instrumented: their own locks are pthread calls TSan sees.
# UCX (MPICH's transport) hooks memory calls in a way that crashes under TSan when a thread starts: off here.
TSAN_BUILD := build/native-tsan
tsan: setup
	@source $(STACK) && \
	  cmake -G Ninja -S native -B $(TSAN_BUILD) -DHDF5_ROOT="$$H5FLOW_HDF5_DIR" -DCMAKE_C_COMPILER=mpicc \
	    -DH5FLOW_TSAN=ON -DCMAKE_BUILD_TYPE=Debug -DH5FLOW_PLUGIN_DIR=$$PWD/$(TSAN_BUILD)/plugins > /dev/null && \
	  cmake --build $(TSAN_BUILD) --target connectors/h5flow_log/all connectors/passthru/all connectors/h5flow_async/all \
	    connectors/h5flow_cache/all && \
	  for t in passthru h5flow_async h5flow_cache; do \
	    HDF5_PLUGIN_PATH=$$PWD/$(TSAN_BUILD)/plugins TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	    UCX_MEM_EVENTS=no UCX_MEM_MALLOC_HOOKS=no \
	      ctest --output-on-failure --test-dir $(TSAN_BUILD)/connectors/$$t || exit 1; \
	  done

clean:
	rm -rf .venv build .pytest_cache h5flow-demo
	find src tests -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	@key=$$(bash scripts/setup.sh --print-key | head -n1); \
	  dir="$${H5FLOW_CACHE:-$${XDG_CACHE_HOME:-$$HOME/.cache}/h5flow}/$$key"; \
	  echo "rm -rf $$dir"; rm -rf "$$dir"
