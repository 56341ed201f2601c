"""Element/scale grids: exhaustive code round-trips, RNE ties, SR, packing."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxlab import formats as F


@pytest.mark.parametrize("grid", [F.E2M1, F.E1M2, F.E2M2, F.E4M3], ids=lambda g: g.name)
def test_every_code_round_trips(grid):
  n = 2 ** grid.nbits
  codes = jnp.arange(n, dtype=jnp.uint8)
  vals = F.decode_float(codes, grid)
  finite = np.isfinite(np.asarray(vals))
  if grid is F.E4M3:
    assert int((~finite).sum()) == 2  # S.1111.111
  else:
    assert finite.all()
  back, bvals = F.round_float(vals, grid)
  np.testing.assert_array_equal(np.asarray(back)[finite], np.asarray(codes)[finite])
  np.testing.assert_array_equal(np.asarray(bvals)[finite], np.asarray(vals)[finite])


def test_grid_values():
  np.testing.assert_array_equal(F.E2M1.magnitudes(), [0, .5, 1, 1.5, 2, 3, 4, 6])
  np.testing.assert_array_equal(F.E1M2.magnitudes(), np.arange(8) / 4)
  np.testing.assert_array_equal(
      F.E2M2.magnitudes(), [0, .25, .5, .75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 7])
  e4 = F.E4M3.magnitudes()
  assert e4.max() == 448 and e4[1] == 2.0 ** -9 and len(e4) == 127


@pytest.mark.parametrize("grid,mldt", [(F.E2M1, ml_dtypes.float4_e2m1fn),
                                       (F.E4M3, ml_dtypes.float8_e4m3fn)], ids=["e2m1", "e4m3"])
def test_codes_and_rne_match_ml_dtypes(grid, mldt):
  codes = np.arange(2 ** grid.nbits, dtype=np.uint8)
  ref = codes.view(mldt).astype(np.float32)
  ours = np.asarray(F.decode_float(jnp.asarray(codes), grid))
  np.testing.assert_array_equal(ours, ref)  # NaN == NaN for assert_array_equal
  # Every midpoint between neighbours (ties), points just off them, and random values.
  mags = grid.magnitudes().astype(np.float64)
  mids = (mags[:-1] + mags[1:]) / 2
  rng = np.random.default_rng(0)
  y = np.concatenate([mids, np.nextafter(mids.astype(np.float32), 0), np.nextafter(
      mids.astype(np.float32), np.inf), rng.uniform(0, grid.max_value * 1.2, 2000)])
  y = np.concatenate([y, -y]).astype(np.float32)
  got_c, got_v = F.round_float(jnp.asarray(y), grid)
  want = np.clip(y, -grid.max_value, grid.max_value).astype(mldt)
  np.testing.assert_array_equal(np.asarray(got_v), want.astype(np.float32))
  np.testing.assert_array_equal(np.asarray(got_c) & ((1 << grid.nbits) - 1),
                                want.view(np.uint8) & ((1 << grid.nbits) - 1))


def _nearest_even_reference(y: np.ndarray, grid) -> tuple[np.ndarray, np.ndarray]:
  """RNE onto `grid` in float64 NumPy: the nearest magnitude, ties to the even code
  (codes are magnitude ranks), saturating; NaN -> +0; the code's sign bit is y's."""
  mags = grid.magnitudes().astype(np.float64)
  nan = np.isnan(y)
  a = np.minimum(np.abs(np.where(nan, np.float32(0), y).astype(np.float64)), mags[-1])
  hi = np.clip(np.searchsorted(mags, a), 1, len(mags) - 1)
  lo = hi - 1
  d_lo, d_hi = a - mags[lo], mags[hi] - a
  rank = np.where((d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0)), hi, lo)
  neg = np.signbit(y) & ~nan
  codes = (neg.astype(np.int64) << (grid.ebits + grid.mbits)) | rank
  return codes.astype(np.uint8), np.where(neg, -mags[rank], mags[rank]).astype(np.float32)


@pytest.mark.parametrize("grid", [F.E4M3, F.E2M2], ids=lambda g: g.name)
def test_round_float_matches_nearest_even_reference_on_all_binades(grid):
  # `round_float` rounds on the float32 bits for these grids: check it against a plain
  # nearest-value search on random bit patterns over every float32 binade (zeros,
  # float32 subnormals, the grid's subnormals, saturation, Inf, NaN) and on every
  # midpoint of the grid and its float32 neighbours.
  rng = np.random.default_rng(3)
  pats = rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
  near_grid = rng.uniform(-grid.max_value * 1.1, grid.max_value * 1.1, 50_000)
  tiny = rng.uniform(-1, 1, 50_000) * 2.0 ** (grid.emin - grid.mbits + 1)
  mags = grid.magnitudes().astype(np.float64)
  mids = ((mags[:-1] + mags[1:]) / 2).astype(np.float32)
  edges = np.concatenate([mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf),
                          mags.astype(np.float32), np.float32([grid.max_value * 1.04, 1e-45])])
  special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32)
  y = np.concatenate([pats, near_grid.astype(np.float32), tiny.astype(np.float32), edges, -edges,
                      special])
  # float32 subnormals are flushed to zero by XLA on CPU: the reference sees them as 0.
  y_seen = np.where(np.abs(y) < np.finfo(np.float32).tiny, np.copysign(0.0, y), y)
  want_c, want_v = _nearest_even_reference(y_seen.astype(np.float32), grid)
  got_c, got_v = jax.jit(lambda v: F.round_float(v, grid))(jnp.asarray(y))
  np.testing.assert_array_equal(np.asarray(got_c), want_c)
  np.testing.assert_array_equal(np.asarray(got_v).view(np.uint32), want_v.view(np.uint32))


def test_e2m1_rne_tie_cases_from_spec():
  ties = np.array([.25, .75, 1.25, 1.75, 2.5, 3.5, 5.0], np.float32)
  want = np.array([0, 1, 1, 2, 2, 4, 4], np.float32)
  _, got = F.round_float(jnp.asarray(np.concatenate([ties, -ties])), F.E2M1)
  np.testing.assert_array_equal(np.asarray(got), np.concatenate([want, -want]))


def test_saturation_and_nonfinite():
  _, v = F.round_float(jnp.array([7.0, 1e9, jnp.inf, -jnp.inf, jnp.nan]), F.E2M1)
  np.testing.assert_array_equal(np.asarray(v), [6, 6, 6, -6, 0])
  c, v = F.round_float(jnp.array([500.0, jnp.inf, jnp.nan]), F.E4M3)
  np.testing.assert_array_equal(np.asarray(v), [448, 448, 0])
  assert not np.any((np.asarray(c) & 0x7F) == 0x7F)  # never the NaN code
  np.testing.assert_array_equal(
      np.asarray(F.round_int(jnp.array([7.6, -9.0, jnp.inf, jnp.nan, 2.5, 3.5]), 7)),
      [7, -7, 7, 0, 2, 4])


def test_e8m0_round_trip_and_nan():
  b = jnp.arange(1, 255, dtype=jnp.int32)
  v = np.asarray(F.decode_e8m0(b.astype(jnp.uint8)))
  np.testing.assert_array_equal(v, np.exp2(np.arange(1, 255) - 127.0).astype(np.float32))
  np.testing.assert_array_equal(np.asarray(F.floor_log2(jnp.asarray(v))) + 127, np.asarray(b))
  ref = np.arange(1, 255, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
  np.testing.assert_array_equal(v, ref)
  assert np.isnan(np.asarray(F.decode_e8m0(jnp.array([255], jnp.uint8))))[0]


def test_e2m2_lut_embeds_both_microformats():
  lut = F.MIX_LUT
  np.testing.assert_array_equal(lut[:8], F.E2M1.magnitudes())
  np.testing.assert_array_equal(lut[8:16], -F.E2M1.magnitudes())
  np.testing.assert_array_equal(lut[16:24], np.arange(8))      # E1M2 k/4 with a 4x scale
  np.testing.assert_array_equal(lut[24:32], -np.arange(8.0))
  # The table really goes through E2M2 codes: E2M1 (s,e,m) -> (s,e,m,0).
  np.testing.assert_array_equal(F.MIX_E2M2_CODES[0, :8], np.arange(8) * 2)
  e2m2_vals = np.asarray(F.decode_float(jnp.asarray(F.MIX_E2M2_CODES.reshape(-1)), F.E2M2))
  np.testing.assert_array_equal(e2m2_vals, lut)


def test_stochastic_rounding_unbiased_and_neighbours_only():
  grid_pts = F.E2M1.magnitudes()
  y = jnp.full((200_000,), 2.6, jnp.float32)  # between 2 and 3, P(up) = 0.6
  _, v = F.round_float(y, F.E2M1, key=jax.random.key(0))
  v = np.asarray(v)
  assert set(np.unique(v)) <= {2.0, 3.0}
  # std error of the mean: sqrt(.6*.4/2e5) ~ 1.1e-3; 5 sigma.
  assert abs(v.mean() - 2.6) < 5.5e-3
  # Representable values never move; the same key gives the same result.
  _, exact = F.round_float(jnp.asarray(grid_pts), F.E2M1, key=jax.random.key(1))
  np.testing.assert_array_equal(np.asarray(exact), grid_pts)
  _, v2 = F.round_float(y, F.E2M1, key=jax.random.key(0))
  np.testing.assert_array_equal(np.asarray(v2), v)
  # E4M3 (used for FP8 weights) and INT: unbiased too.
  y8 = jnp.full((200_000,), 100.7, jnp.float32)  # E4M3 step 8 here: 96 or 104
  _, v8 = F.round_float(y8, F.E4M3, key=jax.random.key(2))
  assert set(np.unique(np.asarray(v8))) <= {96.0, 104.0}
  assert abs(np.asarray(v8).mean() - 100.7) < 5 * 8 * 0.5 / np.sqrt(2e5)
  vi = F.round_int(jnp.full((200_000,), -3.25), 7, key=jax.random.key(3))
  assert abs(np.asarray(vi).mean() + 3.25) < 5 * 0.5 / np.sqrt(2e5)


def test_pack_unpack():
  c = jnp.arange(16, dtype=jnp.uint8)
  p = F.pack_nibbles(c)
  assert p.shape == (8,) and int(p[0]) == 0x10 and int(p[7]) == 0xFE
  np.testing.assert_array_equal(np.asarray(F.unpack_nibbles(p)), np.asarray(c))
  with pytest.raises(ValueError, match="even"):
    F.pack_nibbles(jnp.zeros((3,), jnp.uint8))


def test_scale_byte_tables_equal_the_e4m3_decode_and_its_reciprocal():
  from jaxlab.formats._scales import decode_e4m3_scales, e4m3_byte_inverse, e4m3_byte_value
  b = jnp.arange(256, dtype=jnp.uint8)
  want = np.asarray(F.decode_float(b & jnp.uint8(0x7F), F.E4M3))  # bit 7 (MixFP4's flag) off
  got = np.asarray(jax.jit(e4m3_byte_value)(b))
  np.testing.assert_array_equal(got, want)  # NaN (0x7F) included
  # dequantize's decode on the bits: the same float32 bits, NaN's included.
  np.testing.assert_array_equal(np.asarray(jax.jit(decode_e4m3_scales)(b)).view(np.uint32),
                                got.view(np.uint32))
  inv = np.asarray(jax.jit(e4m3_byte_inverse)(b))
  finite = np.isfinite(want) & (want > 0)
  np.testing.assert_array_equal(inv[finite], (np.float32(1) / want[finite]).astype(np.float32))
  assert np.all(inv[want == 0] == 0)
