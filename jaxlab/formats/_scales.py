"""Scale arithmetic shared by the codecs: E4M3 block scales, tensor scales, guards.

Tiny tensors keep their relative precision: the FP32 tensor encode scale is
capped at 2**126 (so its reciprocal, the decode scale, is a normal float32)
and float32 block scales are floored at 2**-126 (so they are never flushed to
zero as float32 subnormals are on CPU). The floor of every format is thus the
smallest normal float32, 2**-126 ~ 1.18e-38, below which XLA on CPU flushes
inputs and products to zero anyway. Both clamps only act on tensors whose
amax is below ~1e-35; every larger tensor gets the same bits as the uncapped
recipe.
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import Array

from jaxlab.formats import _grids
from jaxlab.formats._grids import E4M3

F32_MAX = float(np.finfo(np.float32).max)
F32_TINY = float(np.finfo(np.float32).tiny)   # 2**-126, the smallest normal float32
_S_ENC_MAX = float(2.0 ** 126)


def recip(c: float) -> float:
  """float32(1/c): the spec's "amax / c" is evaluated as amax * fl32(1/c).

  A jaxlab interpretation of the recipe's rounding order (not the paper's).
  XLA rewrites division by a constant into multiplication by its reciprocal
  (which is not always the correctly rounded quotient), so the recipe is
  defined that way explicitly: identical under XLA, Pallas and NumPy.
  """
  return float(np.float32(1.0) / np.float32(c))


def finite(x: Array) -> Array:
  """isfinite as one compare (NaN compares false), friendly to kernel lowerings."""
  return jnp.abs(x) <= F32_MAX


def finite_abs(xb: Array) -> Array:
  """|x| with NaN and ±Inf replaced by 0 (amaxes are taken over finite values)."""
  a = jnp.abs(xb)
  return jnp.where(a <= F32_MAX, a, 0.0)


def rne_input(xb: Array, all_finite: bool) -> Array:
  """x as the round-to-nearest paths read it: NaN as 0, ±Inf kept (the finite roundings
  saturate it). That is `round_float`'s rule, so blocks with non-finite elements need no
  other path; `all_finite=True` promises there are none.

  Apply it to the very values a fused loop rounds (inside `pack_pairs`' `code_of`, not
  to x before the pairs are split): XLA:CPU then keeps the loop vectorised, where a
  select on x ahead of the split compiled to scalar code (NVFP4 quantize of a tensor
  with one Inf ~10x slower than of a finite one).
  """
  return xb if all_finite else jnp.where(jnp.isnan(xb), 0.0, xb)


def pairwise(items: list, op) -> Array:
  """Reduces `items` with `op` pairwise (item j with item j + n // 2, an odd last one
  carried to the next round), as elementwise ops XLA fuses: the blocks' maxima."""
  while len(items) > 1:
    h = len(items) // 2
    items = [op(items[j], items[j + h]) for j in range(h)] + items[2 * h:]
  return items[0]


# The XLA paths reduce blocks up to this size column by column: elementwise ops on
# [..., nb] arrays, which XLA:CPU fuses with their producers into one loop across
# blocks and splits over threads. A reduction over the short minor axis instead writes
# its input to memory first (a temporary as large as x) and runs ~1.5x slower on 2
# threads. (Kernel bodies keep reductions: Pallas lowers no such slices.)
MAX_COLUMN_BLOCK = 32


def block_amax(xb: Array) -> Array:
  """Finite amax of each block [..., nb, bs] -> [..., nb] (0 for empty inputs).

  A reduction over the block axis (kernel bodies call it too); the XLA quantize path
  takes the same maxima column by column (`_api._block_amaxes`).
  """
  return jnp.max(finite_abs(xb), axis=-1, initial=0.0)


def tensor_amax(amax_b: Array, amax_t: Array | None = None) -> Array:
  """The tensor amax from block amaxes (0 for a tensor with no elements).

  `amax_t`: this maximum, where the caller has already taken it (`quantize` does, to
  check that the tensor is finite); it is returned as is, saving a second reduction.
  """
  return jnp.max(amax_b, initial=0.0) if amax_t is None else amax_t


def e4m3_scale(v: Array) -> tuple[Array, Array]:
  """Rounds non-negative float32 `v` to E4M3 (RNE, saturating at 448).

  Returns (uint8 bytes, float32 values).
  """
  return _grids.round_float(v, E4M3)


def e4m3_scale_finite(v: Array) -> tuple[Array, Array]:
  """`e4m3_scale` for finite `v` >= +0, in a third of the operations (the round-to-nearest
  XLA paths: their block amaxes and tensor scale are finite)."""
  return _grids.round_e4m3_nonneg_finite(v)


