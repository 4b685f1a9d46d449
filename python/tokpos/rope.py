"""Rotary position embeddings (RoPE).

rope_frequencies gives the inverse frequencies and the attention factor of
each scaling scheme of transformers' modeling_rope_utils, computed in float64
by the C++ core (the same code as the C API's tokpos_rope_frequencies).
docs/positions.md ("RoPE") states every formula.
"""

from __future__ import annotations

import numbers

import numpy as np

from . import _core
from ._arrays import count as _count
from ._arrays import index_sequence as _index_sequence
from ._arrays import is_torch as _is_torch
from ._arrays import require_cpu as _require_cpu

__all__ = ["ROPE_LAYOUTS", "ROPE_TYPES", "apply_rope", "apply_rope_tables", "mrope_axes", "mrope_cos_sin", "rope_cos_sin", "rope_frequencies"]

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional")
ROPE_LAYOUTS = ("half", "interleaved")

_REAL_KEYS = (
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "attention_factor",
    "partial_rotary_factor",
)
_LENGTH_KEYS = ("original_max_position_embeddings", "max_position_embeddings")
_LIST_KEYS = ("short_factor", "long_factor")


def _real(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"rope_frequencies: scaling[{name!r}] = {value!r} must be a number")
    return float(value)


def _length(name: str, value) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"rope_frequencies: scaling[{name!r}] = {value!r} must be an integer")
    return _count(f"rope_frequencies: scaling[{name!r}]", value)


def _scaling_type(scaling: dict) -> str:
    """The type of a scaling dict, by the rule the CLI's --scaling shares (the
    core's rope_scaling_type): "rope_type", else "type" (the older
    spelling); both present and different is a ValueError naming both."""
    names = []
    for key in ("rope_type", "type"):
        value = scaling.get(key)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"rope_frequencies: scaling[{key!r}] = {value!r} must be a string")
        names.append(value)
    return _core.rope_scaling_type(*names)


def _scaling(scaling) -> "_core.RopeScaling":
    """A Hugging Face rope_scaling / rope_parameters dict as the core's options."""
    if not isinstance(scaling, dict):
        raise ValueError(f"rope_frequencies: scaling must be a dict or None, got {type(scaling).__name__}")
    s = _core.RopeScaling()
    s.type = _scaling_type(scaling)
    for key in _REAL_KEYS:
        if scaling.get(key) is not None:
            setattr(s, key, _real(key, scaling[key]))
    for key in _LENGTH_KEYS:
        if scaling.get(key) is not None:
            setattr(s, key, _length(key, scaling[key]))
    for key in _LIST_KEYS:
        if scaling.get(key) is not None:
            values = scaling[key]
            if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
                raise ValueError(f"rope_frequencies: scaling[{key!r}] must be a list of numbers")
            setattr(s, key, [_real(f"{key}[{i}]", v) for i, v in enumerate(values)])
    if "truncate" in scaling:
        truncate = scaling["truncate"]
        if not isinstance(truncate, (bool, np.bool_)):
            raise ValueError(f"rope_frequencies: scaling['truncate'] = {truncate!r} must be True or False")
        s.truncate = bool(truncate)
    return s


def _head_dim(dim, scaling) -> int:
    """The head dimension: dim, or scaling's "head_dim" (both given must agree)."""
    given = None if scaling is None else scaling.get("head_dim")
    if given is not None:
        given = _length("head_dim", given)
        if dim is not None and dim != given:
            raise ValueError(f"rope_frequencies: dim = {dim!r} disagrees with scaling['head_dim'] = {given}")
        dim = given
    if dim is None:
        raise ValueError("rope_frequencies: dim is needed (or scaling['head_dim'])")
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise ValueError(f"rope_frequencies: dim must be an integer, got {dim!r}")
    return _count("rope_frequencies: dim", dim)


def _partial_rotary_factor(scaling) -> float | None:
    value = None if scaling is None else scaling.get("partial_rotary_factor")
    if value is None:
        return None
    value = _real("partial_rotary_factor", value)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"rope_frequencies: scaling['partial_rotary_factor'] = {value!r} must be in (0, 1]")
    return value


