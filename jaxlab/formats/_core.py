"""Block-scaled quantizers: FP8 E4M3, INT4/INT8, NVFP4, MXFP4, MixFP4.

One entry point, `quantize(x, fmt, *, axis=-1, key=None, **options)`, returns
a `QArray` (packed codes, raw scale bytes, tensor scale); `dequantize(q)`
inverts it and `fake_quant` is quantize-dequantize with a straight-through
gradient. Blocks run along `axis` (the reduction/K dimension of a matmul).

Non-finite and degenerate inputs (one rule for every format; a jaxlab
interpretation, the spec leaves it open):
  * Tensor and block amaxes are taken over finite values only, so one Inf or
    NaN does not zero a whole tensor.
  * A block whose finite amax is 0 gets scale byte 0 (value 0), all-zero codes,
    and dequantizes to exact zeros: scales are never NaN and never divided by.
  * ±Inf elements saturate to the largest code of their block (±6 for E2M1,
    ±7 for INT4, ±448 for E4M3) at that block's scale; NaN elements encode as
    +0 (none of these grids has a NaN). `dequantize` never returns NaN/Inf.
  * A tensor whose finite amax is 0 uses tensor scale 1 (NVFP4 recipe).

Lengths not divisible by the block size are refused with a ValueError unless
`pad=True`, which zero-pads the blocked axis (zeros change no amax) and crops
on dequantize.
"""

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jaxtyping import Shaped

from jaxlab.formats import _grids
from jaxlab.formats._grids import E2M1, E4M3
from jaxlab.formats._packing import pack_nibbles, unpack_nibbles

FORMATS = ("fp8_e4m3", "int4", "int8", "nvfp4", "mxfp4", "mixfp4")
_F32_MAX = float(np.finfo(np.float32).max)

_DEFAULTS: dict[str, dict[str, Any]] = {
    "fp8_e4m3": dict(granularity="tensor", block_size=32),
    "int4": dict(block_size=16, scale_dtype="f32"),
    "int8": dict(block_size=None, scale_dtype="f32"),
    "nvfp4": dict(block_size=16),
    "mxfp4": dict(block_size=32, scale_rule="floor"),
    "mixfp4": dict(block_size=16, select_p=2.0),
}


@dataclasses.dataclass(frozen=True)
class Format:
  """A fully specified quantization format (hashable, used as a static arg).

  Build it with `make_format(name, **options)`.

  Attributes:
    name: one of `FORMATS`.
    block_size: elements per scale block along the blocked axis; None means
      the whole axis (one scale per row).
    granularity: fp8_e4m3 only: "tensor" (one f32 scale), "row" (one per slice
      along the axis) or "block" (one per `block_size` elements).
    scale_dtype: int4/int8 only: "f32" (scale = amax/qmax in float32) or
      "e4m3" (NVFP4-style two-level scale: E4M3 block scale and an FP32 tensor
      scale with S_enc = 448*qmax/amax(T); a jaxlab interpretation for INT).
    scale_rule: mxfp4 only: "floor" (OCP MX v1.0: X = 2**(floor(log2 amax)-2),
      values above 6 clip) or "rceil" (X = smallest power of two with
      amax/X <= 6, never clips; qwix/NVIDIA).
    select_p: mixfp4 only: the block error used to choose E1M2 over E2M1 is
      sum |x - x_hat|**p; p=2 (MSE) is the public implementations' selector,
      other p are ablations (the paper's selector is unknown; jaxlab
      interpretation).
    pad: zero-pad a blocked axis whose length is not a multiple of the block.
  """
  name: str
  block_size: int | None = None
  granularity: str = "block"
  scale_dtype: str = "e4m3"
  scale_rule: str = "floor"
  select_p: float = 2.0
  pad: bool = False

  @property
  def is_fp4(self) -> bool:
    return self.name in ("nvfp4", "mxfp4", "mixfp4")

  @property
  def element_bits(self) -> int:
    return 8 if self.name in ("fp8_e4m3", "int8") else 4

  @property
  def qmax(self) -> float:
    return {"fp8_e4m3": 448.0, "int4": 7.0, "int8": 127.0}.get(self.name, 6.0)

  def bits_per_element(self, axis_length: int | None = None) -> float:
    """Storage bits per element, excluding the one float32 tensor scale."""
    if self.name == "fp8_e4m3" and self.granularity == "tensor":
      return 8.0
    bs = self.block_size
    if self.name == "fp8_e4m3" and self.granularity == "row" or bs is None:
      bs = axis_length
    if bs is None:
      raise ValueError("bits_per_element: pass axis_length for row-wise scales")
    f32_scale = self.name == "fp8_e4m3" or (self.name in ("int4", "int8")
                                             and self.scale_dtype == "f32")
    return self.element_bits + (32 if f32_scale else 8) / bs


