"""The XLA quantize path's finite-input shortcuts give the general path's bits exactly.

`quantize` / `fake_quant` take a faster path when every element is finite
(`_api._by_blocks`: cheaper roundings, MixFP4's block errors summed column by
column), and `dequantize` decodes the two nibbles of each byte separately. Each is
compared here with the general path it replaces, bit for bit, on ties, grid points,
near-ties between MixFP4's candidates and wide magnitude ranges.
"""

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxlab import formats as F
from jaxlab.formats import _api, _grids, _mixfp4, _nvfp4
from jaxlab.formats._layout import layout, to_blocks
from jaxlab.formats._scales import (
    F32_MAX,
    block_amax,
    e4m3_scale,
    e4m3_scale_finite,
    tensor_amax,
)


def _probe() -> np.ndarray:
  """Grid points, midpoints and their float32 neighbours of E2M1 and the integers 0..8."""
  pts = np.concatenate([F.E2M1.magnitudes(), np.arange(9, dtype=np.float32)])
  mids = np.concatenate([(pts[1:] + pts[:-1]) / 2, np.arange(9) + 0.5]).astype(np.float32)
  both = np.concatenate([pts, mids])
  near = np.concatenate([np.nextafter(both, np.float32(0)), np.nextafter(both, np.float32(100))])
  rng = np.random.default_rng(0)
  wide = rng.standard_normal(4096) * 10.0 ** rng.uniform(-6, 3, 4096)
  y = np.concatenate([both, near, wide, [0.0, 1e30, 3e38, 1e-30]]).astype(np.float32)
  return np.concatenate([y, -y])


def test_finite_roundings_equal_general_roundings():
  y = jnp.asarray(_probe())
  codes, vals = jax.jit(_grids.round_e2m1_finite)(y)
  want_codes, want_vals = jax.jit(lambda v: F.round_float(v, F.E2M1))(y)
  np.testing.assert_array_equal(np.asarray(codes), np.asarray(want_codes))
  # Bit patterns, so that signed zeros count.
  np.testing.assert_array_equal(np.asarray(vals).view(np.uint32),
                                np.asarray(want_vals).view(np.uint32))
  for qmax in (7, 127):
    got = jax.jit(functools.partial(_grids.round_int_finite, qmax=qmax))(y)
    want = jax.jit(functools.partial(F.round_int, qmax=qmax))(y)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32))


def test_e2m1_values_by_magic_constant_equal_finite_rounding():
  # MixFP4's block errors round with `round_e2m1_values_nonneg`: every 2039th
  # non-negative float32 bit pattern up to +Inf (all binades, float32 subnormals,
  # saturation) plus the grid points, midpoints and their neighbours.
  sweep = np.arange(0, 0x7F800001, 2039, dtype=np.int64).astype(np.int32).view(np.float32)
  y = jnp.asarray(np.concatenate([sweep, np.abs(_probe()), [np.inf]]).astype(np.float32))
  got = jax.jit(_grids.round_e2m1_values_nonneg)(y)
  want = jax.jit(lambda v: _grids.round_e2m1_finite(v, nonneg=True)[1])(y)
  np.testing.assert_array_equal(np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32))


def test_e4m3_scales_by_magic_constant_equal_round_float():
  # The XLA paths' block scales (`e4m3_scale_finite`): every 1999th finite non-negative
  # float32 bit pattern (float32 subnormals, E4M3 subnormals and normals, saturation),
  # every E4M3 value, the midpoints between neighbours and their float32 neighbours.
  sweep = np.arange(0, 0x7F800000, 1999, dtype=np.int64).astype(np.int32).view(np.float32)
  grid = np.arange(127, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
  mids = np.concatenate([(grid[1:] + grid[:-1]) / 2, [464.0, 480.0]]).astype(np.float32)
  near = np.concatenate([np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(1e3))])
  y = jnp.asarray(np.concatenate([sweep, grid, mids, near, [F32_MAX]]).astype(np.float32))
  codes, vals = jax.jit(e4m3_scale_finite)(y)
  want_codes, want_vals = jax.jit(e4m3_scale)(y)
  np.testing.assert_array_equal(np.asarray(codes), np.asarray(want_codes))
  np.testing.assert_array_equal(np.asarray(vals).view(np.uint32),
                                np.asarray(want_vals).view(np.uint32))