def rope_frequencies(
    dim: int | None = None, *, base: float | None = None, scaling: dict | None = None, seq_len: int | None = None
):
    """(inv_freq, attention_factor): inv_freq a float64 numpy array of
    rotary_dim // 2 inverse frequencies, attention_factor the float that
    scales cos and sin (1.0 except for yarn and longrope).

    dim: the head dimension (transformers' head_dim; scaling's "head_dim"
    when dim is None, and both given must agree). The rotated dims are
    rotary_dim = int(dim * partial_rotary_factor), with scaling's
    "partial_rotary_factor" in (0, 1] (1 when absent, so then rotary_dim is
    dim), as transformers' ROPE_INIT_FUNCTIONS compute it; rotary_dim must
    be even. "proportional" (transformers 5.x) is the exception, as there:
    its dim // 2 frequencies are base^(-2i/dim) / factor for the first
    int(partial_rotary_factor * dim // 2) of them and 0 (no rotation) for
    the rest.

    base: the rope_theta, 10000.0 unless given here or as scaling's
    "rope_theta" (they must agree when both are given). scaling: a dict
    spelled as a Hugging Face config's rope_scaling or rope_parameters, its
    type under "rope_type" or "type" (one of ROPE_TYPES; both present must
    agree, as the CLI's --scaling requires too), with the keys that
    type reads: factor, original_max_position_embeddings,
    max_position_embeddings (config.max_position_embeddings, which
    transformers reads from the config itself, goes in the dict here),
    low_freq_factor, high_freq_factor, beta_fast, beta_slow, mscale,
    mscale_all_dim, attention_factor, truncate, short_factor, long_factor,
    head_dim, partial_rotary_factor; other keys are ignored. seq_len: the
    current sequence length, read by dynamic and longrope. A missing key,
    an unknown type or a value out of range raises ValueError naming it."""
    head_dim = _head_dim(dim, scaling)
    partial = _partial_rotary_factor(scaling)
    rope_type = "default" if scaling is None else _scaling_type(scaling)
    theta = None if scaling is None else scaling.get("rope_theta")
    if theta is not None:
        theta = _real("rope_theta", theta)
        if base is not None and float(base) != theta:
            raise ValueError(f"rope_frequencies: base = {base!r} disagrees with scaling['rope_theta'] = {theta!r}")
    if base is None:
        base = 10000.0 if theta is None else theta
    if isinstance(base, bool) or not isinstance(base, numbers.Real):
        raise ValueError(f"rope_frequencies: base must be a number, got {base!r}")
    if seq_len is not None:
        if isinstance(seq_len, bool) or not isinstance(seq_len, numbers.Integral):
            raise ValueError(f"rope_frequencies: seq_len must be an integer or None, got {seq_len!r}")
        seq_len = _count("rope_frequencies: seq_len", seq_len)
    rotary_dim = head_dim
    if partial is not None and rope_type != "proportional":  # proportional reads it itself, from the head
        rotary_dim = int(head_dim * partial)
        if rotary_dim < 2 or rotary_dim % 2:
            raise ValueError(
                f"rope_frequencies: partial_rotary_factor = {partial!r} makes the rotary dimension "
                f"int({head_dim} * {partial!r}) = {rotary_dim}, which must be even and >= 2"
            )
    options = _core.RopeScaling() if scaling is None else _scaling(scaling)
    inv_freq, attention_factor = _core.rope_frequencies(rotary_dim, float(base), options, seq_len)
    return np.asarray(inv_freq, dtype=np.float64), float(attention_factor)


# ---- Application ---------------------------------------------------------------



def _tensor(x, name: str, index: bool = False):
    """numpy arrays and torch tensors pass through (detached); sequences
    become int64 (index) or float32 arrays."""
    if isinstance(x, np.ndarray):
        return x
    if _is_torch(x):
        _require_cpu(x, name)
        return x.detach() if x.requires_grad else x
    if isinstance(x, (list, tuple)):
        return _index_sequence(x, name) if index else np.asarray(x, dtype=np.float32)
    if hasattr(x, "__dlpack__") or hasattr(x, "__array_interface__"):
        return x
    raise ValueError(f"{name} must be a numpy array or a torch CPU tensor, got {type(x).__name__}")


