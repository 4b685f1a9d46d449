"""Tests of main.py: shapes, broadcasting, parameter counts, the formula.

Run from the kit's directory:  python -m pytest tests
"""
import math

import pytest
import torch
from torch import nn

import main

V, L, D = 100, 32, 16


def test_composer_maps_b_t_ids_to_b_t_d():
    ids = torch.randint(0, V, (3, 7))
    for position in (main.LearnedPositionalEmbedding(L, D),
                     main.SinusoidalPositionalEmbedding(L, D)):
        out = main.EmbeddingComposer(main.TokenEmbedding(V, D), position)(ids)
        assert out.shape == (3, 7, D)
        assert out.dtype == torch.float32


def test_position_rows_broadcast_over_the_batch():
    torch.manual_seed(1)
    token = main.TokenEmbedding(V, D)
    position = main.SinusoidalPositionalEmbedding(L, D)
    ids = torch.randint(0, V, (4, 5))
    out = main.EmbeddingComposer(token, position)(ids)
    for b in range(4):
        for t in range(5):
            expected = token.table.weight[ids[b, t]] + position.table[t]
            torch.testing.assert_close(out[b, t], expected)
    # The same ids in two batch rows give the same output rows.
    same = torch.stack([ids[0], ids[0]])
    out = main.EmbeddingComposer(token, position)(same)
    torch.testing.assert_close(out[0], out[1])


def test_token_rows_are_looked_up():
    token = main.TokenEmbedding(V, D)
    ids = torch.tensor([[0, 5, 5, V - 1]])
    out = token(ids)
    for t, i in enumerate(ids[0].tolist()):
        assert torch.equal(out[0, t], token.table.weight[i])


def test_token_init_is_normal_with_std_0_02():
    torch.manual_seed(2)
    w = main.TokenEmbedding(2000, 64).table.weight.detach()
    assert abs(w.mean().item()) < 1e-3
    assert abs(w.std().item() - 0.02) < 1e-3


def test_parameter_counts():
    token = main.TokenEmbedding(V, D)
    learned = main.LearnedPositionalEmbedding(L, D)
    sinusoidal = main.SinusoidalPositionalEmbedding(L, D)
    assert main.count_parameters(token) == V * D
    assert main.count_parameters(learned) == L * D
    assert main.count_parameters(sinusoidal) == 0
    assert main.count_parameters(main.EmbeddingComposer(token, learned)) == V * D + L * D


def test_sinusoidal_table_is_the_formula():
    for length, dim in ((L, D), (50, 64), (9, 7)):
        table = main.SinusoidalPositionalEmbedding(length, dim).table
        assert table.shape == (length, dim)
        for p in range(length):
            for i in range(dim):
                angle = p / 10000 ** (2 * (i // 2) / dim)
                expected = math.sin(angle) if i % 2 == 0 else math.cos(angle)
                assert abs(table[p, i].item() - expected) < 1e-6, (p, i)


def test_sinusoidal_table_is_a_buffer_without_gradient():
    module = main.SinusoidalPositionalEmbedding(L, D)
    assert "table" in dict(module.named_buffers())
    assert list(module.parameters()) == []
    assert not module(5).requires_grad
    torch.testing.assert_close(module(5), module.table[:5])


@pytest.mark.parametrize("make", [main.LearnedPositionalEmbedding,
                                  main.SinusoidalPositionalEmbedding])
def test_past_max_context_length_is_an_error_naming_both(make):
    module = make(L, D)
    assert module(L).shape == (L, D)  # T = L still fits
    with pytest.raises((IndexError, ValueError), match=rf"{L + 1}.*{L}"):
        module(L + 1)
    composer = main.EmbeddingComposer(main.TokenEmbedding(V, D), module)
    with pytest.raises((IndexError, ValueError), match=rf"{L + 5}.*{L}"):
        composer(torch.zeros(2, L + 5, dtype=torch.int64))


def test_backward_touches_only_the_rows_used():
    token = main.TokenEmbedding(V, D)
    learned = main.LearnedPositionalEmbedding(L, D)
    ids = torch.tensor([[3, 7, 3], [9, 9, 7]])
    main.EmbeddingComposer(token, learned)(ids).sum().backward()
    touched = token.table.weight.grad.abs().sum(dim=1) != 0
    assert touched.nonzero().flatten().tolist() == [3, 7, 9]
    # Token 3 appears twice, token 9 twice: each use adds 1 per feature.
    assert torch.all(token.table.weight.grad[3] == 2)
    # Positions 0..2 are used (once per batch row); rows 3.. get nothing.
    assert torch.all(learned.table.weight.grad[:3] == 2)
    assert torch.all(learned.table.weight.grad[3:] == 0)


def test_weight_tying_adds_both_gradient_paths():
    torch.manual_seed(3)
    token = main.TokenEmbedding(V, D)
    head = nn.Linear(D, V, bias=False)
    head.weight = token.table.weight  # one matrix, two roles
    ids = torch.tensor([[1, 2, 2]])

    def loss():
        return head(token(ids)).logsumexp(dim=-1).sum()

    loss().backward()
    tied = token.table.weight.grad.clone()
    # The output side touches every row, not only the rows looked up.
    assert torch.all(tied.abs().sum(dim=1) > 0)

    # The same gradient, path by path: through the lookup only, then the head only.
    w = token.table.weight.detach()
    lookup = w.clone().requires_grad_()
    (nn.functional.embedding(ids, lookup) @ w.T).logsumexp(dim=-1).sum().backward()
    output = w.clone().requires_grad_()
    (nn.functional.embedding(ids, w) @ output.T).logsumexp(dim=-1).sum().backward()
    torch.testing.assert_close(tied, lookup.grad + output.grad)


def test_sinusoidal_table_matches_tokpos():
    try:
        import tokpos
    except ImportError as e:
        pytest.skip(f"tokpos is not importable ({e}); `pip install tokpos` to compare")
    for length, dim in ((128, 64), (128, 32), (10, 6)):
        ours = main.SinusoidalPositionalEmbedding(length, dim).table.numpy()
        theirs = tokpos.sinusoidal_table(length, dim, layout="interleaved")
        assert ours.shape == theirs.shape
        assert abs(ours - theirs).max() <= 1e-6
