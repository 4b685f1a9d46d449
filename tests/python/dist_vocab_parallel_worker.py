"""One rank of the vocab-parallel checks, started by test_vocab_parallel.py as
`python -m torch.distributed.run --standalone --nproc_per_node=N
dist_vocab_parallel_worker.py DIR` (gloo). Every rank compares its results
with the one-process modules (tokpos.torch.EmbeddingComposer over a
TokenEmbedding and a LearnedPositionalEmbedding) computed here, prints
"rank R: FAIL ..." for each difference and "rank R: all N checks passed" at
the end, and exits 1 if anything differed. DIR is a directory every rank
shares (the safetensors files)."""

from __future__ import annotations

import json
import os
import pathlib
import sys
import traceback

import numpy as np
import torch
import torch.distributed as dist

import tokpos
from tokpos.torch import (
    EmbeddingComposer,
    LearnedPositionalEmbedding,
    SinusoidalPositionalEmbedding,
    TokenEmbedding,
    VocabParallelComposer,
    VocabParallelEmbedding,
)

RANK = WORLD = 0
FAILURES: list = []
CHECKS = 0


def say(msg: str) -> None:
    print(f"rank {RANK}: {msg}", flush=True)


def check(ok: bool, what: str) -> None:
    global CHECKS
    CHECKS += 1
    if not ok:
        FAILURES.append(what)
        say(f"FAIL {what}")