@pytest.mark.parametrize("to_int", [False, True])
def test_codes_from_bits_equal_one_datapath_codes(to_int):
  # The quantize paths' codes (`e2m1_or_int_codes`): every 2039th float32 bit pattern of
  # either sign up to ±Inf (all binades, float32 subnormals, saturation), grid points,
  # midpoints and their neighbours; per element and with a Python bool (NVFP4).
  sweep = np.arange(0, 0x7F800001, 2039, dtype=np.int64).astype(np.int32).view(np.float32)
  y = jnp.asarray(np.concatenate([sweep, -sweep, _probe(), [np.inf, -np.inf]]).astype(np.float32))
  want = jax.jit(_grids.round_e2m1_or_int_finite)(y, jnp.full(y.shape, to_int))[0]
  got = jax.jit(_grids.e2m1_or_int_codes)(y, jnp.full(y.shape, to_int))
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  if not to_int:
    got = jax.jit(lambda v: _grids.e2m1_or_int_codes(v, False))(y)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_mixfp4_one_datapath_rounding_equals_both_roundings():
  y = jnp.asarray(np.concatenate([_probe(), np.float32([np.inf, -np.inf])]))
  for e1m2 in (False, True):
    codes, vals = jax.jit(_grids.round_e2m1_or_int_finite)(y, jnp.full(y.shape, e1m2))
    if e1m2:
      k = _grids.round_int_finite(y, 7)
      want_vals = k
      want_codes = (jnp.signbit(k).astype(jnp.int32) << 3) | jnp.abs(k).astype(jnp.int32)
    else:
      want_codes, want_vals = _grids.round_e2m1_finite(y)
    np.testing.assert_array_equal(np.asarray(codes), np.asarray(want_codes).astype(np.int32))
    np.testing.assert_array_equal(np.asarray(vals).view(np.uint32),
                                  np.asarray(want_vals).view(np.uint32))