def _freqs(inv_freq) -> np.ndarray:
    """inv_freq as a contiguous float64 vector (a small copy when needed)."""
    if _is_torch(inv_freq):
        inv_freq = _require_cpu(inv_freq, "inv_freq").detach().double().numpy()
    f = np.ascontiguousarray(np.asarray(inv_freq, dtype=np.float64))
    if f.ndim != 1:
        raise ValueError(f"inv_freq must be 1-dimensional, got shape {f.shape}")
    return f


def _rope_heads_first(where: str, x_shape, p_shape, heads_first) -> bool:
    """Whether x is heads-first ((B, H, T, D) or (H, T, D)) rather than
    tokpos's (B, T, H, D) or (T, H, D), given positions' shape (..., T).
    heads_first given: that. None: the reading whose T axis matches
    positions; when both do (H == T > 1), ValueError naming both readings;
    when neither does, False (the core then names the mismatch)."""
    if heads_first is not None:
        if not isinstance(heads_first, (bool, np.bool_)):
            raise ValueError(f"{where}: heads_first = {heads_first!r} must be True, False or None")
        return bool(heads_first)
    nd = len(x_shape)
    if nd not in (3, 4) or len(p_shape) not in (1, 2) or len(p_shape) != nd - 2:
        return False
    T = p_shape[-1]
    seq_second, seq_third = x_shape[-3] == T, x_shape[-2] == T
    if seq_second and seq_third and T > 1:
        b = "B, " if nd == 4 else ""
        raise ValueError(
            f"{where}: x of shape {tuple(x_shape)} with positions of shape {tuple(p_shape)} reads two ways: "
            f"({b}T, H, D) with H = {x_shape[-2]} (tokpos's order) or ({b}H, T, D) with H = {x_shape[-3]} "
            "(transformers' order); pass heads_first=False or heads_first=True"
        )
    return seq_third and not seq_second


def _heads_swapped(a):
    """a's (…, H, T, D) view as (…, T, H, D) (numpy or torch), no copy."""
    if _is_torch(a):
        return a.transpose(-3, -2)
    if isinstance(a, np.ndarray):
        return a.swapaxes(-3, -2)
    raise ValueError(f"apply_rope: heads_first needs numpy arrays or torch tensors, got {type(a).__name__}")


def _batch_positions(positions, x_shape):
    """positions (1, T), or cos and sin (1, T, R), broadcast over x's B (a
    stride-0 view, no copy); any other shape as it is."""
    shape = tuple(positions.shape)
    if len(x_shape) != 4 or len(shape) not in (2, 3) or shape[0] != 1 or x_shape[0] == 1:
        return positions
    if _is_torch(positions):
        return positions.expand(x_shape[0], *shape[1:])
    return np.broadcast_to(np.asarray(positions), (x_shape[0],) + shape[1:])


def _out_for(x, out, where: str):
    """out checked as a writable result (numpy: not read-only), or a new
    array like x when it is None."""
    if out is None:
        return _empty_like(x)
    out = _tensor(out, "out")
    if isinstance(out, np.ndarray) and not out.flags.writeable:
        raise ValueError(f"{where}: out is read-only; tokpos writes its result there in place")
    return out


def _empty_like(x):
    if _is_torch(x):
        import torch

        return torch.empty_like(x, memory_format=torch.contiguous_format)
    return np.empty(x.shape, dtype=x.dtype)


