"""MixFP4: per 16-block, E2M1 (NVFP4) or E1M2 (INT4 k/4), whichever errs less.

Both candidates use the real rounded E4M3 scales (s_F from amax/6, s_I from
amax/7) under the NVFP4 tensor scale; E1M2 wins iff its block error
sum |x - x_hat|**p is strictly smaller and its scale byte is nonzero (ties ->
E2M1). The E1M2 block stores the INT4 code k (value k/4) with scale s_I, i.e.
element value k * s_I * S_dec; its scale byte gets bit 7 (flag polarity bit
7 = 1 -> E1M2 and this byte layout are jaxlab interpretations; the paper's
are unknown). Decoding is NVFP4's (`_nvfp4.decode`): one (flag, nibble) table.
"""

import functools

import jax
import jax.numpy as jnp
from jax import Array

from jaxlab.formats import _grids
from jaxlab.formats._format import Format
from jaxlab.formats._nvfp4 import decode, nvfp4_blocks, tensor_scales
from jaxlab.formats._scales import block_amax, e4m3_scale, finite, pairwise, recip, safe_div

__all__ = ["decode", "encode", "fake", "mixfp4_blocks"]


def tree_sum(v: Array) -> Array:
  """Sum over the last axis as a pairwise tree of slice additions.

  Elementwise adds of static slices, so XLA fuses the whole block error into
  one loop instead of materialising both candidates for a separate reduction
  (MixFP4 quantize ~10x faster on CPU); the order is fixed by this code.
  """
  while v.shape[-1] > 1:
    n, h = v.shape[-1], v.shape[-1] // 2
    s = v[..., :h] + v[..., h:2 * h]
    v = jnp.concatenate([s, v[..., 2 * h:]], axis=-1) if n % 2 else s
  return v[..., 0]


def _block_err(x: Array, xhat: Array, p: float, block_sum) -> Array:
  d = jnp.abs(x - xhat)
  return block_sum(d * d if p == 2.0 else d ** p)


def _candidates(xb: Array, s_enc: Array, s_dec: Array, key: Array | None, amax_b: Array):
  """Both candidates per element: (codes_f, sb_f, xh_f, codes_i, sb_i, xh_i)."""
  kf = ki = None
  if key is not None:
    kf, ki = jax.random.split(key)
  codes_f, sb_f, xh_f = nvfp4_blocks(xb, s_enc, s_dec, kf, amax_b=amax_b)
  sb_i, sv_i = e4m3_scale((amax_b * recip(7.0)) * s_enc)
  y = safe_div(xb * s_enc, sv_i[..., None])
  # E1M2 holds k/4 for k = 0..7 with magnitude bits equal to k, so it is an
  # integer rounding of y (no exponent search): the values of
  # `round_float(y / 4, E1M2)` times 4, and its codes.
  k = _grids.round_int(y, 7, key=ki)
  neg = jnp.signbit(k)
  codes_i = (neg.astype(jnp.uint8) << 3) | jnp.abs(k).astype(jnp.uint8)
  xh_i = (k * sv_i[..., None]) * s_dec
  return codes_f, sb_f, xh_f, codes_i, sb_i, xh_i


def _select_e1m2(xb, sb_i, xh_f, xh_i, select_p, block_sum) -> Array:
  """Per block: True where E1M2 errs strictly less and its scale byte is nonzero.

  Only finite elements count: a saturated +-Inf would add ~amax^2 to both errors and leave
  the choice to float32 rounding (jit and eager could then disagree).
  """
  fin = finite(xb)
  xf = jnp.where(fin, xb, 0.0)
  err_i = _block_err(xf, jnp.where(fin, xh_i, 0.0), select_p, block_sum)
  err_f = _block_err(xf, jnp.where(fin, xh_f, 0.0), select_p, block_sum)
  return (err_i < err_f) & (sb_i > 0)


