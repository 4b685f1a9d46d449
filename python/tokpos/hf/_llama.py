"""tokpos.hf for the Llama family: every model whose rotary embedding runs
transformers' shared rotary code (Llama, Mistral, Mixtral, Qwen2, Qwen3,
Gemma, Gemma 2, Phi-3, Granite, StableLM, Starcoder2, GPT-NeoX, ...).

Such a module's forward(x, position_ids) returns (cos, sin), each
position_ids.shape + (rotary_dim,) in x's dtype, and the attention rotates
q and k with them (apply_rotary_pos_emb, partial rotary included). patch
puts in its place a HFRotary, which returns the same pair from tokpos:
tokpos.torch.RotaryEmbedding.from_config(module.config) (every rope_type,
partial rotary, dynamic NTK with transformers' keep-the-longest state) and
tokpos.rope_cos_sin with angle="float32" (transformers' float32 angle
position * inv_freq, whose cos and sin the kernel reduces exactly and rounds
to float32), times the module's own attention_scaling in float32, then to
x's dtype, as transformers does. The attention and its application of cos and sin stay
the model's own.

The multimodal rotary of Qwen2-VL's text model (and of the models that run
its code, Qwen2.5-VL) and Qwen3-VL's interleaved one take (3, B, T)
position ids; their HFRotary returns tokpos.mrope_cos_sin with the module's
own mrope_section.
"""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import torch
from torch import nn

from .. import rope as _rope
from .._torch_rope import RotaryEmbedding, _config_rope


class HFRotary(nn.Module):
    """A transformers rotary embedding module's interface over tokpos:
    forward(x, position_ids) -> (cos, sin), position_ids (B, T) (or (1, T);
    (3, B, T) for multimodal rotary), cos and sin (B, T, rotary_dim) in x's
    dtype on x's device. With one rotary embedding per layer type (Gemma 3):
    forward(x, position_ids, layer_type), rope the layer types' modules
    (ropes[layer_type]). No parameters and no persistent buffers, so
    state_dict is the model's as before."""

    def __init__(self, ropes: dict, attention_scaling: dict, rope_type):
        super().__init__()
        if None in ropes:
            self.rope = ropes[None]
        else:
            self.ropes = nn.ModuleDict(ropes)
        self.attention_scaling = attention_scaling[None] if None in attention_scaling else dict(attention_scaling)
        self.rope_type = rope_type

    def forward(self, x, position_ids, layer_type=None):
        if layer_type is None:
            rope, scaling = self.rope, self.attention_scaling
        else:
            rope, scaling = self.ropes[layer_type], self.attention_scaling[layer_type]
        positions = position_ids.detach().cpu()
        seq_len = None
        if rope.rope_type in ("dynamic", "longrope") and positions.numel() > 0:
            seq_len = int(positions.max()) + 1  # transformers' dynamic_rope_update reads the same
        inv_freq, _ = rope._frequencies(seq_len, "tokpos.hf rotary")
        inv_freq = inv_freq.cpu()  # tokpos computes on the CPU; cos and sin then go to x's device
        if rope.mrope_section is None:
            cos, sin = _rope.rope_cos_sin(positions, inv_freq, attention_factor=scaling, angle="float32")
        else:
            cos, sin = _rope.mrope_cos_sin(
                positions, inv_freq, rope.mrope_section, interleaved=rope.mrope_interleaved, attention_factor=scaling,
                angle="float32",
            )
        return cos.to(device=x.device, dtype=x.dtype), sin.to(device=x.device, dtype=x.dtype)

    def extra_repr(self) -> str:
        return f"rope_type={self.rope_type!r}, attention_scaling={self.attention_scaling}"


def _sources() -> dict:
    """The source of the rotary code tokpos stands in for: Llama's forward
    (the shared code), Qwen2-VL's and Qwen3-VL's multimodal forwards, and
    the two ways of recomposing their frequencies (Qwen2-VL's sections:
    False, Qwen3-VL's interleaving: True). A transformers without one of
    those models contributes nothing for it."""
    import importlib

    from transformers.models.llama import modeling_llama

    sources = {"shared": _source(modeling_llama.LlamaRotaryEmbedding, "forward"), "mrope": set(), "recompose": {}}
    try:
        from transformers.models.gemma3 import modeling_gemma3

        sources["layered"] = _source(modeling_gemma3.Gemma3RotaryEmbedding, "forward")
    except (ImportError, AttributeError):
        sources["layered"] = None
    for module, cls, interleaved in (
        ("qwen2_vl", "Qwen2VLRotaryEmbedding", False),
        ("qwen3_vl", "Qwen3VLTextRotaryEmbedding", True),
    ):
        try:
            rotary = getattr(importlib.import_module(f"transformers.models.{module}.modeling_{module}"), cls)
        except (ImportError, AttributeError):
            continue
        sources["mrope"].add(_source(rotary, "forward"))
        sources["recompose"][_source(rotary, "recomposition_frequencies")] = interleaved
    return sources


