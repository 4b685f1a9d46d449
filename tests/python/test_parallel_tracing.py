"""tokpos.torch.VocabParallelEmbedding and VocabParallelComposer under the
ways torch traces and transforms a model, as test_torch_tracing.py checks
the one-process modules: meta tensors (device="meta", torch.device("meta"),
skip_init), FakeTensorMode (in child processes: building a module inside
the mode wrote through a fake tensor's data pointer), forward-mode AD
(torch.autograd.forward_ad, torch.func.jvp) and the other torch.func
transforms, and graph tracers, which are refused by name.

The meta and in-process cases run in a one-rank gloo group made here (and
destroyed after this file); forward-mode AD across two ranks and the fake
cases run as ranks of world_runner. Values and tangents are checked against
torch.nn.functional.embedding and slicing, shapes against plain torch."""

from __future__ import annotations

import pytest

from conftest import tokpos_torch

tt = tokpos_torch()  # or a skip saying why (torch missing or too old)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.autograd import forward_ad as fwd  # noqa: E402
from torch.nn import functional as F  # noqa: E402

V, L, D = 13, 9, 6
B, T = 2, 4
META = torch.device("meta")

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()),
    reason="torch.distributed with gloo is not available in this torch build",
)


@pytest.fixture(scope="module", autouse=True)
def one_rank_group(tmp_path_factory):
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    store = tmp_path_factory.mktemp("group") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def ids_of(shape, vocab=V, seed=0):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


def randn(*shape, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def parallel_composer(sequence_parallel=False):
    """A one-rank composer over random float32 tables (and the tables)."""
    tok, pos = randn(V, D, seed=3), randn(L, D, seed=4)
    c = tt.VocabParallelComposer(
        tt.VocabParallelEmbedding(V, D), tt.LearnedPositionalEmbedding(L, D), sequence_parallel=sequence_parallel
    )
    with torch.no_grad():
        c.token.weight.copy_(tok)
        c.position.weight.copy_(pos)
    return c, tok, pos


def composer_call(c, ids, **kw):
    return lambda tok, pos: torch.func.functional_call(c, {"token.weight": tok, "position.weight": pos}, (ids,), kw)


def same_meta(out, like):
    assert out.device.type == "meta", out.device
    assert out.shape == like.shape and out.dtype == like.dtype, (out.shape, out.dtype, like.shape, like.dtype)


# --- meta tensors -------------------------------------------------------------------


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "autograd"])
def test_meta_ids_give_a_meta_result(grad):
    ids = ids_of((B, T)).to(META)
    c, tok, pos = parallel_composer()
    want = F.embedding(ids, tok.to(META)) + pos.to(META)[:T]
    with torch.set_grad_enabled(grad):
        same_meta(c.token(ids), F.embedding(ids, tok.to(META)))
        same_meta(c.token(ids[0]), F.embedding(ids[0], tok.to(META)))
        same_meta(c(ids), want)
        same_meta(c(ids[0]), want[0])
        same_meta(c(ids_of((B, T)), position_ids=ids % L), want)
        same_meta(parallel_composer(sequence_parallel=True)[0](ids), want)


def test_meta_modules_give_meta_results_and_gradients():
    ids = ids_of((B, T))
    with torch.device(META):
        in_context = tt.VocabParallelEmbedding(V, D)
    built = [tt.VocabParallelEmbedding(V, D, device=META), in_context, tt.VocabParallelEmbedding(V, D).to(META)]
    for m in built:
        same_meta(m.weight, torch.empty(V, D))
        same_meta(m(ids), F.embedding(ids, torch.empty(V, D)))
    c = tt.VocabParallelComposer(built[0], tt.LearnedPositionalEmbedding(L, D, device=META), sequence_parallel=True)
    out = c(ids, start=2)
    same_meta(out, torch.empty(B, T, D))
    out.sum().backward()
    same_meta(c.token.weight.grad, torch.empty(V, D))
    same_meta(c.position.weight.grad, torch.empty(L, D))


def test_skip_init_then_reset_parameters_or_load_state_dict():
    # skip_init passes device="meta", then to_empty: no table is drawn until asked.
    vpe = torch.nn.utils.skip_init(tt.VocabParallelEmbedding, V, D, seed=7)
    assert vpe.weight.device.type == "cpu" and vpe.weight.shape == (V, D)
    tok = randn(V, D, seed=5)
    vpe.load_state_dict({"weight": tok})
    ids = ids_of((B, T))
    assert torch.equal(vpe(ids), F.embedding(ids, tok))
    # the two ways of building the same seeded shard agree
    vpe.reset_parameters()
    assert torch.equal(vpe.weight, tt.VocabParallelEmbedding(V, D, seed=7).weight)