def _blocks(bs: int) -> np.ndarray:
  """[rows, nb, bs] finite blocks: Gaussian at several scales, grid-valued and integer blocks.

  (One tensor scale serves every block, so a block far below the tensor amax gets a
  zero E1M2 scale byte; the magnitudes stay within a few decades.)
  """
  rng = np.random.default_rng(1)
  g = rng.standard_normal((24, 8, bs)) * 10.0 ** rng.uniform(-2, 2, (24, 1, 1))
  e2m1 = F.E2M1.magnitudes()
  pow2 = 2.0 ** rng.integers(-4, 4, (8, 1, 1))
  grid = rng.choice(np.concatenate([e2m1, -e2m1]), (8, 8, bs)) * pow2
  ints = rng.integers(-7, 8, (8, 8, bs)) * pow2  # E1M2-exact
  # Blocks whose two candidates err almost equally: half E2M1 points, half integers.
  mixed = np.concatenate([grid[..., : bs // 2], ints[..., bs // 2:]], axis=-1)
  return np.concatenate([g, grid, ints, mixed]).astype(np.float32)


@pytest.mark.parametrize("name,opts", [
    ("nvfp4", {}), ("mixfp4", {}), ("mixfp4", {"select_p": 1.0}),
    ("mixfp4", {"block_size": 64}),  # above the column-wise limit: [..., bs] tensors
    ("mxfp4_floor", {}), ("mxfp4_rceil", {}), ("int4_g16", {}), ("int4_g32", {}),
    ("int8_row", {}),
])
def test_all_finite_path_is_bitidentical(name, opts):
  fmt = F.get_format(name, **opts)
  xb = jnp.asarray(_blocks(fmt.block_size or 64))  # int8_row: one "block" per row
  amax_b = block_amax(xb)
  codec = _api._CODECS[fmt.name]

  def run(fn, all_finite):
    # As `quantize` calls them: the finite path is handed the tensor amax it checked.
    amax_t = tensor_amax(amax_b) if all_finite else None
    return jax.jit(lambda v, a: fn(v, a, fmt=fmt, key=None, all_finite=all_finite,
                                   amax_t=amax_t))(xb, amax_b)

  fast, general = run(codec.encode, True), run(codec.encode, False)
  for a, b in zip(fast, general, strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  if hasattr(codec, "fake"):
    np.testing.assert_array_equal(np.asarray(run(codec.fake, True)).view(np.uint32),
                                  np.asarray(run(codec.fake, False)).view(np.uint32))
  if fmt.name == "mixfp4":  # both candidates really are chosen
    flags = np.asarray(fast[1]) >> 7
    assert 0.05 < flags.mean() < 0.95


@pytest.mark.parametrize("name", ["nvfp4", "mixfp4", "mxfp4_rceil", "int4_g32", "fp8_e4m3_row"])
def test_small_tensors_skip_the_finite_check_with_the_same_bits(name, monkeypatch):
  # `_by_blocks` sends tensors of up to `SMALL_TENSOR` elements straight to the general
  # path; larger ones go through the finite check's `cond` (the finite path, or the
  # masked maxima). Forcing the check on small tensors gives the same bits, finite or not.
  fmt = F.get_format(name)
  codec = _api._CODECS[fmt.name]
  finite_x = _blocks(32).reshape(-1, 256)
  special = finite_x.copy()
  special[1, 3], special[2, 40], special[5, 7], special[6, :32] = np.nan, np.inf, -np.inf, np.inf
  fns = [(codec.encode, _api._nan_scales(fmt))] + (
      [(codec.fake, _api._nan_values)] if hasattr(codec, "fake") else [])

  def run(fn_mark, x):  # a fresh trace each time: `SMALL_TENSOR` is read while tracing
    fn, mark = fn_mark
    xb = to_blocks(jnp.asarray(x), layout(x.shape, -1, fmt))
    f = jax.jit(lambda v: _api._by_blocks(functools.partial(fn, fmt=fmt, key=None), v, mark))
    return f(xb), str(jax.make_jaxpr(f)(xb)).count("cond[")

  for x in (finite_x, special):
    assert x.size <= _api.SMALL_TENSOR
    small = [run(fn, x) for fn in fns]
    with monkeypatch.context() as m:
      m.setattr(_api, "SMALL_TENSOR", 0)
      checked = [run(fn, x) for fn in fns]
    for (got, got_conds), (want, want_conds) in zip(small, checked, strict=True):
      assert want_conds > got_conds  # the check ran in one, not in the other
      for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.atleast_1d(a).view(np.uint8),
                                      np.atleast_1d(b).view(np.uint8))


def test_element_values_equal_mix_lut():
  # NVFP4/MixFP4 decode (flag, nibble) on the float32 bits; the table defines the values.
  codes = jnp.tile(jnp.arange(16, dtype=jnp.uint8), 2)
  flags = jnp.repeat(jnp.array([False, True]), 16)
  got = jax.jit(_nvfp4.element_values)(codes, flags)
  np.testing.assert_array_equal(np.asarray(got).view(np.uint32), F.MIX_LUT.view(np.uint32))


@pytest.mark.parametrize("name", ["nvfp4", "mixfp4", "mxfp4_floor", "int4_g16", "int4_g32"])
def test_dequantize_equals_decoding_unpacked_codes(name):
  # Every byte and scale byte value (flags and E4M3 NaN included), against the codec's
  # decode of the unpacked codes.
  fmt = F.get_format(name)
  bs = fmt.block_size
  rng = np.random.default_rng(2)
  codes = jnp.asarray(rng.integers(0, 256, (6, 4 * bs // 2)), jnp.uint8)
  if fmt.name == "int4" and fmt.scale_dtype == "f32":
    scales = jnp.asarray(rng.standard_normal((6, 4)), jnp.float32)
  else:
    scales = jnp.asarray(rng.integers(0, 256, (6, 4)), jnp.uint8)
  q = F.QArray(codes, scales, jnp.float32(0.75), fmt, (6, 4 * bs), 1)
  want = _api._CODECS[fmt.name].decode(
      F.unpack_nibbles(codes).reshape(6, 4, bs), scales, q.tensor_scale, fmt).reshape(6, -1)
  np.testing.assert_array_equal(np.asarray(F.dequantize(q)).view(np.uint32),
                                np.asarray(want).view(np.uint32))


def _special_blocks() -> np.ndarray:
  """Finite blocks plus NaN, ±Inf, all-zero and zero-scale blocks (codes +0, not -0)."""
  special = _blocks(16)[:8].copy()
  special[0, 1, 3], special[1, 2, :4] = np.nan, np.inf
  special[2, 0, 5], special[3, 4] = -np.inf, 0.0
  special[4, 5, :] = np.nan
  special[5, 6, :8], special[5, 7] = -1e-30, -0.0
  return special


@pytest.mark.parametrize("name", ["nvfp4", "mixfp4"])
def test_round_to_nearest_equals_reference_blocks(name):
  # `encode` / `fake` round to nearest with fused passes that pack codes straight from x;
  # `nvfp4_blocks` and MixFP4's `_staged` (candidates, then select) are the plain
  # references. Same bits on finite blocks and on blocks with non-finite elements.
  fmt = F.get_format(name)
  codec = _api._CODECS[name]
  if name == "nvfp4":
    def reference(v, a):
      s_enc, s_dec = codec.tensor_scales(a)
      return codec.nvfp4_blocks(v, s_enc, s_dec, amax_b=a)
  else:
    def reference(v, a):
      return _mixfp4._staged(v, a, fmt, None)[:3]
  for data, all_finite in ((_blocks(16), True), (_blocks(16), False), (_special_blocks(), False)):
    v = jnp.asarray(data)
    amax_b = block_amax(v)
    codes, sb, _ = jax.jit(lambda v, a, af=all_finite: codec.encode(v, a, fmt, None, af))(
        v, amax_b)
    xh = jax.jit(lambda v, a, af=all_finite: codec.fake(v, a, fmt, None, af))(v, amax_b)
    # The codecs leave non-finite blocks to `_by_blocks`' mark; the references mark them.
    bad = jnp.asarray(~np.isfinite(data).all(-1))
    codes, sb, _ = _api._nan_scales(fmt)((codes, sb, None), bad)
    xh = _api._nan_values(xh, bad)
    if not all_finite:
      assert (np.asarray(sb)[np.asarray(bad)] == 0x7F).all()
      assert np.isnan(np.asarray(xh)[np.asarray(bad)]).all()
    want_codes, want_sb, want_xh = jax.jit(reference)(v, amax_b)
    _, want_sb, _ = _api._nan_scales(fmt)((None, want_sb, None), bad)  # `_staged` leaves
    want_xh = _api._nan_values(want_xh, bad)                            # them to the mark too
    np.testing.assert_array_equal(np.asarray(sb), np.asarray(want_sb))
    np.testing.assert_array_equal(np.asarray(codes), np.asarray(F.pack_nibbles(want_codes)))
    np.testing.assert_array_equal(np.asarray(xh).view(np.uint32),
                                  np.asarray(want_xh).view(np.uint32))


@pytest.mark.parametrize("name", ["mxfp4_floor", "mxfp4_rceil"])
def test_mxfp4_round_to_nearest_equals_round_float(name):
  # MXFP4 rounds to nearest through `e2m1_or_int_codes` on both paths (NaN read as 0 by
  # `rne_input` on the general one); `round_float` on the scaled blocks is the reference.
  fmt = F.get_format(name)
  codec = _api._CODECS[fmt.name]

  def reference(v, a):
    e = codec.mx_scale_exponent(a, fmt.scale_rule)
    return F.pack_nibbles(F.round_float(v * _grids.exp2i(-e)[..., None], F.E2M1)[0])

  special = _special_blocks().reshape(8, 4, 32)  # the same rows, in blocks of 32
  for data, all_finite in ((_blocks(32), True), (_blocks(32), False), (special, False)):
    v = jnp.asarray(data)
    amax_b = block_amax(v)
    codes, _, _ = jax.jit(lambda v, a, af=all_finite: codec.encode(v, a, fmt, None, af))(
        v, amax_b)
    np.testing.assert_array_equal(np.asarray(codes), np.asarray(jax.jit(reference)(v, amax_b)))
