"""Element and scale grids (E2M1, E1M2, E2M2, E4M3, E8M0, INT) with exact rounding.

Every rounding here is plain arithmetic on float32 (floor, compare, multiply by
powers of two built from exponent bits), so the same functions run under XLA,
inside Pallas kernels and in interpret mode, and give bit-identical results.

Codes are sign-magnitude: bit `ebits + mbits` is the sign, the low bits are the
IEEE-style exponent/mantissa fields. The sign of a code is the sign of its
input, so -0.1 rounds to "-0" (as a hardware or ml_dtypes cast does).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jaxtyping import Float, UInt8

_F32_MAX = float(np.finfo(np.float32).max)
# Random bits used per stochastic rounding decision (see `round_float`).
SR_BITS = 24


@dataclasses.dataclass(frozen=True)
class FloatGrid:
  """A small sign-magnitude floating-point grid without Inf (values saturate).

  Attributes:
    name: e.g. "e2m1".
    ebits: exponent bits.
    mbits: mantissa bits.
    bias: exponent bias; the smallest normal exponent is `1 - bias`.
    max_value: largest finite magnitude (saturation bound).
  """
  name: str
  ebits: int
  mbits: int
  bias: int
  max_value: float

  @property
  def emin(self) -> int:
    return 1 - self.bias

  @property
  def nbits(self) -> int:
    return 1 + self.ebits + self.mbits

  def magnitudes(self) -> np.ndarray:
    """All finite non-negative values in code order (float32 numpy array)."""
    codes = np.arange(2 ** (self.ebits + self.mbits), dtype=np.int64)
    e = codes >> self.mbits
    m = codes & ((1 << self.mbits) - 1)
    sub = m * 2.0 ** (self.emin - self.mbits)
    nrm = (2 ** self.mbits + m) * 2.0 ** (e - self.bias - self.mbits)
    vals = np.where(e == 0, sub, nrm).astype(np.float32)
    return vals[vals <= self.max_value]


E2M1 = FloatGrid("e2m1", 2, 1, 1, 6.0)      # ±{0,.5,1,1.5,2,3,4,6}
E1M2 = FloatGrid("e1m2", 1, 2, 1, 1.75)     # ±k/4, k=0..7 (= INT4 ±7 / 4)
E2M2 = FloatGrid("e2m2", 2, 2, 1, 7.0)      # ±{0,.25,...,1.75,2,2.5,3,3.5,4,5,6,7}
E4M3 = FloatGrid("e4m3", 4, 3, 7, 448.0)    # "fn": max 448, S.1111.111 = NaN
GRIDS = {g.name: g for g in (E2M1, E1M2, E2M2, E4M3)}


def floor_log2(a: Array) -> Array:
  """floor(log2(a)) for float32 a > 0 read from the exponent bits (int32).

  Exact for normal floats; 0 and subnormals give -127 (callers clamp).
  """
  bits = jax.lax.bitcast_convert_type(a.astype(jnp.float32), jnp.int32)
  return ((bits >> 23) & 0xFF) - 127


def exp2i(k: Array) -> Array:
  """2.0**k as float32 for int32 k in [-126, 127], built from exponent bits."""
  k = jnp.clip(k, -126, 127).astype(jnp.int32)
  return jax.lax.bitcast_convert_type((k + 127) << 23, jnp.float32)


def _round_count(n: Array, key: Array | None) -> Array:
  """Rounds the non-negative float32 count `n` to an integer-valued float32.

  key None: round half to even. Otherwise exact stochastic rounding: up with
  probability frac(n), decided by comparing SR_BITS random bits with the
  fraction (exact whenever frac(n) is a multiple of 2**-SR_BITS, which holds
  for every float32 input in a normal binade of the target grid).
  """
  f = jnp.floor(n)
  r = n - f  # exact: n and f share a binade and f is an integer
  if key is None:
    odd = (f - 2.0 * jnp.floor(f * 0.5)) == 1.0
    up = (r > 0.5) | ((r == 0.5) & odd)
  else:
    u = (jax.random.bits(key, n.shape, jnp.uint32) >> (32 - SR_BITS)).astype(jnp.float32)
    up = u < r * float(2 ** SR_BITS)
  return f + up.astype(jnp.float32)


# Grids with at most this many magnitudes round by comparing with the midpoints
# (one compare per step) instead of the exponent/mantissa arithmetic: a few
# times fewer operations per element on E2M1/E1M2, the same bits.
_MAX_THRESHOLD_GRID = 8


def _round_small_grid(a: Array, neg: Array, grid: FloatGrid) -> tuple[Array, Array]:
  """RNE of magnitudes `a` (NaN already mapped to 0, saturated) by midpoint compares.

  Between neighbours i-1 and i (codes of a grid without Inf are the magnitude
  ranks) a tie goes to the even code: up (>=) when i is even, down (>) when odd.
  Values are accumulated from exact dyadic steps, so they equal the grid's.
  """
  mags = [float(v) for v in grid.magnitudes()]
  count = jnp.zeros(a.shape, jnp.int32)
  mag = jnp.zeros(a.shape, jnp.float32)
  for i in range(1, len(mags)):
    mid = 0.5 * (mags[i - 1] + mags[i])
    up = (a >= mid) if i % 2 == 0 else (a > mid)
    count = count + up.astype(jnp.int32)
    mag = mag + jnp.where(up, mags[i] - mags[i - 1], 0.0)
  code = (neg.astype(jnp.int32) << (grid.ebits + grid.mbits)) | count
  return code.astype(jnp.uint8), jnp.where(neg, -mag, mag)


def _round_on_bits(y: Array, grid: FloatGrid) -> tuple[Array, Array]:
  """`round_float(y, grid)` with round half to even, on the float32 bits: (codes, values).

  In the grid's normal range, adding half a kept unit less one plus the lowest kept
  mantissa bit (a carry may move up a binade, as it should) and masking rounds the
  float32 mantissa to `grid.mbits` bits, half to even; below it the step is the fixed
  2**(emin - mbits) and `_round_count` rounds the scaled magnitude (scaling by a power
  of two is exact). Then the result saturates at `grid.max_value`, and the code is the
  rounded float32's exponent and mantissa fields re-biased. About a third of the
  operations of the exponent/mantissa arithmetic and no divisions; the same bits.
  """
  bits = jax.lax.bitcast_convert_type(y, jnp.int32)
  mag = bits & 0x7FFFFFFF
  nan = mag > 0x7F800000
  mag = jnp.where(nan, 0, mag)
  sign = jnp.where(nan, 0, bits & jnp.int32(-(2 ** 31)))
  drop = 23 - grid.mbits
  normal = (mag + ((1 << (drop - 1)) - 1) + ((mag >> drop) & 1)) & jnp.int32(-(1 << drop))
  normal = jnp.minimum(normal, int(np.float32(grid.max_value).view(np.int32)))
  sub_step = float(2.0 ** (grid.emin - grid.mbits))
  a = jax.lax.bitcast_convert_type(mag, jnp.float32)
  n_sub = _round_count(a * (1.0 / sub_step), None)  # floor-based: Triton lowers no `round`
  is_sub = a < float(2.0 ** grid.emin)
  mag_out = jnp.where(is_sub, jax.lax.bitcast_convert_type(n_sub * sub_step, jnp.int32), normal)
  # A subnormal count of 2**mbits is the first normal code, as in the grid's code order.
  code = jnp.where(is_sub, n_sub.astype(jnp.int32),
                   (normal >> drop) - ((127 - grid.bias) << grid.mbits))
  code = code | ((sign >> 31) & (1 << (grid.ebits + grid.mbits)))
  return code.astype(jnp.uint8), jax.lax.bitcast_convert_type(mag_out | sign, jnp.float32)


def round_float(y: Float[Array | np.ndarray, "*s"], grid: FloatGrid, *, key: Array | None = None
                ) -> tuple[UInt8[Array, "*s"], Float[Array, "*s"]]:
  """Rounds `y` onto `grid` (saturating) and returns `(codes, values)`.

  Rules: round half to even (or stochastic rounding when `key` is given);
  ``|y|`` above `grid.max_value` (including ±Inf) saturates to ±max; NaN maps to
  +0 (the grids have no NaN). Codes are sign-magnitude uint8.

  Args:
    y: float32 values, any shape.
    grid: the target grid, e.g. `E2M1`.
    key: optional PRNG key for stochastic rounding.

  Returns:
    `(codes, values)`: uint8 codes and the float32 values they decode to.

  Example:
    >>> import jax.numpy as jnp
    >>> codes, vals = round_float(jnp.array([0.75, 2.5, 7.0]), E2M1)
    >>> vals.tolist(), codes.tolist()
    ([1.0, 2.0, 6.0], [2, 4, 7])
  """
  y = jnp.asarray(y).astype(jnp.float32)
  small = len(grid.magnitudes()) <= _MAX_THRESHOLD_GRID
  if key is None and not small:
    return _round_on_bits(y, grid)
  nan = jnp.isnan(y)
  neg = jnp.signbit(y) & ~nan
  a = jnp.minimum(jnp.where(nan, 0.0, jnp.abs(y)), grid.max_value)
  if key is None:
    return _round_small_grid(a, neg, grid)
  e = jnp.maximum(floor_log2(a), grid.emin)
  step = exp2i(e - grid.mbits)
  n = _round_count(a / step, key)
  mag = n * step
  # Re-derive the fields from the rounded magnitude (it may have moved up a binade).
  ev = jnp.maximum(floor_log2(mag), grid.emin)
  normal = mag >= float(2.0 ** grid.emin)
  e_field = jnp.where(normal, ev + grid.bias, 0)
  m_field = jnp.where(normal, mag / exp2i(ev - grid.mbits) - float(2 ** grid.mbits),
                      mag / float(2.0 ** (grid.emin - grid.mbits)))
  code = ((neg.astype(jnp.int32) << (grid.ebits + grid.mbits))
          | (e_field.astype(jnp.int32) << grid.mbits) | m_field.astype(jnp.int32))
  return code.astype(jnp.uint8), jnp.where(neg, -mag, mag)


def _sign_and_clamped_abs(y: Array, m: float | Array, nonneg: bool
                          ) -> tuple[Array | int, Array]:
  """(sign bit of `y` as int32 0 / 1<<31, min(|y|, m)) for non-NaN float32 `y`, `m` >= 0.

  On the bits: |y| clamps by an integer compare (non-negative floats order as
  their bit patterns). XLA's float min/max propagate NaN and order -0 below +0,
  several instructions each on x86; and `y` is used once, so an expensive
  producer of `y` (a division) still fuses into its consumer. `nonneg`: `y` is
  known to be >= +0 (no sign to keep).
  """
  bits = jax.lax.bitcast_convert_type(y.astype(jnp.float32), jnp.int32)
  mag = bits if nonneg else bits & 0x7FFFFFFF
  if isinstance(m, (int, float)):
    cap = int(np.float32(m).view(np.int32))
  else:
    cap = jax.lax.bitcast_convert_type(jnp.asarray(m, jnp.float32), jnp.int32)
  mag = jnp.where(mag > cap, cap, mag)
  sign = 0 if nonneg else bits & jnp.int32(-(2 ** 31))
  return sign, jax.lax.bitcast_convert_type(mag, jnp.float32)


def _with_sign(sign: Array | int, mag: Array) -> Array:
  """A non-negative float32 `mag` with the sign bit `sign` (as from `_sign_and_clamped_abs`)."""
  if isinstance(sign, int) and sign == 0:
    return mag
  return jax.lax.bitcast_convert_type(
      jax.lax.bitcast_convert_type(mag, jnp.int32) | sign, jnp.float32)


def round_e2m1_finite(y: Array, *, nonneg: bool = False) -> tuple[Array, Array]:
  """`round_float(y, E2M1)` (round half to even) for non-NaN float32 `y`: (codes, values).

  The same bits as `round_float`, with a few times fewer operations: the step
  (0.5, 1 or 2) is picked from |y|'s binade and `lax.round` rounds the scaled
  magnitude to an integer (scaling by a power of two is exact). `nonneg=True`
  promises y >= +0 (and skips the sign). For the XLA quantize path only: NaN is
  not handled, and kernels keep `round_float`.
  """
  sign, a = _sign_and_clamped_abs(y, E2M1.max_value, nonneg)
  ge2, ge4 = a >= 2.0, a >= 4.0
  n = jnp.round(a * jnp.where(ge4, 0.5, jnp.where(ge2, 1.0, 2.0)))  # RNE
  vals = _with_sign(sign, n * jnp.where(ge4, 2.0, jnp.where(ge2, 1.0, 0.5)))
  # Magnitude rank = rounded count + 2 per binade above the first (a count that
  # rounds up to the next binade lands on that binade's first code, as it should).
  codes = n.astype(jnp.int32) + jnp.where(ge4, 4, jnp.where(ge2, 2, 0))
  if not nonneg:
    codes = jnp.where(sign != 0, 8, 0) | codes
  return codes.astype(jnp.uint8), vals


def _step_constant(a: Array, mbits: int, lo: Array | int, hi: Array | int | None = None
                   ) -> tuple[Array, Array]:
  """(e, c) for float32 `a` >= +0: e is a's exponent field clamped to [lo, hi], and c =
  1.5 * 2**23 * step the magic constant of that binade's step 2**(E - mbits) (E: e's
  unbiased exponent; mbits: the grid's mantissa bits).

  Adding c leaves float32 an ulp of `step` (while a < 2**22 * step), so a + c rounds a
  half to even to a multiple of it, and both (a + c) - c and the count of steps
  bits(a + c) - bits(c) are exact: c's exponent field is e plus 23 - mbits (a few
  integer operations, no compares or selects).
  """
  e = jnp.maximum(jax.lax.bitcast_convert_type(a, jnp.int32) & 0x7F800000, lo)
  if hi is not None:
    e = jnp.minimum(e, hi)
  return e, jax.lax.bitcast_convert_type(e + (((23 - mbits) << 23) | 0x400000), jnp.float32)


def _round_to_step_nonneg(a: Array, grid: FloatGrid) -> Array:
  """Float32 `a` >= +0 rounded half to even to a multiple of `grid`'s step at a's binade
  (no saturation; callers clamp `a` first, which also keeps c below finite range).

  The step is 2**(e - mbits) for a in [2**e, 2**(e + 1)), e >= emin, and 2**(emin -
  mbits) below 2**emin (the grid's subnormals): `_step_constant` with a's exponent
  floored at 2**emin's.
  """
  c = _step_constant(a, grid.mbits, (127 + grid.emin) << 23)[1]
  return (a + c) - c


def round_e2m1_values_nonneg(y: Array) -> Array:
  """`round_e2m1_finite(y, nonneg=True)[1]`, the values without codes, in fewer operations.

  For MixFP4's block errors, which need the rounded values only: |y| clamped at 6, then
  rounded to its binade's step (0.5, 1 or 2) by `_round_to_step_nonneg`. `y` >= +0 and
  not NaN, as for `nonneg`.
  """
  return _round_to_step_nonneg(_sign_and_clamped_abs(y, E2M1.max_value, nonneg=True)[1], E2M1)


def round_e4m3_nonneg_finite(v: Array) -> tuple[Array, Array]:
  """`round_float(v, E4M3)` for finite float32 `v` >= +0: (uint8 codes, values).

  For the block scales of the XLA quantize paths, whose inputs are finite and
  non-negative. `v` is clamped to 512 (which saturates as every larger value does),
  rounded by `_round_to_step_nonneg` and saturated at 448. The code of a normal value
  is its float32 exponent and top three mantissa bits re-biased; a subnormal value
  n * 2**-9 (n < 8) is first moved up by 2**-6, exactly, onto the first normal binade,
  whose codes are 8 + n. About a third of `round_float`'s operations (which must also
  lower to Triton, without `round`).
  """
  v = _sign_and_clamped_abs(v, 512.0, nonneg=True)[1]
  r = _sign_and_clamped_abs(_round_to_step_nonneg(v, E4M3), E4M3.max_value, nonneg=True)[1]
  sub = r < float(2.0 ** E4M3.emin)
  moved = jax.lax.bitcast_convert_type(r + jnp.where(sub, float(2.0 ** E4M3.emin), 0.0), jnp.int32)
  code = ((moved >> (23 - E4M3.mbits)) - ((127 - E4M3.bias) << E4M3.mbits)
          - jnp.where(sub, 1 << E4M3.mbits, 0))
  return code.astype(jnp.uint8), r


def round_e2m1_or_int_finite(y: Array, to_int: Array) -> tuple[Array, Array]:
  """Non-NaN y rounded to E2M1, or where `to_int` to the integers -7..7: (int32 codes, values).

  MixFP4's second pass in one datapath (x_hat for `fake`; `e2m1_or_int_codes` gives the
  codes), each element rounded once to its block's grid:
  E1M2's k/4 is stored as the integer k, i.e. a single binade with step 1 (infinite
  binade thresholds) and cap 7 instead of E2M1's steps 0.5 / 1 / 2 and cap 6. The same
  bits as `round_e2m1_finite(y)` where `to_int` is False and as `round_int_finite(y, 7)`
  with sign-magnitude codes (k's sign in bit 3) where it is True. ±Inf saturates.
  """
  sign, a = _sign_and_clamped_abs(y, jnp.where(to_int, 7.0, 6.0), nonneg=False)
  two = jnp.where(to_int, np.inf, 2.0)
  ge2, ge4 = a >= two, a >= 2.0 * two
  n = jnp.round(a * jnp.where(ge4, 0.5, jnp.where(ge2 | to_int, 1.0, 2.0)))  # RNE
  vals = _with_sign(sign, n * jnp.where(ge4, 2.0, jnp.where(ge2 | to_int, 1.0, 0.5)))
  codes = n.astype(jnp.int32) + jnp.where(ge4, 4, jnp.where(ge2, 2, 0))
  return jnp.where(sign != 0, 8, 0) | codes, vals


def e2m1_or_int_codes(y: Array, to_int: Array | bool) -> Array:
  """`round_e2m1_or_int_finite(y, to_int)[0]`, the int32 codes alone, read from the bits.

  For the codes of the XLA quantize paths (NVFP4 and MXFP4 with `to_int=False`, MixFP4's
  pass 2): |y| is clamped to 6 (7 where `to_int`) and counted in steps of its E2M1 binade by
  `_step_constant`, its exponent clamped to E2M1's binades [1, 4] (steps 0.5, 1, 2; to 2's,
  step 1, where `to_int`): n = bits(|y| + c) - bits(c), rounded half to even. The code is
  n plus two per binade above the first (E2M1), or n (the integer k). No float compares
  or selects per element; non-NaN y only (±Inf saturates), as for `_finite`.
  """
  sign, a = _sign_and_clamped_abs(y, jnp.where(to_int, 7.0, 6.0), nonneg=False)
  lo = jnp.where(to_int, 128 << 23, 127 << 23)
  e, c = _step_constant(a, E2M1.mbits, lo, jnp.where(to_int, 128 << 23, 129 << 23))
  n = jax.lax.bitcast_convert_type(a + c, jnp.int32) - jax.lax.bitcast_convert_type(c, jnp.int32)
  return jnp.where(sign != 0, 8, 0) | (n + ((e - lo) >> (23 - E2M1.mbits)))


def round_int_finite(y: Array, qmax: int, *, nonneg: bool = False) -> Array:
  """`round_int(y, qmax)` (round half to even) for non-NaN float32 `y`, in a few operations.

  `nonneg=True` promises y >= +0. For the XLA quantize path only (NaN is not
  handled; kernels keep `round_int`).
  """
  sign, a = _sign_and_clamped_abs(y, float(qmax), nonneg)
  return _with_sign(sign, jnp.round(a))


def decode_float(codes: UInt8[Array | np.ndarray, "*s"], grid: FloatGrid) -> Float[Array, "*s"]:
  """Decodes sign-magnitude `codes` of `grid` to float32 (E4M3 NaN codes -> NaN).

  Plain `jnp` arithmetic (shifts, compares, exponent-bit powers of two), so it
  traces inline under `jit` and inside Pallas kernel bodies alike: the public
  decode API for kernels.

  Example:
    >>> import jax.numpy as jnp
    >>> decode_float(jnp.array([7, 15], jnp.uint8), E2M1).tolist()
    [6.0, -6.0]
  """
  c = jnp.asarray(codes).astype(jnp.int32)
  width = grid.ebits + grid.mbits
  neg = (c >> width) & 1
  e = (c >> grid.mbits) & ((1 << grid.ebits) - 1)
  m = (c & ((1 << grid.mbits) - 1)).astype(jnp.float32)
  sub = m * float(2.0 ** (grid.emin - grid.mbits))
  nrm = (m + float(2 ** grid.mbits)) * exp2i(e - grid.bias - grid.mbits)
  mag = jnp.where(e == 0, sub, nrm)
  val = jnp.where(neg == 1, -mag, mag)
  if grid is E4M3 or grid.name == "e4m3":
    val = jnp.where((c & 0x7F) == 0x7F, jnp.nan, val)
  return val


def round_int(y: Float[Array | np.ndarray, "*s"], qmax: int, *, key: Array | None = None
              ) -> Float[Array, "*s"]:
  """Rounds `y` to integers in [-qmax, qmax] (float32 result), RNE or SR.

  Same non-finite rule as `round_float`: ±Inf saturates, NaN maps to 0.

  Example:
    >>> import jax.numpy as jnp
    >>> round_int(jnp.array([2.5, -3.5, 9.0]), 7).tolist()
    [2.0, -4.0, 7.0]
  """
  y = jnp.asarray(y).astype(jnp.float32)
  nan = jnp.isnan(y)
  a = jnp.minimum(jnp.where(nan, 0.0, jnp.abs(y)), float(qmax))
  n = _round_count(a, key)
  return jnp.where(jnp.signbit(y) & ~nan, -n, n)


# E8M0 (MX block scale): value 2**(byte - 127), byte 255 = NaN, no zero.
E8M0_BIAS = 127


def decode_e8m0(scale_bytes: UInt8[Array | np.ndarray, "*s"]) -> Float[Array, "*s"]:
  """E8M0 bytes -> float32 2**(b-127); 255 -> NaN.

  Byte 0 (2**-127) is a float32 subnormal: backends that flush denormals (XLA
  on CPU does) return 0 for it; `quantize` only emits byte 0 for blocks whose
  amax is below 2**-125.
  """
  b = jnp.asarray(scale_bytes).astype(jnp.int32)
  k = b - E8M0_BIAS
  val = jnp.where(k < -126, exp2i(k + 1) * 0.5, exp2i(k))
  return jnp.where(b == 255, jnp.nan, val)


def _lut_e2m2_codes() -> np.ndarray:
  """(flag, nibble) -> E2M2 sign-magnitude 5-bit code, as a [2, 16] uint8 table.

  flag 0: the nibble is E2M1 (s, e, m); E2M2 code is (s, e, m‖0).
  flag 1: the nibble is E1M2/INT4 sign-magnitude k (value k/4 in E1M2, stored
  with a 4x block scale, so its value is the integer k); E2M2 holds 0..7 exactly.
  """
  e2m2 = E2M2.magnitudes()
  table = np.zeros((2, 16), np.uint8)
  for flag, grid, mult in ((0, E2M1, 1.0), (1, E1M2, 4.0)):
    mags = grid.magnitudes()
    for k, v in enumerate(mags):
      c = int(np.nonzero(e2m2 == np.float32(v * mult))[0][0])
      table[flag, k] = c
      table[flag, 8 + k] = 16 | c
  return table


MIX_E2M2_CODES = _lut_e2m2_codes()


def _e2m2_values(codes: np.ndarray) -> np.ndarray:
  mags = E2M2.magnitudes()
  vals = mags[codes & 15]
  return np.where(codes & 16, -vals, vals).astype(np.float32)


# (flag << 4 | nibble) -> float32 value, through E2M2 (32 entries).
MIX_LUT = _e2m2_values(MIX_E2M2_CODES).reshape(32)


def decode_mix_e2m2(nibbles: Array, flags: Array) -> Array:
  """Arithmetic E2M2 datapath: (flag, nibble) -> float32, no table lookup.

  flag 0: E2M1 (s,e,m) -> E2M2 code (e, m<<1). flag 1: INT4/E1M2 sign-magnitude
  k -> the E2M2 code of the integer k. Then one E2M2 decode. Equals `MIX_LUT`.
  Works elementwise on int32 `nibbles` (0..15) and any-dtype `flags` (0/1).
  """
  n = nibbles.astype(jnp.int32)
  neg = (n >> 3) == 1
  k = n & 7
  ki = ((k >= 1).astype(jnp.int32) + (k >= 2).astype(jnp.int32) + (k >= 4).astype(jnp.int32))
  mi = jnp.where(ki == 3, k - 4, jnp.where(ki == 2, (k - 2) * 2, 0))
  code = jnp.where(flags.astype(jnp.int32) == 1, (ki << 2) | mi, k << 1)
  e = code >> 2
  m = (code & 3).astype(jnp.float32)
  unit = jnp.where(e == 1, 0.25, jnp.where(e == 2, 0.5, 1.0))
  mag = jnp.where(e == 0, m * 0.25, (m + 4.0) * unit)
  return jnp.where(neg, -mag, mag)


# The functions above are plain `jnp` (no `jit` of their own): they trace inline
# into the quantizers, into Pallas kernel bodies and into user jits. The
# underscored names are kept for callers written before they were public.
_round_float = round_float
_decode_float = decode_float
_round_int = round_int
_decode_e8m0 = decode_e8m0
