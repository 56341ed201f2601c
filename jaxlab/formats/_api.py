"""quantize / dequantize / fake_quant: layout, dispatch to a codec, packing.

Non-finite and degenerate inputs (one rule for every format, OCP MX's for
non-finite blocks): see the package docstring.
"""

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jaxtyping import Shaped

from jaxlab.formats import _fp8, _int, _mixfp4, _mxfp4, _nvfp4
from jaxlab.formats._format import Format, QArray, get_format
from jaxlab.formats._layout import Layout, from_blocks, layout, to_blocks
from jaxlab.formats._scales import (
    F32_MAX,
    MAX_COLUMN_BLOCK,
    block_amax,
    finite,
    finite_abs,
    pairwise,
    tensor_amax,
)

# Element family -> codec module (encode / decode, and `fake` where a shortcut exists).
# `encode(xb, amax_b, fmt, key, all_finite, amax_t)` returns the codes as stored ([..., nb, bs]
# bytes; 4-bit codes two per byte, [..., nb, bs // 2]), the scales and the tensor scale.
_CODECS = {"fp8_e4m3": _fp8, "int4": _int, "int8": _int, "nvfp4": _nvfp4, "mxfp4": _mxfp4,
           "mixfp4": _mixfp4}


def _check_x(x: Any, name: str = "x") -> Array:
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    raise ValueError(f"{name} must be a floating array, got dtype {x.dtype}")
  if x.ndim < 1:
    raise ValueError(f"{name} must have at least 1 dimension, got shape {x.shape}")
  return x


def _prepare(x: Any, fmt: "str | Format", axis: int, options: dict[str, Any]
             ) -> tuple[Array, Format]:
  """Eager validation with clear messages (before anything is traced)."""
  x = _check_x(x)
  f = get_format(fmt, **options)
  layout(x.shape, axis, f)
  return x, f


def _block_amaxes(xb: Array, finite_only: bool) -> Array:
  """The blocks' amax [..., nb]: max |x| (+Inf where a block holds a NaN or an Inf), or
  the amax over finite |x| (`finite_only`).

  Maxima over the block's columns, elementwise ops on [..., nb]: one loop XLA:CPU
  vectorises across blocks and splits over threads, with no temporary (its reduction
  over a short minor axis runs ~1.5x slower on 2 threads and writes |x| to memory
  first). Blocks above `MAX_COLUMN_BLOCK` take them over 16 columns, then reduce.

  NaN becomes +Inf before any reduction: elementwise maxima propagate NaN, but
  XLA:CPU's max reductions can drop it (a [64, 256] tensor with one NaN reduces to its
  finite max) or return -inf (a [4096] one with a NaN last).
  """
  bs = xb.shape[-1]
  if finite_only and bs > MAX_COLUMN_BLOCK:
    return block_amax(xb)
  if bs <= MAX_COLUMN_BLOCK:
    cols = [xb[..., j] for j in range(bs)]
  else:  # 16 strided columns (1 where 16 does not divide bs), then a reduction; slices,
    # as a reshape to [..., nb, bs // 16, 16] made XLA copy x into the `cond` below
    step = 16 if bs % 16 == 0 else 1
    cols = [xb[..., j::step] for j in range(step)]
  absolute = finite_abs if finite_only else jnp.abs
  m = pairwise([absolute(c) for c in cols], jnp.maximum)
  if not finite_only:
    m = jnp.where(jnp.isnan(m), jnp.inf, m)
  return m if bs <= MAX_COLUMN_BLOCK else jnp.max(m, axis=-1)


# Tensors of up to this many elements take the codec's general path alone. The finite
# check's `cond` puts a second copy of the codec, and the column-wise maxima, into the
# program; at this size they save microseconds but cost compile time in every program
# that quantizes many small tensors (an ECO step quantizes each of its 16 weights: the
# int4 and fp8 arms' six steps compiled in 66 s instead of 95 s). Same bits either way.
SMALL_TENSOR = 1 << 16


