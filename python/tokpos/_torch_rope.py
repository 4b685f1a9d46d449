"""tokpos.torch's RoPE (private: the public names are tokpos.torch's):
apply_rope, through the custom op tokpos::apply_rope when autograd or the
compiler needs it and the kernel directly otherwise, and RotaryEmbedding.

tokpos::apply_rope is linear in x: forward(x) = a * R(x), R the rotation of
each pair by its angle and a the attention factor (dims past rotary_dim are
copied). Its gradient is a * R^T(grad), which the same op computes with
inverse flipped (inverse negates sin and keeps a), so the backward is one
more call of the op, itself differentiable. positions and inv_freq get no
gradient.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import Tensor, nn

from . import rope as _rope
from ._torch_modules import check_int as _check_int
from ._torch_ops import plain as _plain
from ._torch_ops import require_cpu as _require_cpu


def _apply_rope_new(x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse, heads_last=False) -> Tensor:
    """The rotation of x into a new tensor of x's shape and dtype: the custom
    op's body and the inference path both run it. Contiguous, or with
    heads_last its (…, H, T, D) transpose is (the memory order of a
    heads-first caller's x)."""
    if heads_last:
        shape = list(x.shape)
        shape[-3], shape[-2] = shape[-2], shape[-3]
        out = torch.empty(shape, dtype=x.dtype).transpose(-3, -2)
    else:
        out = torch.empty(x.shape, dtype=x.dtype)
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
    return x.new_empty(x.shape)


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
    none. Bad arguments raise ValueError, positions out of range IndexError."""
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
        if t.device.type != "cpu":
            raise ValueError(f"tokpos.torch.apply_rope: {name} is on {t.device}; only CPU tensors are supported")
    inverse = bool(inverse)
    where = "tokpos.torch.apply_rope"
    heads_first = _rope._rope_heads_first(where, tuple(x.shape), tuple(positions.shape), heads_first)
    positions = _rope._batch_positions(positions, tuple(x.shape))
    if heads_first:
        x = x.transpose(-3, -2)  # the kernel's (…, T, H, D) view, no copy
    if torch.compiler.is_compiling() or (torch.is_grad_enabled() and x.requires_grad):
        y = _apply_rope_op(x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse)
    else:
        # Inference: the kernel directly, without the dispatcher.
        y = _apply_rope_new(x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse, heads_first)
    return y.transpose(-3, -2) if heads_first else y


_SEQ_LEN_TYPES = ("dynamic", "longrope")
_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


class RotaryEmbedding(nn.Module):
    """RoPE for queries and keys: rope(x, positions) rotates the first dim
    dims of each head of x (B, T, H, Dh) or (T, H, Dh), Dh >= dim (Dh > dim
    is partial rotary: the rest pass through), with tokpos.torch.apply_rope.

    inv_freq (dim/2,) and attention_factor are tokpos.rope_frequencies(dim,
    base=base, scaling=scaling): scaling a transformers rope_scaling /
    rope_parameters dict ("default", "linear", "dynamic", "yarn", "longrope",
    "llama3"); base None means scaling's "rope_theta", else 10000. inv_freq
    is a float64 non-persistent buffer (recomputed, not in state_dict; it
    stays float64 when the module is converted with .to(dtype), .half() and
    the like), and the module has no parameters.

    "dynamic" and "longrope" frequencies depend on the current sequence
    length: their forward and cos_sin need seq_len= (transformers passes
    max(position_ids) + 1) and raise ValueError without it; those calls
    compute the frequencies in Python, outside torch.compile's graph. Other
    types ignore seq_len."""

    __module__ = "tokpos.torch"  # pickles and reprs name the public module

    def __init__(self, dim: int, base: Optional[float] = None, scaling: Optional[dict] = None, layout: str = "half"):
        super().__init__()
        self.dim = _check_int("dim", dim, 2)
        if layout not in _rope.ROPE_LAYOUTS:
            raise ValueError(f"tokpos.torch.RotaryEmbedding: layout = {layout!r} is not one of 'half', 'interleaved'")
        self.layout = layout
        self.scaling = None if scaling is None else dict(scaling)
        inv_freq, self.attention_factor = _rope.rope_frequencies(self.dim, base=base, scaling=self.scaling)
        self.base = base
        self.rope_type = "default" if scaling is None else _rope._scaling_type(self.scaling)
        self._inv_freq64 = inv_freq
        self._by_seq_len: dict = {}
        self.register_buffer("inv_freq", torch.from_numpy(inv_freq.copy()), persistent=False)

    def _apply(self, fn, *args, **kwargs):
        module = super()._apply(fn, *args, **kwargs)
        inv = self._buffers["inv_freq"]
        if inv.dtype != torch.float64:
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
        (T) -> x rotated, a new tensor; heads_first as apply_rope's."""
        inv_freq, factor = self._frequencies(seq_len, "tokpos.torch.RotaryEmbedding")
        return apply_rope(
            x, positions, inv_freq, layout=self.layout, rotary_dim=self.dim, attention_factor=factor,
            heads_first=heads_first,
        )

    def cos_sin(self, positions: Tensor, *, dtype=torch.float32, seq_len: Optional[int] = None):
        """(cos, sin), each positions.shape + (dim,), as transformers' rotary
        embedding returns them (tokpos.rope_cos_sin): the values forward
        uses, times attention_factor, converted to dtype."""
        name = dtype if dtype in _DTYPE_NAMES.values() else _DTYPE_NAMES.get(dtype)
        if name is None:
            raise ValueError(f"tokpos.torch.RotaryEmbedding.cos_sin: dtype {dtype} is not float32, bfloat16 or float16")
        if isinstance(positions, Tensor):
            _require_cpu("tokpos.torch.RotaryEmbedding.cos_sin", ("positions",), positions)
        inv_freq, factor = self._frequencies(seq_len, "tokpos.torch.RotaryEmbedding.cos_sin")
        return _rope.rope_cos_sin(
            positions, inv_freq, layout=self.layout, attention_factor=factor, dtype=name
        )

    def extra_repr(self) -> str:
        s = f"{self.dim}, rope_type={self.rope_type!r}, layout={self.layout!r}"
        if self.attention_factor != 1.0:
            s += f", attention_factor={self.attention_factor}"
        return s