def apply_rope(
    x,
    positions,
    inv_freq,
    *,
    layout: str = "half",
    rotary_dim: int | None = None,
    attention_factor: float = 1.0,
    inverse: bool = False,
    heads_first: bool | None = None,
    mrope_section=None,
    mrope_interleaved: bool = False,
    out=None,
):
    """Rotary position embedding of x (B, T, H, Dh) with positions (B, T) or
    (1, T) (broadcast over B), or x (T, H, Dh) with positions (T): int32 or
    int64 in [0, 2^31). heads_first=True reads x (and out) as transformers
    holds q and k, (B, H, T, Dh) or (H, T, Dh); False as (B, T, H, Dh); None
    reads the one whose T axis has positions' length, and raises ValueError
    naming both readings when both have it (H == T). Any strides with a unit
    innermost one are read in place. x is
    float32, bfloat16 or float16; the math is float32 with exactly reduced
    angles (cos and sin within 2^-24 of the exact values), rounded once to
    x's dtype. layout "half" is GPT-NeoX / transformers' rotate_half (pairs
    i, i + rotary_dim/2), "interleaved" GPT-J / Meta's Llama (pairs 2i, 2i+1).
    The first rotary_dim = 2 * len(inv_freq) dims of each head rotate, the
    rest pass through. attention_factor multiplies cos and sin; inverse=True
    applies the transposed rotation (the backward). out: written and
    returned (out=x works in place), x's shape; otherwise a new array in x's
    framework and layout.

    mrope_section (multimodal rotary, Qwen2-VL; mrope_interleaved: Qwen3-VL):
    positions (3, B, T), (3, 1, T) or, for x (T, H, Dh), (3, T), and each
    frequency's angle from the axis mrope_axes gives it; each pair is still
    rotated once (by the kernel, one call per axis with the other axes'
    frequencies 0: an exact identity), so the bits are those of
    transformers' rotation with mrope_cos_sin's cos and sin. attention_factor
    must be 1 then (it would round the pairs of two axes twice)."""
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"apply_rope: layout = {layout!r} is not one of 'half', 'interleaved'")
    x = _tensor(x, "x")
    positions = _tensor(positions, "positions", index=True)
    if mrope_section is not None:
        return _apply_mrope(
            x, positions, _freqs(inv_freq), mrope_section, mrope_interleaved, layout, rotary_dim, attention_factor,
            inverse, heads_first, out,
        )
    heads_first = _rope_heads_first("apply_rope", tuple(x.shape), tuple(positions.shape), heads_first)
    positions = _batch_positions(positions, tuple(x.shape))
    freqs = _freqs(inv_freq)
    if rotary_dim is None:
        rotary_dim = -1
    elif isinstance(rotary_dim, bool) or not isinstance(rotary_dim, numbers.Integral) or rotary_dim < 0:
        raise ValueError(f"apply_rope: rotary_dim = {rotary_dim!r} must be an integer >= 0 or None")
    if isinstance(attention_factor, bool) or not isinstance(attention_factor, numbers.Real):
        raise ValueError(f"apply_rope: attention_factor = {attention_factor!r} must be a number")
    out = _out_for(x, out, "apply_rope")
    xv, ov = (_heads_swapped(x), _heads_swapped(out)) if heads_first else (x, out)
    _core.apply_rope(
        ov, xv, positions, freqs, layout, _count("apply_rope: rotary_dim", rotary_dim), float(attention_factor),
        bool(inverse),
        "tokpos.apply_rope",
    )
    return out


def apply_rope_tables(x, cos, sin, *, layout: str = "half", inverse: bool = False, heads_first: bool | None = None,
                      out=None):
    """x rotated by the caller's cos and sin, as transformers'
    apply_rotary_pos_emb computes q * cos + rotate_half(q) * sin in x's
    dtype: x (B, T, H, Dh) with cos and sin (B, T, R) or (1, T, R)
    (broadcast over B), or x (T, H, Dh) with (T, R); heads_first=True reads
    x (and out) as transformers holds q and k, (B, H, T, Dh), and None picks
    the reading whose T axis has cos's length (ValueError naming both when
    both have it), as apply_rope does. x, cos and sin float32, bfloat16 or
    float16, one dtype. The first R dims of each head rotate in the layout's
    pairs (j0, j1), "half" (j, j + R/2: rotate_half) or "interleaved" (2i,
    2i + 1):
        out[j0] = x[j0] * cos[j0] - x[j1] * sin[j0]
        out[j1] = x[j1] * cos[j1] + x[j0] * sin[j1]
    each product and the sum rounded to the dtype, as torch rounds each of
    its elementwise ops, so the results are the formula's as torch evaluates
    it on the CPU, bit for bit; the rest of each head is copied (partial
    rotary). inverse=True applies the transposed map (the gradient with
    respect to x). out: written and returned (out=x works in place);
    otherwise a new array in x's framework and layout."""
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"apply_rope_tables: layout = {layout!r} is not one of 'half', 'interleaved'")
    x, cos, sin = _tensor(x, "x"), _tensor(cos, "cos"), _tensor(sin, "sin")
    heads_first = _rope_heads_first("apply_rope_tables", tuple(x.shape), tuple(cos.shape)[:-1], heads_first)
    cos, sin = _batch_positions(cos, tuple(x.shape)), _batch_positions(sin, tuple(x.shape))
    out = _out_for(x, out, "apply_rope_tables")
    xv, ov = (_heads_swapped(x), _heads_swapped(out)) if heads_first else (x, out)
    _core.apply_rope_tables(ov, xv, cos, sin, layout, bool(inverse), "tokpos.apply_rope_tables")
    return out