def mixfp4_blocks(xb: Array, s_enc: Array, s_dec: Array, key: Array | None = None,
                  select_p: float = 2.0, *, amax_b: Array | None = None,
                  block_sum=None) -> tuple[Array, Array, Array]:
  """MixFP4 on blocked input [..., nb, bs]: (nibble codes, scale bytes, x_hat).

  Plain jnp: the Pallas quantize kernel calls it on its tile. `block_sum`
  sums the block errors over the last axis (default `jnp.sum`; `quantize`
  uses `tree_sum`). Both are float32 sums of 16 terms: they can only disagree
  on blocks whose two errors tie to within float32 rounding.
  """
  if block_sum is None:
    block_sum = functools.partial(jnp.sum, axis=-1)
  if amax_b is None:
    amax_b = block_amax(xb)
  codes_f, sb_f, xh_f, codes_i, sb_i, xh_i = _candidates(xb, s_enc, s_dec, key, amax_b)
  use_i = _select_e1m2(xb, sb_i, xh_f, xh_i, select_p, block_sum)
  codes = jnp.where(use_i[..., None], codes_i, codes_f)
  sb = jnp.where(use_i, sb_i | jnp.uint8(0x80), sb_f)
  return codes, sb, jnp.where(use_i[..., None], xh_i, xh_f)


def _staged(xb: Array, amax_b: Array, fmt: Format, key: Array | None):
  """`mixfp4_blocks` in two passes: flagged scale bytes, then codes and x_hat.

  Pass 1 computes both candidates' block errors and keeps one byte per block;
  pass 2 recomputes the elementwise candidates and keeps the flagged one. The
  `lax.cond` between them (its predicate is always true: S_enc > 0) stops XLA
  from fusing pass 1's block sums into every element of pass 2, and neither
  candidate tensor is ever written to memory.
  """
  s_enc, s_dec = tensor_scales(amax_b)

  def scale_bytes():
    _, sb_f, xh_f, _, sb_i, xh_i = _candidates(xb, s_enc, s_dec, key, amax_b)
    use_i = _select_e1m2(xb, sb_i, xh_f, xh_i, fmt.select_p, tree_sum)
    return jnp.where(use_i, sb_i | jnp.uint8(0x80), sb_f)

  sb = jax.lax.cond(s_enc > 0, scale_bytes, lambda: jnp.zeros(amax_b.shape, jnp.uint8))
  codes_f, _, xh_f, codes_i, _, xh_i = _candidates(xb, s_enc, s_dec, key, amax_b)
  use_i = (sb >> 7)[..., None] == 1
  return jnp.where(use_i, codes_i, codes_f), sb, jnp.where(use_i, xh_i, xh_f), s_dec


# Blocks up to this size are summed column by column in `_finite_errors`; larger ones
# (a user's block_size option) keep [..., nb, bs] tensors and `tree_sum`.
_MAX_COLUMN_BLOCK = 32


