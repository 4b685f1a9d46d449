"""tokpos.torch's RoPE (private: the public names are tokpos.torch's):
apply_rope, through the custom op tokpos::apply_rope when autograd or the
compiler needs it and the kernel directly otherwise, and RotaryEmbedding.

tokpos::apply_rope is linear in x: forward(x) = a * R(x), R the rotation of
each pair by its angle and a the attention factor (dims past rotary_dim are
copied). Its gradient is a * R^T(grad), which the same op computes with
inverse flipped (inverse negates sin and keeps a), so the backward is one
more call of the op, itself differentiable. positions and inv_freq get no
gradient.

Both ops are linear in x, so under forward-mode AD the tangent of the result
is the same op applied to x's tangent; _Rope and _RopeTables are the ops as
autograd.Functions with that jvp, a vmap rule (one call per batch element)
and setup_context, for torch.autograd.forward_ad and torch.func. Fake and
meta tensors go through the ops, whose fake kernels give the result's shape
without touching memory (a meta input gives a meta result).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import Tensor, nn

from . import _core
from . import rope as _rope
from ._torch_modules import check_int as _check_int
from ._torch_ops import _TABLE_CODES
from ._torch_ops import by_element as _by_element
from ._torch_ops import direct as _direct
from ._torch_ops import fake_empty as _fake_empty
from ._torch_ops import has_data as _has_data
from ._torch_ops import plain as _plain
from ._torch_ops import require_host as _require_host
from ._torch_ops import transformed as _transformed

_FORWARD_AD = "forward-mode AD (torch.autograd.forward_ad, torch.func.jvp)"


def _like_x(x: Tensor, t: Tensor) -> Tensor:
    """t as x's fake tensor mode holds it: a real tensor (inv_freq from
    numpy, say) converted to a fake one when x is fake, so the op sees one
    mode; anything else as it is."""
    mode = getattr(x, "fake_mode", None)
    if mode is not None and getattr(t, "fake_mode", None) is None:
        return mode.from_tensor(t)
    return t


def _apply_rope_new(x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse, heads_last=False) -> Tensor:
    """The rotation of x into a new tensor of x's shape and dtype: the custom
    op's body and the inference path both run it. Contiguous, or with
    heads_last its (…, H, T, D) transpose is (the memory order of a
    heads-first caller's x)."""
    if heads_last:
        shape = list(x.shape)
        shape[-3], shape[-2] = shape[-2], shape[-3]
        out = torch.empty(shape, dtype=x.dtype, device="cpu").transpose(-3, -2)
    else:
        out = torch.empty(x.shape, dtype=x.dtype, device="cpu")
    _rope.apply_rope(
        _plain(x),
        _plain(positions),
        inv_freq,
        layout=layout,
        rotary_dim=rotary_dim,
        attention_factor=attention_factor,
        inverse=inverse,
        heads_first=False,  # x is the kernel's (…, T, H, D) view by now
        out=out,
    )
    return out


@torch.library.custom_op("tokpos::apply_rope", mutates_args=(), device_types="cpu")
def _apply_rope_op(
    x: Tensor,
    positions: Tensor,
    inv_freq: Tensor,
    layout: str,
    rotary_dim: Optional[int],
    attention_factor: float,
    inverse: bool,
) -> Tensor:
    """tokpos.apply_rope(x, positions, inv_freq, ...) into a new contiguous
    tensor of x's shape and dtype."""
    return _apply_rope_new(x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse)


@_apply_rope_op.register_fake
def _apply_rope_fake(x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse):
    torch._check(x.dim() in (3, 4), lambda: "tokpos::apply_rope: x must be (T, H, D) or (B, T, H, D)")
    torch._check(
        positions.dim() == x.dim() - 2, lambda: "tokpos::apply_rope: positions must be (T) or (B, T), as x"
    )
    torch._check(inv_freq.dim() == 1, lambda: "tokpos::apply_rope: inv_freq must be 1-D")
    _require_host("tokpos::apply_rope", ("x", "positions", "inv_freq"), x, positions, inv_freq)
    return _fake_empty(x, x.shape, x.dtype, positions, inv_freq)


def _apply_rope_setup_context(ctx, inputs, output):
    x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse = inputs
    ctx.save_for_backward(positions, inv_freq)
    ctx.layout = layout
    ctx.rotary_dim = rotary_dim
    ctx.attention_factor = attention_factor
    ctx.inverse = inverse


def _apply_rope_backward(ctx, d_out):
    positions, inv_freq = ctx.saved_tensors
    d_x = None
    if ctx.needs_input_grad[0]:
        d_x = _apply_rope_op(
            d_out, positions, inv_freq, ctx.layout, ctx.rotary_dim, ctx.attention_factor, not ctx.inverse
        )
    return d_x, None, None, None, None, None, None


_apply_rope_op.register_autograd(_apply_rope_backward, setup_context=_apply_rope_setup_context)


class _Rope(torch.autograd.Function):
    """tokpos::apply_rope with setup_context, backward, jvp (the op on x's
    tangent: it is linear in x) and vmap, for forward-mode AD and torch.func."""

    @staticmethod
    def forward(x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse):
        return _apply_rope_op(x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _apply_rope_setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[1], inputs[2])
        ctx.set_materialize_grads(False)  # an input without a tangent gets None in jvp

    @staticmethod
    def backward(ctx, d_out):
        positions, inv_freq = ctx.saved_tensors
        d_x = None
        if ctx.needs_input_grad[0] and d_out is not None:
            d_x = _Rope.apply(
                d_out, positions, inv_freq, ctx.layout, ctx.rotary_dim, ctx.attention_factor, not ctx.inverse
            )
        return d_x, None, None, None, None, None, None

    @staticmethod
    def jvp(ctx, x_t, positions_t, inv_freq_t, *_):
        if inv_freq_t is not None:
            raise RuntimeError(
                f"tokpos.torch.apply_rope: {_FORWARD_AD} with respect to inv_freq is not supported (x's tangent is)"
            )
        positions, inv_freq = ctx.saved_tensors
        return _Rope.apply(x_t, positions, inv_freq, ctx.layout, ctx.rotary_dim, ctx.attention_factor, ctx.inverse)

    @staticmethod
    def vmap(info, in_dims, *args):
        return _by_element(_Rope.apply, info, in_dims, *args)


def _rope_call(x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse, heads_first) -> Tensor:
    """One rotation, by the way the tensors need: the kernel directly for
    plain CPU tensors without autograd; _Rope under forward-mode AD and
    torch.func; else the op (autograd, the compiler, fake and meta tensors).
    x is the kernel's (…, T, H, D) view; heads_first says its memory is the
    transpose's (the direct path's result keeps that order)."""
    if not torch.compiler.is_compiling():
        if _direct(x, positions, inv_freq):
            if not (torch.is_grad_enabled() and x.requires_grad):
                # Inference: the kernel directly, without the dispatcher.
                return _apply_rope_new(
                    x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse, heads_first
                )
        elif _transformed(x, positions, inv_freq):
            return _Rope.apply(x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse)
        else:
            positions, inv_freq = _like_x(x, positions), _like_x(x, inv_freq)
    return _apply_rope_op(x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse)


def apply_rope(
    x: Tensor,
    positions: Tensor,
    inv_freq,
    *,
    layout: str = "half",
    rotary_dim: Optional[int] = None,
    attention_factor: float = 1.0,
    inverse: bool = False,
    heads_first: Optional[bool] = None,
    mrope_section=None,
    mrope_interleaved: bool = False,
) -> Tensor:
    """tokpos.apply_rope with autograd: a new tensor, x rotated by RoPE.

    x (B, T, H, D) with positions (B, T) or (1, T) (broadcast over B), or
    (T, H, D) with positions (T); heads_first=True reads x as transformers
    holds q and k, (B, H, T, D) or (H, T, D), and returns that layout; None
    reads the one whose T axis has positions' length and raises ValueError
    naming both readings when both have it (H == T); x float32,
    bfloat16 or float16, positions int32 or int64; inv_freq the float64
    frequencies of tokpos.rope_frequencies (a tensor or a numpy array). The
    first rotary_dim = 2 * len(inv_freq) dims of each head rotate, in the
    "half" (transformers' rotate_half) or "interleaved" (GPT-J, Meta) pairs;
    cos and sin are multiplied by attention_factor. The gradient of x is the
    transposed rotation times attention_factor; positions and inv_freq get
    none. mrope_section (and mrope_interleaved): multimodal positions
    (3, B, T), as tokpos.apply_rope's (one rotation per axis, each
    differentiable). Bad arguments raise ValueError, positions out of range
    IndexError."""
    if not isinstance(x, Tensor):
        raise ValueError(f"tokpos.torch.apply_rope: x must be a torch tensor, got {type(x).__name__}")
    if not isinstance(positions, Tensor):
        raise ValueError(
            f"tokpos.torch.apply_rope: positions must be a torch tensor, got {type(positions).__name__}"
        )
    if isinstance(inv_freq, np.ndarray):
        inv_freq = torch.from_numpy(inv_freq)
    elif not isinstance(inv_freq, Tensor):
        raise ValueError(
            f"tokpos.torch.apply_rope: inv_freq must be a tensor or a numpy array, got {type(inv_freq).__name__}"
        )
    if layout not in _rope.ROPE_LAYOUTS:
        raise ValueError(f"tokpos.torch.apply_rope: layout = {layout!r} is not one of 'half', 'interleaved'")
    if rotary_dim is not None:
        rotary_dim = _check_int("tokpos.torch.apply_rope: rotary_dim", rotary_dim, 0)
    if isinstance(attention_factor, bool) or not isinstance(attention_factor, (int, float)):
        raise ValueError(f"tokpos.torch.apply_rope: attention_factor = {attention_factor!r} must be a number")
    attention_factor = float(attention_factor)
    for name, t in (("x", x), ("positions", positions), ("inv_freq", inv_freq)):
        if t.device.type not in ("cpu", "meta"):
            raise ValueError(
                f"tokpos.torch.apply_rope: {name} is on {t.device}; only CPU tensors (and meta ones, for shapes) "
                "are supported"
            )
    inverse = bool(inverse)
    where = "tokpos.torch.apply_rope"
    if mrope_section is not None:
        shape = tuple(positions.shape)
        if len(shape) != x.dim() - 1 or shape[0] != 3:
            raise ValueError(
                f"{where}: with mrope_section, positions must be (3, B, T) (or (3, T) for x (T, H, D)), got shape {shape}"
            )
        if attention_factor != 1.0:
            raise ValueError(
                f"{where}: attention_factor = {attention_factor!r} with mrope_section: only 1 is supported (the "
                "pairs of two axes would be rounded twice); use tokpos.mrope_cos_sin for a scaled pair"
            )
        heads_first = _rope._rope_heads_first(where, tuple(x.shape), shape[1:], heads_first)
        y = x
        for a, f in enumerate(_rope.mrope_axis_frequencies(inv_freq, mrope_section, interleaved=mrope_interleaved)):
            y = apply_rope(
                y, positions[a], torch.from_numpy(f), layout=layout, rotary_dim=rotary_dim, inverse=inverse,
                heads_first=heads_first,
            )
        return y
    heads_first = _rope._rope_heads_first(where, tuple(x.shape), tuple(positions.shape), heads_first)
    positions = _rope._batch_positions(positions, tuple(x.shape))
    if heads_first:
        x = x.transpose(-3, -2)  # the kernel's (…, T, H, D) view, no copy
    y = _rope_call(x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse, heads_first)
    return y.transpose(-3, -2) if heads_first else y


def _rope_tables_out(x, contiguous: bool, device="cpu") -> Tensor:
    """The result's memory on device: contiguous, or x's strides (as torch's
    elementwise ops lay out theirs; contiguous when x's rows are not)."""
    if contiguous or x.dim() == 0 or x.stride(-1) != 1:
        return torch.empty(x.shape, dtype=x.dtype, device=device)
    return torch.empty_like(x, memory_format=torch.preserve_format, device=device)


def _apply_rope_tables_dlpack(x, cos, sin, layout, inverse, heads_first, out) -> Tensor:
    """The DLPack call: any strides (rows copied contiguous where they are
    not), and errors that name what is wrong."""
    cos, sin = _rope._batch_positions(cos, tuple(x.shape)), _rope._batch_positions(sin, tuple(x.shape))
    _rope.apply_rope_tables(
        _plain(x), _plain(cos), _plain(sin), layout=layout, inverse=inverse, heads_first=heads_first, out=out
    )
    return out


def _apply_rope_tables_new(x, cos, sin, layout, inverse, heads_first, contiguous) -> Tensor:
    """x rotated by cos and sin into a new tensor of x's shape and dtype
    (heads_first: x and the result are (…, H, T, D)); cos and sin (1, T, R)
    are shared by every b. The custom op's body and the inference path both
    run it."""
    out = _rope_tables_out(x, contiguous)
    code = _TABLE_CODES.get(x.dtype)
    # Anything the address call does not take (another dtype or device, rows
    # not contiguous, cos and sin of two shapes, fewer than 3 dimensions)
    # goes by DLPack, which copies rows or names what is wrong.
    by_address = (
        code is not None and cos.dtype == x.dtype and sin.dtype == x.dtype and x.is_cpu and cos.is_cpu and sin.is_cpu
        and x.dim() >= 3 and x.stride(-1) == 1 and cos.stride(-1) == 1 and sin.stride(-1) == 1
        and sin.shape == cos.shape
    )
    if not by_address:
        return _apply_rope_tables_dlpack(x, cos, sin, layout, inverse, heads_first, out)
    # By address (a decode step's kernel costs less than four DLPack capsules):
    # the tensors' own shapes and strides, in the kernel's (…, T, H, D) order,
    # a (1, T, R) cos and sin with stride 0 over x's B.
    shape, xs, os_ = list(x.shape), list(x.stride()), list(out.stride())
    if heads_first:
        for v in (shape, xs, os_):
            v[-3], v[-2] = v[-2], v[-3]
    cshape, cs, ss = list(cos.shape), list(cos.stride()), list(sin.stride())
    if len(shape) == 4 and len(cshape) == 3 and cshape[0] == 1:
        cshape[0], cs[0], ss[0] = shape[0], 0, 0
    _core.apply_rope_tables_raw(
        out.data_ptr(), x.data_ptr(), cos.data_ptr(), sin.data_ptr(), code, shape, xs, os_, cshape, cs, ss, layout,
        inverse, "tokpos.torch.apply_rope_tables",
    )
    return out


@torch.library.custom_op("tokpos::apply_rope_tables", mutates_args=(), device_types="cpu")
def _apply_rope_tables_op(
    x: Tensor, cos: Tensor, sin: Tensor, layout: str, inverse: bool, heads_first: bool, contiguous: bool
) -> Tensor:
    """tokpos.apply_rope_tables(x, cos, sin, ...) into a new tensor of x's
    shape and dtype, contiguous or laid out as x."""
    return _apply_rope_tables_new(x, cos, sin, layout, inverse, heads_first, contiguous)


@_apply_rope_tables_op.register_fake
def _apply_rope_tables_fake(x, cos, sin, layout, inverse, heads_first, contiguous):
    torch._check(x.dim() in (3, 4), lambda: "tokpos::apply_rope_tables: x must be 3- or 4-dimensional")
    torch._check(cos.dim() == x.dim() - 1, lambda: "tokpos::apply_rope_tables: cos must have one dimension less than x")
    _require_host("tokpos::apply_rope_tables", ("x", "cos", "sin"), x, cos, sin)
    meta = any(t.device.type == "meta" for t in (x, cos, sin))
    return _rope_tables_out(x, contiguous, "meta" if meta else x.device)


def _apply_rope_tables_setup_context(ctx, inputs, output):
    x, cos, sin, layout, inverse, heads_first, contiguous = inputs
    ctx.save_for_backward(cos, sin)
    ctx.layout, ctx.inverse, ctx.heads_first = layout, inverse, heads_first


def _apply_rope_tables_backward(ctx, d_out):
    cos, sin = ctx.saved_tensors
    d_x = None
    if ctx.needs_input_grad[0]:
        d_x = _apply_rope_tables_op(d_out, cos, sin, ctx.layout, not ctx.inverse, ctx.heads_first, False)
    return d_x, None, None, None, None, None, None


_apply_rope_tables_op.register_autograd(_apply_rope_tables_backward, setup_context=_apply_rope_tables_setup_context)


class _RopeTables(torch.autograd.Function):
    """tokpos::apply_rope_tables with setup_context, backward, jvp (the op on
    x's tangent) and vmap, for forward-mode AD and torch.func. cos and sin
    get no derivative: one asked of them is an error, never a silent zero."""

    @staticmethod
    def forward(x, cos, sin, layout, inverse, heads_first, contiguous):
        return _apply_rope_tables_op(x, cos, sin, layout, inverse, heads_first, contiguous)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _apply_rope_tables_setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[1], inputs[2])
        ctx.contiguous = inputs[6]
        ctx.set_materialize_grads(False)  # an input without a tangent gets None in jvp

    @staticmethod
    def backward(ctx, d_out):
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            raise RuntimeError("tokpos.torch.apply_rope_tables: gradients with respect to cos and sin are not supported")
        cos, sin = ctx.saved_tensors
        d_x = None
        if ctx.needs_input_grad[0] and d_out is not None:
            d_x = _RopeTables.apply(d_out, cos, sin, ctx.layout, not ctx.inverse, ctx.heads_first, False)
        return d_x, None, None, None, None, None, None

    @staticmethod
    def jvp(ctx, x_t, cos_t, sin_t, *_):
        if cos_t is not None or sin_t is not None:
            raise RuntimeError(
                f"tokpos.torch.apply_rope_tables: {_FORWARD_AD} with respect to cos and sin is not supported "
                "(x's tangent is)"
            )
        cos, sin = ctx.saved_tensors
        return _RopeTables.apply(x_t, cos, sin, ctx.layout, ctx.inverse, ctx.heads_first, ctx.contiguous)

    @staticmethod
    def vmap(info, in_dims, *args):
        return _by_element(_RopeTables.apply, info, in_dims, *args)