def mrope_axis_frequencies(inv_freq, mrope_section, *, interleaved: bool = False) -> list[np.ndarray]:
    """inv_freq once per position axis (temporal, height, width), each with
    the frequencies of the other axes set to 0 (no rotation)."""
    freqs = _freqs(inv_freq)
    axes = np.asarray(mrope_axes(mrope_section, freqs.shape[0], interleaved=bool(interleaved)))
    return [np.ascontiguousarray(np.where(axes == a, freqs, 0.0)) for a in range(3)]


def _apply_mrope(x, positions, freqs, section, interleaved, layout, rotary_dim, attention_factor, inverse,
                 heads_first, out):
    """apply_rope with mrope_section: one kernel call per axis into a new
    array, copied to out only once all three succeeded (out stays as it was
    on failure)."""
    shape = tuple(positions.shape)
    if len(shape) != len(x.shape) - 1 or shape[0] != 3:
        raise ValueError(
            f"apply_rope: with mrope_section, positions must be (3, B, T) (or (3, T) for x (T, H, D)), got shape {shape}"
        )
    if isinstance(attention_factor, bool) or not isinstance(attention_factor, numbers.Real) or attention_factor != 1.0:
        raise ValueError(
            f"apply_rope: attention_factor = {attention_factor!r} with mrope_section: only 1 is supported (the "
            "pairs of two axes would be rounded twice); use mrope_cos_sin for a scaled pair"
        )
    if rotary_dim is None:
        rotary_dim = -1
    elif isinstance(rotary_dim, bool) or not isinstance(rotary_dim, numbers.Integral) or rotary_dim < 0:
        raise ValueError(f"apply_rope: rotary_dim = {rotary_dim!r} must be an integer >= 0 or None")
    heads_first = _rope_heads_first("apply_rope", tuple(x.shape), shape[1:], heads_first)
    if out is not None:
        out = _tensor(out, "out")
        if tuple(out.shape) != tuple(x.shape):
            raise ValueError(f"apply_rope: out has shape {tuple(out.shape)} but x has {tuple(x.shape)}")
        if isinstance(out, np.ndarray) and not out.flags.writeable:
            raise ValueError("apply_rope: out is read-only; tokpos writes its result there in place")
    result = _empty_like(x)
    xv, rv = (_heads_swapped(x), _heads_swapped(result)) if heads_first else (x, result)
    for a, f in enumerate(mrope_axis_frequencies(freqs, section, interleaved=interleaved)):
        _core.apply_rope(
            rv, xv if a == 0 else rv, _batch_positions(positions[a], tuple(x.shape)), f, layout,
            _count("apply_rope: rotary_dim", rotary_dim), 1.0, bool(inverse), "tokpos.apply_rope",
        )
    if out is None:
        return result
    if _is_torch(out):
        out.copy_(result)
    else:
        np.copyto(out, result)
    return out


ROPE_ANGLES = ("exact", "float32")
# A float32 angle is passed to the kernel as position 2^11 times angle / 2^11
# (exact: a power of two), which keeps the frequency within the kernel's 2^20.
_ANGLE_POSITION = 2048
_MAX_FLOAT32_ANGLE = float(_ANGLE_POSITION) * 2.0**20


