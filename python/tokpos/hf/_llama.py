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

import ast
import inspect
import textwrap
import types
import warnings

import numpy as np
import torch
from torch import nn

from .. import rope as _rope
from .._torch_rope import RotaryEmbedding, _config_rope, rope_tables


def _model_cos_sin(positions, inv_freq, scaling: float, section=None, interleaved: bool = False):
    """(cos, sin) of tokpos's frequencies in transformers' own arithmetic:
    the angle float32(position) * float32(inv_freq) in float32 (the product
    its float32 matmul forms), each frequency's position from its axis of
    mrope_axes with a section (multimodal rotary), the angles twice over
    (rotate_half's layout), torch's float32 cos and sin of them, times
    scaling in float32. torch's float32 cos and sin are within an ulp of
    the rounded values, not always on them: the model's own module takes
    them, so the patched model takes them too."""
    inv = torch.as_tensor(inv_freq).float()
    if section is None:
        angle = positions.float()[..., None] * inv
    else:
        if positions.dim() == 2:
            positions = positions.expand(3, *positions.shape)  # the same position on every axis, as transformers
        per_axis = positions.float()[..., None] * inv  # (3, B, T, half)
        axes = torch.tensor(_rope.mrope_axes(section, inv.shape[0], interleaved=interleaved))
        angle = per_axis.gather(0, axes.expand(1, *per_axis.shape[1:])).squeeze(0)
    emb = torch.cat([angle, angle], dim=-1)
    return emb.cos() * scaling, emb.sin() * scaling


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
        cos, sin = _model_cos_sin(positions, inv_freq, scaling, rope.mrope_section, rope.mrope_interleaved)
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


# ---- The application: apply_rotary_pos_emb in the attention ----------------------

_TABLE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _function_code(fn):
    """fn's definition as an AST dump without its decorators and docstring
    (the copies of one function in transformers' model files differ only
    there, and in comments); None when fn has no Python source."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(fn))))
    except (OSError, TypeError, SyntaxError, ValueError):
        return None
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.FunctionDef):
        return None
    node.decorator_list = []
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0].value, "value", None), str):
        node.body = body[1:]
    return ast.dump(node)


def _application_sources() -> dict:
    """The apply_rotary_pos_emb tokpos stands in for, by their code: Llama's
    (every dim of the head rotates; the result laid out as q, as torch's
    elementwise ops give it) and GPT-NeoX's and Phi-3's (the first
    cos.shape[-1] dims rotate, the rest pass through; the result contiguous,
    as torch.cat gives it), each with Llama's rotate_half (pairs i, i + R/2).
    Each maps to whether its result is contiguous."""
    from transformers.models.gpt_neox import modeling_gpt_neox
    from transformers.models.llama import modeling_llama
    from transformers.models.phi3 import modeling_phi3

    return {
        "rotate_half": _function_code(modeling_llama.rotate_half),
        _function_code(modeling_llama.apply_rotary_pos_emb): False,
        _function_code(modeling_gpt_neox.apply_rotary_pos_emb): True,
        _function_code(modeling_phi3.apply_rotary_pos_emb): True,
    }


def _tokpos_reads(q, k, cos, sin, unsqueeze_dim):
    """heads_first for tokpos's application of cos and sin to q and k, or
    None where the model's own function must run (another device or dtype,
    shapes it broadcasts otherwise, a cos or sin that needs its gradient)."""
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(cos, torch.Tensor)
            and isinstance(sin, torch.Tensor)):
        return None
    dtype = q.dtype
    if dtype not in _TABLE_DTYPES or k.dtype != dtype or cos.dtype != dtype or sin.dtype != dtype:
        return None
    if not (q.is_cpu and k.is_cpu and cos.is_cpu and sin.is_cpu):
        return None
    if (cos.requires_grad or sin.requires_grad) and torch.is_grad_enabled():
        return None
    if unsqueeze_dim not in (1, 2, -3, -2) or q.dim() != 4 or k.dim() != 4:
        return None
    heads_first = unsqueeze_dim in (1, -3)
    cs, qs, ks = cos.shape, q.shape, k.shape
    if len(cs) != 3 or sin.shape != cs or cs[2] % 2 or cs[2] > qs[3] or cs[2] > ks[3]:
        return None
    t = 2 if heads_first else 1
    if cs[1] != qs[t] or cs[1] != ks[t] or cs[0] not in (1, qs[0]) or ks[0] != qs[0]:
        return None
    return heads_first


def _application(original, contiguous: bool):
    """apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1) through tokpos's
    apply_rope_tables (the model's formula's bits), falling back to the
    model's own function where tokpos does not apply."""

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        heads_first = _tokpos_reads(q, k, cos, sin, unsqueeze_dim)
        if heads_first is None:
            return original(q, k, cos, sin, unsqueeze_dim)
        return (
            rope_tables(q, cos, sin, "half", False, heads_first, contiguous),
            rope_tables(k, cos, sin, "half", False, heads_first, contiguous),
        )

    apply_rotary_pos_emb.tokpos_original = original
    return apply_rotary_pos_emb


