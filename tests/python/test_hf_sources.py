"""tokpos.hf.patch and the installed transformers: the fused patches apply
where the functions they mirror have the recorded sources (whatever the
version number), the tokpos.torch.Embedding fallback where one differs
(exact, with a warning naming the version and what is not fused), a
refusal where neither applies; and patching models built on the meta
device (deferred initialisation), with the rotary module keeping what
transformers' tests and utilities read from it. Every patched model is
compared with the unpatched transformers model, bit for bit where the patch
is exact."""

from __future__ import annotations

import copy
import inspect
import sys
import warnings

import numpy as np
import pytest

from conftest import tokpos_torch

tt = tokpos_torch()

import torch  # noqa: E402
from torch import nn  # noqa: E402

transformers = pytest.importorskip("transformers", reason="transformers is not installed: tokpos.hf patches its models")

import tokpos.hf  # noqa: E402
from tokpos.hf import _bert, _gpt2, _llama, _sources  # noqa: E402

V, L = 101, 40


def seeded(make, seed=0):
    torch.manual_seed(seed)
    return make()


def gpt2():
    config = transformers.GPT2Config(vocab_size=V, n_positions=L, n_embd=32, n_layer=2, n_head=4,
                                     bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


def bert(config_name="BertConfig", cls_name="BertModel"):
    config = getattr(transformers, config_name)(vocab_size=V, hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=4, intermediate_size=64,
                                                max_position_embeddings=L, type_vocab_size=2, pad_token_id=1)
    return getattr(transformers, cls_name)(config)


def llama_config(**kw):
    sizes = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return transformers.LlamaConfig(**dict(sizes, **kw))


def llama(**kw):
    return transformers.LlamaForCausalLM(llama_config(**kw))


def pair(make):
    model = seeded(make).eval()
    return model, copy.deepcopy(model)


def ids(seed=3, shape=(3, 9), high=90):
    return torch.randint(2, high, shape, generator=torch.Generator().manual_seed(seed))


def changed_source(monkeypatch, family, path):
    """The installed function at path as a transformers release that changed
    it would have it: the same behaviour, another source (a wrapper), put
    where transformers' code finds it."""
    module_name, _, qualname = path.partition(":")
    owner = _sources.resolve(f"{module_name}:{qualname.rpartition('.')[0]}") if "." in qualname else None
    name = qualname.rpartition(".")[2]
    original = _sources.resolve(path)

    def changed(*args, **kwargs):
        return original(*args, **kwargs)

    changed.__name__ = name
    if owner is not None:
        monkeypatch.setattr(owner, name, changed)
    else:
        monkeypatch.setattr(sys.modules[module_name], name, changed)
    assert not _sources.matches(family, path)
    return original


# ---------------------------------------------------------------------------
# Fingerprints


class _Documented:
    def f(self, x):
        """A docstring."""
        # a comment
        return x + 1  # another


class _Plain:
    def f(self, x):

        return x + 1


class _Changed:
    def f(self, x):
        return x + 2


def test_fingerprints_ignore_comments_and_docstrings_and_see_code():
    assert _sources.fingerprint(_Documented.f) == _sources.fingerprint(_Plain.f)
    assert _sources.fingerprint(_Plain.f) != _sources.fingerprint(_Changed.f)
    assert _sources.fingerprint(len) is None  # no Python source


def test_every_mirrored_function_of_a_recorded_version_matches():
    recorded = {v.strip() for family in _sources.RECORDED for table in _sources.RECORDED[family].values()
                for versions in table.values() for v in versions.split(",")}
    version = transformers.__version__
    if version not in recorded:
        pytest.skip(f"transformers {version} is not one the fingerprints were recorded from ({sorted(recorded)})")
    for family in _sources.MIRRORED:
        assert _sources.differing(family) == [], family


def test_a_kernels_hub_layer_is_read_as_the_function_it_wraps():
    # transformers' use_kernel_forward_from_hub makes a function an nn.Module
    # instance when the kernels package is installed.
    def rotate(x):
        return x + 1

    class Func(nn.Module):
        def forward(self, *args, **kwargs):
            return rotate(*args, **kwargs)

    assert _sources.underlying(Func()) is rotate
    assert _sources.fingerprint(Func()) == _sources.fingerprint(rotate)


# ---------------------------------------------------------------------------
# Fused where the sources match, exact either way


def test_gpt2_fused_exactly_where_the_source_is_recorded():
    model, reference = pair(gpt2)
    fused = _sources.matches(_gpt2.FAMILY, _gpt2.FORWARD)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert tokpos.hf.patch(model) == ["transformer.wte", "transformer.wpe"]
    unfused = [w for w in caught if "not fused" in str(w.message)]
    assert bool(unfused) == (not fused)
    assert getattr(getattr(model.transformer.forward, "__func__", None), "tokpos_fused", False) == fused
    assert (type(model.transformer.wte) is tt.Embedding) == (not fused)
    x = ids()
    with torch.no_grad():
        assert torch.equal(model(x).logits, reference(x).logits)


def test_gpt2_fallback_where_the_forward_changed(monkeypatch):
    changed_source(monkeypatch, _gpt2.FAMILY, _gpt2.FORWARD)
    model, reference = pair(gpt2)
    monkeypatch.setattr(sys.modules["transformers"], "__version__", "5.99.0")
    with pytest.warns(UserWarning, match=r"transformers 5\.99\.0, GPT-2: not fused: .*GPT2Model\.forward.*"
                                         r"transformer\.wte, transformer\.wpe are tokpos\.torch\.Embedding"):
        assert tokpos.hf.patch(model) == ["transformer.wte", "transformer.wpe"]
    assert "forward" not in model.transformer.__dict__  # the model's own forward
    assert type(model.transformer.wte) is tt.Embedding and type(model.transformer.wpe) is tt.Embedding
    assert model.lm_head.weight is model.transformer.wte.weight  # the same Parameter: the tie kept
    assert model.state_dict().keys() == reference.state_dict().keys()
    x = ids()
    mask = torch.ones_like(x)
    mask[1, :3] = 0
    with torch.no_grad():
        assert torch.equal(model(x, attention_mask=mask).logits, reference(x, attention_mask=mask).logits)
        kw = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
        assert torch.equal(model.generate(x, **kw), reference.generate(x, **kw))
    for m in (model, reference):
        m.train()
        torch.manual_seed(5)
        m(x, labels=x).loss.backward()
    for (name, a), (_, b) in zip(model.named_parameters(), reference.named_parameters()):
        assert torch.equal(a.grad, b.grad), name


def test_gpt2_refused_where_neither_applies(monkeypatch):
    changed_source(monkeypatch, _gpt2.FAMILY, _gpt2.FORWARD)

    class Scaled(nn.Embedding):
        def forward(self, input):
            return super().forward(input) * 2

    model = seeded(gpt2)
    old = model.transformer.wpe
    model.transformer.wpe = Scaled(old.num_embeddings, old.embedding_dim)
    with pytest.raises(RuntimeError, match=r"GPT-2: the source of GPT2Model\.forward is not the one the fused patch "
                                           r"mirrors.*transformer\.wpe is a Scaled, not an nn\.Embedding.*"
                                           r"left untouched"):
        tokpos.hf.patch(model)
    assert type(model.transformer.wte) is nn.Embedding  # nothing changed, wte included
    assert "forward" not in model.transformer.__dict__


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_bert_fallback_where_an_embeddings_forward_changed(monkeypatch, family):
    path = _sources.MIRRORED[_bert.FAMILY][0 if family == "bert" else 1]
    changed_source(monkeypatch, _bert.FAMILY, path)
    make = bert if family == "bert" else (lambda: bert("RobertaConfig", "RobertaModel"))
    model, reference = pair(make)
    with pytest.warns(UserWarning, match=r"BERT/RoBERTa: not fused: .*embeddings\.word_embeddings, "
                                         r"embeddings\.token_type_embeddings, embeddings\.position_embeddings are "
                                         r"tokpos\.torch\.Embedding"):
        names = tokpos.hf.patch(model)
    assert names == [f"embeddings.{t}" for t in _bert.TABLES]
    assert "forward" not in model.embeddings.__dict__
    assert all(type(getattr(model.embeddings, t)) is tt.Embedding for t in _bert.TABLES)
    x = ids(shape=(2, 11))
    x[1, -3:] = 1  # padding
    with torch.no_grad():
        assert torch.equal(model(x).last_hidden_state, reference(x).last_hidden_state)


def test_one_family_refusing_leaves_the_others_untouched(monkeypatch):
    # An encoder-decoder of a BERT encoder and a GPT-2 decoder: GPT-2 refuses, so BERT is not patched either.
    changed_source(monkeypatch, _gpt2.FAMILY, _gpt2.FORWARD)
    holder = nn.Module()
    holder.encoder = seeded(bert)
    holder.decoder = seeded(gpt2)
    holder.decoder.transformer.wte = nn.Linear(2, 2)  # not an embedding at all
    with pytest.raises(RuntimeError, match="GPT-2"):
        tokpos.hf.patch(holder)
    assert "forward" not in holder.encoder.embeddings.__dict__


def test_llama_fused_exactly_where_the_sources_are_recorded():
    model, reference = pair(llama)
    fused = not _sources.differing(_llama.FAMILY)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = tokpos.hf.patch(model, rotary="model")
    assert bool([w for w in caught if "not fused" in str(w.message)]) == (not fused)
    if fused:
        assert names == ["model.layers.0.self_attn", "model.layers.1.self_attn"]
    x = ids()
    with torch.no_grad():
        assert torch.equal(model(x).logits, reference(x).logits)


def test_llama_fallback_where_the_application_changed(monkeypatch):
    from transformers.models.llama import modeling_llama

    path = "transformers.models.llama.modeling_llama:apply_rotary_pos_emb"
    changed_source(monkeypatch, _llama.FAMILY, path)
    model, reference = pair(llama)
    with pytest.warns(UserWarning, match=r"Llama: not fused: the application of cos and sin to q and k \(the source "
                                         r"of modeling_llama\.apply_rotary_pos_emb.*model\.embed_tokens is a "
                                         r"tokpos\.torch\.Embedding"):
        names = tokpos.hf.patch(model, rotary="model")
    assert names == ["model.embed_tokens"]
    assert all("forward" not in layer.self_attn.__dict__ for layer in model.model.layers)
    assert type(model.model.embed_tokens) is tt.Embedding
    assert type(model.model.rotary_emb) is modeling_llama.LlamaRotaryEmbedding
    x = ids()
    with torch.no_grad():
        assert torch.equal(model(x).logits, reference(x).logits)
        kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
        assert torch.equal(model.generate(x, **kw), reference.generate(x, **kw))


def test_llama_fallback_where_the_rotary_changed(monkeypatch):
    from transformers.models.llama import modeling_llama

    changed_source(monkeypatch, _llama.FAMILY, _sources.MIRRORED[_llama.FAMILY][0])
    model, reference = pair(llama)
    with pytest.warns(UserWarning, match=r"Llama: not fused: the rotary embedding \(LlamaRotaryEmbedding\).*"
                                         r"LlamaRotaryEmbedding\.forward"):
        names = tokpos.hf.patch(model)
    # The application's source is still the recorded one: fused; the rotary module stays the model's.
    assert names == ["model.layers.0.self_attn", "model.layers.1.self_attn", "model.embed_tokens"]
    assert type(model.model.rotary_emb) is modeling_llama.LlamaRotaryEmbedding
    x = ids()
    with torch.no_grad():
        assert torch.equal(model(x).logits, reference(x).logits)


def test_llama_refused_where_neither_applies(monkeypatch):
    for path in _sources.MIRRORED[_llama.FAMILY][:1] + ("transformers.models.llama.modeling_llama:apply_rotary_pos_emb",):
        changed_source(monkeypatch, _llama.FAMILY, path)

    class Scaled(nn.Embedding):
        def forward(self, input):
            return super().forward(input) * 2

    model = seeded(llama)
    old = model.model.embed_tokens
    model.model.embed_tokens = Scaled(old.num_embeddings, old.embedding_dim)
    with pytest.raises(RuntimeError, match=r"Llama: the rotary embedding .*the application of cos and sin.*no "
                                           r"embed_tokens nn\.Embedding.*left untouched"):
        tokpos.hf.patch(model)
    assert all("forward" not in layer.self_attn.__dict__ for layer in model.model.layers)


# ---------------------------------------------------------------------------
# Models built on the meta device


def test_gpt2_and_bert_patched_on_the_meta_device_then_loaded():
    for make, out in ((gpt2, "logits"), (bert, "last_hidden_state")):
        real = seeded(make).eval()
        with torch.device("meta"):
            model = make()
        tokpos.hf.patch(model)
        model.to_empty(device="cpu")
        model.init_weights()  # the buffers, as transformers' loading does
        model.load_state_dict(real.state_dict())
        model.eval()
        x = ids(shape=(2, 7))
        with torch.no_grad():
            assert torch.equal(getattr(model(x), out), getattr(real(x), out))


@pytest.mark.parametrize("rotary", ["tokpos", "model"])
def test_llama_patched_on_the_meta_device(rotary):
    real = seeded(llama).eval()
    normal = copy.deepcopy(real)
    tokpos.hf.patch(normal, rotary=rotary)
    with torch.device("meta"):
        model = llama()
    names = tokpos.hf.patch(model, rotary=rotary)  # transformers' test_can_be_initialized_on_meta, then patched
    assert names == tokpos.hf.patch(copy.deepcopy(normal), rotary=rotary)
    rotary_emb = model.model.rotary_emb
    assert rotary_emb.inv_freq.device.type == "meta"
    model.to_empty(device="cpu")
    model.init_weights()
    model.load_state_dict(real.state_dict())
    model.eval()
    # The rotary's buffers hold the frequencies in use, as a model built on the CPU holds them.
    for name, buffer in normal.named_buffers():
        assert torch.equal(dict(model.named_buffers())[name], buffer), name
    x = ids()
    with torch.no_grad():
        assert torch.equal(model(x).logits, normal(x).logits)
        if rotary == "model":
            assert torch.equal(model(x).logits, real(x).logits)


def test_llama_rotary_keeps_what_transformers_reads():
    config = llama_config(rope_parameters={"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0},
                          max_position_embeddings=16)
    model, reference = pair(lambda: transformers.LlamaForCausalLM(config))
    tokpos.hf.patch(model)
    rotary, theirs = model.model.rotary_emb, reference.model.rotary_emb
    assert isinstance(rotary, _llama.HFRotary)
    assert rotary.rope_type == theirs.rope_type == "dynamic"
    assert rotary.attention_scaling == theirs.attention_scaling
    assert rotary.max_seq_len_cached == theirs.max_seq_len_cached == rotary.original_max_seq_len == 16
    np.testing.assert_allclose(rotary.inv_freq.numpy(), theirs.inv_freq.numpy(), rtol=4e-6)
    np.testing.assert_allclose(rotary.original_inv_freq.numpy(), theirs.original_inv_freq.numpy(), rtol=4e-6)
    assert rotary.state_dict().keys() == theirs.state_dict().keys()
    assert {n for n, _ in rotary.named_buffers()} == {n for n, _ in theirs.named_buffers()}
    # transformers' RoPE tests find the module by its name and build another from a config.
    assert list(inspect.signature(type(rotary).__init__).parameters)[1] == "config"
    built = type(rotary)(config=config)
    x = torch.zeros(1)
    positions = torch.arange(40)[None]
    cos, sin = built(x, positions)
    want_cos, want_sin = theirs(x, positions)
    torch.testing.assert_close(cos, want_cos)
    torch.testing.assert_close(sin, want_sin)
    # Dynamic NTK past the original length: inv_freq is the frequencies in use, as transformers' is.
    assert rotary.max_seq_len_cached == 16 and built.max_seq_len_cached == 40 == theirs.max_seq_len_cached
    np.testing.assert_allclose(built.inv_freq.numpy(), theirs.inv_freq.numpy(), rtol=4e-6)
    assert (built.inv_freq < built.original_inv_freq).any()
    # transformers' loading sets a non-persistent buffer with an empty tensor: the frequencies are filled in.
    built.inv_freq = torch.empty_like(built.inv_freq)
    assert torch.equal(built.inv_freq, built._in_use[None].float())
