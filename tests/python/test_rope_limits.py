"""RoPE and ALiBi at their limits from Python: sizes past the documented
maxima, attention factors that are not finite float32 values, and the
rope_type / type rule the CLI's --scaling shares."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

import tokpos
from conftest import tokpos_torch


@pytest.mark.parametrize("dim", [2**62, 2**40, 2**20 + 2, 2**63 - 2])
def test_huge_dim_is_a_value_error_naming_dim_and_its_limit(dim):
    with pytest.raises(ValueError, match=rf"dim = {dim} must be <= 2\^20 = 1048576"):
        tokpos.rope_frequencies(dim)
    with pytest.raises(ValueError, match=rf"dim = {dim} must be <= 2\^20"):
        tokpos.rope_frequencies(dim, scaling={"rope_type": "linear", "factor": 2.0})
    inv, _ = tokpos.rope_frequencies(2**20)
    assert inv.shape == (2**19,)


@pytest.mark.parametrize("n", [2**40, 2**62, 2**20 + 1])
def test_huge_head_count_is_a_value_error_naming_num_heads_and_its_limit(n):
    with pytest.raises(ValueError, match=rf"num_heads = {n} must be <= 2\^20 = 1048576"):
        tokpos.alibi_slopes(n)
    assert tokpos.alibi_slopes(2**20).shape == (2**20,)


def _rows():
    x = np.full((3, 2, 8), 0.5, dtype=np.float32)
    inv, _ = tokpos.rope_frequencies(8)
    return x, np.arange(3, dtype=np.int64), inv


@pytest.mark.parametrize("factor", [1e39, 3.5e38, 1e300, 1e-50, 2.0**-150])
def test_attention_factor_must_be_a_finite_nonzero_float32(factor):
    x, pos, inv = _rows()
    out = np.full_like(x, -3.0)
    with pytest.raises(ValueError, match=r"attention_factor = .* must be finite and > 0 in float32.*FLT_MAX"):
        tokpos.apply_rope(x, pos, inv, attention_factor=factor, out=out)
    assert (out == -3.0).all()
    with pytest.raises(ValueError, match=r"attention_factor = .* in float32"):
        tokpos.rope_cos_sin(pos, inv, attention_factor=factor)


def test_the_ends_of_the_float32_range_give_finite_values():
    x, pos, inv = _rows()
    for factor in (float(np.finfo(np.float32).max), 2.0**-149):
        y = tokpos.apply_rope(x, pos, inv, attention_factor=factor)
        assert np.isfinite(y).all()


@pytest.mark.parametrize(
    "scaling, needle",
    [
        ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "attention_factor": 1e39},
         r"attention_factor = 9\.9999999999999994e\+38 must be finite and > 0 in float32"),
        ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "mscale": 1e300,
          "mscale_all_dim": 1.0},
         r"get_mscale\(factor, mscale\) / get_mscale\(factor, mscale_all_dim\) = .* in float32"),
        ({"rope_type": "longrope", "original_max_position_embeddings": 64, "short_factor": [1.0] * 4,
          "long_factor": [1.0] * 4, "attention_factor": 1e-60}, r"attention_factor = .* in float32"),
    ],
)
def test_scaling_attention_factors_must_be_finite_nonzero_float32s(scaling, needle):
    with pytest.raises(ValueError, match=needle):
        tokpos.rope_frequencies(8, scaling=scaling)


def test_rope_type_and_type_that_disagree_are_refused_naming_both():
    scaling = {"rope_type": "linear", "type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64}
    with pytest.raises(ValueError, match=r"'rope_type' = 'linear' and 'type' = 'yarn' disagree"):
        tokpos.rope_frequencies(8, scaling=scaling)
    # Agreeing, or either alone: the same frequencies.
    want, _ = tokpos.rope_frequencies(8, scaling={"rope_type": "linear", "factor": 2.0})
    for s in ({"rope_type": "linear", "type": "linear", "factor": 2.0}, {"type": "linear", "factor": 2.0},
              {"rope_type": "linear", "type": None, "factor": 2.0}):
        got, _ = tokpos.rope_frequencies(8, scaling=s)
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match=r"scaling\['type'\] = 3 must be a string"):
        tokpos.rope_frequencies(8, scaling={"rope_type": "linear", "type": 3, "factor": 2.0})


def test_torch_rotary_embedding_reads_the_type_by_the_same_rule():
    tt = tokpos_torch()
    scaling = {"rope_type": "linear", "type": "dynamic", "factor": 2.0, "max_position_embeddings": 16}
    with pytest.raises(ValueError, match="disagree"):
        tt.RotaryEmbedding(8, scaling=scaling)
    rope = tt.RotaryEmbedding(8, scaling={"type": "dynamic", "factor": 2.0, "max_position_embeddings": 16})
    assert rope.rope_type == "dynamic"


def _cli():
    path = os.environ.get("TOKPOS_CLI") or shutil.which("tokpos")
    if not path or not pathlib.Path(path).exists():
        pytest.skip("the tokpos CLI is not built (set TOKPOS_CLI)")
    return path


def test_the_cli_and_python_refuse_the_same_scaling_dicts(tmp_path):
    cli = _cli()
    cases = [
        {"rope_type": "linear", "type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64},
        {"rope_type": "linear", "factor": float("inf")},
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "attention_factor": 1e39},
        {"rope_type": "proportional", "partial_rotary_factor": 1.5},
        {"rope_type": "proportional", "partial_rotary_factor": 0.5, "factor": -2.0},
    ]
    import json

    for scaling in cases:
        with pytest.raises(ValueError):
            tokpos.rope_frequencies(8, scaling=scaling)
        text = json.dumps(scaling).replace("Infinity", "1e400")
        r = subprocess.run([cli, "rope", "--dim", "8", "--positions", "0:4", "--scaling", text,
                            "--out", str(tmp_path / "r.npy")], capture_output=True, text=True)
        assert r.returncode == 1, r.stderr
        assert "--scaling" in r.stderr and "internal error" not in r.stderr, r.stderr