def make_format(name: str, **options: Any) -> Format:
  """Validates `options` for format `name` and returns a `Format`.

  Options per format (defaults in brackets):
    fp8_e4m3: granularity ["tensor"] in {"tensor","row","block"}, block_size [32].
    int4: block_size [16], scale_dtype ["f32"] in {"f32","e4m3"}.
    int8: block_size [None = per row], scale_dtype ["f32"].
    nvfp4: block_size [16].  mxfp4: block_size [32], scale_rule ["floor"|"rceil"].
    mixfp4: block_size [16], select_p [2.0].
    every format: pad [False].

  Example:
    >>> make_format("mxfp4", scale_rule="rceil").block_size
    32
  """
  if name not in FORMATS:
    raise ValueError(f"fmt must be one of {FORMATS}, got {name!r}")
  allowed = dict(_DEFAULTS[name], pad=False)
  unknown = set(options) - set(allowed)
  if unknown:
    raise ValueError(f"Unknown option(s) {sorted(unknown)} for format {name!r}; "
                     f"allowed: {sorted(allowed)}")
  kw = {**allowed, **options}
  fmt = Format(name=name, **kw)
  bs = fmt.block_size
  if bs is not None and (not isinstance(bs, int) or bs < 1):
    raise ValueError(f"block_size must be a positive int or None, got {bs!r}")
  if fmt.element_bits == 4 and bs is not None and bs % 2:
    raise ValueError(f"block_size must be even for 4-bit format {name!r}, got {bs}")
  if fmt.granularity not in ("tensor", "row", "block"):
    raise ValueError(f"granularity must be 'tensor', 'row' or 'block', got {fmt.granularity!r}")
  if fmt.scale_dtype not in ("f32", "e4m3"):
    raise ValueError(f"scale_dtype must be 'f32' or 'e4m3', got {fmt.scale_dtype!r}")
  if fmt.scale_rule not in ("floor", "rceil"):
    raise ValueError(f"scale_rule must be 'floor' or 'rceil', got {fmt.scale_rule!r}")
  if not (isinstance(fmt.select_p, (int, float)) and fmt.select_p > 0):
    raise ValueError(f"select_p must be a positive number, got {fmt.select_p!r}")
  return fmt


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class QArray:
  """A quantized array (pytree: array fields are leaves, the rest is static).

  Storage is in "blocked layout": the blocked axis is moved last and padded
  to a multiple of the block size (K_pad).

  Attributes:
    codes: uint8. 4-bit formats: two codes per byte, [..., K_pad // 2]; 8-bit
      formats: [..., K_pad] (E4M3 bytes or two's-complement int8 bytes).
    scales: per-block scales [..., K_pad // block]: raw uint8 bytes (E4M3 for
      nvfp4/mixfp4/int*-e4m3, bit 7 = 1 marking an E1M2 block in mixfp4; E8M0
      for mxfp4) or float32 (int*-f32, fp8 row/block); shape () float32 for
      fp8 "tensor".
    tensor_scale: float32 scalar multiplying every block (S_dec = 1/S_enc for
      two-level formats, else 1).
    fmt: the `Format` (static).
    shape: the original array's shape (static).
    axis: the blocked axis of the original array, non-negative (static).
  """
  # Leaves are typed Any: pytree machinery (vmap, custom_vjp cotangents) rebuilds
  # QArrays with placeholder leaves.
  codes: Any
  scales: Any
  tensor_scale: Any
  fmt: Format = dataclasses.field(metadata=dict(static=True))
  shape: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))
  axis: int = dataclasses.field(metadata=dict(static=True))

  @property
  def block_size(self) -> int:
    return self.fmt.block_size or self.shape[self.axis]

  def e1m2_fraction(self) -> Array:
    """Fraction of blocks stored as E1M2 (mixfp4; 0 for every other format)."""
    if self.fmt.name != "mixfp4":
      return jnp.zeros((), jnp.float32)
    return jnp.mean((self.scales >> 7).astype(jnp.float32))