def _by_blocks(fn, xb: Array, mark):
  """fn(xb, amax_b, all_finite=...) with the blocks' finite amax, |x| never materialised;
  then `mark(out, bad)` gives blocks holding a NaN or an Inf (`bad` [..., nb]) their
  NaN encoding.

  For a finite tensor the raw maxima are the amaxes, and the codec may take its faster
  finite-input path (`all_finite=True`) and is handed the tensor amax the check
  computed (`amax_t`: inside the branch it would be reduced again, ~2% of MixFP4's
  quantize time); otherwise (a NaN or an Inf makes the raw maxima +Inf) the masked
  maxima and the general path run instead. Tensors up to `SMALL_TENSOR` elements (and
  empty ones) go straight to the general path.
  """
  if xb.size <= SMALL_TENSOR:
    bad = jnp.any(~finite(xb), axis=-1)
    return mark(fn(xb, block_amax(xb), all_finite=False), bad)
  raw = _block_amaxes(xb, finite_only=False)
  amax_t = tensor_amax(raw)

  def nonfinite():
    # The finite maxima get a `cond` of their own (its predicate is always true here),
    # which writes them out: fused into the codec's loops, XLA recomputed each block's
    # maximum for every element (MXFP4 quantize ~1.8x slower).
    amax_b = jax.lax.cond(amax_t > F32_MAX, lambda: _block_amaxes(xb, finite_only=True),
                          lambda: jnp.zeros_like(raw))
    return mark(fn(xb, amax_b, all_finite=False), raw > F32_MAX)

  return jax.lax.cond(amax_t <= F32_MAX,
                      lambda: fn(xb, raw, all_finite=True, amax_t=amax_t), nonfinite)


def _nan_scales(fmt: Format):
  """`mark` for encoded blocks: OCP MX's rule, a non-finite block gets the NaN scale.

  E8M0 0xFF (MXFP4), E4M3 0x7F (NVFP4, MixFP4 with its E1M2 flag clear, INT with E4M3
  scales), float32 NaN (FP8 and INT with float32 scales). FP8 with one tensor scale
  has no block scale: the block's elements get E4M3's NaN code 0x7F instead.
  """
  def mark(out, bad):
    codes, scales, tensor_scale = out
    if fmt.name == "fp8_e4m3" and fmt.granularity == "tensor":
      codes = jnp.where(bad[..., None], jnp.uint8(0x7F), codes)
    elif scales.dtype == jnp.uint8:
      scales = jnp.where(bad, jnp.uint8(0xFF if fmt.name == "mxfp4" else 0x7F), scales)
    else:
      scales = jnp.where(bad, jnp.nan, scales)
    return codes, scales, tensor_scale
  return mark


def _nan_values(xh: Array, bad: Array) -> Array:
  """`mark` for fake-quantized blocks: what `dequantize` gives a NaN-scaled block."""
  return jnp.where(bad[..., None], jnp.nan, xh)