# --- forward-mode AD and torch.func (one rank) -----------------------------------------


@pytest.mark.parametrize("sequence_parallel", [False, True], ids=["all_reduce", "reduce_scatter"])
def test_forward_ad_gives_the_tangent(sequence_parallel):
    c, tok, pos = parallel_composer(sequence_parallel)
    dT, dP = randn(V, D, seed=11), randn(L, D, seed=12)
    ids, pids = ids_of((B, T)), ids_of((B, T), vocab=L, seed=4)
    cases = [({}, lambda p: p[:T].expand(B, T, D)), ({"start": 3}, lambda p: p[3 : 3 + T].expand(B, T, D)),
             ({"position_ids": pids}, lambda p: F.embedding(pids, p))]
    for kw, rows in cases:
        pos_rows = rows(dP)
        want = F.embedding(ids, dT) + pos_rows
        call = composer_call(c, ids, **kw)
        with fwd.dual_level():
            both = fwd.unpack_dual(call(fwd.make_dual(tok, dT), fwd.make_dual(pos, dP))).tangent
            only_tok = fwd.unpack_dual(call(fwd.make_dual(tok, dT), pos)).tangent
            only_pos = fwd.unpack_dual(call(tok, fwd.make_dual(pos, dP))).tangent
        assert both is not None and only_tok is not None and only_pos is not None, kw
        assert torch.equal(both, want), kw
        assert torch.equal(only_tok, F.embedding(ids, dT)), kw
        assert torch.equal(only_pos, pos_rows), kw
        out, tangent = torch.func.jvp(call, (tok, pos), (dT, dP))
        assert torch.equal(out, F.embedding(ids, tok) + rows(pos)), kw
        assert torch.equal(tangent, want), kw
    # the embedding alone, 1-D ids too
    emb = lambda w, i: torch.func.functional_call(c.token, {"weight": w}, (i,))  # noqa: E731
    for i in (ids, ids[1]):
        assert torch.equal(torch.func.jvp(lambda w: emb(w, i), (tok,), (dT,))[1], F.embedding(i, dT))  # noqa: B023


def test_func_grad_jacrev_hessian_vmap_and_jacfwd():
    c, tok, pos = parallel_composer()
    ids = ids_of((B, T))
    ours = composer_call(c, ids)

    def ref(t, p):
        return F.embedding(ids, t) + p[:T]

    def loss(f):
        return lambda t, p: (f(t, p) ** 3).sum()

    torch.testing.assert_close(
        torch.func.grad(loss(ours), argnums=(0, 1))(tok, pos), torch.func.grad(loss(ref), argnums=(0, 1))(tok, pos)
    )
    torch.testing.assert_close(
        torch.func.hessian(loss(ours), argnums=1)(tok, pos), torch.func.hessian(loss(ref), argnums=1)(tok, pos)
    )
    for argnums in (0, 1):
        for jac in (torch.func.jacrev, torch.func.jacfwd):
            assert torch.equal(jac(ours, argnums=argnums)(tok, pos), jac(ref, argnums=argnums)(tok, pos))
    many = ids_of((3, B, T), seed=8)
    assert torch.equal(torch.func.vmap(c)(many), F.embedding(many, tok) + pos[:T])


def test_gradcheck_with_forward_ad():
    c, tok, pos = parallel_composer()
    call = composer_call(c, ids_of((B, T)))
    assert torch.autograd.gradcheck(
        call, (tok.requires_grad_(), pos.requires_grad_()), eps=1e-2, atol=1e-3, rtol=1e-3,
        check_forward_ad=True, check_backward_ad=True,
    )


def test_graph_tracers_are_refused_by_name():
    # make_fx would record the shapes and the all-reduce but not the kernel
    # between them: a graph that computes something else.
    from torch.fx.experimental.proxy_tensor import make_fx

    c, _, _ = parallel_composer()
    for mode in ("real", "fake"):
        with pytest.raises(RuntimeError, match=r"VocabParallelComposer: tracing into a graph .* is not supported"):
            make_fx(lambda i: c(i), tracing_mode=mode)(ids_of((B, T)))  # noqa: B023


# --- two ranks, and FakeTensorMode (child processes) -----------------------------------