# ----------------------------------------------------------------------------- helpers


def e4m3_scale(v: Array) -> tuple[Array, Array]:
  """Rounds non-negative float32 `v` to E4M3 (RNE, saturating at 448).

  Returns (uint8 bytes, float32 values).
  """
  return _grids._round_float(v, E4M3)


def recip(c: float) -> float:
  """float32(1/c): the spec's "amax / c" is evaluated as amax * fl32(1/c).

  A jaxlab interpretation of the recipe's rounding order (not the paper's).

  XLA rewrites division by a constant into multiplication by its reciprocal
  (which is not always the correctly rounded quotient), so the recipe is
  defined that way explicitly: identical under XLA, Pallas and NumPy.
  """
  return float(np.float32(1.0) / np.float32(c))


def tensor_encode_scale(amax_t: Array, qmax: float) -> Array:
  """S_enc = 448 * qmax / amax(T), clamped to float32 max; 1 when amax(T) = 0."""
  s = jnp.minimum(jnp.float32(448.0 * qmax) / jnp.where(amax_t > 0, amax_t, 1.0), _F32_MAX)
  return jnp.where(amax_t > 0, s, 1.0).astype(jnp.float32)


def _finite(x: Array) -> Array:
  """isfinite as one compare (NaN compares false), friendly to kernel lowerings."""
  return jnp.abs(x) <= _F32_MAX


def _safe_div(num: Array, den: Array) -> Array:
  return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 0.0)


def _mul_inv(num: Array, den: Array) -> Array:
  """num * fl32(1/den) (0 where den == 0): a reciprocal, then a multiply.

  Used for the fp8/int scales so that XLA (which may rewrite a division by a
  broadcast into this form) and NumPy compute the same bits.
  """
  inv = jnp.where(den > 0, 1.0 / jnp.where(den > 0, den, 1.0), 0.0)
  return num * inv


def _block_err(x: Array, xhat: Array, p: float) -> Array:
  d = jnp.abs(x - xhat)
  return jnp.sum(d * d if p == 2.0 else d ** p, axis=-1)


def nvfp4_blocks(xb: Array, s_enc: Array, s_dec: Array, key: Array | None = None
                 ) -> tuple[Array, Array, Array]:
  """NVFP4 on blocked input [..., nb, bs]: (nibble codes, scale bytes, x_hat)."""
  xf = jnp.where(_finite(xb), xb, 0.0)
  amax_b = jnp.max(jnp.abs(xf), axis=-1)
  sb, sv = e4m3_scale((amax_b * recip(6.0)) * s_enc)
  y = _safe_div(xb * s_enc, sv[..., None])
  codes, vals = _grids._round_float(y, E2M1, key=key)
  return codes, sb, (vals * sv[..., None]) * s_dec


