"""tokpos.torch lets the core's messages through: an out-of-range id or
position raises the kernel's own IndexError, with the same words on the
eager no-grad fast path, under autograd (the custom op) and under
torch.compile, and the same words the core gives the functional API."""

from __future__ import annotations

import pytest

from conftest import tokpos_torch

tt = tokpos_torch()  # or a skip saying why (torch missing or too old)

import torch  # noqa: E402

V, D, L, B, T = 13, 8, 16, 3, 5


def composer():
    return tt.EmbeddingComposer(tt.TokenEmbedding(V, D, seed=1), tt.LearnedPositionalEmbedding(L, D, seed=2))


def messages(module, *args, **kwargs):
    """The IndexError texts of module(*args, **kwargs): eager with the
    tables requiring grad (the custom op), eager under no_grad (the fast
    path, the kernel called directly) and compiled (fullgraph=False)."""
    got = {}
    with pytest.raises(IndexError) as e:
        module(*args, **kwargs)
    got["autograd"] = str(e.value)
    with torch.no_grad(), pytest.raises(IndexError) as e:
        module(*args, **kwargs)
    got["no_grad"] = str(e.value)
    torch._dynamo.reset()
    compiled = torch.compile(module, fullgraph=False, dynamic=False)
    with pytest.raises(IndexError) as e:
        compiled(*args, **kwargs)
    got["compile"] = str(e.value)
    return got


def check(got: dict, fragment: str) -> None:
    assert len(set(got.values())) == 1, got
    text = got["no_grad"]
    assert fragment in text, text
    # The core's own message: the op's name, then the kernel's words.
    assert text.startswith("tokpos::compose: "), text


def ids_with(value, at=(2, 4)):
    ids = torch.arange(B * T, dtype=torch.int64).reshape(B, T) % V
    ids[at] = value
    return ids


def test_an_id_out_of_range_reads_the_same_everywhere():
    c = composer()
    got = messages(c, ids_with(V))
    check(got, f"token id {V} at (b=2, t=4) is outside [0, {V})")
    check(messages(c.token, ids_with(-1)), "token id -1 at (b=2, t=4) is outside [0, 13)")
    # The functional API's kernel gives the same words.
    import numpy as np

    import tokpos

    with pytest.raises(IndexError) as e:
        tokpos.compose(ids_with(V).numpy(), c.token.weight.detach().numpy(), np.zeros((L, D), np.float32))
    assert f"token id {V} at (b=2, t=4) is outside [0, {V})" in str(e.value)


def test_a_start_past_the_table_reads_the_same_everywhere():
    got = messages(composer(), ids_with(1), start=14)
    check(got, "positions 14 .. 18 (start 14, T = 5) exceed the 16 rows of pos_table")


def test_a_position_id_out_of_range_reads_the_same_everywhere():
    pids = torch.zeros(B, T, dtype=torch.int64)
    pids[1, 2] = 130
    got = messages(composer(), ids_with(1), position_ids=pids)
    check(got, "position id 130 at (b=1, t=2) is outside [0, 16)")


def test_a_positional_module_reads_the_same_everywhere():
    pos = tt.LearnedPositionalEmbedding(L, D)
    p = torch.tensor([[1, 5, 130]])
    check(messages(pos, p), "position id 130 at (b=0, t=2) is outside [0, 16)")
    # forward(seq_len): rows start .. start + T - 1, checked by the same kernel.
    check(messages(pos, L + 1), f"positions 0 .. {L} (start 0, T = {L + 1}) exceed the {L} rows of pos_table")
    check(messages(pos, 3, start=L - 1), f"positions {L - 1} .. {L + 1} (start {L - 1}, T = 3) exceed the {L} rows")


def test_a_positional_lookup_is_the_table_bit_for_bit():
    """The lookup adds a row of -0.0: every value comes back unchanged,
    -0.0, subnormals, infinities and NaN included, in every table dtype."""
    special = [0.0, -0.0, 1e-45, -1e-45, 1.5, float("inf"), -float("inf"), float("nan")]
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        pos = tt.LearnedPositionalEmbedding(L, D)
        with torch.no_grad():
            pos.weight.copy_(torch.randn(L, D))
            pos.weight[0, : len(special)] = torch.tensor(special)
            pos.weight.data = pos.weight.data.to(dtype)
        for out, want in ((pos(L), pos.weight), (pos(torch.tensor([[0, 3], [L - 1, 0]])), pos.weight[torch.tensor([[0, 3], [L - 1, 0]])])):
            assert out.dtype == dtype
            got_bits = out.detach().contiguous().view(torch.int16 if dtype != torch.float32 else torch.int32)
            want_bits = want.detach().contiguous().view(torch.int16 if dtype != torch.float32 else torch.int32)
            assert torch.equal(got_bits, want_bits), dtype