def _code(source: str) -> str:
    """source without its comments and blank lines: the copies of one
    function in transformers' model files differ in comments naming the
    model, and only there."""
    lines = (line.split("#", 1)[0].rstrip() for line in source.splitlines())
    return "\n".join(line for line in lines if line.strip())


def _source(cls, name: str):
    fn = getattr(cls, name, None)
    try:
        return None if fn is None else _code(inspect.getsource(fn))
    except (OSError, TypeError):
        return None


def _kind(module, sources: dict):
    """"rope" for transformers' shared rotary code, ("mrope", interleaved)
    for Qwen2-VL's or Qwen3-VL's multimodal one, "layered" for Gemma 3's
    one per layer type, None for anything else."""
    if not hasattr(module, "config"):
        return None
    forward = _source(type(module), "forward")
    if forward is not None and forward == sources["layered"] and isinstance(getattr(module, "rope_type", None), dict):
        return "layered"
    if not all(hasattr(module, a) for a in ("inv_freq", "attention_scaling")):
        return None
    if forward == sources["shared"]:
        return "rope"
    if forward in sources["mrope"] and hasattr(module, "mrope_section"):
        interleaved = sources["recompose"].get(_source(type(module), "recomposition_frequencies"))
        if interleaved is not None:
            return ("mrope", interleaved)
    return None


def _one(module, kind, layer_type=None):
    """(RotaryEmbedding, attention_scaling) for module (for one layer type
    of it), or (None, the reason tokpos cannot stand in for it)."""
    prefix = "" if layer_type is None else f"{layer_type}_"
    try:
        head_dim, params = _config_rope(module.config, layer_type)
        mrope = {}
        if isinstance(kind, tuple):
            # The module's own section (transformers falls back to a default when the dict has none).
            mrope = dict(mrope_section=list(module.mrope_section), mrope_interleaved=kind[1])
        rope = RotaryEmbedding(head_dim, scaling=params, dynamic="longest", **mrope)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        return None, f"its config's rope parameters are not read by tokpos ({e})"
    original = getattr(module, f"{prefix}original_inv_freq", None)
    theirs = (original if original is not None else getattr(module, f"{prefix}inv_freq"))
    theirs = theirs.detach().double().cpu().numpy()
    ours = rope.inv_freq.numpy()
    # transformers' frequencies are float32: a few float32 ulps from tokpos's float64 ones.
    if theirs.shape != ours.shape or not np.allclose(ours, theirs, rtol=1e-5, atol=0):
        return None, (
            f"its {theirs.shape[0]} frequencies{'' if layer_type is None else ' for ' + layer_type} are not the "
            f"{ours.shape[0]} that tokpos reads from its config (rope_type {rope.rope_type!r})"
        )
    if rope.rope_type == "dynamic":
        cached = getattr(module, f"{prefix}max_seq_len_cached", getattr(module, "max_seq_len_cached", None))
        if cached is not None:
            rope.seq_len_cached = int(cached)
    return rope, float(getattr(module, f"{prefix}attention_scaling"))


def _replacement(module, kind):
    """The HFRotary for module, or (None, the reason tokpos cannot stand in for it)."""
    layer_types = list(module.rope_type) if kind == "layered" else [None]
    ropes, scalings = {}, {}
    for layer_type in layer_types:
        rope, scaling = _one(module, kind, layer_type)
        if rope is None:
            return None, scaling
        ropes[layer_type], scalings[layer_type] = rope, scaling
    rope_type = module.rope_type if kind != "layered" else dict(module.rope_type)
    return HFRotary(ropes, scalings, rope_type), None


def patch(model) -> list[str] | None:
    """Replaces, in place, each rotary embedding module of model that runs
    transformers' shared rotary code (or Qwen2-VL's or Qwen3-VL's
    multimodal one) with a HFRotary (tokpos's cos and sin,
    the module's attention_scaling kept); returns the replaced modules'
    names, or None when model has no such module. A module of that code
    whose frequencies tokpos would not reproduce (a config it reads
    differently) is left in place and named in a warning."""
    sources = _sources()
    replaced, found = [], False
    for name, module in list(model.named_modules()):
        if isinstance(module, HFRotary):
            found = True
            replaced.append(name)
            continue
        kind = _kind(module, sources) if name else None
        if kind is None:
            continue
        found = True
        new, reason = _replacement(module, kind)
        if new is None:
            warnings.warn(f"tokpos.hf.patch: {name} ({type(module).__name__}) left as it is: {reason}", stacklevel=2)
            continue
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, new)
        replaced.append(name)
    return replaced if found else None