def rope_tables(x, cos, sin, layout: str, inverse: bool, heads_first: bool, contiguous: bool) -> Tensor:
    """apply_rope_tables after its checks: the kernel directly for plain CPU
    tensors without autograd; _RopeTables under forward-mode AD and
    torch.func; else the custom op (autograd, the compiler, fake and meta
    tensors)."""
    if not torch.compiler.is_compiling():
        if _direct(x, cos, sin):
            if not (torch.is_grad_enabled() and x.requires_grad):
                return _apply_rope_tables_new(x, cos, sin, layout, inverse, heads_first, contiguous)
        elif _transformed(x, cos, sin):
            cos, sin = _rope._batch_positions(cos, tuple(x.shape)), _rope._batch_positions(sin, tuple(x.shape))
            return _RopeTables.apply(x, cos, sin, layout, inverse, heads_first, contiguous)
        else:
            cos, sin = _like_x(x, cos), _like_x(x, sin)
    cos, sin = _rope._batch_positions(cos, tuple(x.shape)), _rope._batch_positions(sin, tuple(x.shape))
    return _apply_rope_tables_op(x, cos, sin, layout, inverse, heads_first, contiguous)


def apply_rope_tables(
    x: Tensor, cos: Tensor, sin: Tensor, *, layout: str = "half", inverse: bool = False,
    heads_first: Optional[bool] = None,
) -> Tensor:
    """tokpos.apply_rope_tables with autograd: a new tensor, x rotated by the
    caller's cos and sin as transformers' apply_rotary_pos_emb computes
    q * cos + rotate_half(q) * sin (the same bits on the CPU). x (B, T, H, D)
    with cos and sin (B, T, R) or (1, T, R), or (T, H, D) with (T, R);
    heads_first=True (or None with an unambiguous shape): x (B, H, T, D),
    as transformers holds q and k. The result has x's shape and, as torch's
    elementwise ops, x's memory order. The gradient of x is the transposed
    map (one more call of the op); cos and sin get none, so a cos or sin
    that requires grad is a ValueError rather than a silently missing
    gradient."""
    where = "tokpos.torch.apply_rope_tables"
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        if not isinstance(t, Tensor):
            raise ValueError(f"{where}: {name} must be a torch tensor, got {type(t).__name__}")
        if t.device.type not in ("cpu", "meta"):
            raise ValueError(
                f"{where}: {name} is on {t.device}; only CPU tensors (and meta ones, for shapes) are supported"
            )
    if layout not in _rope.ROPE_LAYOUTS:
        raise ValueError(f"{where}: layout = {layout!r} is not one of 'half', 'interleaved'")
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad):
        raise ValueError(f"{where}: cos and sin get no gradient here; pass them detached (they require grad)")
    heads_first = _rope._rope_heads_first(where, tuple(x.shape), tuple(cos.shape)[:-1], heads_first)
    return rope_tables(x, cos, sin, layout, bool(inverse), heads_first, False)


