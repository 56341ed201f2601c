"""MixFP4: per 16-block, E2M1 (NVFP4) or E1M2 (INT4 k/4), whichever errs less.

Both candidates use the real rounded E4M3 scales (s_F from amax/6, s_I from
amax/7) under the NVFP4 tensor scale; E1M2 wins iff its block error
sum |x - x_hat|**p is strictly smaller and its scale byte is nonzero (ties ->
E2M1). The errors are summed on x * S_enc against each candidate's values
times its block scale (exact products), i.e. in units of S_dec: the common
factor S_enc**p leaves the choice as on x up to float32 rounding of near-ties
(a jaxlab interpretation, as is every float32 rounding order here). The E1M2
block stores the INT4 code k (value k/4) with scale s_I, i.e. element value
k * s_I * S_dec; its scale byte gets bit 7 (flag polarity bit 7 = 1 -> E1M2
and this byte layout are jaxlab interpretations; the paper's are unknown).
Decoding is NVFP4's (`_nvfp4.decode`): one (flag, nibble) table.

Speed (XLA:CPU): quantize reads x three times, because S_enc needs the tensor amax
before any block can choose, and the codes need each block's choice (see
`_rne_encode`). The choice pass is compute-bound: XLA:CPU loads a block's 16 strided
columns as scalar loads and vector inserts. On a 2-core machine, `launch.bench
--only=fp4` measures quantize at 0.34-0.48 of a same-size copy's bandwidth (copy time
/ quantize time), NVFP4's at 0.41-0.73.
"""

import functools

import jax
import jax.numpy as jnp
from jax import Array

from jaxlab.formats import _grids
from jaxlab.formats._format import Format
from jaxlab.formats._nvfp4 import decode, e2m1_candidate, nan_blocks, scaled, tensor_scales
from jaxlab.formats._packing import pack_nibbles, pack_pairs
from jaxlab.formats._scales import (
    MAX_COLUMN_BLOCK,
    block_amax,
    e4m3_byte_inverse,
    e4m3_byte_value,
    e4m3_scale,
    e4m3_scale_finite,
    finite,
    finite_abs,
    recip,
    rne_input,
    safe_div,
)

__all__ = ["decode", "encode", "fake", "mixfp4_blocks"]


def running_sum(items: list) -> Array:
  """items[0] + items[1] + ... left to right: the order of a block's error sum."""
  total = items[0]
  for v in items[1:]:
    total = total + v
  return total


def ordered_sum(v: Array) -> Array:
  """Sum over the last axis in a fixed order, as elementwise additions.

  Elementwise adds, so XLA fuses the whole block error into one loop instead of
  materialising both candidates for a separate reduction (MixFP4 quantize ~10x
  faster on CPU); the order is fixed by this code. Blocks up to `MAX_COLUMN_BLOCK`
  add their columns left to right (`running_sum`: no [..., nb, bs] temporary, and one
  partial sum live per block: XLA:CPU spilled the registers of a pairwise tree's
  partial sums, ~12% of pass 1's time), larger ones halves of the axis, pairwise.
  """
  if v.shape[-1] <= MAX_COLUMN_BLOCK:
    return running_sum([v[..., j] for j in range(v.shape[-1])])
  while v.shape[-1] > 1:
    n, h = v.shape[-1], v.shape[-1] // 2
    s = v[..., :h] + v[..., h:2 * h]
    v = jnp.concatenate([s, v[..., 2 * h:]], axis=-1) if n % 2 else s
  return v[..., 0]


def _block_err(xs: Array, r: Array, p: float, block_sum) -> Array:
  d = jnp.abs(xs - r)
  return block_sum(d * d if p == 2.0 else d ** p)


