#!/usr/bin/env python3
"""GPT-2 small's embedding stage with and without tokpos.hf.patch, in one run.

    python3 bench/hf_patch.py [--threads 2] [--reps 21] [--quick]

The model is GPT-2 small's shape (V = 50257, D = 768, 1024 positions) from
its config, with random weights (nothing is downloaded). The unpatched stage
is what GPT2Model.forward runs: wte(ids) + wpe(position_ids), the (1, T)
position row broadcast over B; the patched stage is the one fused call the
patched forward makes instead (tokpos.hf._gpt2.embed). Shapes: a prefill
(B = 8, T = 512), a decode step (B = 8, T = 1 at position 511), and a
training step of the stage (the prefill's forward and its backward into both
tables). One more row times BERT's sum before LayerNorm at
all-MiniLM-L6-v2's shape (B = 32, T = 128, random weights): the model's
(word + token_type) + position against the patch's one call. Each figure is the median of --reps runs after one warm-up, the
two run in turns; torch and tokpos use the same thread count. The outputs
(and, for the training step, both tables' gradients) are checked bit for bit
in the run, and so are the logits of one whole-model forward (B = 1,
T = 128). The whole forward is not timed: the embedding stage is a small part
of it, below this shared machine's run-to-run noise.
"""

import argparse
import copy
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import cpu_details, cpu_model, fmt_ratio, fmt_time  # noqa: E402

import tokpos  # noqa: E402
import tokpos.hf  # noqa: E402
from tokpos.hf import _bert, _gpt2, _llama  # noqa: E402


