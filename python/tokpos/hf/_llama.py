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

The rotary replacement applies where the installed rotary code (the
module's forward and dynamic_rope_update) has the recorded source, and the
application of cos and sin where apply_rotary_pos_emb and rotate_half do
(_sources.RECORDED); what does not stays the model's own, embed_tokens
becomes a tokpos.torch.Embedding, and a warning says what is not fused
(plan). A model built on the meta device is patched as any other: the
check of its frequencies computes them from its config on the CPU.
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
from . import _fallback
from . import _sources as _recorded

FAMILY = "Llama"


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


_SEQ_LEN_TYPES = ("dynamic", "longrope")


def _nested_layer_types(config) -> list:
    """The layer types config's rope_parameters is nested by (Gemma 3), those
    with a dict; [] when it is not nested."""
    params = getattr(config, "rope_parameters", None) or {}
    if not isinstance(params, dict):
        return []
    types_ = set(getattr(config, "layer_types", None) or ()) & set(params)
    return sorted(t for t in types_ if params[t] is not None)


class HFRotary(nn.Module):
    """A transformers rotary embedding module over tokpos, built as
    transformers builds one: HFRotary(config), or HFRotary(config, device).
    forward(x, position_ids) -> (cos, sin), position_ids (B, T) (or (1, T);
    (3, B, T) for multimodal rotary), cos and sin (B, T, rotary_dim) in x's
    dtype on x's device. A config whose rope_parameters is nested by layer
    type (Gemma 3) gives one rotary embedding per layer type:
    forward(x, position_ids, layer_type). mrope_section (multimodal rotary,
    Qwen2-VL; mrope_interleaved: Qwen3-VL) defaults to the config's
    rope_parameters' own, False for none; attention_scaling to tokpos's
    attention factor (patch passes the replaced module's).

    The frequencies are tokpos.torch.RotaryEmbedding.from_config's (rope,
    or ropes[layer_type]; every rope_type, partial rotary, dynamic NTK
    keeping the longest length seen), held in Python, and cos and sin are
    computed from them on the CPU. What transformers' tests and utilities
    read from a rotary module is kept: inv_freq (the frequencies in use,
    float32) and original_inv_freq, non-persistent buffers ({layer_type}_
    prefixed with layer types), attention_scaling, rope_type, config,
    max_seq_len_cached and original_max_seq_len. The buffers are filled
    from the held frequencies whenever they are set or moved (.to(),
    to_empty(), transformers' loading), so a module built on the meta device
    and materialised later holds the right values, and state_dict is the
    model's as before (no parameters, no persistent buffers)."""

    def __init__(self, config, device=None, *, mrope_section=None, mrope_interleaved=None, attention_scaling=None):
        super().__init__()
        device = torch.empty(0).device if device is None else torch.device(device)  # the default device, meta included
        self.config = config
        self.original_max_seq_len = config.max_position_embeddings
        layer_types = _nested_layer_types(config)
        self.layer_types = layer_types
        ropes, originals = {}, {}
        with torch.device("cpu"):  # the held frequencies are CPU tensors whatever the default device
            for layer_type in layer_types or [None]:
                head_dim, params = _config_rope(config, layer_type)
                section = params.get("mrope_section") if mrope_section is None else mrope_section
                mrope = {}
                if section:
                    interleaved = params.get("mrope_interleaved", False) if mrope_interleaved is None else mrope_interleaved
                    mrope = dict(mrope_section=list(section), mrope_interleaved=bool(interleaved))
                rope = RotaryEmbedding(head_dim, scaling=params, dynamic="longest", **mrope)
                inv, _ = _rope.rope_frequencies(rope.dim, base=rope.base, scaling=rope.scaling)
                ropes[layer_type], originals[layer_type] = rope, torch.from_numpy(inv)
        self.__dict__["_ropes"] = ropes  # not submodules: nothing of theirs is the model's state
        self.__dict__["_originals"] = originals
        self.__dict__["_in_use"] = dict(originals)
        if attention_scaling is None:
            attention_scaling = {t: float(r.attention_factor) for t, r in ropes.items()}
        elif not isinstance(attention_scaling, dict):
            attention_scaling = {None: float(attention_scaling)}
        if layer_types:
            self.rope_type = {t: ropes[t].rope_type for t in layer_types}
            self.attention_scaling = {t: float(attention_scaling[t]) for t in layer_types}
            for t in layer_types:
                setattr(self, f"{t}_attention_scaling", self.attention_scaling[t])
        else:
            self.rope_type = ropes[None].rope_type
            self.attention_scaling = float(attention_scaling[None])
        # buffer name -> (which held frequencies, layer type)
        self.__dict__["_buffer_values"] = {}
        for t in ropes:
            prefix = "" if t is None else f"{t}_"
            self._buffer_values[f"{prefix}inv_freq"] = ("_in_use", t)
            self._buffer_values[f"{prefix}original_inv_freq"] = ("_originals", t)
        for name in self._buffer_values:
            self.register_buffer(name, torch.empty(self._held(name).shape, device=device), persistent=False)
            self._fill(name, self._buffers[name])

    @property
    def rope(self) -> RotaryEmbedding:
        """The tokpos rotary embedding (one for the whole model)."""
        if None not in self._ropes:
            raise AttributeError("HFRotary: one rotary embedding per layer type: read ropes[layer_type]")
        return self._ropes[None]

    @property
    def ropes(self) -> dict:
        """The tokpos rotary embedding of each layer type."""
        return {t: r for t, r in self._ropes.items() if t is not None}

    @property
    def max_seq_len_cached(self) -> int:
        """transformers' max_seq_len_cached: for dynamic NTK, the longest length seen (tokpos's seq_len_cached)."""
        for rope in self._ropes.values():
            if rope.rope_type == "dynamic" and rope.seq_len_cached is not None:
                return int(rope.seq_len_cached)
        return int(self.original_max_seq_len)

    def _held(self, name):
        which, layer_type = self._buffer_values[name]
        return self.__dict__[which][layer_type]

    def _fill(self, name, tensor):
        """Copies the held frequencies of buffer name into tensor (not on the meta device)."""
        if tensor is None or tensor.device.type == "meta" or name not in self._buffer_values:
            return
        with torch.no_grad():
            tensor.copy_(self._held(name).to(dtype=tensor.dtype))

    def __setattr__(self, name, value):
        if isinstance(value, torch.Tensor) and name in self.__dict__.get("_buffer_values", ()):
            self._fill(name, value)
        super().__setattr__(name, value)

    def _apply(self, fn, *args, **kwargs):
        module = super()._apply(fn, *args, **kwargs)
        for name in self._buffer_values:
            self._fill(name, self._buffers.get(name))
        return module

    def forward(self, x, position_ids, layer_type=None):
        rope = self._ropes[layer_type]
        scaling = self.attention_scaling if layer_type is None else self.attention_scaling[layer_type]
        if x.device.type == "meta" or position_ids.device.type == "meta":
            shape = tuple(position_ids.shape[-2:] if position_ids.dim() == 3 else position_ids.shape)
            out = torch.empty(*shape, rope.rotary_dim, dtype=x.dtype, device="meta")
            return out, out.clone()
        positions = position_ids.detach().cpu()
        inv_freq = self._originals[layer_type]
        if rope.rope_type in _SEQ_LEN_TYPES and positions.numel() > 0:
            seq_len = int(positions.max()) + 1  # transformers' dynamic_rope_update reads the same
            inv_freq, _ = rope._frequencies(seq_len, "tokpos.hf rotary")
            if inv_freq is not self._in_use[layer_type]:
                self._in_use[layer_type] = inv_freq
                name = "inv_freq" if layer_type is None else f"{layer_type}_inv_freq"
                self._fill(name, self._buffers.get(name))
        # tokpos computes on the CPU; cos and sin then go to x's device
        cos, sin = _model_cos_sin(positions, inv_freq, scaling, rope.mrope_section, rope.mrope_interleaved)
        return cos.to(device=x.device, dtype=x.dtype), sin.to(device=x.device, dtype=x.dtype)

    def extra_repr(self) -> str:
        return f"rope_type={self.rope_type!r}, attention_scaling={self.attention_scaling}"


def _rotary_sources() -> dict:
    """The source of the rotary code tokpos stands in for: Llama's forward
    (the shared code), Qwen2-VL's and Qwen3-VL's multimodal forwards, and
    the two ways of recomposing their frequencies (Qwen2-VL's sections:
    False, Qwen3-VL's interleaving: True). A transformers without one of
    those models contributes nothing for it. "changed": for each kind
    (_kind), the functions HFRotary mirrors for it whose installed source is
    not the recorded one (_sources.RECORDED)."""
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
    (shared, update, layered, qwen2_forward, qwen2_recompose, qwen3_forward, qwen3_recompose) = _recorded.MIRRORED[
        FAMILY
    ][:7]
    sources["changed"] = {
        kind: _recorded.differing(FAMILY, paths)
        for kind, paths in (
            ("rope", (shared, update)),
            ("layered", (layered, update)),
            (("mrope", False), (qwen2_forward, qwen2_recompose, update)),
            (("mrope", True), (qwen3_forward, qwen3_recompose, update)),
        )
    }
    return sources


def _code(source: str) -> str:
    """source without its comments and blank lines: the copies of one
    function in transformers' model files differ in comments naming the
    model, and only there."""
    lines = (line.split("#", 1)[0].rstrip() for line in source.splitlines())
    return "\n".join(line for line in lines if line.strip())


def _source(cls, name: str):
    fn = getattr(cls, name, None)
    return None if fn is None else _recorded._cached(_source_code, fn)


def _source_code(fn):
    try:
        return _code(inspect.getsource(fn))
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


def _their_frequencies(module, layer_type=None):
    """module's original frequencies (float64, numpy): its buffer, or, for a
    module on the meta device (a model built for deferred initialisation,
    whose buffers hold no values yet), what its __init__ computes from its
    config, computed here on the CPU."""
    prefix = "" if layer_type is None else f"{layer_type}_"
    buffer = getattr(module, f"{prefix}original_inv_freq", None)
    if buffer is None:
        buffer = getattr(module, f"{prefix}inv_freq")
    if buffer.device.type != "meta":
        return buffer.detach().double().cpu().numpy()
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope_type = module.rope_type if layer_type is None else module.rope_type[layer_type]
    if rope_type == "default":
        init = getattr(module, "compute_default_rope_parameters")
    else:
        init = ROPE_INIT_FUNCTIONS[rope_type]
    with torch.device("cpu"):
        inv_freq, _ = init(module.config) if layer_type is None else init(module.config, layer_type=layer_type)
    return inv_freq.detach().double().cpu().numpy()


def _replacement(module, kind):
    """The HFRotary for module (its config, its attention scaling and
    multimodal section, its dynamic state), or (None, the reason tokpos
    cannot stand in for it): a config tokpos reads otherwise, or
    frequencies that are not the module's."""
    layer_types = sorted(module.rope_type) if kind == "layered" else []
    prefixes = [f"{t}_" for t in layer_types] or [""]
    try:
        if kind == "layered":
            scaling = {t: float(getattr(module, f"{t}_attention_scaling")) for t in layer_types}
        else:
            scaling = float(module.attention_scaling)
        section = list(module.mrope_section) if isinstance(kind, tuple) else False
        interleaved = kind[1] if isinstance(kind, tuple) else None
        device = getattr(module, f"{prefixes[0]}inv_freq").device
        new = HFRotary(
            module.config, device, mrope_section=section, mrope_interleaved=interleaved, attention_scaling=scaling
        )
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        return None, f"its config's rope parameters are not read by tokpos ({e})"
    if new.layer_types != layer_types:
        return None, f"its layer types {layer_types} are not the {new.layer_types} its config's rope_parameters name"
    for layer_type, prefix in zip(layer_types or [None], prefixes):
        rope = new._ropes[layer_type]
        try:
            theirs = _their_frequencies(module, layer_type)
        except (ValueError, KeyError, TypeError, AttributeError, RuntimeError, NotImplementedError) as e:
            return None, f"its frequencies cannot be computed from its config ({type(e).__name__}: {e})"
        ours = new._originals[layer_type].numpy()
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
                new._in_use[layer_type], _ = rope._frequencies(int(cached), "tokpos.hf rotary")
                new._fill(f"{prefix}inv_freq", new._buffers.get(f"{prefix}inv_freq"))
    return new, None


# ---- The application: apply_rotary_pos_emb in the attention ----------------------

_TABLE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _function_code(fn):
    """fn's definition as an AST dump without its decorators and docstring
    (the copies of one function in transformers' model files differ only
    there, and in comments); None when fn has no Python source. A kernels
    hub layer around a function (_sources.underlying) is read as that
    function."""
    fn = _recorded.underlying(fn)
    return None if fn is None else _recorded._cached(_function_dump, fn)


def _function_dump(fn):
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
    Each maps to whether its result is contiguous. "changed": for each,
    the functions among it and rotate_half whose installed source is not
    the recorded one (_sources.RECORDED)."""
    from transformers.models.gpt_neox import modeling_gpt_neox
    from transformers.models.llama import modeling_llama
    from transformers.models.phi3 import modeling_phi3

    rotate_half_path, llama_path, neox_path, phi3_path = _recorded.MIRRORED[FAMILY][7:11]
    sources = {"rotate_half": _function_code(modeling_llama.rotate_half), "changed": {}}
    for fn, path, contiguous in (
        (modeling_llama.apply_rotary_pos_emb, llama_path, False),
        (modeling_gpt_neox.apply_rotary_pos_emb, neox_path, True),
        (modeling_phi3.apply_rotary_pos_emb, phi3_path, True),
    ):
        code = _function_code(fn)
        sources[code] = contiguous
        sources["changed"][code] = sources["changed"].get(code, []) + _recorded.differing(
            FAMILY, (path, rotate_half_path)
        )
    return sources


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
    None when that function is not one tokpos stands in for, or a list of
    the mirrored functions whose sources changed when it is one but the
    installed source is not the recorded one."""
    chain = [getattr(type(module), "forward", None)]
    while hasattr(chain[-1], "__wrapped__"):
        chain.append(chain[-1].__wrapped__)
    inner = chain[-1]
    if not isinstance(inner, types.FunctionType) or "apply_rotary_pos_emb" not in inner.__code__.co_names:
        return None
    original = inner.__globals__.get("apply_rotary_pos_emb")
    if original is None or _function_code(inner.__globals__.get("rotate_half")) != sources["rotate_half"]:
        return None
    code = _function_code(original)
    contiguous = sources.get(code)
    if contiguous is None:
        return None
    if sources["changed"].get(code):
        return list(sources["changed"][code])
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


def _attention_plan(model):
    """(the attention modules of model given tokpos's application: (name,
    module, forward), None for one already given it; the mirrored functions
    whose changed sources keep it from the others)."""
    sources = _application_sources()
    fused, changed = [], []
    for name, module in model.named_modules():
        if getattr(module.__dict__.get("forward"), "tokpos_application", False):
            fused.append((name, module, None))
            continue
        forward = _attention_forward(module, sources) if name else None
        if isinstance(forward, list):
            changed += [p for p in forward if p not in changed]
        elif forward is not None:
            fused.append((name, module, forward))
    return fused, changed


def plan(model, rotary: str = "tokpos") -> _fallback.Plan | None:
    """What patch does to model (nothing changed yet), or None when model
    has no rotary module of transformers' shared rotary code (or Qwen2-VL's,
    Qwen3-VL's or Gemma 3's); RuntimeError when neither the fused patch nor
    the fallback applies.

    Each rotary module of that code becomes a HFRotary where the rotary
    code it runs has the recorded sources (rotary="tokpos"), and each
    attention module that applies cos and sin with Llama's, GPT-NeoX's or
    Phi-3's apply_rotary_pos_emb gets tokpos's application where that
    function and rotate_half have the recorded sources. Where a source
    differs, that part stays the model's own, the model's embed_tokens
    (plain nn.Embedding modules) become tokpos.torch.Embedding modules, and
    the warning names what is not fused. Nothing fused and no embedding to
    replace: RuntimeError."""
    sources = _rotary_sources()
    result = _fallback.Plan(FAMILY)
    rotaries, found = [], False
    for name, module in list(model.named_modules()):
        if isinstance(module, HFRotary):
            found = True
            result.names.append(name)
            continue
        kind = _kind(module, sources) if name else None
        if kind is None:
            continue
        found = True
        if rotary == "model":
            continue
        changed = sources["changed"][kind]
        if changed:
            why = _fallback.changed_sources(FAMILY, changed)
            if not any(what == f"the rotary embedding ({type(module).__name__})" for what, _ in result.unfused):
                result.unfused.append((f"the rotary embedding ({type(module).__name__})", why))
            continue
        rotaries.append((name, module, kind))
    if not found:
        return None
    replacements = []
    for name, module, kind in rotaries:
        new, reason = _replacement(module, kind)
        if new is None:
            warnings.warn(f"tokpos.hf.patch: {name} ({type(module).__name__}) left as it is: {reason}", stacklevel=3)
            continue
        replacements.append((name, new))
        result.names.append(name)
    attention, changed = _attention_plan(model)
    result.names += [name for name, _, _ in attention]
    if changed:
        result.unfused.append(("the application of cos and sin to q and k", _fallback.changed_sources(FAMILY, changed)))

    def fuse():
        for name, new in replacements:
            parent_name, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent_name), child, new)
        for _, module, forward in attention:
            if forward is not None:
                module.forward = types.MethodType(forward, module)

    result.steps.append(fuse)
    if result.unfused:
        for name, module in model.named_modules():
            if name.rpartition(".")[2] == "embed_tokens" and _fallback.replaceable(module):
                result.steps.append(_fallback.to_tokpos_embedding(module))
                result.replaced.append(name)
                result.names.append(name)
        if not result.names:
            raise _fallback.refusal(
                FAMILY,
                "; ".join(f"{what}: {why}" for what, why in result.unfused)
                + ", and the model has no embed_tokens nn.Embedding that tokpos.torch.Embedding can stand in for",
            )
    return result


def patch(model, rotary: str = "tokpos") -> list[str] | None:
    """Replaces, in place, each rotary embedding module of model that runs
    transformers' shared rotary code (or Qwen2-VL's or Qwen3-VL's
    multimodal one) with a HFRotary (tokpos's cos and sin,
    the module's attention_scaling kept), and gives each attention module
    that applies cos and sin with Llama's or GPT-NeoX's apply_rotary_pos_emb
    a forward that applies them through tokpos.apply_rope_tables; returns
    the replaced modules' names (the rotary modules, then the attention
    modules, then any embed_tokens of the fallback), or None when model has
    no such rotary module. A module of that code whose frequencies tokpos
    would not reproduce (a config it reads differently) is left in place
    and named in a warning. rotary="model": every rotary module stays the
    model's own and only the attention modules are given tokpos's
    application (so the logits are the model's bit for bit). Where the
    installed transformers' sources differ from the recorded ones: plan."""
    result = plan(model, rotary)
    return None if result is None else result.apply()