def _candidates(xs: Array, s_enc: Array, key: Array | None, amax_b: Array):
  """Both candidates of xs = x * S_enc: (codes_f, sb_f, r_f, codes_i, sb_i, r_i).

  r = element value * s_b = x_hat / S_dec, an exact product (an E4M3 significand of
  4 bits times an element of at most 3), so x_hat = r * S_dec as `decode` forms it.
  """
  kf = ki = None
  if key is not None:
    kf, ki = jax.random.split(key)
  codes_f, sb_f, sv_f, vals_f = e2m1_candidate(xs, amax_b, s_enc, kf)
  sb_i, sv_i = e4m3_scale((amax_b * recip(7.0)) * s_enc)
  y = safe_div(xs, sv_i[..., None])
  # E1M2 holds k/4 for k = 0..7 with magnitude bits equal to k, so it is an
  # integer rounding of y (no exponent search): the values of
  # `round_float(y / 4, E1M2)` times 4, and its codes.
  k = _grids.round_int(y, 7, key=ki)
  neg = jnp.signbit(k)
  codes_i = (neg.astype(jnp.uint8) << 3) | jnp.abs(k).astype(jnp.uint8)
  return codes_f, sb_f, vals_f * sv_f[..., None], codes_i, sb_i, k * sv_i[..., None]


def _select_e1m2(xs, sb_i, r_f, r_i, select_p, block_sum) -> Array:
  """Per block: True where E1M2 errs strictly less on xs = x * S_enc and its scale byte is
  nonzero.

  Only finite elements count: a saturated +-Inf would add ~amax^2 to both errors and leave
  the choice to float32 rounding (jit and eager could then disagree). (xs is finite
  exactly where x is: |x| <= amax(T) keeps |xs| <= 2688.)
  """
  fin = finite(xs)
  xf = jnp.where(fin, xs, 0.0)
  err_i = _block_err(xf, jnp.where(fin, r_i, 0.0), select_p, block_sum)
  err_f = _block_err(xf, jnp.where(fin, r_f, 0.0), select_p, block_sum)
  return (err_i < err_f) & (sb_i > 0)


def mixfp4_blocks(xb: Array, s_enc: Array, s_dec: Array, key: Array | None = None,
                  select_p: float = 2.0, *, amax_b: Array | None = None,
                  block_sum=None) -> tuple[Array, Array, Array]:
  """MixFP4 on blocked input [..., nb, bs]: (nibble codes, scale bytes, x_hat).

  Plain jnp: the Pallas quantize kernel calls it on its tile. `block_sum`
  sums the block errors over the last axis (default `jnp.sum`; `quantize`
  uses `ordered_sum`). Both are float32 sums of 16 terms: they can only disagree
  on blocks whose two errors tie to within float32 rounding. A block holding a NaN
  or an Inf gets scale byte 0x7F (NaN, flag clear) and NaN x_hat, as in NVFP4.
  """
  if block_sum is None:
    block_sum = functools.partial(jnp.sum, axis=-1)
  if amax_b is None:
    amax_b = block_amax(xb)
  xs = xb * s_enc
  codes_f, sb_f, r_f, codes_i, sb_i, r_i = _candidates(xs, s_enc, key, amax_b)
  use_i = _select_e1m2(xs, sb_i, r_f, r_i, select_p, block_sum)
  codes = jnp.where(use_i[..., None], codes_i, codes_f)
  sb = jnp.where(use_i, sb_i | jnp.uint8(0x80), sb_f)
  return (codes, *nan_blocks(xb, sb, jnp.where(use_i[..., None], r_i, r_f) * s_dec))


