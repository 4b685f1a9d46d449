"""tokpos.torch under the ways torch traces and transforms a model: meta
tensors (torch.device("meta"), device="meta", deferred initialisation),
FakeTensorMode (what torch.compile, torch.export and deferred
initialisation trace with), forward-mode AD (torch.autograd.forward_ad,
torch.func.jvp) and the other torch.func transforms (grad, vmap, jacrev,
hessian), and torch.compile with graph breaks allowed.

Every op and module either gives the result plain torch gives (shapes and
dtypes for meta and fake tensors, values and tangents checked against
torch.nn.functional.embedding, slicing and the rotation formula written out
in torch), or raises an error naming what is not supported. Nothing here
compares tokpos with itself, except the two ways of building the same
seeded table."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import ref_interleaved, tokpos_torch

tt = tokpos_torch()  # or a skip saying why (torch missing or too old)

import tokpos  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.autograd import forward_ad as fwd  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode  # noqa: E402

V, L, D = 13, 9, 6
B, T, H, DH = 2, 5, 3, 8
META = torch.device("meta")


def ids_of(shape, vocab=V, seed=0):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


def randn(*shape, dtype=torch.float64, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def composer(dtype=torch.float64, seed=3):
    """A composer over random tables of dtype (and the tables themselves)."""
    tok, pos = randn(V, D, dtype=dtype, seed=seed), randn(L, D, dtype=dtype, seed=seed + 1)
    c = tt.EmbeddingComposer(tt.TokenEmbedding(V, D), tt.LearnedPositionalEmbedding(L, D))
    with torch.no_grad():
        c.token.weight = nn.Parameter(tok.clone())
        c.position.weight = nn.Parameter(pos.clone())
    return c, tok, pos


def composer_call(c, ids, **kw):
    """The composer as a function of its two tables."""
    return lambda tok, pos: torch.func.functional_call(c, {"token.weight": tok, "position.weight": pos}, (ids,), kw)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_reference(x, positions, inv_freq):
    """transformers' q * cos + rotate_half(q) * sin in float64, x (..., T, H, D)
    with positions (..., T): the rotation written out in torch."""
    freqs = positions.to(torch.float64)[..., None] * torch.as_tensor(np.asarray(inv_freq), dtype=torch.float64)
    emb = torch.cat((freqs, freqs), dim=-1)[..., None, :]
    x = x.to(torch.float64)
    return x * emb.cos() + rotate_half(x) * emb.sin()


def rope_tables_reference(x, cos, sin):
    """apply_rotary_pos_emb in x's dtype, cos and sin (B, T, R) broadcast over heads."""
    return x * cos[:, :, None, :] + rotate_half(x) * sin[:, :, None, :]


INV = tokpos.rope_frequencies(DH)[0]
POSITIONS = torch.arange(T).expand(B, T)


def close_to(actual, expected, atol=1e-6):
    torch.testing.assert_close(actual.to(torch.float64), expected.to(torch.float64), atol=atol, rtol=0)


# --- meta tensors -------------------------------------------------------------------


def same_meta(out, like):
    """out is a meta tensor of like's shape and dtype (like: plain torch's result)."""
    assert out.device.type == "meta", out.device
    assert out.shape == like.shape and out.dtype == like.dtype, (out.shape, out.dtype, like.shape, like.dtype)


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "autograd"])
def test_meta_ids_give_a_meta_result(grad):
    # A CPU module given meta ids: a meta result of torch's shape, no memory read.
    ids = torch.zeros(B, T, dtype=torch.int64, device=META)
    c, tok, pos = composer(torch.float32)
    want = F.embedding(ids, tok.to(META)) + pos.to(META)[:T]
    with torch.set_grad_enabled(grad):
        same_meta(tt.TokenEmbedding(V, D)(ids), F.embedding(ids, tok.to(META)))
        same_meta(tt.Embedding(V, D)(ids), F.embedding(ids, tok.to(META)))
        same_meta(tt.embedding(ids, tok), F.embedding(ids, tok.to(META)))
        same_meta(c(ids), want)
        same_meta(c(torch.zeros(B, T, dtype=torch.int64), position_ids=ids), want)
        same_meta(c.position(ids), F.embedding(ids, pos.to(META)))
        same_meta(tt.SinusoidalPositionalEmbedding(L, D)(ids), F.embedding(ids, pos.to(META)))