def median_times(a, b, reps):
    """The medians of reps runs of a and of b, run in turns (a, b, a, b, ...)
    after one warm-up each, so a change in the machine's load reaches both."""
    a(), b()
    ta, tb = [], []
    for _ in range(reps):
        for fn, times in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--quick", action="store_true", help="a tiny model and 3 reps (checks that the script runs)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    torch.set_num_threads(args.threads)
    tokpos.set_num_threads(args.threads)
    if args.quick:
        config = transformers.GPT2Config(vocab_size=503, n_positions=64, n_embd=32, n_layer=1, n_head=2)
        prefill, decode_at, reps = (2, 16), 15, 3
    else:
        config = transformers.GPT2Config()  # GPT-2 small: 50257 x 768, 1024 positions, 12 layers
        prefill, decode_at, reps = (8, 512), 511, args.reps
    torch.manual_seed(0)
    reference = transformers.GPT2LMHeadModel(config).eval()
    model = copy.deepcopy(reference)
    tokpos.hf.patch(model)
    plain, fused = reference.transformer, model.transformer

    print(f"tokpos.hf.patch, GPT-2 embedding stage: V={config.vocab_size} D={config.n_embd} "
          f"L={config.n_positions}, float32, {args.threads} thread(s), median of {reps}, run in turns")
    print(f"CPU: {cpu_model()} ({cpu_details()}); torch {torch.__version__}, transformers {transformers.__version__}")
    B, T = prefill
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (B, T), generator=g)
    step = torch.randint(0, config.vocab_size, (B, 1), generator=g)
    rows = {}

    def stage(m, ids, pos):
        return m.wte(ids) + m.wpe(pos)

    agree = True
    # The positions as each forward makes them when none are given: the
    # model's a (1, T) tensor, the patched forward's the start of the run.
    with torch.no_grad():
        for name, x, start in (("prefill", ids, 0), ("decode", step, decode_at)):
            pos = (torch.arange(x.shape[1]) + start)[None]
            agree &= torch.equal(stage(plain, x, pos), _gpt2.embed(fused, x, None, start))
            rows[f"{name} B={x.shape[0]} T={x.shape[1]}"] = median_times(
                lambda: stage(plain, x, pos), lambda: _gpt2.embed(fused, x, None, start), reps
            )

    d_out = torch.randn(B, T, config.n_embd, generator=g)
    pos = torch.arange(T)[None]

    def train(m, fn, pos):
        m.wte.weight.grad = m.wpe.weight.grad = None
        fn(m, ids, pos).backward(d_out)

    train(plain, stage, pos)
    train(fused, _gpt2.embed, None)
    agree &= torch.equal(plain.wte.weight.grad, fused.wte.weight.grad)
    agree &= torch.equal(plain.wpe.weight.grad, fused.wpe.weight.grad)
    rows[f"train step B={B} T={T} (fwd + bwd)"] = median_times(
        lambda: train(plain, stage, pos), lambda: train(fused, _gpt2.embed, None), reps
    )

    # BERT's sum before LayerNorm, all-MiniLM-L6-v2's shape (V = 30522,
    # D = 384, 512 positions, 2 token types), random weights: the model's
    # (word + token_type) + position against the one compose_typed call.
    if args.quick:
        bert_config = transformers.BertConfig(vocab_size=211, hidden_size=32, max_position_embeddings=64)
        bB, bT = 2, 16
    else:
        bert_config = transformers.BertConfig(vocab_size=30522, hidden_size=384, max_position_embeddings=512)
        bB, bT = 32, 128
    bert = transformers.models.bert.modeling_bert.BertEmbeddings(bert_config).eval()
    bert_ids = torch.randint(0, bert_config.vocab_size, (bB, bT), generator=g)
    bert_types = (torch.arange(bT) >= bT // 2).long().expand(bB, bT)
    bert_pos = bert.position_ids[:, :bT]

    def bert_stage():
        return (bert.word_embeddings(bert_ids) + bert.token_type_embeddings(bert_types)) + bert.position_embeddings(
            bert_pos
        )

    def bert_fused():
        return _bert.embed_sum(bert, bert_ids, bert_types, bert_pos, None)

    with torch.no_grad():
        agree &= torch.equal(bert_stage(), bert_fused())
        rows[f"BERT sum B={bB} T={bT} (MiniLM's shape)"] = median_times(bert_stage, bert_fused, reps)

    # The Llama family's application of cos and sin to q and k (one attention
    # layer's apply_rotary_pos_emb), at Llama-2-7B's heads (32 of 128) as the
    # attention holds them: the (B, T, H, D) projection viewed (B, H, T, D).
    from transformers.models.llama import modeling_llama

    heads, hd = (4, 16) if args.quick else (32, 128)
    for lB, lT in ((1, 16 if args.quick else 512), (8, 1)):
        q = torch.randn(lB, lT, heads * hd, generator=g).view(lB, lT, heads, hd).transpose(1, 2)
        k = torch.randn(lB, lT, heads * hd, generator=g).view(lB, lT, heads, hd).transpose(1, 2)
        angle = torch.rand(1, lT, hd // 2, generator=g) * 100
        cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
        theirs = modeling_llama.apply_rotary_pos_emb
        ours = _llama._application(theirs, contiguous=False)
        with torch.no_grad():
            a, b = theirs(q, k, cos, sin), ours(q, k, cos, sin)
            # The same values in the same memory order (a stride of a size-1 dimension addresses nothing).
            agree &= all(
                torch.equal(x, y) and all(n == 1 or sx == sy for n, sx, sy in zip(x.shape, x.stride(), y.stride()))
                for x, y in zip(a, b)
            )
            rows[f"Llama q, k rotation B={lB} T={lT} H={heads} D={hd}"] = median_times(
                lambda: theirs(q, k, cos, sin), lambda: ours(q, k, cos, sin), reps
            )

    whole = ids[:1, : min(T, 128)]
    with torch.no_grad():
        agree &= torch.equal(reference(whole).logits, model(whole).logits)

    width = max(len(k) for k in rows)
    print(f"{'':{width}}  {'unpatched':>10}  {'patched':>10}  speedup")
    for k, (a, b) in rows.items():
        print(f"{k:{width}}  {fmt_time(a):>10}  {fmt_time(b):>10}  {fmt_ratio(a / b)}")
    print("outputs agree (bitwise: stage outputs, gradients, logits)" if agree else "OUTPUTS DIFFER")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