def mixfp4_blocks(xb: Array, s_enc: Array, s_dec: Array, key: Array | None = None,
                  select_p: float = 2.0) -> tuple[Array, Array, Array]:
  """MixFP4 on blocked input: E2M1 vs E1M2 per block by block error.

  Both candidates use the real rounded E4M3 scales (s_F from amax/6, s_I from
  amax/7); E1M2 wins iff its error is strictly smaller and its scale byte is
  nonzero (ties -> E2M1). The E1M2 block stores the INT4 code k (value k/4)
  with scale s_I, i.e. element value k * s_I * S_dec; its scale byte gets bit 7
  (flag polarity bit 7 = 1 -> E1M2 and this byte layout are jaxlab
  interpretations; the paper's are unknown).
  """
  kf = ki = None
  if key is not None:
    kf, ki = jax.random.split(key)
  codes_f, sb_f, xh_f = nvfp4_blocks(xb, s_enc, s_dec, kf)
  xf = jnp.where(_finite(xb), xb, 0.0)
  amax_b = jnp.max(jnp.abs(xf), axis=-1)
  sb_i, sv_i = e4m3_scale((amax_b * recip(7.0)) * s_enc)
  y = _safe_div(xb * s_enc, sv_i[..., None])
  # E1M2 holds k/4 for k = 0..7 with magnitude bits equal to k, so it is an
  # integer rounding of y (no exponent search): the values of
  # `round_float(y / 4, E1M2)` times 4, and its codes.
  k = _grids._round_int(y, 7, key=ki)
  neg = jnp.signbit(k)
  codes_i = (neg.astype(jnp.uint8) << 3) | jnp.abs(k).astype(jnp.uint8)
  xh_i = (k * sv_i[..., None]) * s_dec
  use_i = (_block_err(xf, xh_i, select_p) < _block_err(xf, xh_f, select_p)) & (sb_i > 0)
  codes = jnp.where(use_i[..., None], codes_i, codes_f)
  sb = jnp.where(use_i, sb_i | jnp.uint8(0x80), sb_f)
  return codes, sb, jnp.where(use_i[..., None], xh_i, xh_f)


def mx_scale_exponent(amax_b: Array, rule: str) -> Array:
  """MXFP4 shared exponent (int32, clamped to [-127, 127]; 0 amax -> -127)."""
  f = _grids.floor_log2(amax_b)
  if rule == "floor":
    e = f - 2
  else:  # rceil: smallest e with amax <= 6 * 2**e, exact (amax in [2**f, 2**(f+1)))
    e = jnp.where(amax_b <= 1.5 * _grids.exp2i(f), f - 2, f - 1)
  e = jnp.where(amax_b > 0, e, -127)
  return jnp.clip(e, -127, 127)


# ----------------------------------------------------------------------------- quantize


def _check_x(x: Any, name: str = "x") -> Array:
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    raise ValueError(f"{name} must be a floating array, got dtype {x.dtype}")
  if x.ndim < 1:
    raise ValueError(f"{name} must have at least 1 dimension, got shape {x.shape}")
  return x


def _resolve(fmt: "str | Format", options: dict[str, Any]) -> Format:
  if isinstance(fmt, Format):
    if options:
      raise ValueError(f"Pass options either inside Format or as keywords, not both: {options}")
    return fmt
  if not isinstance(fmt, str):
    raise ValueError(f"fmt must be a format name or Format, got {type(fmt).__name__}")
  return make_format(fmt, **options)


