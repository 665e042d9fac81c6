# attnkit: `make demo` (install deps, build, run the demo) and `make test` (install deps, build, test).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: setup configure build test test-isa check-headers demo report-check bench clean

setup:
	bash scripts/setup.sh

# Ninja, and a fresh configure only when the build folder has none (a build folder that an older
# Makefile configured with another generator is reconfigured from scratch).
configure: setup
	@if [ -f $(BUILD)/CMakeCache.txt ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$$' $(BUILD)/CMakeCache.txt; then \
	  echo "make: $(BUILD) was configured with another generator; configuring it anew"; \
	  rm -rf $(BUILD); fi
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# ctest runs $(JOBS) test processes at once; OpenBLAS would give each of them a pool of $(JOBS)
# spinning workers (it ignores LibTorch's thread setting), which made some tests 20x slower.
test: build
	OPENBLAS_NUM_THREADS=1 ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

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

bench: build
	@if [ -x bench/run.sh ]; then bash bench/run.sh $(BUILD); else echo "no benchmarks yet"; fi

clean:
	rm -rf $(BUILD)