# E4M3 scale byte (its low 7 bits) -> the scale and fl32(1 / scale) (0 for the zero code).
# The XLA quantize paths read a block's scale from its byte in these tables: one load
# per block, where XLA would otherwise recompute the E4M3 rounding for every element of
# the block it is fused into. The inverses equal `1.0 / s` bit for bit, and XLA computes
# `safe_div`'s division by a broadcast scale as a product with that reciprocal.
_E4M3_VALUES = np.arange(128, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
with np.errstate(divide="ignore", invalid="ignore"):
  _E4M3_INVERSES = np.where(_E4M3_VALUES > 0, np.float32(1) / _E4M3_VALUES, 0).astype(np.float32)


def _by_scale_byte(table: np.ndarray, sb: Array) -> Array:
  # Unsigned, in-bounds indices: a plain load, without per-element index checks.
  code = (sb & jnp.uint8(0x7F)).astype(jnp.uint32)
  return jnp.asarray(table).at[code].get(mode="promise_in_bounds")


def e4m3_byte_value(sb: Array) -> Array:
  """The E4M3 scale of each scale byte (bit 7, MixFP4's flag, ignored)."""
  return _by_scale_byte(_E4M3_VALUES, sb)


def e4m3_byte_inverse(sb: Array) -> Array:
  """fl32(1 / scale) of each scale byte, 0 for a zero scale (bit 7 ignored)."""
  return _by_scale_byte(_E4M3_INVERSES, sb)


def decode_e4m3_scales(sb: Array) -> Array:
  """`e4m3_byte_value` for stored scale bytes (dequantize), decoded on the float32 bits.

  The values of `_grids.decode_float(sb & 0x7F, E4M3)` in fewer operations (behind the
  same barrier, that generic decode made dequantize 4-7% slower). A normal code
  (e, m) = (b >> 3, b & 7), e >= 1, is 2**(e - 7) * (1 + m/8): float32 exponent field
  e + 120 and mantissa m << 20, i.e. the bits (b << 20) + (120 << 23); a subnormal code
  is m * 2**-9; 0x7F is NaN. The barrier gives the decode a vectorised loop of its own
  over the scale bytes, not fused into the element loop (where it would run for every
  element): dequantize 3-7% faster than with the table (paired rounds), whose gather
  XLA:CPU runs as a scalar loop. The quantize paths keep the table: with this form,
  NVFP4 quantize ran ~1.5x slower.
  """
  b = (sb & jnp.uint8(0x7F)).astype(jnp.int32)
  normal = jax.lax.bitcast_convert_type((b << 20) + (120 << 23), jnp.float32)
  v = jnp.where(b >= 8, normal, b.astype(jnp.float32) * np.float32(2.0 ** -9))
  return jax.lax.optimization_barrier(jnp.where(b == 0x7F, jnp.nan, v))


def tensor_encode_scale(amax_t: Array, qmax: float) -> Array:
  """S_enc = 448 * qmax / amax(T), capped at 2**126; 1 when amax(T) = 0.

  The cap keeps S_dec = 1/S_enc a normal float32 (a subnormal one would be
  flushed to zero on CPU and decode a tiny tensor to all zeros); it only acts
  when amax(T) < 448 * qmax * 2**-126 (~3e-35 for NVFP4).
  """
  s = jnp.minimum(jnp.float32(448.0 * qmax) / jnp.where(amax_t > 0, amax_t, 1.0), _S_ENC_MAX)
  return jnp.where(amax_t > 0, s, 1.0).astype(jnp.float32)


def f32_scale(amax: Array, qmax: float) -> Array:
  """A float32 scale amax * fl32(1/qmax), floored at 2**-126 where amax > 0.

  The floor only acts when amax < qmax * 2**-126; such blocks then use part of
  the element grid instead of decoding to zeros.
  """
  s = amax * recip(qmax)
  return jnp.where((amax > 0) & (s < F32_TINY), F32_TINY, s)


def safe_div(num: Array, den: Array) -> Array:
  """num / den, 0 where den == 0 (scales are never divided by zero)."""
  return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 0.0)


def mul_inv(num: Array, den: Array) -> Array:
  """num * fl32(1/den) (0 where den == 0): a reciprocal, then a multiply.

  Used for the fp8/int scales so that XLA (which may rewrite a division by a
  broadcast into this form) and NumPy compute the same bits.
  """
  inv = jnp.where(den > 0, 1.0 / jnp.where(den > 0, den, 1.0), 0.0)
  return num * inv