def rope_cos_sin(
    positions, inv_freq, *, layout: str = "half", attention_factor: float = 1.0, dtype: str = "float32",
    angle: str = "exact",
):
    """(cos, sin) as transformers' rotary embedding returns them: shape
    positions.shape + (dim,), dim = 2 * len(inv_freq), with the frequencies
    repeated as the layout pairs them ("half": cat(freqs, freqs);
    "interleaved": each twice in a row), times attention_factor, then
    rounded to dtype (float32, bfloat16 or float16) as transformers'
    .to(dtype) does. numpy in, numpy out; torch in, torch out.

    angle="exact" (the default): cos and sin of the exactly reduced angle
    position * inv_freq, times attention_factor, rounded once to float32
    (the values apply_rope uses). angle="float32": transformers' own
    arithmetic, for reproducing a transformers model: the angle is
    float32(position) * float32(inv_freq) rounded to float32 (its float32
    matmul), cos and sin of that angle are rounded to float32, and the
    attention factor multiplies them in float32. The float32 angles must be
    at most 2^31 in magnitude."""
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"rope_cos_sin: layout = {layout!r} is not one of 'half', 'interleaved'")
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"rope_cos_sin: dtype = {dtype!r} is not one of 'float32', 'bfloat16', 'float16'")
    if angle not in ROPE_ANGLES:
        raise ValueError(f"rope_cos_sin: angle = {angle!r} is not one of 'exact', 'float32'")
    positions = _tensor(positions, "positions", index=True)
    torch_out = _is_torch(positions) or _is_torch(inv_freq)
    if torch_out and not _is_torch(positions):
        import torch

        positions = torch.from_numpy(np.ascontiguousarray(positions))
    if not torch_out and dtype == "bfloat16":
        raise ValueError('rope_cos_sin: numpy has no bfloat16: pass torch positions for a bfloat16 result')
    freqs = _freqs(inv_freq)
    half = freqs.shape[0]
    shape = tuple(positions.shape)
    if len(shape) not in (1, 2):
        raise ValueError(f"rope_cos_sin: positions must be (T) or (B, T), got shape {shape}")
    flat = positions.reshape(-1)
    n = int(flat.shape[0])
    if angle == "exact":
        c, s = _unit_rotation(flat, freqs, n, half, float(attention_factor))
    else:
        c, s = _float32_angle_rotation(flat, freqs, n, half, float(attention_factor))
    if layout == "half":
        cos, sin = np.concatenate([c, c], axis=-1), np.concatenate([s, s], axis=-1)
    else:
        cos, sin = np.repeat(c, 2, axis=-1), np.repeat(s, 2, axis=-1)
    cos, sin = cos.reshape(shape + (2 * half,)), sin.reshape(shape + (2 * half,))
    if torch_out:
        import torch

        cos, sin = torch.from_numpy(cos), torch.from_numpy(sin)
        return cos.to(getattr(torch, dtype)), sin.to(getattr(torch, dtype))
    return cos.astype(dtype), sin.astype(dtype)


def _unit_rotation(positions, freqs, n: int, half: int, factor: float):
    """(cos, sin), each (n, half) float32: pairs (1, 0) rotated by the
    kernel into (cos, sin) exactly, its own values, times factor."""
    unit = np.zeros((n, 1, 2 * half), dtype=np.float32)
    unit[:, :, :half] = 1.0
    rotated = np.empty_like(unit)
    _core.apply_rope(rotated, unit, positions, freqs, "half", -1, factor, False, "tokpos.rope_cos_sin")
    return rotated[:, 0, :half], rotated[:, 0, half:]


