"""tokpos.hf.patch on Llama-family models: tiny random-weight models built
from configs (no download), each family's logits within 2e-7 (or 4 ulps)
of the unpatched model's with tokpos's rotary and bitwise equal with the
model's own (rotary="model"), greedy generate() identical (plain and
left-padded batches, KV cache), the rope_type variants, partial rotary, the
attention's application, a training step, and a saved patched model
loading in unpatched transformers."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import tokpos_torch

tt = tokpos_torch()  # or a skip saying why (torch missing or too old)

import torch  # noqa: E402

transformers = pytest.importorskip("transformers", reason="transformers is not installed")
import tokpos.hf  # noqa: E402
from tokpos.hf import _llama  # noqa: E402

# The logits' bound: 2e-7, or 4 float32 ulps of the largest logit when that
# is larger. The patched application of cos and sin gives the model's bits,
# and its rotary the model's arithmetic on tokpos's frequencies, which are a
# float32 ulp from transformers' float32 ones in some places (3 of 8 here);
# those ulps reach the logits as a few ulps of their own size.
LOGITS_ATOL = 2e-7


def logits_bound(scale):
    return max(LOGITS_ATOL, 4 * float(np.spacing(np.float32(scale))))
SIZES = dict(
    vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0,
    bos_token_id=1, eos_token_id=2,
)


def config_of(family, **kw):
    sizes = dict(SIZES, **kw)
    cls = {
        "llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig, "qwen2": transformers.Qwen2Config,
        "qwen3": transformers.Qwen3Config, "gemma": transformers.GemmaConfig, "phi3": transformers.Phi3Config,
        "granite": transformers.GraniteConfig, "stablelm": transformers.StableLmConfig,
    }[family]
    if family in ("gemma", "qwen3"):
        sizes.setdefault("head_dim", 16)
    return cls(**sizes)


def build(config, seed=26):
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    return model.eval()


def pair(config):
    """(the unpatched model, the same weights patched) and patch's names."""
    plain, patched = build(config), build(config)
    names = tokpos.hf._llama.patch(patched)
    return plain, patched, names


def prompts(config, left_padded):
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(1, config.vocab_size, (3, 10), generator=g)
    mask = torch.ones_like(ids)
    if left_padded:
        for b, pad in enumerate((0, 3, 6)):
            ids[b, :pad] = config.pad_token_id
            mask[b, :pad] = 0
    return ids, mask


def max_logit_difference(plain, patched, ids, mask):
    with torch.no_grad():
        a = plain(input_ids=ids, attention_mask=mask).logits
        b = patched(input_ids=ids, attention_mask=mask).logits
    return float((a - b).abs().max()), float(a.abs().max())


def check_equivalent(plain, patched, config, new_tokens=12):
    for left_padded in (False, True):
        ids, mask = prompts(config, left_padded)
        diff, scale = max_logit_difference(plain, patched, ids, mask)
        assert diff <= logits_bound(scale), (diff, scale)
        kw = dict(attention_mask=mask, max_new_tokens=new_tokens, do_sample=False, pad_token_id=config.pad_token_id)
        with torch.no_grad():
            want = plain.generate(ids, **kw)
            got = patched.generate(ids, **kw)
        assert want.shape[1] == ids.shape[1] + new_tokens
        assert torch.equal(got, want)


def test_patched_rotary_is_transformers_arithmetic_on_tokpos_frequencies():
    # transformers' rotary: angle = float32 inv_freq @ float32 positions,
    # then torch's float32 cos and sin, times attention_scaling. The patched
    # module does the same on tokpos's frequencies rounded to float32, so with
    # transformers' own frequencies in their place its values are transformers'.
    config = config_of("llama", rope_parameters={"rope_type": "yarn", "factor": 2.0, "rope_theta": 10000.0,
                                                 "original_max_position_embeddings": 8})
    plain, patched, _ = pair(config)
    rotary = patched.model.rotary_emb
    positions = torch.tensor([[0, 3, 17, 63], [5, 6, 7, 1000]])
    x = torch.zeros(1, dtype=torch.float32)
    cos, sin = rotary(x, positions)
    theirs = plain.model.rotary_emb
    want_cos, want_sin = theirs(x, positions)
    ours_f32 = torch.from_numpy(np.asarray(rotary.rope.inv_freq)).float()
    their_f32 = theirs.inv_freq.float()
    for inv, c_want, s_want in ((ours_f32, cos, sin), (their_f32, want_cos, want_sin)):
        c, s_ = _llama._model_cos_sin(positions, inv, rotary.attention_scaling)
        assert torch.equal(c, c_want) and torch.equal(s_, s_want)
    # The frequencies themselves: float32 roundings of tokpos's float64 ones,
    # within an ulp of transformers' float32 arithmetic.
    assert float(((ours_f32 - their_f32) / their_f32).abs().max()) <= 2 ** -23