def test_meta_modules_give_meta_results():
    ids = ids_of((B, T), vocab=L)
    for module in (
        tt.TokenEmbedding(V, D, device=META),
        tt.LearnedPositionalEmbedding(L, D, device=META),
        tt.SinusoidalPositionalEmbedding(L, D, device=META),
        tt.TokenEmbedding(V, D).to(META),
        tt.LearnedPositionalEmbedding(L, D).to(META),
    ):
        same_meta(module.weight, torch.empty(module.weight.shape))
        same_meta(module(ids), F.embedding(ids, torch.empty(module.weight.shape)))
        same_meta(module(ids.to(META)), F.embedding(ids, torch.empty(module.weight.shape)))
    c = tt.EmbeddingComposer(tt.TokenEmbedding(V, D, device=META), tt.LearnedPositionalEmbedding(L, D, device=META))
    same_meta(c(ids), torch.empty(B, T, D))
    out = tt.LearnedPositionalEmbedding(L, D, device=META, dtype=torch.bfloat16)(T, start=2)
    same_meta(out, torch.empty(T, D, dtype=torch.bfloat16))


def test_meta_rope():
    x = randn(B, T, H, DH, dtype=torch.float32)
    rope = tt.RotaryEmbedding(DH)
    same_meta(tt.apply_rope(x.to(META), POSITIONS, INV), x)
    same_meta(tt.apply_rope(x, POSITIONS.to(META), INV), x)
    same_meta(rope(x.to(META).transpose(1, 2), POSITIONS, heads_first=True), x.transpose(1, 2))
    cos, sin = (t.to(META) for t in rope.cos_sin(POSITIONS))
    same_meta(rope.cos_sin(POSITIONS.to(META))[0], cos)
    meta_rope = tt.RotaryEmbedding(DH).to(META)
    same_meta(meta_rope(x, POSITIONS), x)
    same_meta(meta_rope.cos_sin(POSITIONS)[1], sin)
    same_meta(tt.apply_rope_tables(x.to(META), cos, sin), x)
    xm = x.to(META).requires_grad_()
    (g,) = torch.autograd.grad(tt.apply_rope(xm, POSITIONS, INV).sum(), xm)
    same_meta(g, x)


def test_meta_backward_gives_meta_gradients():
    c = tt.EmbeddingComposer(tt.TokenEmbedding(V, D, device=META), tt.LearnedPositionalEmbedding(L, D, device=META))
    c(ids_of((B, T))).sum().backward()
    same_meta(c.token.weight.grad, torch.empty(V, D))
    same_meta(c.position.weight.grad, torch.empty(L, D))


def test_the_ops_take_meta_tensors():
    # The fake kernels are the ops' meta kernels: meta in, meta out, any mix
    # of meta and CPU arguments included.
    w, ids = randn(V, D, dtype=torch.float32), torch.tensor([[1, 2, 3]], device=META)
    same_meta(torch.ops.tokpos.compose(ids, w, None, None, 0, -1, False), torch.empty(1, 3, D))
    d_out = torch.zeros(1, 3, D, device=META)
    d_tok, d_pos = torch.ops.tokpos.compose_backward(d_out, torch.tensor([[1, 2, 3]]), None, 0, V, L, -1)
    same_meta(d_tok, torch.empty(V, D))
    same_meta(d_pos, torch.empty(L, D))


# --- building a module from shapes alone ----------------------------------------------