def _finite_errors(xb: Array, s_enc: Array, s_dec: Array, sv_f: Array, sv_i: Array, p: float
                   ) -> tuple[Array, Array]:
  """Both candidates' block errors (err_i, err_f) [..., nb] for finite blocks, round-to-nearest.

  The same float32 operations in the same `tree_sum` order as `_select_e1m2` (whose
  non-finite masks are no-ops here), written per block column `xb[..., j]`: every
  operation is elementwise on [..., nb] arrays and each column feeds one leaf of the
  sum, so XLA:CPU fuses candidates, errors and both sums into one loop across blocks
  and writes neither candidate nor error to memory (over a [..., nb, bs] error tensor
  it materialises both errors before summing: several times slower).
  """
  def err(x, xh):
    d = x - xh
    # d * d == |d| * |d| exactly (the sign does not reach a product).
    return d * d if p == 2.0 else jnp.abs(d) ** p

  # Where a scale is 0, x_hat is 0 whatever the element rounds to, so the division
  # may use 1 there (one select per block instead of `safe_div`'s per element).
  den_f, den_i = jnp.where(sv_f > 0, sv_f, 1.0), jnp.where(sv_i > 0, sv_i, 1.0)

  def candidates(x, svf, svi, denf, deni):
    # Both candidates keep x's sign, so x - x_hat = sign(x) * (|x| - |x_hat|) exactly
    # (and the squares agree): the errors are computed on |x|, with no signs to carry.
    a = jnp.abs(x)
    xs = a * s_enc
    _, vals_f = _grids.round_e2m1_finite(xs / denf, nonneg=True)
    k = _grids.round_int_finite(xs / deni, 7, nonneg=True)
    return err(a, (k * svi) * s_dec), err(a, (vals_f * svf) * s_dec)

  bs = xb.shape[-1]
  if bs > _MAX_COLUMN_BLOCK:
    e_i, e_f = candidates(xb, *(v[..., None] for v in (sv_f, sv_i, den_f, den_i)))
    return tree_sum(e_i), tree_sum(e_f)
  cols = [candidates(xb[..., j], sv_f, sv_i, den_f, den_i) for j in range(bs)]
  return pairwise([c[0] for c in cols], jnp.add), pairwise([c[1] for c in cols], jnp.add)


def _finite_staged(xb: Array, amax_b: Array, fmt: Format):
  """`_staged` for finite blocks and round-to-nearest: the same bits, fewer operations.

  Pass 1 (`_finite_errors`) keeps one flagged scale byte per block; pass 2 rounds
  each element once, to the chosen candidate's grid and scale.
  """
  s_enc, s_dec = tensor_scales(amax_b)
  sb_f, sv_f = e4m3_scale((amax_b * recip(6.0)) * s_enc)
  sb_i, sv_i = e4m3_scale((amax_b * recip(7.0)) * s_enc)

  def scale_bytes():
    err_i, err_f = _finite_errors(xb, s_enc, s_dec, sv_f, sv_i, fmt.select_p)
    use_i = (err_i < err_f) & (sb_i > 0)
    return jnp.where(use_i, sb_i | jnp.uint8(0x80), sb_f)

  # As in `_staged`, the always-true `lax.cond` keeps pass 1 out of pass 2's loop.
  sb = jax.lax.cond(s_enc > 0, scale_bytes, lambda: jnp.zeros(amax_b.shape, jnp.uint8))
  use_i = (sb >> 7) == 1
  sv = jnp.where(use_i, sv_i, sv_f)[..., None]
  y = safe_div(xb * s_enc, sv)
  codes_f, vals_f = _grids.round_e2m1_finite(y)
  k = _grids.round_int_finite(y, 7)
  codes_i = (jnp.signbit(k).astype(jnp.uint8) << 3) | jnp.abs(k).astype(jnp.uint8)
  u = use_i[..., None]
  xh = (jnp.where(u, k, vals_f) * sv) * s_dec
  return jnp.where(u, codes_i, codes_f), sb, xh, s_dec


def _quantized(xb: Array, amax_b: Array, fmt: Format, key: Array | None, all_finite: bool):
  if all_finite and key is None:
    return _finite_staged(xb, amax_b, fmt)
  return _staged(xb, amax_b, fmt, key)


def encode(xb: Array, amax_b: Array, fmt: Format, key: Array | None, all_finite: bool = False):
  """Blocks -> (element codes [..., nb, bs] uint8, flagged scale bytes, S_dec).

  `all_finite=True` promises that every element of `xb` is finite (a faster path).
  """
  codes, sb, _, s_dec = _quantized(xb, amax_b, fmt, key, all_finite)
  return codes, sb, s_dec


def fake(xb: Array, amax_b: Array, fmt: Format, key: Array | None, all_finite: bool = False
         ) -> Array:
  """x_hat in blocks (the products `decode` forms, without codes or packing)."""
  return _quantized(xb, amax_b, fmt, key, all_finite)[2]