def test_forward_ad_on_two_ranks(tmp_path):
    from world_runner import run

    results = run(
        """
        from torch.autograd import forward_ad as fwd
        from torch.nn import functional as F
        from tokpos.torch import VocabParallelComposer

        V, L, D, B, T = 13, 9, 6, 2, 4
        g = torch.Generator().manual_seed(1)
        tok, pos, dT, dP = (torch.randn(n, D, generator=g) for n in (V, L, V, L))
        ids = torch.randint(0, V, (B, T), generator=g)
        c = VocabParallelComposer(
            VocabParallelEmbedding(V, D, pad_vocab_to_multiple_of=4), LearnedPositionalEmbedding(L, D))
        sp = VocabParallelComposer(c.token, c.position, sequence_parallel=True)
        lo, S = c.token.row_begin, c.token.shard_rows
        pad = lambda t: torch.cat([t, torch.zeros(S * WORLD - V, D)])[lo : lo + S]
        shard, d_shard = pad(tok), pad(dT)
        want = F.embedding(ids, dT) + dP[:T]
        mine = want[:, RANK * T // WORLD :][:, : T // WORLD]  # this rank's T slice
        with fwd.dual_level():
            for name, m, expect in (("all_reduce", c, want), ("reduce_scatter", sp, mine)):
                tables = {"token.weight": fwd.make_dual(shard, d_shard), "position.weight": fwd.make_dual(pos, dP)}
                out = torch.func.functional_call(m, tables, (ids,))
                t = fwd.unpack_dual(out).tangent
                result(case=name, tangent_ok=t is not None and torch.equal(t, expect))
        call = lambda s: torch.func.functional_call(c.token, {"weight": s}, (ids,))
        result(case="jvp", tangent_ok=torch.equal(torch.func.jvp(call, (shard,), (d_shard,))[1], F.embedding(ids, dT)))
        """,
        tmp_path,
        world=2,
        timeout=300,
    )
    for rank, rows in enumerate(results):
        by_case = {r["case"]: r for r in rows}
        for case in ("all_reduce", "reduce_scatter", "jvp"):
            assert by_case[case]["tangent_ok"], (rank, case)


def test_fake_tensor_mode_builds_and_runs_from_shapes(tmp_path):
    # Building inside the mode wrote the drawn shard through a fake tensor's
    # data pointer, and a forward wrote its partial so: a crash of the
    # process, so the ranks are child processes.
    from world_runner import run

    results = run(
        """
        from torch._subclasses.fake_tensor import FakeTensorMode
        from tokpos.torch import VocabParallelComposer

        real = VocabParallelComposer(VocabParallelEmbedding(13, 6), LearnedPositionalEmbedding(9, 6))
        real_sp = VocabParallelComposer(real.token, real.position, sequence_parallel=True)
        real.token.save_safetensors(DIR / "t.safetensors", "wte")
        ids = torch.zeros(2, 4, dtype=torch.int64)
        with FakeTensorMode(allow_non_fake_inputs=True):
            parts = [VocabParallelEmbedding(20, 8), VocabParallelEmbedding(20, 8, pad_vocab_to_multiple_of=16),
                     VocabParallelEmbedding.from_safetensors(DIR / "t.safetensors", "wte")]
            parts[0].reset_parameters()
            fc = VocabParallelComposer(parts[1], LearnedPositionalEmbedding(16, 8), sequence_parallel=True)
            fids = torch.zeros(2, 4, dtype=torch.int64)
            outs = [parts[0](fids), fc(fids), real(fids), real_sp(ids)]
            outs[1].sum().backward()
            grads = [fc.token.weight.grad, fc.position.weight.grad]
            refused = attempt(lambda: parts[0].full_table())
        result(weights=[[type(p.weight).__name__, list(p.weight.shape)] for p in parts],
               outs=[[type(o).__name__, list(o.shape), str(o.dtype)] for o in outs],
               grads=[[type(g).__name__, list(g.shape)] for g in grads], refused=refused)
        """,
        tmp_path,
        world=2,
        timeout=300,
    )
    for rank, (fake,) in enumerate(results):
        # shards: ceil(20 / 2), 32 / 2 (20 padded to a multiple of 16) and ceil(13 / 2) rows
        assert fake["weights"] == [["FakeTensor", [10, 8]], ["FakeTensor", [16, 8]], ["FakeTensor", [7, 6]]], rank
        assert fake["outs"] == [["FakeTensor", [2, 4, 8], "torch.float32"], ["FakeTensor", [2, 2, 8], "torch.float32"],
                                ["FakeTensor", [2, 4, 6], "torch.float32"], ["FakeTensor", [2, 2, 6], "torch.float32"]]
        assert fake["grads"] == [["FakeTensor", [16, 8]], ["FakeTensor", [16, 8]]], rank
        assert fake["refused"][0] == "RuntimeError" and "no values to gather" in fake["refused"][1], fake["refused"]
