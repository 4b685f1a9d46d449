"""Arguments a caller gets wrong, at the Python layer: index arguments given
floats or bools, integers past what the core's types hold, init_std outside
what the C++ modules accept, and tensors off the CPU (meta ones included).
Each raises ValueError naming the argument, eagerly, under autograd and
under torch.compile; none is rounded, wrapped or answered with
uninitialised memory."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tokpos

F32 = np.float32
I64_MAX = 2**63 - 1


def tables(V=6, L=5, D=4):
    rng = np.random.default_rng(0)
    return rng.standard_normal((V, D)).astype(F32), rng.standard_normal((L, D)).astype(F32)


# ---- index arguments: floats and bools are refused, never rounded -----------------------

tok, pos = tables()
SLOPES = tokpos.alibi_slopes(2)
X = np.zeros((2, 1, 4), F32)
INV = tokpos.rope_frequencies(4)[0]

FLOAT_INDEX_CASES = {
    "compose ids": (lambda v: tokpos.compose(v, tok), "ids"),
    "compose position_ids": (lambda v: tokpos.compose([[1]], tok, pos, position_ids=v), "position_ids"),
    "compose_backward ids": (
        lambda v: tokpos.compose_backward(np.ones((1, 1, 4), F32), v, d_token_table=np.zeros_like(tok)),
        "ids",
    ),
    "compose_backward position_ids": (
        lambda v: tokpos.compose_backward(
            np.ones((1, 1, 4), F32), [[1]], d_pos_table=np.zeros_like(pos), position_ids=v
        ),
        "position_ids",
    ),
    "alibi_bias q_positions": (lambda v: tokpos.alibi_bias(SLOPES, v[0], [0]), "q_positions"),
    "alibi_bias k_positions": (lambda v: tokpos.alibi_bias(SLOPES, [0], v[0]), "k_positions"),
    "roberta_position_ids": (lambda v: tokpos.roberta_position_ids(v, 1), "input_ids"),
    "packed_position_ids": (lambda v: tokpos.packed_position_ids(v[0]), "cu_seqlens"),
    "cu_seqlens_from_position_ids": (lambda v: tokpos.cu_seqlens_from_position_ids(v), "position_ids"),
    "position_ids_from_mask": (lambda v: tokpos.position_ids_from_mask(v), "attention_mask"),
    "apply_rope positions": (lambda v: tokpos.apply_rope(X[:1], v[0], INV), "positions"),
    "rope_cos_sin positions": (lambda v: tokpos.rope_cos_sin(v[0], INV), "positions"),
}


@pytest.mark.parametrize("case", sorted(FLOAT_INDEX_CASES))
@pytest.mark.parametrize("value", [[[1.9]], [[0.9]], [[0.7]], [[1.0]], [[2.5e9]]], ids=repr)
def test_float_lists_are_refused_not_truncated(case, value):
    fn, name = FLOAT_INDEX_CASES[case]
    with pytest.raises(ValueError, match=rf"{name} holds {value[0][0]!r} at \(0, 0\)|{name} holds {value[0][0]!r} at \(\d+,\)") as e:
        fn(value)
    assert "not an integer" in str(e.value)


def test_the_first_fractional_value_is_named_with_its_index():
    with pytest.raises(ValueError, match=r"ids holds 2\.5 at \(1, 0\)"):
        tokpos.compose([[1], [2.5], [3.5]], tok)
    with pytest.raises(ValueError, match=r"ids holds 1\.0 at \(0, 0\)"):  # integral floats too
        tokpos.compose([[1.0, 2.0]], tok)


@pytest.mark.parametrize("case", sorted(c for c in FLOAT_INDEX_CASES if c != "position_ids_from_mask"))
def test_bool_lists_are_not_indices(case):
    fn, name = FLOAT_INDEX_CASES[case]
    with pytest.raises(ValueError, match=rf"{name} holds True at .*a bool"):
        fn([[True]])


def test_a_mask_may_be_bool():
    np.testing.assert_array_equal(tokpos.position_ids_from_mask([[True, False, True]]), [[0, 0, 1]])
    np.testing.assert_array_equal(tokpos.position_ids_from_mask(np.array([[True, True]])), [[0, 1]])


def test_bool_arrays_are_not_indices():
    with pytest.raises(ValueError, match="input_ids has dtype bool"):
        tokpos.roberta_position_ids(np.array([[True, False]]), 1)
    with pytest.raises(ValueError, match="q_positions has dtype bool"):
        tokpos.alibi_bias(SLOPES, np.array([True]), [0])


@pytest.mark.parametrize("value", [2**63, 2**64, -(2**63) - 1, 2**70])
def test_list_values_outside_int64_are_refused(value):
    with pytest.raises(ValueError, match=rf"ids holds {value} at \(0, 1\): outside int64"):
        tokpos.compose([[1, value]], tok)
    with pytest.raises(ValueError, match=rf"q_positions holds {value} at \(1,\): outside int64"):
        tokpos.alibi_bias(SLOPES, [0, value], [0])


def test_uint64_arrays_past_int64_are_refused_not_wrapped():
    with pytest.raises(ValueError, match=r"cu_seqlens holds 18446744073709551615, above the int64 maximum"):
        tokpos.packed_position_ids(np.array([0, 2**64 - 1], np.uint64))


def test_ragged_and_non_numeric_lists_name_the_argument():
    with pytest.raises(ValueError, match="ids must be an integer or a rectangular sequence"):
        tokpos.compose([[1, 2], [3]], tok)
    with pytest.raises(ValueError, match="position_ids holds '1' at"):
        tokpos.compose([[1]], tok, pos, position_ids=[["1"]])
    with pytest.raises(ValueError, match="ids holds None"):
        tokpos.compose([[1, None]], tok)


def test_integer_lists_still_work_and_match_arrays():
    ids = [[1, 2, 0], [5, 4, 3]]
    np.testing.assert_array_equal(tokpos.compose(ids, tok, pos), tokpos.compose(np.array(ids), tok, pos))
    np.testing.assert_array_equal(
        tokpos.compose(ids, tok, pos, position_ids=[[0, 1, 2], [4, 3, 2]]),
        tokpos.compose(np.array(ids), tok, pos, position_ids=np.array([[0, 1, 2], [4, 3, 2]])),
    )
    np.testing.assert_array_equal(tokpos.cu_seqlens_from_position_ids([]), [0])
    np.testing.assert_array_equal(tokpos.alibi_bias(SLOPES, [1], [0]), tokpos.alibi_bias(SLOPES, np.array([1]), [0]))


def test_a_refused_list_leaves_out_untouched():
    out = np.full((1, 1, 4), 7.0, F32)
    with pytest.raises(ValueError, match="ids"):
        tokpos.compose([[1.9]], tok, out=out)
    with pytest.raises(ValueError, match="position_ids"):
        tokpos.compose([[1]], tok, pos, position_ids=[[0.9]], out=out)
    assert np.all(out == 7.0)


# ---- integers past the core's types: named, with the limit --------------------------------

BIG = 2**63
HUGE_INT_CASES = [
    ("compose start", lambda: tokpos.compose([[1]], tok, pos, start=BIG), "start", I64_MAX),
    ("compose_backward start", lambda: tokpos.compose_backward(
        np.ones((1, 1, 4), F32), [[1]], d_pos_table=np.zeros_like(pos), start=BIG), "start", I64_MAX),
    ("sinusoidal_table max_context", lambda: tokpos.sinusoidal_table(BIG, 4), "max_context", I64_MAX),
    ("sinusoidal_table dim", lambda: tokpos.sinusoidal_table(4, BIG), "dim", I64_MAX),
    ("sinusoidal_table start", lambda: tokpos.sinusoidal_table(4, 4, start=BIG), "start", I64_MAX),
    ("sinusoidal_table padding_idx", lambda: tokpos.sinusoidal_table(4, 4, layout="fairseq", padding_idx=2**70),
     "padding_idx", I64_MAX),
    ("pe_sinusoidal pos", lambda: tokpos.pe_sinusoidal(BIG, 0, 4), "pos", I64_MAX),
    ("pe_sinusoidal hidden_dim", lambda: tokpos.pe_sinusoidal(0, 0, -BIG - 1), "hidden_dim", -BIG),
    ("set_num_threads", lambda: tokpos.set_num_threads(2**31), "n", 2**31 - 1),
    ("alibi_slopes num_heads", lambda: tokpos.alibi_slopes(BIG), "num_heads", I64_MAX),
    ("roberta padding_idx", lambda: tokpos.roberta_position_ids([[1]], 2**70), "padding_idx", I64_MAX),
    ("roberta past_length", lambda: tokpos.roberta_position_ids([[1]], 0, BIG), "past_length", I64_MAX),
    ("packed start", lambda: tokpos.packed_position_ids([0, 1], BIG), "start", I64_MAX),
    ("mask num_new_tokens", lambda: tokpos.position_ids_from_mask([[1]], BIG), "num_new_tokens", I64_MAX),
    ("rope_frequencies dim", lambda: tokpos.rope_frequencies(BIG), "dim", I64_MAX),
    ("rope_frequencies seq_len", lambda: tokpos.rope_frequencies(8, seq_len=BIG), "seq_len", I64_MAX),
    ("rope max_position_embeddings", lambda: tokpos.rope_frequencies(
        8, scaling={"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": BIG}, seq_len=4),
     "max_position_embeddings", I64_MAX),
    ("rope original_max_position_embeddings", lambda: tokpos.rope_frequencies(
        8, scaling={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": BIG}),
     "original_max_position_embeddings", I64_MAX),
    ("apply_rope rotary_dim", lambda: tokpos.apply_rope(X, [0, 1], INV, rotary_dim=BIG), "rotary_dim", I64_MAX),
]


@pytest.mark.parametrize("case", HUGE_INT_CASES, ids=[c[0] for c in HUGE_INT_CASES])
def test_huge_integers_are_named_with_the_limit(case):
    _, fn, name, limit = case
    with pytest.raises(ValueError, match=rf"{name}\W.* must be [<>]= {limit}") as e:
        fn()
    assert "incompatible function arguments" not in str(e.value)


def test_the_limits_themselves_are_accepted():
    tokpos.set_num_threads(2**31 - 1)
    tokpos.set_num_threads(0)
    assert tokpos.alibi_slopes(3).shape == (3,)
    with pytest.raises((ValueError, IndexError), match="start") as e:  # an int64: the core judges it
        tokpos.compose([[1]], tok, pos, start=I64_MAX)
    assert "incompatible function arguments" not in str(e.value)


# ---- tokpos.torch ---------------------------------------------------------------------------

from conftest import tokpos_torch  # noqa: E402

tt = tokpos_torch()  # or a skip saying why (torch missing or too old)
import torch  # noqa: E402


@pytest.mark.parametrize(
    "make",
    [
        lambda v: tt.TokenEmbedding(5, 3, seed=2**64 - 1 + v),
        lambda v: tt.LearnedPositionalEmbedding(5, 3, seed=2**64 - 1 + v),
    ],
    ids=["TokenEmbedding", "LearnedPositionalEmbedding"],
)
def test_seed_is_any_uint64(make):
    assert make(0).weight.shape == (5, 3)
    with pytest.raises(ValueError, match=r"seed = 18446744073709551616 must be <= 18446744073709551615 \(the uint64"):
        make(1)


TORCH_HUGE = [
    ("TokenEmbedding vocab_size", lambda: tt.TokenEmbedding(BIG, 3), "vocab_size"),
    ("TokenEmbedding dim", lambda: tt.TokenEmbedding(3, BIG), "dim"),
    ("TokenEmbedding padding_idx", lambda: tt.TokenEmbedding(3, 2, padding_idx=2**70), "padding_idx"),
    ("LearnedPositionalEmbedding max_context_length", lambda: tt.LearnedPositionalEmbedding(BIG, 3),
     "max_context_length"),
    ("SinusoidalPositionalEmbedding dim", lambda: tt.SinusoidalPositionalEmbedding(4, BIG), "dim"),
    ("RotaryEmbedding dim", lambda: tt.RotaryEmbedding(BIG), "dim"),
    ("positional forward start", lambda: tt.LearnedPositionalEmbedding(4, 2)(2, start=BIG), "start"),
    ("positional forward seq_len", lambda: tt.LearnedPositionalEmbedding(4, 2)(BIG), "seq_len"),
    ("composer start", lambda: tt.EmbeddingComposer(tt.TokenEmbedding(4, 2), tt.LearnedPositionalEmbedding(4, 2))(
        torch.tensor([[1]]), start=BIG), "start"),
]


@pytest.mark.parametrize("case", TORCH_HUGE, ids=[c[0] for c in TORCH_HUGE])
def test_torch_modules_name_huge_integers(case):
    _, fn, name = case
    with pytest.raises(ValueError, match=rf"{name} = \d+ must be <= {I64_MAX}") as e:
        fn()
    assert "incompatible function arguments" not in str(e.value)


# init_std: what the C++ modules refuse (finite and >= 0), through the same check.

@pytest.mark.parametrize("cls", [tt.TokenEmbedding, tt.LearnedPositionalEmbedding])
@pytest.mark.parametrize("init_std", [math.nan, math.inf, -math.inf, -1.0, -1e-300])
def test_bad_init_std_is_refused(cls, init_std):
    with pytest.raises(ValueError, match=rf"tokpos.torch.{cls.__name__}: init_std = (-?nan|-?inf|-1e-300|-1) must be finite and >= 0"):
        cls(4, 3, init_std=init_std)


@pytest.mark.parametrize("cls", [tt.TokenEmbedding, tt.LearnedPositionalEmbedding])
def test_init_std_zero_gives_a_zero_table_and_a_string_is_refused(cls):
    assert torch.count_nonzero(cls(4, 3, init_std=0.0).weight) == 0
    with pytest.raises(ValueError, match="init_std must be a number"):
        cls(4, 3, init_std="0.02")


def test_reset_parameters_checks_init_std_and_keeps_the_table():
    m = tt.TokenEmbedding(4, 3, seed=1)
    before = m.weight.detach().clone()
    m.init_std = math.nan
    with pytest.raises(ValueError, match="init_std = nan"):
        m.reset_parameters()
    assert torch.equal(m.weight.detach(), before)


# Tensors off the CPU: meta ones have no memory to read. tokpos.torch computes
# their shapes alone (a meta result, never an uninitialised CPU tensor); the
# numpy-facing API refuses them by name.

META = torch.device("meta")


def _composer():
    return tt.EmbeddingComposer(tt.TokenEmbedding(6, 4, seed=1), tt.LearnedPositionalEmbedding(5, 4, seed=2))


def _meta_calls():
    """Each call with one meta argument and the shape of its result (plain
    torch's: (B, T, D) rows, x's shape for a rotation)."""
    ids, pids = torch.tensor([[1, 2]]), torch.tensor([[0, 1]])
    learned, composer = tt.LearnedPositionalEmbedding(5, 4), _composer()
    rope = tt.RotaryEmbedding(4)
    x = torch.zeros(1, 2, 1, 4)
    return {
        "LearnedPositionalEmbedding positions": (lambda: learned(pids.to(META)), (1, 2, 4)),
        "EmbeddingComposer ids": (lambda: composer(ids.to(META)), (1, 2, 4)),
        "EmbeddingComposer position_ids": (lambda: composer(ids, position_ids=pids.to(META)), (1, 2, 4)),
        "apply_rope x": (lambda: tt.apply_rope(x.to(META), pids, rope.inv_freq), (1, 2, 1, 4)),
        "RotaryEmbedding positions": (lambda: rope(x, pids.to(META)), (1, 2, 1, 4)),
        "RotaryEmbedding.cos_sin positions": (lambda: rope.cos_sin(pids.to(META))[0], (1, 2, 4)),
    }


META_CASES = sorted(_meta_calls())


def _meta_result(out, shape) -> None:
    assert out.device.type == "meta" and tuple(out.shape) == shape and out.dtype == torch.float32, out


@pytest.mark.parametrize("case", META_CASES)
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "autograd"])
def test_meta_tensors_give_meta_results(case, grad):
    fn, shape = _meta_calls()[case]
    with torch.set_grad_enabled(grad):
        _meta_result(fn(), shape)


def test_a_module_moved_to_meta_gives_meta_results():
    learned = tt.LearnedPositionalEmbedding(5, 4).to(META)
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            _meta_result(learned(torch.tensor([[0, 1]])), (1, 2, 4))


def test_token_embedding_on_meta_is_torch_embedding():
    # TokenEmbedding, like Embedding, hands a device tokpos has no kernels
    # for to torch.nn.functional.embedding: shapes propagate as torch's do.
    emb = tt.TokenEmbedding(6, 4).to(META)
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            out = emb(torch.tensor([[1, 2]], device=META))
        assert out.device.type == "meta" and out.shape == (1, 2, 4)


def test_the_ops_give_meta_results_for_meta_tensors():
    """The fake kernels are also the ops' meta kernels: called with a meta
    tensor they give a meta result, never an empty CPU tensor; the sparse
    gradient's row count depends on the ids' values, which torch names."""
    w = torch.zeros(6, 4)
    ids = torch.tensor([[1, 2]], device=META)
    _meta_result(torch.ops.tokpos.compose(ids, w, None, None, 0, -1, False), (1, 2, 4))
    d_tok, _ = torch.ops.tokpos.compose_backward(torch.zeros(1, 2, 4, device=META), ids, None, 0, 6, 0, -1)
    _meta_result(d_tok, (6, 4))
    with pytest.raises(RuntimeError, match="data-dependent"):
        torch.ops.tokpos.token_grad_rows(torch.zeros(1, 2, 4), ids, 6, -1)


@pytest.mark.parametrize("fullgraph", [False, True])
def test_meta_tensors_under_torch_compile(fullgraph):
    """Compiled, the same meta results; CPU inputs still compile and run."""
    torch._dynamo.reset()
    composer = _composer()
    compiled = torch.compile(composer, fullgraph=fullgraph, backend="eager")
    ids, pids = torch.tensor([[1, 2]]), torch.tensor([[0, 1]])
    _meta_result(compiled(ids, position_ids=pids.to(META)), (1, 2, 4))
    _meta_result(compiled(ids.to(META)), (1, 2, 4))
    torch.testing.assert_close(compiled(ids, position_ids=pids), composer(ids, position_ids=pids))


def _named_device_error(e: BaseException, name: str) -> None:
    msg = str(e)
    assert f"{name} is on meta" in msg and "CPU" in msg, msg


def test_the_numpy_api_refuses_meta_tensors_by_name():
    ids = torch.tensor([[1, 2]], device=META)
    t = torch.from_numpy(tok)
    cases = [
        (lambda: tokpos.compose(ids, t), "ids"),
        (lambda: tokpos.compose(torch.tensor([[1]]), t.to(META)), "token_table"),
        (lambda: tokpos.position_ids_from_mask(ids), "attention_mask"),
        (lambda: tokpos.alibi_bias(torch.from_numpy(SLOPES).to(META), [0], [0]), "slopes"),
        (lambda: tokpos.apply_rope(torch.zeros(2, 1, 4), torch.tensor([0, 1], device=META), INV), "positions"),
    ]
    for fn, name in cases:
        with pytest.raises(ValueError) as e:
            fn()
        _named_device_error(e.value, name)


@pytest.mark.skipif(
    not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
    reason="torch.distributed with gloo is not available",
)
def test_vocab_parallel_checks_init_std_and_seed_on_every_rank(tmp_path):
    """VocabParallelEmbedding refuses what TokenEmbedding refuses, on every
    rank: with V = 1 over 2 ranks, rank 1 holds only a padding row and draws
    nothing, and still raises (a rank that went on would wait in the next
    collective for ever)."""
    from world_runner import run

    got = run(
        """
        import math
        errors = {}
        for init_std in (math.nan, math.inf, -1.0):
            errors[repr(init_std)] = attempt(lambda: VocabParallelEmbedding(1, 3, init_std=init_std))
        errors["seed"] = attempt(lambda: VocabParallelEmbedding(1, 3, seed=2**64))
        ok = VocabParallelEmbedding(1, 3, seed=2**64 - 1, init_std=0.0)
        result(errors=errors, rows=ok.num_real_rows, zeros=bool((ok.weight == 0).all()))
        """,
        tmp_path,
        world=2,
    )
    for rank, [r] in enumerate(got):
        assert r["rows"] == (1 if rank == 0 else 0) and r["zeros"], r
        for key in ("nan", "inf", "-1.0"):
            kind, msg = r["errors"][key]
            assert kind == "ValueError" and "tokpos.torch.VocabParallelEmbedding: init_std" in msg, (rank, key, msg)
            assert "must be finite and >= 0" in msg
        assert r["errors"]["seed"][0] == "ValueError" and "seed = 18446744073709551616" in r["errors"]["seed"][1]