def _staged(xb: Array, amax_b: Array, fmt: Format, key: Array | None,
            amax_t: Array | None = None):
  """`mixfp4_blocks` in two passes: flagged scale bytes, then codes and x_hat.

  Pass 1 computes both candidates' block errors and keeps one byte per block;
  pass 2 recomputes the elementwise candidates and keeps the flagged one. The
  `lax.cond` between them (its predicate is always true: S_enc > 0) stops XLA
  from fusing pass 1's block sums into every element of pass 2, and neither
  candidate tensor is ever written to memory.
  """
  s_enc, s_dec = tensor_scales(amax_b, amax_t)
  xs = xb * s_enc

  def scale_bytes():
    _, sb_f, r_f, _, sb_i, r_i = _candidates(xs, s_enc, key, amax_b)
    use_i = _select_e1m2(xs, sb_i, r_f, r_i, fmt.select_p, ordered_sum)
    return jnp.where(use_i, sb_i | jnp.uint8(0x80), sb_f)

  sb = jax.lax.cond(s_enc > 0, scale_bytes, lambda: jnp.zeros(amax_b.shape, jnp.uint8))
  codes_f, _, r_f, codes_i, _, r_i = _candidates(xs, s_enc, key, amax_b)
  use_i = (sb >> 7)[..., None] == 1
  return jnp.where(use_i, codes_i, codes_f), sb, jnp.where(use_i, r_i, r_f) * s_dec, s_dec


def _rne_errors(xb: Array, s_enc: Array, sv_f: Array, sv_i: Array, p: float,
                all_finite: bool = True) -> tuple[Array, Array]:
  """Both candidates' block errors (err_i, err_f) [..., nb] with round-to-nearest.

  The same float32 operations in the same `ordered_sum` order as `_select_e1m2`,
  written per block column `xb[..., j]`: every operation is elementwise on [..., nb]
  arrays and each column feeds one leaf of the sum, so XLA:CPU fuses candidates,
  errors and both sums into one loop across blocks and writes neither candidate nor
  error to memory (over a [..., nb, bs] error tensor it materialises both errors
  before summing: several times slower). Non-finite elements count as 0, as in
  `_select_e1m2` (`all_finite=True` promises there are none).
  """
  def err(xs, r):
    d = xs - r
    # d * d == |d| * |d| exactly (the sign does not reach a product).
    return d * d if p == 2.0 else jnp.abs(d) ** p

  # x * S_enc / s_b as the reference forms it: XLA computes `safe_div`'s division by
  # a broadcast scale as a product with the scale's reciprocal (`scaled`), one
  # division per block instead of two per element. Where a scale is 0, x_hat is 0
  # whatever the element rounds to, so the reciprocal may be 1 there.
  inv_f, inv_i = (1.0 / jnp.where(sv > 0, sv, 1.0) for sv in (sv_f, sv_i))

  def candidates(x, svf, svi, invf, invi):
    # Both candidates keep x's sign, so xs - r = sign(x) * (|xs| - |r|) exactly (and
    # the squares agree): the errors are computed on |x|, with no signs to carry.
    xs = (jnp.abs(x) if all_finite else finite_abs(x)) * s_enc
    vals_f = _grids.round_e2m1_values_nonneg(xs * invf)
    k = _grids.round_int_finite(xs * invi, 7, nonneg=True)
    return err(xs, k * svi), err(xs, vals_f * svf)

  bs = xb.shape[-1]
  if bs > MAX_COLUMN_BLOCK:
    e_i, e_f = candidates(xb, *(v[..., None] for v in (sv_f, sv_i, inv_f, inv_i)))
    return ordered_sum(e_i), ordered_sum(e_f)
  cols = [candidates(xb[..., j], sv_f, sv_i, inv_f, inv_i) for j in range(bs)]
  return running_sum([c[0] for c in cols]), running_sum([c[1] for c in cols])