def _function_copy(fn, globals_, closure):
    """A copy of the plain function fn with other globals and closure cells."""
    new = types.FunctionType(fn.__code__, globals_, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__ = fn.__kwdefaults__
    for attr in ("__module__", "__qualname__", "__doc__", "__annotations__"):
        setattr(new, attr, getattr(fn, attr))
    new.__dict__.update(fn.__dict__)
    return new


def _rewrapped(wrapper, inner, new_inner):
    """A copy of wrapper (a decorator's closure around inner) around
    new_inner instead, or None when inner is not in its closure."""
    cells, found = [], False
    for cell in wrapper.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            cells.append(cell)
            continue
        if value is inner:
            cells.append(types.CellType(new_inner))
            found = True
        else:
            cells.append(cell)
    if not found:
        return None
    new = _function_copy(wrapper, wrapper.__globals__, tuple(cells))
    new.__wrapped__ = new_inner
    return new


def _attention_forward(module, sources: dict):
    """module's class forward with tokpos's application of cos and sin in
    place of the apply_rotary_pos_emb it calls (its decorators kept), or
    None when that function is not one tokpos stands in for."""
    chain = [getattr(type(module), "forward", None)]
    while hasattr(chain[-1], "__wrapped__"):
        chain.append(chain[-1].__wrapped__)
    inner = chain[-1]
    if not isinstance(inner, types.FunctionType) or "apply_rotary_pos_emb" not in inner.__code__.co_names:
        return None
    original = inner.__globals__.get("apply_rotary_pos_emb")
    if original is None or _function_code(inner.__globals__.get("rotate_half")) != sources["rotate_half"]:
        return None
    contiguous = sources.get(_function_code(original))
    if contiguous is None:
        return None
    globals_ = dict(inner.__globals__)
    globals_["apply_rotary_pos_emb"] = _application(original, contiguous)
    new = _function_copy(inner, globals_, inner.__closure__)
    for wrapper, wrapped in zip(reversed(chain[:-1]), reversed(chain[1:])):
        if not isinstance(wrapper, types.FunctionType):
            return None
        new = _rewrapped(wrapper, wrapped, new)
        if new is None:
            return None
    new.tokpos_application = True
    return new


def _patch_attention(model) -> list[str]:
    """Gives each attention module of model that calls a known
    apply_rotary_pos_emb a forward that applies cos and sin through tokpos
    (an instance attribute: the class and other models are untouched);
    returns their names."""
    sources = _application_sources()
    names = []
    for name, module in model.named_modules():
        if getattr(module.__dict__.get("forward"), "tokpos_application", False):
            names.append(name)
            continue
        forward = _attention_forward(module, sources) if name else None
        if forward is None:
            continue
        module.forward = types.MethodType(forward, module)
        names.append(name)
    return names


def patch(model, rotary: str = "tokpos") -> list[str] | None:
    """Replaces, in place, each rotary embedding module of model that runs
    transformers' shared rotary code (or Qwen2-VL's or Qwen3-VL's
    multimodal one) with a HFRotary (tokpos's cos and sin,
    the module's attention_scaling kept), and gives each attention module
    that applies cos and sin with Llama's or GPT-NeoX's apply_rotary_pos_emb
    a forward that applies them through tokpos.apply_rope_tables; returns
    the replaced modules' names (the rotary modules, then the attention
    modules), or None when model has no such rotary module. A module of that
    code whose frequencies tokpos would not reproduce (a config it reads
    differently) is left in place and named in a warning. rotary="model":
    every rotary module stays the model's own and only the attention
    modules are given tokpos's application (so the logits are the model's
    bit for bit)."""
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
        if rotary == "model":
            continue
        new, reason = _replacement(module, kind)
        if new is None:
            warnings.warn(f"tokpos.hf.patch: {name} ({type(module).__name__}) left as it is: {reason}", stacklevel=2)
            continue
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, new)
        replaced.append(name)
    if not found:
        return None
    return replaced + _patch_attention(model)
