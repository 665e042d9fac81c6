# attnkit: `make demo` (install deps, build, run the demo) and `make test` (install deps, build, test).
# TORCH=<python>: build against that Python's torch package (2.7+) instead of Debian's LibTorch
# 1.13, in its own build folder (docs/architecture.md, "Building against LibTorch 2.x").
TORCH ?=
ifneq ($(TORCH),)
BUILD ?= build-torch2
CMAKE_FLAGS_TORCH := -DATTNKIT_TORCH_PYTHON=$(TORCH)
endif
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: setup configure build test test-python build-torch2 test-torch2 test-isa check-headers demo report-check bench clean configure-sanitize fuzz test-asan soak

setup:
	bash scripts/setup.sh

# Ninja, and a fresh configure only when the build folder has none (a build folder that an older
# Makefile configured with another generator is reconfigured from scratch).
configure: setup
	@if [ -f $(BUILD)/CMakeCache.txt ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$$' $(BUILD)/CMakeCache.txt; then \
	  echo "make: $(BUILD) was configured with another generator; configuring it anew"; \
	  rm -rf $(BUILD); fi
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) $(CMAKE_FLAGS_TORCH)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# ctest runs $(JOBS) test processes at once; OpenBLAS would give each of them a pool of $(JOBS)
# spinning workers (it ignores LibTorch's thread setting), which made some tests 20x slower.
# The ctest suite, then the Python package against the pinned PyTorch 2.x (test-python below).
# The Python package's venv (a ~2.5 GB download, little CPU) is made in the background while the
# C++ build runs; test_python_package.sh waits for it (scripts/python_package_venv.sh's lock).
test: configure
	@mkdir -p $(BUILD)
	@echo "make: making the Python package's venv in the background (log: $(BUILD)/python-package-venv.log)"
	@(bash scripts/python_package_venv.sh > $(BUILD)/python-package-venv.log 2>&1 &)
	cmake --build $(BUILD) -j $(JOBS)
	OPENBLAS_NUM_THREADS=1 ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	bash scripts/test_python_package.sh

# The Python package (docs/python.md): built with pip against the pinned PyTorch 2.x of
# ~/.cache/attnkit/venv-py (made on first use) and tested with pytest (tests/python_package/).
# Independent of the CMake build. PYTEST_ARGS="-k softmax" selects tests.
PYTEST_ARGS ?=
test-python:
	bash scripts/test_python_package.sh $(PYTEST_ARGS)

# The whole suite against the pinned PyTorch 2.x of the benchmark venv (scripts/bench_venv.sh makes
# it once, about 2.5 GB), in build-torch2/; tests that cannot run there skip with their reason.
TORCH2_PYTHON = $(or $(ATTNKIT_CACHE),$(HOME)/.cache/attnkit)/venv-bench/bin/python
build-torch2:
	bash scripts/bench_venv.sh > /dev/null
	$(MAKE) build TORCH=$(TORCH2_PYTHON)

test-torch2: build-torch2
	OPENBLAS_NUM_THREADS=1 ctest --test-dir build-torch2 --output-on-failure -j $(JOBS)

# The whole suite once per kernel instruction set and OpenBLAS core type (docs/testing.md).
test-isa: build
	bash scripts/test_isa.sh $(BUILD)

# Every public header compiles alone (no precompiled header).
check-headers: configure
	cmake --build $(BUILD) -j $(JOBS) --target attnkit_header_check

demo: build
	bash scripts/demo.sh $(BUILD)

# The report as a browser shows it (Debian's chromium, headless): console messages, empty
# sections, outside references; screenshot in $(REPORT_DIR)/report.png. Uses demo-output/ from
# `make demo` when it is there, else runs `attnkit demo --quick` into $(BUILD)/report-check.
REPORT_DIR ?= $(if $(wildcard demo-output/report.html),demo-output,$(BUILD)/report-check)
report-check: build
	@if [ ! -f $(REPORT_DIR)/report.html ]; then $(BUILD)/attnkit demo --quick --out $(REPORT_DIR); fi
	/usr/bin/python3 scripts/report_check.py $(REPORT_DIR)/report.html --screenshot $(REPORT_DIR)/report.png

# BENCH=attention: only bench/compare.py (attention vs its peers and the targets), docs/benchmarks.md.
BENCH ?= all
bench: build
	BENCH=$(BENCH) bash bench/run.sh $(BUILD)

clean:
	rm -rf $(BUILD)

# ---- robustness (docs/robustness.md) -------------------------------------------------------------
# One clang build with AddressSanitizer + UndefinedBehaviorSanitizer + libFuzzer coverage serves
# both `make fuzz` and `make test-asan` (a second instrumented build would cost as long again).
SANITIZE_BUILD ?= build-fuzz
SANITIZE_FLAGS ?= -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" -DATTNKIT_FUZZ=ON -DATTNKIT_BUILD_BENCH=OFF
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
# FUZZ_RUNS=1000000: stop each target after that many executions (FUZZ_SECONDS still bounds it);
# FUZZ_JOBS=2: two targets at once; FUZZ_MAX_LEN: largest input (default libFuzzer's choice).
FUZZ_RUNS ?=
FUZZ_JOBS ?= 1
FUZZ_MAX_LEN ?=
# The unit tests under ASan + UBSan (leak checks on): every ctest entry except the patterns of
# scripts/asan_exclude.txt, each with its reason (docs/robustness.md).
ASAN_EXCLUDE ?= $(shell grep -v -e '^\#' -e '^$$' scripts/asan_exclude.txt | paste -sd'|')

configure-sanitize: setup
	cmake -S . -B $(SANITIZE_BUILD) -G Ninja $(SANITIZE_FLAGS)

fuzz: configure-sanitize
	cmake --build $(SANITIZE_BUILD) -j $(JOBS) --target attnkit_fuzz_targets
	FUZZ_RUNS=$(FUZZ_RUNS) FUZZ_JOBS=$(FUZZ_JOBS) FUZZ_MAX_LEN=$(FUZZ_MAX_LEN) \
	  bash scripts/fuzz.sh $(SANITIZE_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

test-asan: configure-sanitize
	cmake --build $(SANITIZE_BUILD) -j $(JOBS)
	OPENBLAS_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(SANITIZE_BUILD) --output-on-failure -j $(JOBS) $(if $(ASAN_EXCLUDE),-E '$(ASAN_EXCLUDE)')

# Long fault-injection runs (kill -9 loops over many runs); `make test` runs short versions.
soak: build
	ATTNKIT_SOAK=1 OPENBLAS_NUM_THREADS=1 ctest --test-dir $(BUILD) --output-on-failure -R 'Soak|Fault'
