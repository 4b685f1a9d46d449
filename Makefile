# tokpos: thin wrapper over CMake. See README.md.
BUILD      ?= build
BUILD_TYPE ?= Release
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
# Warnings are errors by default (CI builds this way); `make WERROR=OFF` to relax locally.
WERROR     ?= ON
CMAKE_ARGS ?=

.PHONY: all deps configure build test demo bench clean install

all: build

deps:
	@tools/ensure-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DTOKPOS_WERROR=$(WERROR) $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: build
	$(BUILD)/bin/tokpos demo

bench: build
	$(BUILD)/bin/tokpos_bench --benchmark_min_time=0.2

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX),)

clean:
	rm -rf $(BUILD) out