@functools.partial(jax.jit, static_argnames=("fmt", "axis"))
def _quantize(x: Array, key: Array | None, *, fmt: Format, axis: int) -> QArray:
  lay = layout(x.shape, axis, fmt)
  xb = to_blocks(x, lay)
  encode = functools.partial(_CODECS[fmt.name].encode, fmt=fmt, key=key)
  codes, scales, tensor_scale = _by_blocks(encode, xb, _nan_scales(fmt))
  codes = codes.reshape(*codes.shape[:-2], lay.padded * fmt.element_bits // 8)
  return QArray(codes, scales, tensor_scale, fmt, tuple(x.shape), lay.axis)


def quantize(x: Shaped[Array | np.ndarray, "*shape"], fmt: "str | Format", *, axis: int = -1,
             key: Array | None = None, **options: Any) -> QArray:
  """Quantizes `x` to `fmt` with blocks along `axis`.

  Args:
    x: float array (any float dtype; computed in float32). Axes other than
      `axis` may be empty (the result is empty too).
    fmt: a preset name (`PRESETS`: "nvfp4", "mxfp4_rceil", "int4_g32",
      "fp8_e4m3_row", ...), an element family (`FORMATS`), or a `Format`.
    axis: the blocked axis (the reduction/K axis of a matmul operand).
    key: PRNG key; when given, elements are stochastically rounded (exact SR,
      scales stay round-to-nearest-even). None = round half to even.
    **options: format options, see `make_format` (e.g. scale_rule="rceil",
      block_size=128, granularity="row", scale_dtype="e4m3", pad=True).

  Returns:
    A `QArray`; `dequantize(q)` has `x.shape`.

  Raises:
    ValueError: unknown format/option, non-float input, bad axis, an empty
      blocked axis, or a blocked length not divisible by the block size
      without `pad=True`.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> x = jax.random.normal(jax.random.key(0), (4, 64))
    >>> q = quantize(x, "nvfp4")
    >>> q.codes.shape, q.scales.shape, dequantize(q).shape
    ((4, 32), (4, 4), (4, 64))
  """
  x, f = _prepare(x, fmt, axis, options)
  return _quantize(x, key, fmt=f, axis=axis)


def _qarray_layout(q: QArray) -> Layout:
  return layout(q.shape, q.axis, q.fmt)


@functools.partial(jax.jit, static_argnames=("dtype",))
def _dequantize(q: QArray, dtype: Any) -> Array:
  lay = _qarray_layout(q)
  decode = functools.partial(_CODECS[q.fmt.name].decode, tensor_scale=q.tensor_scale,
                             fmt=q.fmt)
  nb = lay.padded // lay.block
  if q.fmt.element_bits == 4 and lay.block % 8 == 0:
    # Each block as uint32 words of 8 codes (little-endian: code 2i is the low nibble
    # of byte i), split by per-nibble shifts, and decoded in [..., nb, words, 8]: one
    # loop XLA:CPU vectorises. Interleaving two decoded halves instead compiles to
    # scalar code (~1.3x slower); unpacking first decodes on a strided index.
    packed = q.codes.reshape(*q.codes.shape[:-1], nb, lay.block // 8, 4)
    words = jax.lax.bitcast_convert_type(packed, jnp.uint32)[..., None]
    codes = ((words >> jnp.arange(0, 32, 4, dtype=jnp.uint32)) & 0xF).astype(jnp.uint8)
    vals = decode(codes, q.scales[..., None]).reshape(*codes.shape[:-2], lay.block)
  elif q.fmt.element_bits == 4:
    packed = q.codes.reshape(*q.codes.shape[:-1], nb, lay.block // 2)
    vals = jnp.stack([decode(packed & jnp.uint8(0xF), q.scales),
                      decode(packed >> 4, q.scales)], axis=-1)
    vals = vals.reshape(*vals.shape[:-2], lay.block)
  else:
    vals = decode(q.codes.reshape(*q.codes.shape[:-1], nb, lay.block), q.scales)
  return from_blocks(vals, lay).astype(dtype)


def dequantize(q: QArray, dtype: Any = jnp.float32) -> Array:
  """Decodes a `QArray` back to an array of its original shape.

  Element value = element code value * block scale * tensor scale, in float32
  (a MixFP4/NVFP4 element has the value of its (flag, nibble) pair in the 32-entry
  E2M2 table `MIX_LUT`), then cast to `dtype`.

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


@functools.partial(jax.jit, static_argnames=("fmt", "axis"))
def _fake_quant_values(x: Array, key: Array | None, *, fmt: Format, axis: int) -> Array:
  """dequantize(quantize(x)) in x.dtype; NVFP4/MixFP4 take a shortcut.

  Their block functions return x_hat = (element value * block scale) * S_dec,
  the same float32 products `dequantize` forms, so skipping codes, packing and
  the table lookup gives identical values with a smaller program.
  """
  codec = _CODECS[fmt.name]
  if not hasattr(codec, "fake"):
    return _dequantize(_quantize(x, key, fmt=fmt, axis=axis), x.dtype)
  lay = layout(x.shape, axis, fmt)
  xb = to_blocks(x, lay)
  xh = _by_blocks(functools.partial(codec.fake, fmt=fmt, key=key), xb, _nan_values)
  return from_blocks(xh, lay).astype(x.dtype)


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
  x, f = _prepare(x, fmt, axis, options)
  xq = _fake_quant_values(x, key, fmt=f, axis=axis)
  return _ste(x, jax.lax.stop_gradient(xq))


def block_view(x: Array, fmt: "str | Format", *, axis: int = -1, **options: Any) -> Array:
  """x in blocked layout [..., nb, bs] (axis moved last, zero-padded if allowed)."""
  x, f = _prepare(x, fmt, axis, options)
  return to_blocks(x, layout(x.shape, axis, f), x.dtype)


def sqnr_db(x: Array, xhat: Array) -> Array:
  """Signal-to-quantization-noise ratio 10*log10(sum x^2 / sum (x-xhat)^2) in dB."""
  x = jnp.asarray(x, jnp.float32)
  err = jnp.sum((x - xhat) ** 2)
  return 10.0 * jnp.log10(jnp.sum(x * x) / jnp.maximum(err, 1e-30))