def test_modules_built_under_fake_tensor_mode_touch_no_data():
    # It wrote the drawn table through the fake tensor's data pointer: a
    # crash of the process, so the construction runs in a child.
    code = textwrap.dedent(
        """
        import torch, tokpos.torch as tt
        from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
        with FakeTensorMode():
            parts = [tt.TokenEmbedding(20, 8), tt.LearnedPositionalEmbedding(16, 8),
                     tt.SinusoidalPositionalEmbedding(16, 8), tt.TokenEmbedding(20, 8, padding_idx=1)]
            parts[0].reset_parameters()
            rope = tt.RotaryEmbedding(8)
            ids = torch.zeros(2, 5, dtype=torch.int64)
            outs = [tt.EmbeddingComposer(parts[0], parts[1])(ids), tt.EmbeddingComposer(parts[3], parts[2])(ids)]
            outs.append(rope(outs[0].unsqueeze(2), ids))
            outs += rope.cos_sin(ids)
        assert all(isinstance(p.weight, FakeTensor) for p in parts) and isinstance(rope.inv_freq, FakeTensor)
        for out in outs:
            assert isinstance(out, FakeTensor) and out.shape in ((2, 5, 8), (2, 5, 1, 8)), out
        print("built")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "built" in r.stdout, (r.returncode, r.stderr[-2000:])


def test_device_meta_and_the_meta_context_build_from_shapes():
    with torch.device(META):
        built = [tt.TokenEmbedding(V, D), tt.LearnedPositionalEmbedding(L, D), tt.SinusoidalPositionalEmbedding(L, D)]
        rope = tt.RotaryEmbedding(DH)
    built += [tt.TokenEmbedding(V, D, device="meta"), tt.LearnedPositionalEmbedding(L, D, device="meta")]
    for m in built:
        assert m.weight.device.type == "meta" and m.weight.shape[1] == D
    # a CPU module called under the meta context still computes on the CPU, as torch's modules do
    c, tok, pos = composer(torch.float32)
    ids = ids_of((B, T))
    with torch.device(META):
        out = c(ids)
        learned = c.position(T)
    assert torch.equal(out, F.embedding(ids, tok.float()) + pos.float()[:T])
    assert torch.equal(learned, pos.float()[:T])
    # to_empty then the computed tables: the sinusoidal one and RoPE's frequencies
    sinus = built[2].to_empty(device="cpu")
    close_to(sinus.weight, torch.from_numpy(ref_interleaved(L, D)), atol=2e-7)
    rope.to_empty(device="cpu")
    want = 10000.0 ** (-torch.arange(0, DH, 2, dtype=torch.float64) / DH)
    torch.testing.assert_close(rope.inv_freq, want, rtol=1e-15, atol=0)


def test_skip_init_and_load_state_dict():
    # torch.nn.utils.skip_init passes device="meta", then to_empty.
    token = torch.nn.utils.skip_init(tt.TokenEmbedding, V, D, padding_idx=2, seed=7)
    learned = torch.nn.utils.skip_init(tt.LearnedPositionalEmbedding, L, D)
    assert token.weight.device.type == "cpu" and learned.weight.device.type == "cpu"
    tok, pos = randn(V, D, dtype=torch.float32), randn(L, D, dtype=torch.float32, seed=5)
    token.load_state_dict({"weight": tok})
    learned.load_state_dict({"weight": pos})
    c = tt.EmbeddingComposer(token, learned)
    ids = ids_of((B, T))
    assert torch.equal(c(ids), F.embedding(ids, tok) + pos[:T])
    # reset_parameters after to_empty draws the seed's table, as an eager build does
    token.reset_parameters()
    assert torch.equal(token.weight, tt.TokenEmbedding(V, D, padding_idx=2, seed=7).weight)
    assert not token.weight[2].any()


# --- FakeTensorMode ---------------------------------------------------------------


def same_fake(out, like):
    assert isinstance(out, FakeTensor), type(out)
    assert out.shape == like.shape and out.dtype == like.dtype, (out.shape, out.dtype, like.shape, like.dtype)


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "autograd"])
def test_fake_tensors_through_every_module(grad):
    # Modules built outside (building inside is the child's test above),
    # their tables joining the mode as torch.export's tracing has them join.
    c = tt.EmbeddingComposer(tt.TokenEmbedding(V, D), tt.LearnedPositionalEmbedding(L, D))
    modules = dict(
        emb=tt.Embedding(V, D), tok16=tt.TokenEmbedding(V, D, dtype=torch.bfloat16),
        sinus=tt.SinusoidalPositionalEmbedding(L, D), rope=tt.RotaryEmbedding(DH),
    )
    with FakeTensorMode(allow_non_fake_inputs=True), torch.set_grad_enabled(grad):
        ids, pids = torch.zeros(B, T, dtype=torch.int64), torch.zeros(B, T, dtype=torch.int64)
        tok, pos = torch.empty(V, D), torch.empty(L, D)
        want = F.embedding(ids, tok) + pos[:T]
        same_fake(c(ids), want)
        same_fake(c(ids, position_ids=pids, start=0), want)
        same_fake(c(ids[0]), want[0])
        same_fake(modules["emb"](ids), want)
        same_fake(tt.embedding(ids, tok), want)
        same_fake(modules["tok16"](ids), want.to(torch.bfloat16))
        same_fake(modules["sinus"](T), pos[:T])
        same_fake(c.position(pids), want)
        x = torch.empty(B, T, H, DH)
        rope = modules["rope"]
        same_fake(tt.apply_rope(x, pids, torch.from_numpy(INV)), x)
        same_fake(rope(x.transpose(1, 2), pids, heads_first=True), x.transpose(1, 2))
        cos, sin = rope.cos_sin(pids)
        same_fake(cos, torch.empty(B, T, DH))
        same_fake(tt.apply_rope_tables(x, cos, sin), x)
        if grad:
            c(ids).sum().backward()
            same_fake(c.token.weight.grad, tok)
            same_fake(c.position.weight.grad, pos)


def test_a_real_rope_module_called_under_fake_tensor_mode():
    # Its frequencies (a real CPU buffer) join the fake x's mode.
    rope = tt.RotaryEmbedding(DH)
    with FakeTensorMode():
        x = torch.empty(B, T, H, DH)
        same_fake(rope(x, torch.zeros(B, T, dtype=torch.int64)), x)


def test_export_of_a_composer_and_rope():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.c, _, _ = composer(torch.float32)
            self.rope = tt.RotaryEmbedding(D)

        def forward(self, ids):
            x = self.c(ids)
            return self.rope(x.unsqueeze(2), torch.arange(ids.shape[1]).expand(ids.shape))

    m = Model()
    ids = ids_of((B, T))
    ep = torch.export.export(m, (ids,), strict=False)
    with torch.no_grad():
        tok, pos = m.c.token.weight, m.c.position.weight
        want = rope_reference((F.embedding(ids, tok) + pos[:T]).unsqueeze(2), POSITIONS, m.rope.inv_freq)
        close_to(ep.module()(ids), want)


# --- forward-mode AD ------------------------------------------------------------------


def test_composer_forward_ad_gives_the_tangent():
    c, tok, pos = composer()
    dT, dP = randn(V, D, seed=11), randn(L, D, seed=12)
    ids, pids = ids_of((B, T)), ids_of((B, T), vocab=L, seed=4)
    cases = [({}, dP[:T].expand(B, T, D)), ({"start": 3}, dP[3 : 3 + T].expand(B, T, D)),
             ({"position_ids": pids}, F.embedding(pids, dP))]
    for kw, pos_rows in cases:
        want = F.embedding(ids, dT) + pos_rows
        call = composer_call(c, ids, **kw)
        with fwd.dual_level():
            out = call(fwd.make_dual(tok, dT), fwd.make_dual(pos, dP))
            assert torch.equal(fwd.unpack_dual(out).tangent, want), kw
            # one table dual: that table's rows alone
            only_tok = fwd.unpack_dual(call(fwd.make_dual(tok, dT), pos)).tangent
            only_pos = fwd.unpack_dual(call(tok, fwd.make_dual(pos, dP))).tangent
        assert torch.equal(only_tok, F.embedding(ids, dT))
        assert torch.equal(only_pos, pos_rows)
        assert torch.equal(torch.func.jvp(call, (tok, pos), (dT, dP))[1], want)


def test_positional_modules_forward_ad():
    pos, dP = randn(L, D), randn(L, D, seed=2)
    m = tt.LearnedPositionalEmbedding(L, D).double()
    pids = ids_of((B, T), vocab=L)
    for arg, want in ((T, dP[:T]), (pids, F.embedding(pids, dP))):
        call = lambda p: torch.func.functional_call(m, {"weight": p}, (arg,))  # noqa: B023, E731
        assert torch.equal(torch.func.jvp(call, (pos,), (dP,))[1], want)
        with fwd.dual_level():
            assert torch.equal(fwd.unpack_dual(call(fwd.make_dual(pos, dP))).tangent, want)


def test_composer_gradcheck_with_forward_ad():
    c, tok, pos = composer()
    call = composer_call(c, ids_of((B, T)))
    assert torch.autograd.gradcheck(
        call, (tok.requires_grad_(), pos.requires_grad_()), check_forward_ad=True, check_backward_ad=True
    )


@pytest.mark.parametrize("heads_first", [False, True])
def test_apply_rope_forward_ad_rotates_the_tangent(heads_first):
    x, dx = randn(B, T, H, DH, dtype=torch.float32), randn(B, T, H, DH, dtype=torch.float32, seed=9)
    want = rope_reference(dx, POSITIONS, INV)
    if heads_first:
        x, dx, want = x.transpose(1, 2), dx.transpose(1, 2), want.transpose(1, 2)
    rope = tt.RotaryEmbedding(DH)
    for f in (lambda x: tt.apply_rope(x, POSITIONS, INV, heads_first=heads_first),
              lambda x: rope(x, POSITIONS, heads_first=heads_first)):
        with fwd.dual_level():
            tangent = fwd.unpack_dual(f(fwd.make_dual(x, dx))).tangent
        assert tangent is not None
        close_to(tangent, want)
        close_to(torch.func.jvp(f, (x,), (dx,))[1], want)


def test_apply_rope_tables_forward_ad_rotates_the_tangent():
    x, dx = randn(B, T, H, DH, dtype=torch.float32), randn(B, T, H, DH, dtype=torch.float32, seed=9)
    cos, sin = tt.RotaryEmbedding(DH).cos_sin(POSITIONS)
    want = rope_tables_reference(dx, cos, sin)  # the same bits in float32
    f = lambda x: tt.apply_rope_tables(x, cos, sin)  # noqa: E731
    with fwd.dual_level():
        assert torch.equal(fwd.unpack_dual(f(fwd.make_dual(x, dx))).tangent, want)
    assert torch.equal(torch.func.jvp(f, (x,), (dx,))[1], want)


def test_a_tangent_the_ops_cannot_carry_is_an_error():
    x = randn(B, T, H, DH, dtype=torch.float32)
    inv = torch.from_numpy(INV)
    cos, sin = tt.RotaryEmbedding(DH).cos_sin(POSITIONS)
    with fwd.dual_level():
        with pytest.raises(RuntimeError, match=r"forward-mode AD .* with respect to inv_freq is not supported"):
            tt.apply_rope(x, POSITIONS, fwd.make_dual(inv, torch.ones_like(inv)))
        with pytest.raises(RuntimeError, match=r"forward-mode AD .* with respect to cos and sin is not supported"):
            tt.apply_rope_tables(x, fwd.make_dual(cos, torch.ones_like(cos)), sin)
    with pytest.raises(RuntimeError, match=r"forward-mode AD .* with respect to inv_freq is not supported"):
        torch.func.jvp(lambda f: tt.apply_rope(x, POSITIONS, f), (inv,), (torch.ones_like(inv),))


# --- torch.func ----------------------------------------------------------------------


def test_func_grad_and_hessian_of_a_composer():
    c, tok, pos = composer()
    ids = ids_of((B, T))
    ours = composer_call(c, ids)

    def ref(t, p):
        return F.embedding(ids, t) + p[:T]

    def loss(f):
        return lambda t, p: (f(t, p) ** 3).sum()

    g = torch.func.grad(loss(ours), argnums=(0, 1))(tok, pos)
    r = torch.func.grad(loss(ref), argnums=(0, 1))(tok, pos)
    torch.testing.assert_close(g, r, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(
        torch.func.hessian(loss(ours), argnums=1)(tok, pos), torch.func.hessian(loss(ref), argnums=1)(tok, pos)
    )
    jac = torch.func.jacrev(ours, argnums=1)(tok, pos)
    torch.testing.assert_close(jac, torch.func.jacrev(ref, argnums=1)(tok, pos))


def test_func_vmap_of_a_composer():
    c, tok, pos = composer()
    ids = ids_of((3, B, T))
    out = torch.func.vmap(lambda i: c(i))(ids)
    assert torch.equal(out, F.embedding(ids, tok) + pos[:T])
    toks = torch.stack([tok, 2 * tok])
    out = torch.func.vmap(lambda t: composer_call(c, ids[0])(t, pos))(toks)
    assert torch.equal(out, torch.stack([F.embedding(ids[0], t) + pos[:T] for t in toks]))


def test_func_vmap_and_grad_of_rope():
    xs = randn(4, T, H, DH, dtype=torch.float32)
    out = torch.func.vmap(lambda x: tt.apply_rope(x, POSITIONS[0], INV))(xs)
    close_to(out, rope_reference(xs, POSITIONS[0], INV))
    cos, sin = tt.RotaryEmbedding(DH).cos_sin(POSITIONS[:1])
    out = torch.func.vmap(lambda x: tt.apply_rope_tables(x.unsqueeze(0), cos, sin)[0])(xs)
    assert torch.equal(out, rope_tables_reference(xs, cos.expand(4, T, DH), sin.expand(4, T, DH)))
    # the gradient of sum(R(x) * w) is R^T(w)
    w = randn(4, T, H, DH, dtype=torch.float32, seed=3)
    g = torch.func.grad(lambda x: (tt.apply_rope(x, POSITIONS[:1], INV) * w).sum())(xs)
    x64 = xs.double().requires_grad_()
    (rope_reference(x64, POSITIONS[:1], INV) * w.double()).sum().backward()
    close_to(g, x64.grad)


def test_cos_sin_under_vmap_names_the_transform():
    rope = tt.RotaryEmbedding(DH)
    with pytest.raises(RuntimeError, match="torch.func transforms"):
        torch.func.vmap(rope.cos_sin)(POSITIONS)


# --- torch.compile with graph breaks allowed -------------------------------------------


def test_compiled_model_with_a_composer_matches_eager():
    torch._dynamo.reset()
    torch.manual_seed(0)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            token, position = tt.TokenEmbedding(V, D, seed=1), tt.LearnedPositionalEmbedding(L, D, seed=2)
            self.embed = tt.EmbeddingComposer(token, position)
            self.head = nn.Linear(D, V)

        def forward(self, ids):
            return self.head(torch.tanh(self.embed(ids)))

    model = Model()
    ids = ids_of((B, T))
    compiled = torch.compile(model, fullgraph=False, backend="aot_eager")
    got = compiled(ids)
    got.square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    # plain torch with the same parameters
    tok, pos = model.embed.token.weight, model.embed.position.weight
    want = model.head(torch.tanh(F.embedding(ids, tok) + pos[:T]))
    want.square().sum().backward()
    torch.testing.assert_close(got, want)
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad)