def _rne_scale_bytes(xb: Array, amax_b: Array, fmt: Format, all_finite: bool,
                     amax_t: Array | None) -> tuple[Array, Array, Array]:
  """Pass 1 of the round-to-nearest path: (flagged scale bytes, S_enc, S_dec).

  Non-finite elements do not count in the block errors (as in `_select_e1m2`): they
  are read as 0.
  """
  s_enc, s_dec = tensor_scales(amax_b, amax_t)

  def scale_bytes():
    # The block scales are computed here, inside pass 1's loop (outside the `cond`
    # XLA would compute each in a small loop of its own and pass the arrays in).
    sb_f, sv_f = e4m3_scale_finite((amax_b * recip(6.0)) * s_enc)
    sb_i, sv_i = e4m3_scale_finite((amax_b * recip(7.0)) * s_enc)
    err_i, err_f = _rne_errors(xb, s_enc, sv_f, sv_i, fmt.select_p, all_finite)
    use_i = (err_i < err_f) & (sb_i > 0)
    return jnp.where(use_i, sb_i | jnp.uint8(0x80), sb_f)

  # As in `_staged`, the always-true `lax.cond` keeps pass 1 out of pass 2's loop.
  sb = jax.lax.cond(s_enc > 0, scale_bytes, lambda: jnp.zeros(amax_b.shape, jnp.uint8))
  return sb, s_enc, s_dec


def _inverses_and_flags(sb: Array) -> tuple[Array, Array]:
  """Scale bytes [..., nb] -> fl32(1 / s_b) (0 for a zero scale) and E1M2 flags, [..., nb, 1]."""
  return e4m3_byte_inverse(sb)[..., None], ((sb >> 7) == 1)[..., None]


def _rne_encode(xb: Array, amax_b: Array, fmt: Format, all_finite: bool,
                amax_t: Array | None) -> tuple[Array, Array, Array]:
  """`encode` with round-to-nearest: pass 1, then pass 2 from x straight to bytes.

  Two passes over x, not one: a block's 16 codes (64 bits) and its scale byte would be
  two outputs of one loop, and XLA:CPU does not fuse sibling outputs (each would
  recompute the block errors); a variadic `lax.reduce` over the block axis that forms
  both in one loop gives the same bits but compiles to scalar code (~10x slower).
  """
  sb, s_enc, s_dec = _rne_scale_bytes(xb, amax_b, fmt, all_finite, amax_t)
  inv, e1m2 = _inverses_and_flags(sb)

  def code(v):
    return _grids.e2m1_or_int_codes(scaled(rne_input(v, all_finite), s_enc, inv), e1m2)

  return pack_pairs(code, xb), sb, s_dec


def _rne_fake(xb: Array, amax_b: Array, fmt: Format, all_finite: bool,
              amax_t: Array | None) -> Array:
  """`fake` with round-to-nearest (x_hat as `_staged` forms it)."""
  sb, s_enc, s_dec = _rne_scale_bytes(xb, amax_b, fmt, all_finite, amax_t)
  inv, e1m2 = _inverses_and_flags(sb)
  y = scaled(rne_input(xb, all_finite), s_enc, inv)
  vals = _grids.round_e2m1_or_int_finite(y, e1m2)[1]
  return (vals * e4m3_byte_value(sb)[..., None]) * s_dec


def encode(xb: Array, amax_b: Array, fmt: Format, key: Array | None, all_finite: bool = False,
           amax_t: Array | None = None):
  """Blocks -> (packed codes [..., nb, bs // 2] uint8, flagged scale bytes, S_dec).

  Round-to-nearest runs `_rne_encode` (`all_finite=True` promises finite `xb` and
  skips its masks), stochastic rounding `_staged`. Both give `mixfp4_blocks`' bits
  (up to float32 near-ties of a block's two errors). `amax_t` is max(amax_b) where
  the caller has it (`tensor_amax`).
  """
  if key is None:
    return _rne_encode(xb, amax_b, fmt, all_finite, amax_t)
  codes, sb, _, s_dec = _staged(xb, amax_b, fmt, key, amax_t)
  return pack_nibbles(codes), sb, s_dec


def fake(xb: Array, amax_b: Array, fmt: Format, key: Array | None, all_finite: bool = False,
         amax_t: Array | None = None) -> Array:
  """x_hat in blocks (the products `decode` forms, without codes or packing)."""
  if key is None:
    return _rne_fake(xb, amax_b, fmt, all_finite, amax_t)
  return _staged(xb, amax_b, fmt, key, amax_t)[2]
