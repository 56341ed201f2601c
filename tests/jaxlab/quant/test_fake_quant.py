"""Fake quantization: exact group values, STE gradients, LAC, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.quant import fake_quant, fake_quant_dynamic, grid_bounds, kurtosis, lac_init_logit


def test_int4_groups_hand_computed():
  # Two groups of 4 along K. Group 0: max|x| = 0.8, s = 0.8 / 8 = 0.1 (paper M = 8);
  # 0.8 / 0.1 = 8 clips to 7 -> 0.7; 0.25 / 0.1 = 2.5 rounds half-even to 2 -> 0.2.
  # Group 1: max|x| = 4, s = 0.5; -4 -> -8 (on the grid); 1.3 -> 2.6 -> 3 -> 1.5.
  x = jnp.array([[0.8, 0.25, -0.31, 0.0, -4.0, 1.3, 0.2, 3.9]])
  got = fake_quant(x, bits=4, group_size=4)
  want = np.array([[0.7, 0.2, -0.3, 0.0, -4.0, 1.5, 0.0, 3.5]])
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_int4_qmax_interpretation_and_per_channel():
  # absmax_m="qmax": s = max|x| / 7 for the whole row (group_size=None).
  x = jnp.array([[0.7, -0.35, 0.1, 0.0]])
  got = fake_quant(x, bits=4, group_size=None, absmax_m="qmax")
  np.testing.assert_allclose(got, [[0.7, -0.4, 0.1, 0.0]], atol=1e-6)  # -3.5 -> -4 (even)
  assert grid_bounds(8) == (-128.0, 127.0, 128.0)


def test_int8_and_fp4_hand_computed():
  x = jnp.array([1.0, 0.5, -0.0625, 0.004])  # s = 1/128; 0.004 * 128 = 0.512 -> 1
  np.testing.assert_allclose(fake_quant(x, bits=8, group_size=4),
                             [127 / 128, 0.5, -0.0625, 1 / 128], atol=1e-7)
  # FP4 (E2M1): s = 6 / 6 = 1; 2.5 -> 2 and 0.75 -> 1 (ties to even), 5 -> 4.
  y = jnp.array([6.0, 2.5, 0.75, -5.0])
  np.testing.assert_allclose(fake_quant(y, bits=4, group_size=4, fmt="fp4"), [6, 2, 1, -4])


def test_scales_above_2_pow_126_do_not_flush_the_group_to_zero():
  # INT2 near float32's maximum: s = 3.3e38 / 2 > 2**126, whose reciprocal (XLA divides
  # by a broadcast scale that way) is a float32 subnormal, flushed to 0 on CPU.
  x = jnp.array([[1e-38, -3.3e38, 1.0e38, 0.0]])
  for m, b in (("paper", 2), ("qmax", 2), ("paper", 3)):
    got = np.asarray(fake_quant(x, bits=b, group_size=4, absmax_m=m))
    assert got[0, 1] == np.float32(-3.3e38), (m, b, got)
    got = np.asarray(jax.jit(lambda v, b=b, m=m: fake_quant_dynamic(
        v, bits=jnp.int32(b), group_size=jnp.int32(4), group_sizes=(4,), absmax_m=m))(x))
    assert got[0, 1] == np.float32(-3.3e38), (m, b, got)


def test_full_precision_bits_is_identity():
  x = jax.random.normal(jax.random.key(0), (3, 8))
  assert fake_quant(x, bits=16, group_size=4) is x


def test_group_size_must_divide_k():
  with pytest.raises(ValueError, match="does not divide"):
    fake_quant(jnp.ones((2, 24)), bits=4, group_size=16)
  with pytest.raises(ValueError, match="group_size"):
    fake_quant(jnp.ones((2, 24)), bits=4, group_size=0)
  with pytest.raises(ValueError, match="bits"):
    fake_quant(jnp.ones((2, 24)), bits=3, group_size=8, fmt="fp4")


def test_ste_gradient_identity_inside_zero_outside():
  x = jnp.array([[0.8, 0.25, -0.31, 0.0]])
  g = jax.grad(lambda v: jnp.sum(fake_quant(v, bits=4, group_size=4) * jnp.arange(1.0, 5.0)))(x)
  # AbsMax: nothing lies outside [-max, max]; the +8 -> +7 clip keeps its gradient.
  np.testing.assert_array_equal(g, [[1.0, 2.0, 3.0, 4.0]])
  # LAC with clip = 0.5 * max|x| = 0.4: 0.8 is clipped (gradient 0), the rest pass.
  logit = jnp.array([0.0])
  g = jax.grad(lambda v: jnp.sum(fake_quant(v, bits=4, group_size=4, clip_logit=logit)))(x)
  np.testing.assert_array_equal(g, [[0.0, 1.0, 1.0, 1.0]])


def test_lac_clip_learns():
  # Laplace inputs, 1024-wide groups: the MSE-optimal 4-bit clip is ~5 b while
  # max|x| is ~7.6 b, so SGD on the quantization MSE must shrink an AbsMax-like
  # clip (ratio 0.98), and grow a clip that crushes the tails (ratio 0.2).
  x = jax.random.laplace(jax.random.key(1), (64, 1024))
  loss = lambda lg: jnp.mean((fake_quant(x, bits=4, group_size=1024, clip_logit=lg) - x) ** 2)
  grad = jax.jit(jax.grad(loss))
  for ratio, direction in ((0.98, -1.0), (0.2, 1.0)):
    logit = jnp.full((1,), lac_init_logit(ratio))
    start = float(loss(logit))
    for _ in range(10):
      logit = logit - 20.0 * grad(logit)
    assert direction * (float(logit[0]) - lac_init_logit(ratio)) > 0.05, (ratio, logit)
    assert float(loss(logit)) < start


def test_dynamic_matches_static():
  x = jax.random.normal(jax.random.key(2), (4, 32))
  f = jax.jit(lambda v, b, g: fake_quant_dynamic(v, bits=b, group_size=g, group_sizes=(8, 32)))
  for bits, g in ((4, 8), (4, 32), (8, 8), (16, 32)):
    want = fake_quant(x, bits=bits, group_size=g)
    np.testing.assert_array_equal(f(x, jnp.int32(bits), jnp.int32(g)), want)
  gd = jax.grad(lambda v: f(v, jnp.int32(4), jnp.int32(8)).sum())(x)
  gs = jax.grad(lambda v: fake_quant(v, bits=4, group_size=8).sum())(x)
  np.testing.assert_allclose(gd, gs, rtol=1e-6)


def test_kurtosis():
  x = jax.random.normal(jax.random.key(3), (200_000,))
  assert abs(float(kurtosis(x)) - 3.0) < 0.1
  assert float(kurtosis(x.at[:100].mul(30.0))) > 10.0


def test_dynamic_unlisted_group_size_raises_or_gives_nan():
  # Old code: a G not in group_sizes silently used the last one (here per-channel).
  x = jax.random.normal(jax.random.key(1), (2, 32))
  with pytest.raises(ValueError, match=r"group_size must be one of group_sizes \(16, 32\)"):
    fake_quant_dynamic(x, bits=4, group_size=8, group_sizes=(16, 32))
  # Traced: one program for (bits, G) = (4, 8) unlisted, (16, 8) full precision, (4, 16).
  f = jax.jit(jax.vmap(lambda b, g: fake_quant_dynamic(x, bits=b, group_size=g,
                                                       group_sizes=(16, 32))))
  got = np.asarray(f(jnp.array([4, 16, 4]), jnp.array([8, 8, 16])))
  assert np.isnan(got[0]).all()
  np.testing.assert_array_equal(got[1], x)  # full precision: G is not used
  assert np.isfinite(got[2]).all() and not np.array_equal(got[2], x)


def test_array_bits_out_of_range_raise_or_give_nan():
  # Old code: array bits 1, 0, -3, 12 were used as is (e.g. -12.0 everywhere for -3).
  x = jnp.array([[0.1, -0.8, 0.4, 0.3]])
  for b in (1, 0, -3, 12):
    with pytest.raises(ValueError, match=rf"bits must be in \[2, 8\].*got {b}"):
      fake_quant(x, bits=jnp.int32(b), group_size=4)
    with pytest.raises(ValueError, match=rf"bits must be in \[2, 8\].*got {b}"):
      fake_quant_dynamic(x, bits=jnp.int32(b), group_size=4, group_sizes=(4,))
  # Traced: NaN outside [2, 8] and >= 16; INT2 s = 0.8 / 2 = 0.4, INT4 s = 0.1 (exact).
  f = jax.jit(jax.vmap(lambda b: (fake_quant(x, bits=b, group_size=4), fake_quant_dynamic(
      x, bits=b, group_size=4, group_sizes=(4,)))))
  bits = jnp.array([1, 0, -3, 12, 2, 4, 16])
  for got in f(bits):
    got = np.asarray(got)[:, 0]
    assert np.isnan(got[:4]).all()
    np.testing.assert_allclose(got[4:], [[0.0, -0.8, 0.4, 0.4], x[0], x[0]], atol=1e-7)