# What patch replaces in these two-layer models: the rotary module, then each
# layer's attention (its application of cos and sin).
NAMES = ["model.rotary_emb", "model.layers.0.self_attn", "model.layers.1.self_attn"]

FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gemma", "phi3", "granite", "stablelm"]


@pytest.mark.parametrize("family", FAMILIES)
def test_family_logits_and_generate(family):
    config = config_of(family)
    plain, patched, names = pair(config)
    assert names == NAMES
    assert isinstance(patched.model.rotary_emb, _llama.HFRotary)
    assert patched.model.rotary_emb.attention_scaling == plain.model.rotary_emb.attention_scaling
    assert sum(1 for _ in patched.parameters()) == sum(1 for _ in plain.parameters())
    check_equivalent(plain, patched, config)


def variants():
    half = 8  # head_dim 16
    yield "linear", {"rope_type": "linear", "factor": 2.0}
    yield "dynamic", {"rope_type": "dynamic", "factor": 2.0}  # generation runs past max_position_embeddings
    yield "yarn", {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 8}
    yield "llama3", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8}
    yield "longrope", {"rope_type": "longrope", "original_max_position_embeddings": 8,
                       "short_factor": [1.0 + 0.05 * i for i in range(half)],
                       "long_factor": [1.0 + 0.5 * i for i in range(half)]}


@pytest.mark.parametrize("name,rope", list(variants()), ids=[n for n, _ in variants()])
def test_rope_type_variants(name, rope):
    config = config_of("llama", rope_parameters={**rope, "rope_theta": 10000.0}, max_position_embeddings=16)
    plain, patched, names = pair(config)
    assert names == NAMES
    assert patched.model.rotary_emb.rope.rope_type == name
    check_equivalent(plain, patched, config, new_tokens=14)
    if name == "dynamic":
        # Both kept the longest length seen (prompt 10 + 13 fed back: the last token is not).
        assert patched.model.rotary_emb.rope.seq_len_cached == int(plain.model.rotary_emb.max_seq_len_cached) == 23


def test_partial_rotary_phi3():
    config = config_of("phi3", partial_rotary_factor=0.5)
    plain, patched, names = pair(config)
    assert names == NAMES
    assert patched.model.rotary_emb.rope.rotary_dim == 8 == plain.model.rotary_emb.inv_freq.shape[0] * 2
    check_equivalent(plain, patched, config)


def test_phi3_longrope_with_its_config_level_original_length():
    # Phi-3 long-context: longrope over half the head, the pretraining length on the config.
    half = 4
    config = config_of(
        "phi3", partial_rotary_factor=0.5, max_position_embeddings=32, original_max_position_embeddings=8,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                         "short_factor": [1.0 + 0.1 * i for i in range(half)],
                         "long_factor": [1.5 + 0.7 * i for i in range(half)]},
    )
    plain, patched, names = pair(config)
    assert names == NAMES
    assert patched.model.rotary_emb.attention_scaling == plain.model.rotary_emb.attention_scaling > 1.0
    check_equivalent(plain, patched, config, new_tokens=14)  # 10 + 14 > 8: the long factors


def test_save_pretrained_loads_unpatched(tmp_path):
    config = config_of("llama")
    plain, patched, _ = pair(config)
    patched.save_pretrained(tmp_path)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert not any(isinstance(m, _llama.HFRotary) for m in loaded.modules())
    ids, mask = prompts(config, True)
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids, attention_mask=mask).logits, plain(input_ids=ids, attention_mask=mask).logits)


