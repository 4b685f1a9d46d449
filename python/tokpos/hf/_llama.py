"""tokpos.hf for the Llama family: every model whose rotary embedding runs
transformers' shared rotary code (Llama, Mistral, Mixtral, Qwen2, Qwen3,
Gemma, Gemma 2, Phi-3, Granite, StableLM, Starcoder2, GPT-NeoX, ...).

Such a module's forward(x, position_ids) returns (cos, sin), each
position_ids.shape + (rotary_dim,) in x's dtype, and the attention rotates
q and k with them (apply_rotary_pos_emb, partial rotary included). patch
puts in its place a HFRotary, which returns the same pair from tokpos:
tokpos.torch.RotaryEmbedding.from_config(module.config) (every rope_type,
partial rotary, dynamic NTK with transformers' keep-the-longest state) and
tokpos.rope_cos_sin (the exactly reduced angle's cos and sin, rounded once
to float32), times the module's own attention_scaling, then to x's dtype as
transformers does. The attention and its application of cos and sin stay
the model's own.
"""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import torch
from torch import nn

from .. import rope as _rope
from .._torch_rope import RotaryEmbedding


class HFRotary(nn.Module):
    """A transformers rotary embedding module's interface over tokpos:
    forward(x, position_ids) -> (cos, sin), position_ids (B, T) (or (1, T)),
    cos and sin (B, T, rotary_dim) in x's dtype on x's device. No parameters
    and no persistent buffers, so state_dict is the model's as before."""

    def __init__(self, rope: RotaryEmbedding, attention_scaling: float, rope_type: str):
        super().__init__()
        self.rope = rope
        self.attention_scaling = float(attention_scaling)
        self.rope_type = rope_type

    def forward(self, x, position_ids):
        positions = position_ids.detach().cpu()
        seq_len = None
        if self.rope.rope_type in ("dynamic", "longrope") and positions.numel() > 0:
            seq_len = int(positions.max()) + 1  # transformers' dynamic_rope_update reads the same
        inv_freq, _ = self.rope._frequencies(seq_len, "tokpos.hf rotary")
        inv_freq = inv_freq.cpu()  # tokpos computes on the CPU; cos and sin then go to x's device
        cos, sin = _rope.rope_cos_sin(positions, inv_freq, attention_factor=self.attention_scaling)
        return cos.to(device=x.device, dtype=x.dtype), sin.to(device=x.device, dtype=x.dtype)

    def extra_repr(self) -> str:
        return f"rope_type={self.rope_type!r}, attention_scaling={self.attention_scaling}"


def _shared_forward_source() -> str:
    from transformers.models.llama import modeling_llama

    return inspect.getsource(modeling_llama.LlamaRotaryEmbedding.forward)


def _is_shared_rotary(module, shared: str) -> bool:
    forward = getattr(type(module), "forward", None)
    if forward is None or not all(hasattr(module, a) for a in ("config", "inv_freq", "attention_scaling")):
        return False
    try:
        return inspect.getsource(forward) == shared
    except (OSError, TypeError):
        return False


def _replacement(module):
    """The HFRotary for module, or the reason tokpos cannot stand in for it."""
    try:
        rope = RotaryEmbedding.from_config(module.config, dynamic="longest")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        return None, f"its config's rope parameters are not read by tokpos ({e})"
    if rope.mrope_section is not None:
        return None, "multimodal rotary (mrope_section) takes (3, B, T) positions this interface does not pass"
    theirs = getattr(module, "original_inv_freq", module.inv_freq).detach().double().cpu().numpy()
    ours = rope.inv_freq.numpy()
    # transformers' frequencies are float32: a few float32 ulps from tokpos's float64 ones.
    if theirs.shape != ours.shape or not np.allclose(ours, theirs, rtol=1e-5, atol=0):
        return None, (
            f"its {theirs.shape[0]} frequencies are not the {ours.shape[0]} that tokpos reads from its config "
            f"(rope_type {rope.rope_type!r})"
        )
    if rope.rope_type == "dynamic":
        rope.seq_len_cached = int(getattr(module, "max_seq_len_cached", rope.seq_len_cached))
    return HFRotary(rope, module.attention_scaling, rope.rope_type), None


def patch(model) -> list[str] | None:
    """Replaces, in place, each rotary embedding module of model that runs
    transformers' shared rotary code with a HFRotary (tokpos's cos and sin,
    the module's attention_scaling kept); returns the replaced modules'
    names, or None when model has no such module. A module of that code
    whose frequencies tokpos would not reproduce (a config it reads
    differently) is left in place and named in a warning."""
    shared = _shared_forward_source()
    replaced, found = [], False
    for name, module in list(model.named_modules()):
        if isinstance(module, HFRotary):
            found = True
            replaced.append(name)
            continue
        if not name or not _is_shared_rotary(module, shared):
            continue
        found = True
        new, reason = _replacement(module)
        if new is None:
            warnings.warn(f"tokpos.hf.patch: {name} ({type(module).__name__}) left as it is: {reason}", stacklevel=2)
            continue
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, new)
        replaced.append(name)
    return replaced if found else None