def same(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    """Bitwise equality of float32 tensors, except that -0 equals +0
    (torch.equal compares values)."""
    if a.shape != b.shape:
        check(False, f"{what}: shape {tuple(a.shape)} != expected {tuple(b.shape)}")
        return
    if torch.equal(a, b):
        check(True, what)
        return
    diff = (a != b).nonzero()
    i = tuple(int(x) for x in diff[0])
    check(
        False,
        f"{what}: {diff.shape[0]} elements differ, first at {i}: got {a[i].item()!r}, expected {b[i].item()!r}",
    )


def expect_error(kind, needles, fn, what: str) -> None:
    try:
        fn()
    except kind as e:
        msg = str(e)
        missing = [n for n in needles if n not in msg]
        check(not missing, f"{what}: {kind.__name__} message {msg!r} does not name {missing}")
        if not missing:
            say(f"{what} raised {kind.__name__}: {msg}")
        return
    except Exception as e:  # noqa: BLE001
        check(False, f"{what}: raised {type(e).__name__}: {e} instead of {kind.__name__}")
        return
    check(False, f"{what}: no {kind.__name__} raised")


def shard_rows(V: int, pad: int, world: int) -> int:
    """ceil(V_padded / world), computed here independently of the core."""
    vp = (V + pad - 1) // pad * pad
    return (vp + world - 1) // world


def boundary_ids(V: int, S: int, world: int) -> list:
    """v0 - 1, v0, v1 - 1, v1 of every rank's range, 0 and V - 1, inside [0, V)."""
    out = {0, V - 1}
    for r in range(world):
        v0, v1 = r * S, (r + 1) * S
        out.update(x for x in (v0 - 1, v0, v1 - 1, v1) if 0 <= x < V)
    return sorted(out)


def make_ids(V: int, S: int, B: int, T: int, seed: int, dtype) -> torch.Tensor:
    """(B, T) ids holding every boundary id, the rest drawn from the
    boundaries and [0, V) (so rows repeat), the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    edges = boundary_ids(V, S, WORLD)
    assert len(edges) <= B * T
    n_rest = B * T - len(edges)
    rest_edges = torch.tensor(edges)[torch.randint(len(edges), (n_rest // 2,), generator=g)]
    rest_any = torch.randint(V, (n_rest - n_rest // 2,), generator=g)
    flat = torch.cat([torch.tensor(edges), rest_edges, rest_any])
    flat = flat[torch.randperm(flat.numel(), generator=g)]
    return flat.reshape(B, T).to(dtype)


def reference(V, D, L, seed, ids, position_ids, start, G):
    """The one-process composer: output, token table gradient, position table gradient."""
    tok = TokenEmbedding(V, D, seed=seed)
    pos = LearnedPositionalEmbedding(L, D, seed=seed + 1)
    out = EmbeddingComposer(tok, pos)(ids, position_ids=position_ids, start=start)
    out.backward(G)
    return out.detach(), tok.weight.grad, pos.weight.grad, tok.weight.detach()


def check_shard_memory(vpe, V, D, pad, what):
    S = shard_rows(V, pad, WORLD)
    check(tuple(vpe.weight.shape) == (S, D), f"{what}: weight shape {tuple(vpe.weight.shape)} != (S, D) = ({S}, {D})")
    check(
        vpe.weight.numel() * vpe.weight.element_size() == S * D * 4,
        f"{what}: weight holds {vpe.weight.numel() * vpe.weight.element_size()} bytes, not S*D*4 = {S * D * 4}",
    )
    if vpe.weight.grad is not None:
        g = vpe.weight.grad
        check(tuple(g.shape) == (S, D), f"{what}: grad shape {tuple(g.shape)} != ({S}, {D})")
        check(g.numel() * g.element_size() == S * D * 4, f"{what}: grad bytes {g.numel() * g.element_size()}")


def real_rows(V, pad):
    S = shard_rows(V, pad, WORLD)
    v0 = RANK * S
    v1 = max(v0, min(v0 + S, V))
    return S, v0, v1


def composer_case(V, D, pad, L, B, T, *, sp, position_ids, start, seed, ids_dtype, flat=False):
    what = (
        f"V={V} D={D} pad={pad} B={B} T={T} sp={sp} start={start} "
        f"position_ids={'given' if position_ids is not None else 'None'} ids={ids_dtype} flat={flat}"
    )
    S, v0, v1 = real_rows(V, pad)
    n = v1 - v0
    ids = make_ids(V, S, B, T, seed, ids_dtype)
    g = torch.Generator().manual_seed(seed + 100)
    G = torch.randn((B, T, D), generator=g)
    if flat:
        ids, G = ids[0], G[0]
        position_ids = None if position_ids is None else position_ids[0]
    ref_out, ref_dtok, ref_dpos, ref_table = reference(V, D, L, seed, ids, position_ids, start, G)

    vpe = VocabParallelEmbedding(V, D, seed=seed, pad_vocab_to_multiple_of=pad)
    pos = LearnedPositionalEmbedding(L, D, seed=seed + 1)
    comp = VocabParallelComposer(vpe, pos, sequence_parallel=sp)
    same(vpe.weight.detach()[:n], ref_table[v0:v1], f"{what}: initial shard rows [{v0}, {v1})")
    check(bool((vpe.weight.detach()[n:] == 0).all()), f"{what}: initial padding rows are not zero")
    out = comp(ids, position_ids=position_ids, start=start)
    if sp:
        c = T // WORLD
        sl = slice(RANK * c, (RANK + 1) * c)
        exp_out = ref_out[..., sl, :]
        g_local = G[..., sl, :].contiguous()
    else:
        exp_out, g_local = ref_out, G
    same(out.detach(), exp_out, f"{what}: forward")
    out.backward(g_local)
    grad = vpe.weight.grad
    same(grad[:n], ref_dtok[v0:v1], f"{what}: weight grad rows [{v0}, {v1})")
    check(bool((grad[n:] == 0).all()), f"{what}: padding rows' gradient is not zero")
    same(pos.weight.grad, ref_dpos, f"{what}: position table grad")
    check_shard_memory(vpe, V, D, pad, what)


def embedding_case(V, D, pad, B, T, seed):
    what = f"VocabParallelEmbedding V={V} D={D} pad={pad}"
    S, v0, v1 = real_rows(V, pad)
    ids = make_ids(V, S, B, T, seed, torch.int64)
    G = torch.randn((B, T, D), generator=torch.Generator().manual_seed(seed + 5))
    tok = TokenEmbedding(V, D, seed=seed)
    ref = tok(ids)
    ref.backward(G)
    vpe = VocabParallelEmbedding(V, D, seed=seed, pad_vocab_to_multiple_of=pad)
    out = vpe(ids)
    same(out.detach(), ref.detach(), f"{what}: forward")
    out.backward(G)
    same(vpe.weight.grad[: v1 - v0], tok.weight.grad[v0:v1], f"{what}: weight grad")
    check(bool((vpe.weight.grad[v1 - v0 :] == 0).all()), f"{what}: padding rows' gradient is not zero")
    # An optimizer step leaves the padding rows at zero.
    torch.optim.AdamW([vpe.weight], lr=0.1, weight_decay=0.1).step()
    check(bool((vpe.weight.detach()[v1 - v0 :] == 0).all()), f"{what}: padding rows changed by an AdamW step")
    check(v1 == v0 or not torch.equal(vpe.weight.detach()[: v1 - v0], tok.weight.detach()[v0:v1]), f"{what}: no step")


def sinusoidal_case(V, D, pad, L, sp):
    """The fixed sinusoidal table (a buffer, no gradient) as the positions."""
    what = f"sinusoidal V={V} D={D} pad={pad} sp={sp}"
    S, v0, v1 = real_rows(V, pad)
    B, T = 2, 4 * WORLD
    ids = make_ids(V, S, B, T, 50, torch.int64)
    G = torch.randn((B, T, D), generator=torch.Generator().manual_seed(51))
    tok = TokenEmbedding(V, D, seed=52)
    ref = EmbeddingComposer(tok, SinusoidalPositionalEmbedding(L, D))(ids, start=3)
    ref.backward(G)
    vpe = VocabParallelEmbedding(V, D, seed=52, pad_vocab_to_multiple_of=pad)
    out = VocabParallelComposer(vpe, SinusoidalPositionalEmbedding(L, D), sequence_parallel=sp)(ids, start=3)
    c = T // WORLD if sp else T
    t0 = RANK * c if sp else 0
    same(out.detach(), ref.detach()[:, t0 : t0 + c], f"{what}: forward")
    out.backward(G[:, t0 : t0 + c])
    same(vpe.weight.grad[: v1 - v0], tok.weight.grad[v0:v1], f"{what}: weight grad")


def without_reduce_scatter(fn):
    """fn with a backend that lacks reduce_scatter_tensor: the modules fall
    back to all_reduce and a local slice of T, with the same results."""
    from tokpos import _parallel

    real = dist.reduce_scatter_tensor
    calls = []

    def refuse(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("ProcessGroup does not support reduce_scatter_tensor (simulated)")

    dist.reduce_scatter_tensor = refuse
    try:
        fn()
    finally:
        dist.reduce_scatter_tensor = real
        _parallel._NO_REDUCE_SCATTER.clear()
    check(len(calls) == 1, f"the fallback tried reduce_scatter_tensor {len(calls)} times, not once")


def error_cases(V, D, pad, L):
    S, _, _ = real_rows(V, pad)
    vpe = VocabParallelEmbedding(V, D, seed=3, pad_vocab_to_multiple_of=pad)
    comp = VocabParallelComposer(vpe, LearnedPositionalEmbedding(L, D, seed=4))
    T = 4 * WORLD
    ids = make_ids(V, S, 1, T, 9, torch.int64).repeat(2, 1)
    bad = ids.clone()
    bad[1, 3] = V + 5
    expect_error(IndexError, [str(V + 5), str(V)], lambda: comp(bad), f"bad id {V + 5} (V={V})")
    expect_error(IndexError, [str(V + 5), str(V)], lambda: vpe(bad), f"bad id {V + 5} in VocabParallelEmbedding")
    pids = torch.zeros_like(ids)
    pids[0, 2] = L + 2
    expect_error(IndexError, [str(L + 2), str(L)], lambda: comp(ids, position_ids=pids), f"bad position {L + 2}")
    expect_error(IndexError, [str(L)], lambda: comp(ids, start=L - 1), f"start {L - 1} past L={L}")
    if WORLD > 1:
        sp = VocabParallelComposer(vpe, LearnedPositionalEmbedding(L, D), sequence_parallel=True)
        odd = ids[:, : WORLD + 1]
        expect_error(ValueError, [str(WORLD + 1), str(WORLD)], lambda: sp(odd), "sequence_parallel T % world")
    # The collectives are still in step after the errors: a good call works.
    ref = TokenEmbedding(V, D, seed=3)(ids).detach()
    same(vpe(ids).detach(), ref, "forward after the errors")


# -- safetensors, written and read here without tokpos -------------------------


def write_st(path: pathlib.Path, name: str, array: np.ndarray, dtype: str, *, shape=None, end_extra=0) -> None:
    data = array.tobytes()
    shape = list(array.shape) if shape is None else shape
    entry = {"dtype": dtype, "shape": shape, "data_offsets": [0, len(data) + end_extra]}
    header = {"__metadata__": {"format": "pt"}, name: entry}
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


def read_st(path: pathlib.Path):
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    return header, raw[8 + n :]


def bf16_bits(t: torch.Tensor) -> np.ndarray:
    return t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def safetensors_cases(root: pathlib.Path, V, D, pad):
    what = f"safetensors V={V} D={D} pad={pad}"
    S, v0, v1 = real_rows(V, pad)
    n = v1 - v0
    d = root / f"st-{V}-{pad}"
    full = TokenEmbedding(V, D, seed=11).weight.detach()
    if RANK == 0:
        d.mkdir()
        write_st(d / "f32.safetensors", "wte", full.numpy(), "F32")
        write_st(d / "f16.safetensors", "wte", full.half().numpy(), "F16")
        write_st(d / "bf16.safetensors", "wte", bf16_bits(full), "BF16")
        write_st(d / "i32.safetensors", "wte", full.numpy().view(np.int32), "I32")
        write_st(d / "vec.safetensors", "wte", full.numpy().reshape(-1), "F32")
        write_st(d / "short.safetensors", "wte", full.numpy(), "F32", shape=[V + 1, D], end_extra=D * 4)
    dist.barrier()
    for fname, expected in (
        ("f32", full),
        ("f16", full.half().float()),
        ("bf16", full.to(torch.bfloat16).float()),
    ):
        vpe = VocabParallelEmbedding.from_safetensors(d / f"{fname}.safetensors", "wte", pad_vocab_to_multiple_of=pad)
        check((vpe.vocab_size, vpe.dim) == (V, D), f"{what}: {fname} load gives ({vpe.vocab_size}, {vpe.dim})")
        check_shard_memory(vpe, V, D, pad, f"{what}: {fname} load")
        same(vpe.weight.detach()[:n], expected[v0:v1], f"{what}: {fname} load rows [{v0}, {v1})")
        check(bool((vpe.weight.detach()[n:] == 0).all()), f"{what}: {fname} load padding rows are not zero")
    f = d / "f32.safetensors"

    def load(name, tensor="wte"):
        return lambda: VocabParallelEmbedding.from_safetensors(d / name, tensor)

    expect_error(ValueError, ["I32"], load("i32.safetensors"), "I32 file")
    expect_error(ValueError, [str([V * D])], load("vec.safetensors"), "1-D tensor")
    expect_error(OSError, ["outside the data area"], load("short.safetensors"), "short file")
    expect_error(ValueError, ["'nope'"], load("f32.safetensors", "nope"), "absent tensor")
    expect_error(OSError, ["missing"], load("missing.safetensors"), "absent file")

    # Round trip: load the shard, save on rank 0, compare the file with the table.
    vpe = VocabParallelEmbedding.from_safetensors(f, "wte", pad_vocab_to_multiple_of=pad)
    out = d / "saved.safetensors"
    vpe.save_safetensors(out, "wte")
    header, data = read_st(out)
    check(header.get("wte", {}).get("dtype") == "F32", f"{what}: saved dtype {header.get('wte')}")
    check(header.get("wte", {}).get("shape") == [V, D], f"{what}: saved shape {header.get('wte')}")
    got = torch.from_numpy(np.frombuffer(data, dtype="<f4").copy())
    check(got.numel() == V * D, f"{what}: saved file holds {got.numel()} floats, not V*D = {V * D}")
    if got.numel() == V * D:
        same(got.reshape(V, D), full, f"{what}: saved table")
    # A freshly initialised layer saves TokenEmbedding(V, D, seed)'s table.
    fresh = VocabParallelEmbedding(V, D, seed=11, pad_vocab_to_multiple_of=pad)
    out2 = d / "fresh.safetensors"
    fresh.save_safetensors(out2, "table")
    header, data = read_st(out2)
    got = torch.from_numpy(np.frombuffer(data, dtype="<f4").copy())
    if got.numel() == V * D:
        same(got.reshape(V, D), full, f"{what}: saved initial table")
    else:
        check(False, f"{what}: fresh save holds {got.numel()} floats")
    dist.barrier()
    names = sorted(p.name for p in d.iterdir())
    expected_names = sorted(
        ["f32.safetensors", "f16.safetensors", "bf16.safetensors", "i32.safetensors", "vec.safetensors",
         "short.safetensors", "saved.safetensors", "fresh.safetensors"]
    )
    check(names == expected_names, f"{what}: the directory holds {names} (a temporary file left, or a file per rank?)")
    dist.barrier()


def main() -> int:
    global RANK, WORLD
    root = pathlib.Path(sys.argv[1])
    dist.init_process_group("gloo")
    RANK, WORLD = dist.get_rank(), dist.get_world_size()
    tokpos.set_num_threads(1)
    torch.set_num_threads(1)
    try:
        D, L = 12, 24
        for V, pad in ((37, 1), (37, 8), (6, 4)):
            B, T = 3, 8
            for k, (sp, mode, start) in enumerate(
                ((False, None, 0), (False, None, 5), (False, "packed", 0), (True, None, 2), (True, "packed", 0))
            ):
                pids = None
                if mode == "packed":
                    # documents restarting inside the row: a position row
                    # appears in more than one T slice.
                    pids = torch.tensor([[0, 1, 2, 0, 1, 2, 3, 0], [0, 1, 2, 3, 4, 5, 6, 7], [0, 0, 1, 1, 2, 0, 1, 2]])
                dt = torch.int32 if k % 2 else torch.int64
                composer_case(V, D, pad, L, B, T, sp=sp, position_ids=pids, start=start, seed=20 + k, ids_dtype=dt)
            for seed, (sp, start) in ((31, (False, 1)), (32, (True, 0))):
                composer_case(
                    V, D, pad, L, 1, 8,
                    sp=sp, position_ids=None, start=start, seed=seed, ids_dtype=torch.int64, flat=True,
                )
            embedding_case(V, D, pad, B, T, seed=40)
            if pad == 1:
                sinusoidal_case(V, D, pad, L, sp=False)
                sinusoidal_case(V, D, pad, L, sp=True)
                without_reduce_scatter(lambda: sinusoidal_case(V, D, pad, L, sp=True))
            error_cases(V, D, pad, L)
            safetensors_cases(root, V, D, pad)
    except Exception:  # noqa: BLE001
        FAILURES.append("exception")
        say("FAIL exception:\n" + traceback.format_exc())
    if FAILURES:
        say(f"{len(FAILURES)} of {CHECKS} checks FAILED")
        return 1
    say(f"all {CHECKS} checks passed")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
