"""position_ids_from_mask against transformers' own generation code: the pad
value of today's transformers (0) by default, 4.x's (1) on request."""

import numpy as np
import pytest

import tokpos

torch = pytest.importorskip("torch", reason="torch is not installed: transformers' position ids need it")
generation = pytest.importorskip("transformers.generation.utils", reason="transformers is not installed")


def transformers_position_ids(mask):
    """GenerationMixin._prepare_position_ids_for_generation, transformers'
    own function, on an attention mask (it reads nothing from self then)."""
    fn = generation.GenerationMixin._prepare_position_ids_for_generation
    ids = torch.zeros(mask.shape, dtype=torch.long)
    return fn(None, ids, {"attention_mask": mask})


def masks():
    rng = np.random.default_rng(26)
    yield torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]])
    for _ in range(30):
        b, s = int(rng.integers(1, 5)), int(rng.integers(1, 12))
        left = rng.integers(0, s + 1, size=b)  # left padding, as generate() sees it
        mask = (np.arange(s)[None, :] >= left[:, None]).astype(np.int64)
        yield torch.from_numpy(mask)
        yield torch.from_numpy(rng.integers(0, 2, size=(b, s)))  # any 0/1 pattern


def test_default_pad_value_is_transformers_own():
    for mask in masks():
        want = transformers_position_ids(mask)
        got = tokpos.position_ids_from_mask(mask)
        assert got.dtype == torch.int64
        assert torch.equal(got, want), (mask, got, want)
        got = tokpos.position_ids_from_mask(mask.bool())
        assert torch.equal(got, want)


def test_last_columns_are_transformers_own_last_columns():
    for mask in masks():
        want = transformers_position_ids(mask)
        for new in range(mask.shape[1] + 1):
            got = tokpos.position_ids_from_mask(mask, new)
            assert torch.equal(got, want[:, want.shape[1] - new :])


def test_pad_value_one_is_transformers_4_rule():
    # transformers 4.x, prepare_inputs_for_generation (GPT-2, Llama, ...):
    #   position_ids = attention_mask.long().cumsum(-1) - 1
    #   position_ids.masked_fill_(attention_mask == 0, 1)
    for mask in masks():
        want = mask.long().cumsum(-1) - 1
        want.masked_fill_(mask == 0, 1)
        assert torch.equal(tokpos.position_ids_from_mask(mask, pad_value=1), want)
        # real tokens agree under both rules; only the pads differ
        today = transformers_position_ids(mask)
        assert torch.equal(want[mask == 1], today[mask == 1])


def test_any_int64_pad_value_and_a_bad_one_named():
    mask = np.array([[0, 1, 1]])
    np.testing.assert_array_equal(tokpos.position_ids_from_mask(mask, pad_value=-1), [[-1, 0, 1]])
    big = np.iinfo(np.int64).max
    np.testing.assert_array_equal(tokpos.position_ids_from_mask(mask, pad_value=big), [[big, 0, 1]])
    for bad in (0.5, True, "0", big + 1):
        with pytest.raises(ValueError, match="pad_value"):
            tokpos.position_ids_from_mask(mask, pad_value=bad)
