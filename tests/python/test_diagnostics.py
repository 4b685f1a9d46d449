"""tokpos.adjacent_cosine, cosine_by_offset and relative_position_fit against
independent float64 numpy on random and sinusoidal tables, for numpy and
torch inputs of every float dtype, and their errors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import tokpos

from conftest import REPO, ref_halves, ref_interleaved


def unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def ref_adjacent(x):
    u = unit(x)
    return np.sum(u[:-1] * u[1:], axis=1)


def ref_by_offset(x, ks):
    u = unit(x)
    return np.array([np.mean(np.sum(u[: len(u) - k] * u[k:], axis=1)) for k in ks])


def ref_fit(x, k, pairs):
    """Largest residual and its ratio to the largest entry of the best 2x2
    rotation per column pair (a, b), row p -> row p + k, by SVD (orthogonal Procrustes)."""
    worst = largest = 0.0
    for a, b in pairs:
        u, v = x[: len(x) - k][:, [a, b]], x[k:][:, [a, b]]
        left, _, right = np.linalg.svd(u.T @ v)
        r = left @ np.diag([1.0, np.sign(np.linalg.det(left @ right))]) @ right
        worst = max(worst, float(np.max(np.abs(v - u @ r))))
        largest = max(largest, float(np.max(np.abs(u))), float(np.max(np.abs(v))))
    return worst, (worst / largest if largest else 0.0)


def interleaved_pairs(D):
    return [(2 * i, 2 * i + 1) for i in range(D // 2)]


TABLES = [
    ("random 50x16", lambda: np.random.default_rng(1).standard_normal((50, 16)).astype(np.float32)),
    ("random 9x7", lambda: np.random.default_rng(2).uniform(-3, 3, (9, 7)).astype(np.float32)),
    ("random 2x1", lambda: np.random.default_rng(3).standard_normal((2, 1)).astype(np.float32) + 2),
    ("sinusoidal 128x64", lambda: tokpos.sinusoidal_table(128, 64)),
]


@pytest.mark.parametrize("name, make", TABLES, ids=[t[0] for t in TABLES])
def test_against_numpy(name, make):
    t = make()
    x = t.astype(np.float64)
    L, D = t.shape
    adj = tokpos.adjacent_cosine(t)
    assert adj.dtype == np.float64 and adj.shape == (L - 1,)
    np.testing.assert_allclose(adj, ref_adjacent(x), rtol=0, atol=1e-12)
    top = L - 1
    by = tokpos.cosine_by_offset(t, top)
    np.testing.assert_allclose(by, ref_by_offset(x, range(top + 1)), rtol=0, atol=1e-12)
    ks = [top, 0, 1, top, min(2, top)]
    np.testing.assert_allclose(tokpos.cosine_by_offset(t, ks), ref_by_offset(x, ks), rtol=0, atol=1e-12)
    np.testing.assert_allclose(tokpos.cosine_by_offset(t, np.array(ks)), ref_by_offset(x, ks), rtol=0, atol=1e-12)
    assert tokpos.cosine_by_offset(t, []).shape == (0,)
    for k in sorted({0, 1, top, min(8, top)}):
        fit = tokpos.relative_position_fit(t, k)
        worst, relative = ref_fit(x, k, interleaved_pairs(D))
        assert fit.offset == k and fit.pairs == D // 2
        assert fit.max_residual == pytest.approx(worst, rel=1e-9, abs=1e-12)
        assert fit.relative == pytest.approx(relative, rel=1e-9, abs=1e-12)
        assert "RelativeFit(offset=" in repr(fit)


def test_sinusoidal_table_is_rotations_and_a_random_one_is_not():
    t = tokpos.sinusoidal_table(256, 32)
    np.testing.assert_allclose(tokpos.adjacent_cosine(t), ref_adjacent(ref_interleaved(256, 32)), atol=1e-6)
    assert tokpos.relative_position_fit(t, 8).relative < 1e-6
    r = np.random.default_rng(0).standard_normal((256, 32)).astype(np.float32)
    assert tokpos.relative_position_fit(r, 8).relative > 0.3


def test_layout_names_the_pairs():
    halves = ref_halves(64, 16).astype(np.float32)
    pairs = [(i, i + 8) for i in range(8)]
    fit = tokpos.relative_position_fit(halves, 3, layout="halves")
    worst, relative = ref_fit(halves.astype(np.float64), 3, pairs)
    assert fit.relative == pytest.approx(relative, rel=1e-9, abs=1e-12) and fit.relative < 1e-6
    assert tokpos.relative_position_fit(halves, 3).relative > 0.1  # interleaved pairs of a halves table


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_numpy_dtypes_are_rounded_to_float32(dtype):
    t = np.random.default_rng(4).standard_normal((20, 6)).astype(dtype)
    f32 = t.astype(np.float32)
    assert np.array_equal(tokpos.adjacent_cosine(t), tokpos.adjacent_cosine(f32))
    assert np.array_equal(tokpos.cosine_by_offset(t, 5), tokpos.cosine_by_offset(f32, 5))
    assert tokpos.relative_position_fit(t, 2).max_residual == tokpos.relative_position_fit(f32, 2).max_residual
    np.testing.assert_allclose(tokpos.adjacent_cosine(t), ref_adjacent(f32.astype(np.float64)), atol=1e-12)


def test_strided_and_list_inputs():
    t = np.random.default_rng(5).standard_normal((12, 10)).astype(np.float32)
    view = np.asfortranarray(t)[::2, 1:]  # not C-contiguous
    np.testing.assert_allclose(tokpos.adjacent_cosine(view), ref_adjacent(view.astype(np.float64)), atol=1e-12)
    assert np.array_equal(tokpos.adjacent_cosine(t.tolist()), tokpos.adjacent_cosine(t))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_torch_tensors_of_every_float_dtype(dtype):
    import torch

    x = torch.randn(30, 8, generator=torch.Generator().manual_seed(6)).to(getattr(torch, dtype))
    x.requires_grad_(True)
    ref = x.detach().float().numpy()
    assert np.array_equal(tokpos.adjacent_cosine(x), tokpos.adjacent_cosine(ref))
    assert np.array_equal(tokpos.cosine_by_offset(x, [1, 4]), tokpos.cosine_by_offset(ref, [1, 4]))
    assert tokpos.relative_position_fit(x, 1).relative == tokpos.relative_position_fit(ref, 1).relative
    np.testing.assert_allclose(tokpos.adjacent_cosine(x), ref_adjacent(ref.astype(np.float64)), atol=1e-12)
    np.testing.assert_allclose(tokpos.adjacent_cosine(x.t().contiguous().t()), ref_adjacent(ref.astype(np.float64)),
                               atol=1e-12)


def test_torch_errors():
    import torch

    with pytest.raises(TypeError, match=r"adjacent_cosine: table has dtype torch.int64; expected a float dtype"):
        tokpos.adjacent_cosine(torch.zeros(3, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"table is on meta"):
        tokpos.adjacent_cosine(torch.zeros(3, 2, device="meta"))
    with pytest.raises(ValueError, match=r"table has 3 dimensions, shape \(2, 3, 4\); expected 2"):
        tokpos.cosine_by_offset(torch.zeros(2, 3, 4), 1)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda t: tokpos.adjacent_cosine(np.zeros(4, np.float32)), ValueError,
         r"adjacent_cosine: table has 1 dimensions, shape \(4,\); expected 2, \(L, D\)"),
        (lambda t: tokpos.adjacent_cosine(np.zeros((0, 4), np.float32)), ValueError,
         r"table has shape \(L, D\) = \(0, 4\); L and D must be >= 1"),
        (lambda t: tokpos.relative_position_fit(np.zeros((4, 0), np.float32), 1), ValueError,
         r"relative_position_fit: table has shape \(L, D\) = \(4, 0\)"),
        (lambda t: tokpos.adjacent_cosine(np.zeros((3, 3), np.int32)), TypeError,
         r"table has dtype int32; expected a float dtype"),
        (lambda t: tokpos.adjacent_cosine(np.zeros((3, 3), bool)), TypeError, r"table has dtype bool"),
        (lambda t: tokpos.adjacent_cosine("abc"), TypeError, r"table has dtype <U3"),
        (lambda t: tokpos.cosine_by_offset(t, 10), ValueError,
         r"cosine_by_offset: offsets = 10 is outside \[0, 9\] \(the table has L = 10 rows\)"),
        (lambda t: tokpos.cosine_by_offset(t, -1), ValueError, r"offsets = -1 is outside \[0, 9\]"),
        (lambda t: tokpos.cosine_by_offset(t, [2, 12]), ValueError, r"offsets\[1\] = 12 is outside \[0, 9\]"),
        (lambda t: tokpos.cosine_by_offset(t, [1.5]), TypeError, r"offsets\[0\] = 1.5 is not an integer"),
        (lambda t: tokpos.cosine_by_offset(t, [True]), TypeError, r"offsets\[0\] = True is a bool"),
        (lambda t: tokpos.cosine_by_offset(t, 2.0), TypeError, r"offsets = 2.0 is neither an int nor a sequence"),
        (lambda t: tokpos.relative_position_fit(t, 10), ValueError,
         r"relative_position_fit: k = 10 is outside \[0, 9\]"),
        (lambda t: tokpos.relative_position_fit(t, "1"), TypeError, r"k = '1' is not an integer"),
        (lambda t: tokpos.relative_position_fit(t, 1, layout="sideways"), ValueError,
         r"relative_position_fit: layout = 'sideways' is not one of interleaved, halves"),
    ],
)
def test_bad_input_names_value_and_limit(call, error, message):
    t = np.ones((10, 4), np.float32)
    with pytest.raises(error, match=message):
        call(t)


def test_numpy_input_does_not_import_torch():
    code = (
        "import sys, numpy as np, tokpos\n"
        "t = tokpos.sinusoidal_table(16, 8)\n"
        "tokpos.adjacent_cosine(t); tokpos.cosine_by_offset(t, [1, 2]); tokpos.relative_position_fit(t, 1)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr.decode()