def test_patch_twice_and_other_models():
    config = config_of("llama")
    _, patched, names = pair(config)
    assert _llama.patch(patched) == names  # already tokpos's: named, not replaced again
    model = build(config)
    assert tokpos.hf.patch(model) == NAMES  # the one call reaches this family
    assert isinstance(model.model.rotary_emb, _llama.HFRotary)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    assert _llama.patch(gpt2) is None


def test_a_config_tokpos_reads_differently_is_left_with_a_warning():
    # Llama's default rotary reads the whole head, whatever partial_rotary_factor says.
    config = config_of("llama", partial_rotary_factor=0.5)
    model = build(config)
    before = model.model.rotary_emb
    with pytest.warns(UserWarning, match=r"model.rotary_emb \(LlamaRotaryEmbedding\) left as it is: its 8 frequencies"):
        # The application of cos and sin does not depend on how they were made: still tokpos's.
        assert _llama.patch(model) == NAMES[1:]
    assert model.model.rotary_emb is before


def mrope_text_model(family):
    torch.manual_seed(26)
    sizes = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=128)
    if family == "qwen2_vl":
        from transformers.models.qwen2_vl import configuration_qwen2_vl as c, modeling_qwen2_vl as m

        config = c.Qwen2VLTextConfig(**sizes, rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3],
                                                               "rope_theta": 10000.0})
        return config, m.Qwen2VLTextModel(config).eval()
    from transformers.models.qwen3_vl import configuration_qwen3_vl as c, modeling_qwen3_vl as m

    config = c.Qwen3VLTextConfig(**sizes, head_dim=16, rope_parameters={
        "rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": True, "rope_theta": 10000.0})
    return config, m.Qwen3VLTextModel(config).eval()


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])
def test_multimodal_rotary_text_models(family):
    config, plain = mrope_text_model(family)
    _, patched = mrope_text_model(family)
    assert _llama.patch(patched) == ["rotary_emb", "layers.0.self_attn", "layers.1.self_attn"]
    rope = patched.rotary_emb.rope
    assert rope.mrope_section == list(plain.rotary_emb.mrope_section)
    assert rope.mrope_interleaved == (family == "qwen3_vl")
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(1, 96, (2, 12), generator=g)
    # (3, B, T) positions as an image's grid gives them: the axes apart after two text tokens.
    positions = torch.randint(0, 60, (3, 2, 12), generator=g)
    positions[:, :, :2] = torch.arange(2)
    with torch.no_grad():
        want = plain(input_ids=ids, position_ids=positions).last_hidden_state
        got = patched(input_ids=ids, position_ids=positions).last_hidden_state
        # Text positions (B, T) are expanded to the three axes, as transformers does.
        want_text = plain(input_ids=ids).last_hidden_state
        got_text = patched(input_ids=ids).last_hidden_state
    scale = float(want.abs().max())
    assert float((got - want).abs().max()) <= 8 * float(np.spacing(np.float32(scale))), scale
    assert float((got_text - want_text).abs().max()) <= 8 * float(np.spacing(np.float32(scale)))
    assert not torch.equal(want, want_text)  # the multimodal positions mattered


def test_gemma3_one_rotary_per_layer_type():
    # Gemma 3: local (sliding) layers with the default rope, global ones with linear scaling.
    config = gemma3_config()
    plain, patched, names = pair(config)
    assert names == NAMES
    rotary = patched.model.rotary_emb
    assert set(rotary.ropes) == {"sliding_attention", "full_attention"}
    assert rotary.ropes["full_attention"].rope_type == "linear"
    check_equivalent(plain, patched, config)
    with pytest.raises(ValueError, match="nested by layer type"):
        tt.RotaryEmbedding.from_config(config)
    rope = tt.RotaryEmbedding.from_config(config, layer_type="full_attention")
    torch.testing.assert_close(rope.inv_freq, plain.model.rotary_emb.full_attention_inv_freq.double(), rtol=4e-6, atol=0)