_SEQ_LEN_TYPES = ("dynamic", "longrope")
_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
_DYNAMIC_CHOICES = ("stateless", "longest")


def _config_rope(config, layer_type: Optional[str] = None) -> tuple[int, dict]:
    """(head_dim, scaling) of a transformers config, read as transformers'
    rotary embeddings read it: head_dim (else hidden_size //
    num_attention_heads); rope_parameters (5.x) or rope_scaling and
    rope_theta (4.x), or with layer_type the dict of that layer type
    (Gemma 3's rope_parameters nested by layer type); partial_rotary_factor
    from that dict or the config; config.max_position_embeddings; and for
    llama3, yarn and longrope the config's original_max_position_embeddings
    when it has one (Phi-3), else the dict's, else max_position_embeddings
    (standardize_rope_params)."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    params = getattr(config, "rope_parameters", None)
    if params is None:
        params = getattr(config, "rope_scaling", None)
    params = dict(params or {})
    layer_types = set(getattr(config, "layer_types", None) or ())
    nested = sorted(layer_types & set(params))
    if layer_type is not None:
        if layer_type not in nested or params[layer_type] is None:
            raise ValueError(f"tokpos.torch.RotaryEmbedding.from_config: the config has no rope dict for layer type {layer_type!r}")
        params = dict(params[layer_type])
    elif nested:
        raise ValueError(
            f"tokpos.torch.RotaryEmbedding.from_config: rope_parameters is nested by layer type ({nested}); "
            "pass layer_type= for one of them"
        )
    rope_type = params.get("rope_type", params.get("type", "default"))
    params.pop("type", None)  # transformers reads rope_type first
    params["rope_type"] = rope_type
    if params.get("rope_theta") is None:
        params["rope_theta"] = getattr(config, "rope_theta", None) or getattr(config, "default_theta", 10000.0)
    partial = getattr(config, "partial_rotary_factor", None)
    if params.get("partial_rotary_factor") is None and partial is not None:
        params["partial_rotary_factor"] = partial
    max_pos = getattr(config, "max_position_embeddings", None)
    if max_pos is not None:
        params["max_position_embeddings"] = max_pos
    if rope_type in ("llama3", "yarn", "longrope"):
        original = getattr(config, "original_max_position_embeddings", None)
        if original is not None:
            params["original_max_position_embeddings"] = original
        elif params.get("original_max_position_embeddings") is None and max_pos is not None:
            params["original_max_position_embeddings"] = max_pos
    return head_dim, params


class RotaryEmbedding(nn.Module):
    """RoPE for queries and keys: rope(x, positions) rotates the first
    rotary_dim dims of each head of x (B, T, H, Dh) or (T, H, Dh), Dh >=
    rotary_dim (Dh > rotary_dim is partial rotary: the rest pass through),
    with tokpos.torch.apply_rope.

    inv_freq (rotary_dim/2,) and attention_factor are
    tokpos.rope_frequencies(dim, base=base, scaling=scaling): dim the head
    dimension, scaling a transformers rope_scaling / rope_parameters dict
    (any of tokpos.ROPE_TYPES, with partial_rotary_factor and head_dim read
    from it: rotary_dim = int(dim * partial_rotary_factor)); base None means
    scaling's "rope_theta", else 10000. inv_freq is a float64
    non-persistent buffer (recomputed, not in state_dict; it stays float64
    when the module is converted with .to(dtype), .half() and the like), and
    the module has no parameters. from_config(config) reads all of it from a
    transformers config as transformers does.

    "dynamic" and "longrope" frequencies depend on the current sequence
    length: their forward and cos_sin need seq_len= (transformers passes
    max(position_ids) + 1) and raise ValueError without it; those calls
    compute the frequencies in Python, outside torch.compile's graph. Other
    types ignore seq_len. For "dynamic", dynamic= chooses which length:
    "stateless" (the default) the call's own seq_len, so every call depends
    on its arguments alone; "longest" the longest seq_len seen since the
    last call shorter than max_position_embeddings, as transformers'
    dynamic_rope_update keeps it (the module then holds that length, in
    seq_len_cached, and calls depend on the calls before them).

    mrope_section (3 sizes summing to rotary_dim / 2) makes forward and
    cos_sin take multimodal positions (3, B, T), as Qwen2-VL's rotary
    embedding (tokpos.mrope_cos_sin; mrope_interleaved=True: Qwen3-VL's
    layout)."""

    __module__ = "tokpos.torch"  # pickles and reprs name the public module

    def __init__(
        self,
        dim: int,
        base: Optional[float] = None,
        scaling: Optional[dict] = None,
        layout: str = "half",
        *,
        dynamic: str = "stateless",
        mrope_section=None,
        mrope_interleaved: bool = False,
    ):
        super().__init__()
        self.dim = _check_int("dim", dim, 2)
        if layout not in _rope.ROPE_LAYOUTS:
            raise ValueError(f"tokpos.torch.RotaryEmbedding: layout = {layout!r} is not one of 'half', 'interleaved'")
        if dynamic not in _DYNAMIC_CHOICES:
            raise ValueError(f"tokpos.torch.RotaryEmbedding: dynamic = {dynamic!r} is not one of 'stateless', 'longest'")
        self.layout = layout
        self.dynamic = dynamic
        self.scaling = None if scaling is None else dict(scaling)
        inv_freq, self.attention_factor = _rope.rope_frequencies(self.dim, base=base, scaling=self.scaling)
        self.rotary_dim = 2 * inv_freq.shape[0]
        self.base = base
        self.rope_type = "default" if scaling is None else _rope._scaling_type(self.scaling)
        self.mrope_section = None
        if mrope_section is not None:
            _rope.mrope_axes(mrope_section, inv_freq.shape[0], interleaved=bool(mrope_interleaved))  # checks it
            self.mrope_section = [int(v) for v in mrope_section]
        self.mrope_interleaved = bool(mrope_interleaved)
        # "longest": the length whose frequencies are in use (transformers' max_seq_len_cached).
        self.seq_len_cached = None
        if self.rope_type == "dynamic":
            self.seq_len_cached = int(self.scaling["max_position_embeddings"])
        self._inv_freq64 = inv_freq
        self._by_seq_len: dict = {}
        # On the device a torch.device context or FakeTensorMode gives a new
        # tensor: the meta device or a fake tensor hold the shape alone.
        shell = torch.empty(inv_freq.shape, dtype=torch.float64)
        buffer = torch.from_numpy(inv_freq.copy()).to(shell.device) if _has_data(shell) else shell
        self.register_buffer("inv_freq", buffer, persistent=False)

    @classmethod
    def from_config(
        cls, config, *, layout: str = "half", dynamic: str = "longest", layer_type: Optional[str] = None
    ) -> "RotaryEmbedding":
        """The rotary embedding a transformers config describes, read as
        transformers reads it: head_dim (else hidden_size //
        num_attention_heads), partial_rotary_factor, rope_parameters (5.x) or
        rope_scaling and rope_theta (4.x), max_position_embeddings and
        original_max_position_embeddings (the config's own, as Phi-3's, takes
        precedence for llama3, yarn and longrope), and mrope_section when the
        dict has one (with mrope_interleaved). dynamic defaults to "longest",
        transformers' own behaviour. layer_type: the layer type whose dict
        to read when rope_parameters is nested by layer type (Gemma 3). The
        config is read, never changed."""
        head_dim, params = _config_rope(config, layer_type)
        return cls(
            head_dim, scaling=params, layout=layout, dynamic=dynamic,
            mrope_section=params.get("mrope_section"), mrope_interleaved=bool(params.get("mrope_interleaved", False)),
        )

    def _apply(self, fn, *args, **kwargs):
        module = super()._apply(fn, *args, **kwargs)
        inv = self._buffers["inv_freq"]
        # Kept float64, and rewritten wherever it has memory: to_empty (from
        # the meta device, deferred initialisation) leaves it uninitialised.
        if inv.dtype != torch.float64 or _has_data(inv):
            self._buffers["inv_freq"] = torch.from_numpy(self._inv_freq64.copy()).to(inv.device)
        return module

    def _frequencies(self, seq_len: Optional[int], where: str):
        """(inv_freq, attention_factor) for this call."""
        if self.rope_type not in _SEQ_LEN_TYPES:
            return self.inv_freq, self.attention_factor
        if seq_len is None:
            raise ValueError(
                f"{where}: rope type {self.rope_type!r} depends on the sequence length: pass seq_len= "
                "(the current length, e.g. max(positions) + 1)"
            )
        seq_len = _check_int("seq_len", seq_len, 0)
        if self.rope_type == "dynamic" and self.dynamic == "longest":
            # dynamic_rope_update: grow past the longest seen; back to the
            # original frequencies for a sequence within the original length.
            original = int(self.scaling["max_position_embeddings"])
            if seq_len > self.seq_len_cached:
                self.seq_len_cached = seq_len
            if seq_len < original and self.seq_len_cached > original:
                self.seq_len_cached = original
            seq_len = self.seq_len_cached
        hit = self._by_seq_len.get(seq_len)
        if hit is None:
            inv, factor = _rope.rope_frequencies(self.dim, base=self.base, scaling=self.scaling, seq_len=seq_len)
            hit = (torch.from_numpy(inv), factor)
            self._by_seq_len = {seq_len: hit}
        return hit

    def forward(
        self, x: Tensor, positions: Tensor, *, seq_len: Optional[int] = None, heads_first: Optional[bool] = None
    ) -> Tensor:
        """x (B, T, H, Dh) with positions (B, T) or (1, T), or (T, H, Dh) with
        (T) -> x rotated, a new tensor; heads_first as apply_rope's. With
        mrope_section: positions (3, B, T) (apply_rope's mrope_section)."""
        inv_freq, factor = self._frequencies(seq_len, "tokpos.torch.RotaryEmbedding")
        mrope = {}
        if self.mrope_section is not None:
            mrope = dict(mrope_section=self.mrope_section, mrope_interleaved=self.mrope_interleaved)
        return apply_rope(
            x, positions, inv_freq, layout=self.layout, attention_factor=factor, heads_first=heads_first, **mrope,
        )

    def cos_sin(self, positions: Tensor, *, dtype=torch.float32, seq_len: Optional[int] = None):
        """(cos, sin), each positions.shape + (rotary_dim,), as transformers'
        rotary embedding returns them (tokpos.rope_cos_sin): the values
        forward uses, times attention_factor, converted to dtype. With
        mrope_section: positions (3, B, T) or (B, T), each (B, T, rotary_dim)
        (tokpos.mrope_cos_sin)."""
        name = dtype if dtype in _DTYPE_NAMES.values() else _DTYPE_NAMES.get(dtype)
        if name is None:
            raise ValueError(f"tokpos.torch.RotaryEmbedding.cos_sin: dtype {dtype} is not float32, bfloat16 or float16")
        where = "tokpos.torch.RotaryEmbedding.cos_sin"
        if isinstance(positions, Tensor):
            _require_host(where, ("positions",), positions)
            if torch._C._functorch.is_functorch_wrapped_tensor(positions):
                raise RuntimeError(
                    f"{where}: torch.func transforms (vmap, grad, jvp) are not supported here (the values are "
                    "computed in numpy); call it outside the transform"
                )
        inv_freq, factor = self._frequencies(seq_len, where)
        if isinstance(positions, Tensor) and not (_has_data(positions) and _has_data(inv_freq)):
            # Fake or meta positions, or a module on the meta device or built
            # under FakeTensorMode: the shapes alone, no values read (meta
            # when either is meta).
            shape = tuple(positions.shape)
            if self.mrope_section is not None and len(shape) == 3:
                shape = shape[1:]
            dt = dtype if isinstance(dtype, torch.dtype) else getattr(torch, name)
            like = _like_x(inv_freq, positions)
            return tuple(_fake_empty(like, (*shape, self.rotary_dim), dt, inv_freq) for _ in range(2))
        if self.mrope_section is not None:
            return _rope.mrope_cos_sin(
                positions, inv_freq, self.mrope_section, interleaved=self.mrope_interleaved, layout=self.layout,
                attention_factor=factor, dtype=name,
            )
        return _rope.rope_cos_sin(
            positions, inv_freq, layout=self.layout, attention_factor=factor, dtype=name
        )

    def extra_repr(self) -> str:
        s = f"{self.dim}, rope_type={self.rope_type!r}, layout={self.layout!r}"
        if self.rotary_dim != self.dim:
            s += f", rotary_dim={self.rotary_dim}"
        if self.rope_type == "dynamic":
            s += f", dynamic={self.dynamic!r}"
        if self.mrope_section is not None:
            s += f", mrope_section={self.mrope_section}, mrope_interleaved={self.mrope_interleaved}"
        if self.attention_factor != 1.0:
            s += f", attention_factor={self.attention_factor}"
        return s