def _float32_angle_rotation(positions, freqs, n: int, half: int, factor: float):
    """(cos, sin), each (n, half) float32, as transformers computes them:
    angle = float32(position) * float32(freq) in float32, its cos and sin
    rounded to float32 (the kernel's exactly reduced values of that angle),
    times float32(factor) in float32."""
    if hasattr(positions, "numpy"):
        positions = positions.detach().cpu().numpy()
    angles = np.asarray(positions).astype(np.float32)[:, None] * freqs.astype(np.float32)[None, :]
    if angles.size and not float(np.max(np.abs(angles))) <= _MAX_FLOAT32_ANGLE:
        raise ValueError(
            f"rope_cos_sin: a float32 angle position * inv_freq is {float(np.max(np.abs(angles)))!r}; "
            "angle='float32' takes angles of magnitude at most 2^31 = 2147483648"
        )
    # One token at position 2^11, one frequency per (token, frequency) pair:
    # 2^11 * (angle / 2^11) is the float32 angle exactly.
    per_pair = (angles.reshape(-1).astype(np.float64)) / _ANGLE_POSITION
    c, s = _unit_rotation(np.array([_ANGLE_POSITION], dtype=np.int64), per_pair, 1, n * half, 1.0)
    c, s = c.reshape(n, half), s.reshape(n, half)
    if factor != 1.0:
        f = np.float32(factor)
        c, s = c * f, s * f
    return c, s


# ---- Multimodal rotary (M-RoPE) ---------------------------------------------------


def mrope_axes(mrope_section, half: int, *, interleaved: bool = False) -> list[int]:
    """The position axis (0 temporal, 1 height, 2 width) each of the half
    frequencies reads. mrope_section (3 sizes summing to half): contiguous
    bands, section k on axis k (Qwen2-VL, Qwen2.5-VL); interleaved: frequency
    i on axis 1 when i % 3 == 1 and i < 3 * mrope_section[1], on axis 2
    when i % 3 == 2 and i < 3 * mrope_section[2], else on axis 0 (Qwen3-VL)."""
    if isinstance(mrope_section, (str, bytes)) or not hasattr(mrope_section, "__len__") or len(mrope_section) != 3:
        raise ValueError(f"mrope_section = {mrope_section!r} must be 3 sizes (temporal, height, width)")
    sizes = [_count(f"mrope_section[{k}]", v, 0) for k, v in enumerate(mrope_section)]
    if sum(sizes) != half:
        raise ValueError(f"mrope_section = {sizes} sums to {sum(sizes)}; the {half} frequencies need it to sum to {half}")
    if not interleaved:
        return [k for k, n in enumerate(sizes) for _ in range(n)]
    axes = []
    for i in range(half):
        k = i % 3
        axes.append(k if k and i < 3 * sizes[k] else 0)
    return axes


def mrope_cos_sin(
    positions, inv_freq, mrope_section, *, interleaved: bool = False, layout: str = "half",
    attention_factor: float = 1.0, dtype: str = "float32", angle: str = "exact",
):
    """(cos, sin) of multimodal rotary (M-RoPE) as transformers' Qwen2-VL and
    Qwen3-VL rotary embeddings return them: positions (3, B, T) (temporal,
    height, width; a (B, T) tensor is read as the same on all three axes, as
    transformers expands it), frequency i taking its angle from the axis
    mrope_axes(mrope_section, len(inv_freq), interleaved=...) gives it.
    Shape (B, T, dim), dim = 2 * len(inv_freq), the frequencies repeated as
    layout pairs them; each value is rope_cos_sin's for that axis's
    position (angle as there: "exact" or transformers' "float32")."""
    positions = _tensor(positions, "positions", index=True)
    shape = tuple(positions.shape)
    if len(shape) == 2:
        axes_positions = [positions] * 3
    elif len(shape) == 3 and shape[0] == 3:
        axes_positions = [positions[a] for a in range(3)]
    else:
        raise ValueError(f"mrope_cos_sin: positions must be (3, B, T) or (B, T), got shape {shape}")
    half = _freqs(inv_freq).shape[0]
    axes = mrope_axes(mrope_section, half, interleaved=bool(interleaved))
    column_axes = axes + axes if layout == "half" else [a for a in axes for _ in range(2)]
    kwargs = dict(layout=layout, attention_factor=attention_factor, dtype=dtype, angle=angle)
    cos, sin = rope_cos_sin(axes_positions[0], inv_freq, **kwargs)
    for a in (1, 2):
        columns = [j for j, k in enumerate(column_axes) if k == a]
        if columns:
            cos_a, sin_a = rope_cos_sin(axes_positions[a], inv_freq, **kwargs)
            cos[..., columns] = cos_a[..., columns]
            sin[..., columns] = sin_a[..., columns]
    return cos, sin