def _layout(shape: tuple[int, ...], axis: int, fmt: Format) -> tuple[int, int, int]:
  """Returns (normalized axis, block size, padded length)."""
  ndim = len(shape)
  if not -ndim <= axis < ndim:
    raise ValueError(f"axis {axis} out of range for an array of shape {shape}")
  axis %= ndim
  k = shape[axis]
  if k == 0:
    raise ValueError(f"the blocked axis {axis} of shape {shape} is empty")
  if fmt.name == "fp8_e4m3" and fmt.granularity in ("tensor", "row"):
    bs = k
  else:
    bs = fmt.block_size if fmt.block_size is not None else k
  if fmt.element_bits == 4 and bs % 2:
    raise ValueError(f"4-bit format {fmt.name!r} needs an even block; axis {axis} of shape "
                     f"{shape} has length {k}")
  k_pad = -(-k // bs) * bs
  if k_pad != k and not fmt.pad:
    raise ValueError(
        f"{fmt.name}: axis {axis} of shape {shape} has length {k}, not a multiple of the "
        f"block size {bs}; pass pad=True to zero-pad it (cropped on dequantize)")
  return axis, bs, k_pad


@functools.partial(jax.jit, static_argnames=("fmt", "axis"))
def _quantize(x: Array, key: Array | None, *, fmt: Format, axis: int) -> QArray:
  shape = x.shape
  axis, bs, k_pad = _layout(shape, axis, fmt)
  xm = jnp.moveaxis(x.astype(jnp.float32), axis, -1)
  if k_pad != xm.shape[-1]:
    xm = jnp.pad(xm, [(0, 0)] * (xm.ndim - 1) + [(0, k_pad - xm.shape[-1])])
  xb = xm.reshape(*xm.shape[:-1], k_pad // bs, bs)
  xf = jnp.where(_finite(xb), xb, 0.0)
  amax_b = jnp.max(jnp.abs(xf), axis=-1)
  amax_t = jnp.max(amax_b)
  one = jnp.ones((), jnp.float32)
  name = fmt.name

  if name in ("nvfp4", "mixfp4"):
    s_enc = tensor_encode_scale(amax_t, 6.0)
    s_dec = 1.0 / s_enc
    if name == "nvfp4":
      codes, scales, _ = nvfp4_blocks(xb, s_enc, s_dec, key)
    else:
      codes, scales, _ = mixfp4_blocks(xb, s_enc, s_dec, key, fmt.select_p)
    codes = pack_nibbles(codes.reshape(xm.shape))
    return QArray(codes, scales, s_dec, fmt, shape, axis)

  if name == "mxfp4":
    e = mx_scale_exponent(amax_b, fmt.scale_rule)
    y = xb * _grids.exp2i(-e)[..., None]  # exact: multiply by a power of two
    codes, _ = _grids._round_float(y, E2M1, key=key)
    scales = (e + _grids.E8M0_BIAS).astype(jnp.uint8)
    return QArray(pack_nibbles(codes.reshape(xm.shape)), scales, one, fmt, shape, axis)

  if name in ("int4", "int8"):
    qmax = fmt.qmax
    if fmt.scale_dtype == "e4m3":
      s_enc = tensor_encode_scale(amax_t, qmax)
      scales, sv = e4m3_scale((amax_b * recip(qmax)) * s_enc)
      y = _safe_div(xb * s_enc, sv[..., None])
      tensor_scale = 1.0 / s_enc
    else:
      sv = amax_b * recip(qmax)
      scales = sv
      y = _mul_inv(xb, sv[..., None])
      tensor_scale = one
    q = _grids._round_int(y, int(qmax), key=key).astype(jnp.int32).reshape(xm.shape)
    if name == "int4":
      codes = pack_nibbles((q & 0xF).astype(jnp.uint8))
    else:
      codes = jax.lax.bitcast_convert_type(q.astype(jnp.int8), jnp.uint8)
    return QArray(codes, scales, jnp.asarray(tensor_scale, jnp.float32), fmt, shape, axis)

  # fp8_e4m3
  if fmt.granularity == "tensor":
    s = amax_t * recip(448.0)
    y = _mul_inv(xb, s)
    scales = s
  else:
    s = amax_b * recip(448.0)
    y = _mul_inv(xb, s[..., None])
    scales = s
  codes, _ = _grids._round_float(y, E4M3, key=key)
  return QArray(codes.reshape(xm.shape), scales, one, fmt, shape, axis)


def quantize(x: Shaped[Array | np.ndarray, "*shape"], fmt: "str | Format", *, axis: int = -1,
             key: Array | None = None, **options: Any) -> QArray:
  """Quantizes `x` to `fmt` with blocks along `axis`.

  Args:
    x: float array (any float dtype; computed in float32).
    fmt: "fp8_e4m3", "int4", "int8", "nvfp4", "mxfp4", "mixfp4", or a `Format`.
    axis: the blocked axis (the reduction/K axis of a matmul operand).
    key: PRNG key; when given, elements are stochastically rounded (exact SR,
      scales stay round-to-nearest-even). None = round half to even.
    **options: format options, see `make_format` (e.g. scale_rule="rceil",
      block_size=128, granularity="row", scale_dtype="e4m3", pad=True).

  Returns:
    A `QArray`; `dequantize(q)` has `x.shape`.

  Raises:
    ValueError: unknown format/option, non-float input, bad axis, or a blocked
      length not divisible by the block size without `pad=True`.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> x = jax.random.normal(jax.random.key(0), (4, 64))
    >>> q = quantize(x, "nvfp4")
    >>> q.codes.shape, q.scales.shape, dequantize(q).shape
    ((4, 32), (4, 4), (4, 64))
  """
  x = _check_x(x)
  f = _resolve(fmt, options)
  _layout(x.shape, axis, f)  # validate eagerly with a clear message
  return _quantize(x, key, fmt=f, axis=axis)


def _element_values(q: QArray) -> Array:
  """Decoded element values in blocked layout [..., K_pad] (before scaling)."""
  name = q.fmt.name
  if name in ("nvfp4", "mixfp4", "mxfp4"):
    nib = unpack_nibbles(q.codes).astype(jnp.int32)
    if name == "mxfp4":
      return _grids._decode_float(nib.astype(jnp.uint8), E2M1)
    bs = q.block_size
    flag = jnp.repeat((q.scales >> 7).astype(jnp.int32), bs, axis=-1)
    return jnp.take(jnp.asarray(_grids.MIX_LUT), (flag << 4) | nib, mode="clip")
  if name == "int4":
    nib = unpack_nibbles(q.codes).astype(jnp.int32)
    return jnp.where(nib >= 8, nib - 16, nib).astype(jnp.float32)
  if name == "int8":
    return jax.lax.bitcast_convert_type(q.codes, jnp.int8).astype(jnp.float32)
  return _grids._decode_float(q.codes, E4M3)


def _scale_values(q: QArray) -> Array:
  name = q.fmt.name
  if name in ("nvfp4", "mixfp4") or (name in ("int4", "int8") and q.fmt.scale_dtype == "e4m3"):
    return _grids._decode_float(q.scales & jnp.uint8(0x7F), E4M3)
  if name == "mxfp4":
    return _grids._decode_e8m0(q.scales)
  return q.scales.astype(jnp.float32)


@functools.partial(jax.jit, static_argnames=("dtype",))
def _dequantize(q: QArray, dtype: Any) -> Array:
  vals = _element_values(q)
  sv = _scale_values(q)
  k_pad = vals.shape[-1]
  if sv.ndim == 0:
    out = vals * sv * q.tensor_scale
  else:
    nb = sv.shape[-1]
    vb = vals.reshape(*vals.shape[:-1], nb, k_pad // nb)
    out = ((vb * sv[..., None]) * q.tensor_scale).reshape(vals.shape)
  out = out[..., :q.shape[q.axis]]
  return jnp.moveaxis(out, -1, q.axis).astype(dtype)


def dequantize(q: QArray, dtype: Any = jnp.float32) -> Array:
  """Decodes a `QArray` back to an array of its original shape.

  Element value = element code value * block scale * tensor scale, in float32
  (MixFP4/NVFP4 elements decode through one 32-entry (flag, nibble) -> E2M2
  table), then cast to `dtype`.

  Example:
    >>> import jax.numpy as jnp
    >>> q = quantize(jnp.array([[0.5, -6.0, 3.0, 1.0]]), "mxfp4", pad=True)
    >>> dequantize(q).tolist()
    [[0.5, -6.0, 3.0, 1.0]]
  """
  if not isinstance(q, QArray):
    raise ValueError(f"dequantize expects a QArray, got {type(q).__name__}")
  return _dequantize(q, jnp.dtype(dtype))


@jax.custom_vjp
def _ste(x: Array, xq: Array) -> Array:
  del x
  return xq


def _ste_fwd(x, xq):
  return xq, None


def _ste_bwd(_, g):
  return g, jnp.zeros_like(g)


_ste.defvjp(_ste_fwd, _ste_bwd)


def fake_quant(x: Shaped[Array | np.ndarray, "*shape"], fmt: "str | Format", *, axis: int = -1,
               key: Array | None = None, **options: Any) -> Shaped[Array, "*shape"]:
  """dequantize(quantize(x)) in x's dtype, with a straight-through gradient.

  The forward value is exactly the dequantized array; the gradient w.r.t. `x`
  is the identity (STE).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> x = jnp.linspace(-1.0, 1.0, 32)
    >>> jax.grad(lambda v: fake_quant(v, "mxfp4").sum())(x).tolist() == [1.0] * 32
    True
  """
  x = _check_x(x)
  f = _resolve(fmt, options)
  _layout(x.shape, axis, f)
  xq = _fake_quant_values(x, key, fmt=f, axis=axis)
  return _ste(x, jax.lax.stop_gradient(xq))


@functools.partial(jax.jit, static_argnames=("fmt", "axis"))
def _fake_quant_values(x: Array, key: Array | None, *, fmt: Format, axis: int) -> Array:
  """dequantize(quantize(x)) in x.dtype; NVFP4/MixFP4 take a shortcut.

  The block functions return x_hat = (element value * block scale) * S_dec,
  the same float32 products `dequantize` forms, so skipping codes, packing and
  the table lookup gives identical values with a smaller program.
  """
  if fmt.name not in ("nvfp4", "mixfp4"):
    return _dequantize(_quantize(x, key, fmt=fmt, axis=axis), x.dtype)
  ax, bs, k_pad = _layout(x.shape, axis, fmt)
  xm = jnp.moveaxis(x.astype(jnp.float32), ax, -1)
  k = xm.shape[-1]
  if k_pad != k:
    xm = jnp.pad(xm, [(0, 0)] * (xm.ndim - 1) + [(0, k_pad - k)])
  xb = xm.reshape(*xm.shape[:-1], k_pad // bs, bs)
  amax_t = jnp.max(jnp.abs(jnp.where(_finite(xb), xb, 0.0)))
  s_enc = tensor_encode_scale(amax_t, 6.0)
  s_dec = 1.0 / s_enc
  if fmt.name == "nvfp4":
    _, _, xh = nvfp4_blocks(xb, s_enc, s_dec, key)
  else:
    _, _, xh = mixfp4_blocks(xb, s_enc, s_dec, key, fmt.select_p)
  xh = xh.reshape(xm.shape)[..., :k]
  return jnp.moveaxis(xh, -1, ax).astype(x.dtype)


def block_view(x: Array, fmt: "str | Format", *, axis: int = -1, **options: Any) -> Array:
  """x in blocked layout [..., nb, bs] (axis moved last, zero-padded if allowed)."""
  x = _check_x(x)
  f = _resolve(fmt, options)
  ax, bs, k_pad = _layout(x.shape, axis, f)
  xm = jnp.moveaxis(x, ax, -1)
  if k_pad != xm.shape[-1]:
    xm = jnp.pad(xm, [(0, 0)] * (xm.ndim - 1) + [(0, k_pad - xm.shape[-1])])
  return xm.reshape(*xm.shape[:-1], k_pad // bs, bs)


def sqnr_db(x: Array, xhat: Array) -> Array:
  """Signal-to-quantization-noise ratio 10*log10(sum x^2 / sum (x-xhat)^2) in dB."""
  x = jnp.asarray(x, jnp.float32)
  err = jnp.sum((x - xhat) ** 2)
  return 10.0 * jnp.log10(jnp.sum(x * x) / jnp.maximum(err, 1e-30))


__all__ = ["FORMATS", "Format", "QArray", "block_view", "dequantize", "fake_quant",
           "make_format", "quantize", "sqnr_db"]
