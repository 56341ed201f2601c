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

import jax.numpy as jnp
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


def pairwise(items: list, op) -> Array:
  """Reduces `items` with `op` in `_mixfp4.tree_sum`'s order (item j with item j + n // 2,
  an odd last one carried to the next round): a fixed order, as elementwise ops XLA fuses."""
  while len(items) > 1:
    h = len(items) // 2
    items = [op(items[j], items[j + h]) for j in range(h)] + items[2 * h:]
  return items[0]


def block_amax(xb: Array) -> Array:
  """Finite amax of each block [..., nb, bs] -> [..., nb] (0 for empty inputs)."""
  return jnp.max(finite_abs(xb), axis=-1, initial=0.0)


def tensor_amax(amax_b: Array) -> Array:
  """The tensor amax from block amaxes (0 for a tensor with no elements)."""
  return jnp.max(amax_b, initial=0.0)


def e4m3_scale(v: Array) -> tuple[Array, Array]:
  """Rounds non-negative float32 `v` to E4M3 (RNE, saturating at 448).

  Returns (uint8 bytes, float32 values).
  """
  return _grids.round_float(v, E4M3)


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