def test_the_attention_patch_is_the_instance_s_alone():
    config = config_of("llama")
    plain, patched, names = pair(config)
    cls = type(patched.model.layers[0].self_attn)
    for layer in patched.model.layers:
        assert getattr(layer.self_attn.__dict__["forward"], "tokpos_application", False)
    # The class and any other model of it keep transformers' forward and function.
    assert "forward" not in plain.model.layers[0].self_attn.__dict__
    assert not getattr(cls.forward, "tokpos_application", False)
    fn = patched.model.layers[0].self_attn.forward.__func__
    inner = fn
    while hasattr(inner, "__wrapped__"):
        inner = inner.__wrapped__
    from transformers.models.llama import modeling_llama

    assert inner.__globals__["apply_rotary_pos_emb"].tokpos_original is modeling_llama.apply_rotary_pos_emb
    assert modeling_llama.apply_rotary_pos_emb is not inner.__globals__["apply_rotary_pos_emb"]


def test_the_application_falls_back_where_tokpos_does_not_apply():
    config = config_of("llama")
    _, patched, _ = pair(config)
    fn = patched.model.layers[0].self_attn.forward.__func__
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    apply = fn.__globals__["apply_rotary_pos_emb"]
    q = torch.randn(2, 4, 5, 16)
    cos, sin = torch.randn(2, 5, 16, requires_grad=True), torch.randn(2, 5, 16)
    want = apply.tokpos_original(q, q, cos, sin)
    got = apply(q, q, cos, sin)  # cos needs its gradient: the model's own function
    assert torch.equal(got[0], want[0]) and got[0].grad_fn is not None
    got = apply(q, q, cos.detach().double(), sin.double())  # another dtype: the model's own promotion
    assert got[0].dtype == torch.float64


def test_a_training_step_matches():
    config = config_of("qwen3")
    plain, patched, _ = pair(config)
    plain.train(), patched.train()
    ids, mask = prompts(config, left_padded=True)
    for m in (plain, patched):
        m(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
    for (name, a), (_, b) in zip(plain.named_parameters(), patched.named_parameters()):
        scale = float(a.grad.abs().max())
        assert float((a.grad - b.grad).abs().max()) <= 1e-5 * max(scale, 1e-3), name


def gemma3_config():
    return transformers.Gemma3TextConfig(
        **dict(SIZES, max_position_embeddings=64), head_dim=16, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}},
    )


def model_rotary_cases():
    for family in FAMILIES:
        yield family, lambda family=family: config_of(family)
    for name, rope in variants():
        yield name, lambda rope=rope: config_of("llama", rope_parameters={**rope, "rope_theta": 10000.0},
                                                 max_position_embeddings=16)
    yield "gemma3", gemma3_config


@pytest.mark.parametrize("name,make", list(model_rotary_cases()), ids=[n for n, _ in model_rotary_cases()])
def test_the_model_s_rotary_with_tokpos_s_application_is_bitwise(name, make):
    config = make()
    plain, patched = build(config), build(config)
    names = tokpos.hf.patch(patched, rotary="model")
    assert names == NAMES[1:]
    assert type(patched.model.rotary_emb) is type(plain.model.rotary_emb)
    for left_padded in (False, True):
        ids, mask = prompts(config, left_padded)
        with torch.no_grad():
            assert torch.equal(plain(input_ids=ids, attention_mask=mask).logits,
                               patched(input_ids=ids, attention_mask=mask).logits)
            kw = dict(attention_mask=mask, max_new_tokens=14, do_sample=False, pad_token_id=config.pad_token_id)
            assert torch.equal(plain.generate(ids, **kw), patched.generate(ids, **kw))


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])
def test_multimodal_models_with_their_own_rotary_are_bitwise(family):
    config, plain = mrope_text_model(family)
    _, patched = mrope_text_model(family)
    assert _llama.patch(patched, rotary="model") == ["layers.0.self_attn", "layers.1.self_attn"]
    ids = torch.randint(1, 96, (2, 12), generator=torch.Generator().manual_seed(3))
    positions = torch.randint(0, 60, (3, 2, 12), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert torch.equal(plain(input_ids=ids, position_ids=positions).last_hidden_state,
                           patched(input_ids=ids, position_ids=positions).last_hidden_state)


def test_rotary_choice_is_checked():
    with pytest.raises(ValueError, match="rotary = 'mine' is not one of 'tokpos', 'model'"):
        tokpos.hf.patch(build(config_of("llama")), rotary="mine")
