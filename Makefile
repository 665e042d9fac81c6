# attnkit: `make demo` (install deps, build, run the demo) and `make test` (install deps, build, test).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: setup configure build test demo bench clean

setup:
	bash scripts/setup.sh

configure: setup
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# ctest runs $(JOBS) test processes at once; OpenBLAS would give each of them a pool of $(JOBS)
# spinning workers (it ignores LibTorch's thread setting), which made some tests 20x slower.
test: build
	OPENBLAS_NUM_THREADS=1 ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

demo: build
	bash scripts/demo.sh $(BUILD)

bench: build
	@if [ -x bench/run.sh ]; then bash bench/run.sh $(BUILD); else echo "no benchmarks yet"; fi

clean:
	rm -rf $(BUILD)
