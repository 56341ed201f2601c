"""Log-space Gaussian interval masses (the leaf box integrals) against scipy in float64."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxlab.pc import gaussian


def _scipy_log_interval(a: float, b: float) -> float:
  """log(Phi(b) - Phi(a)) in float64, from the side where the tail probabilities are small."""
  if not b > a:
    return -np.inf
  if a + b > 0:  # upper side: sf(a) - sf(b)
    la, lb = stats.norm.logsf(a), stats.norm.logsf(b)
    return float(la + np.log1p(-np.exp(lb - la)))
  la, lb = stats.norm.logcdf(a), stats.norm.logcdf(b)
  return float(lb + np.log1p(-np.exp(la - lb)))


CASES = [(-1.0, 1.0), (-0.3, 2.5), (0.5, 0.6), (-np.inf, 0.3), (-np.inf, -9.0), (1.2, np.inf),
         (9.0, np.inf), (8.0, 9.0), (-30.0, -29.5), (-np.inf, np.inf), (2.0, 2.0), (3.0, 1.0),
         (-1e-4, 1e-4), (1.5, 1.5005), (-3.0, -2.9999999)]


def test_log_interval_matches_scipy_including_tails():
  a = jnp.array([c[0] for c in CASES], jnp.float32)
  b = jnp.array([c[1] for c in CASES], jnp.float32)
  got = np.asarray(gaussian.log_ndtr_interval(a, b), np.float64)
  want = np.array([_scipy_log_interval(float(x), float(y)) for x, y in zip(a, b, strict=True)])
  assert np.all(np.isneginf(got) == np.isneginf(want))
  finite = np.isfinite(want)
  np.testing.assert_allclose(got[finite], want[finite], rtol=2e-5, atol=1e-6)
  # The plain CDF difference where it is representable.
  mid = np.array([np.log(stats.norm.cdf(y) - stats.norm.cdf(x)) for x, y in CASES[:3]])
  np.testing.assert_allclose(got[:3], mid, rtol=1e-5)


def test_normal_interval_mass_matches_scipy_with_mean_and_scale():
  rng = np.random.default_rng(0)
  mean, scale = rng.normal(size=50), rng.uniform(0.1, 3.0, size=50)
  lo = rng.normal(scale=3.0, size=50)
  hi = lo + rng.uniform(0.01, 4.0, size=50)
  got = gaussian.normal_log_interval_mass(*(jnp.asarray(v, jnp.float32) for v in
                                            (mean, scale, lo, hi)))
  want = np.array([_scipy_log_interval(a, b) for a, b in
                   zip((lo - mean) / scale, (hi - mean) / scale, strict=True)])
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(np.asarray(gaussian.normal_logpdf(
      jnp.asarray(lo, jnp.float32), jnp.asarray(mean, jnp.float32),
      jnp.asarray(scale, jnp.float32))), stats.norm.logpdf(lo, mean, scale), rtol=1e-5)


@pytest.mark.parametrize("lo,hi", [(-np.inf, 0.4), (0.4, np.inf), (-np.inf, np.inf), (1.0, 0.5),
                                   (0.2, 0.9), (0.7, 0.7 + 1e-7)])
def test_gradients_are_finite_at_infinite_and_empty_intervals(lo, hi):
  grads = jax.grad(lambda m, s: gaussian.normal_log_interval_mass(m, s, lo, hi), (0, 1))(
      jnp.float32(0.3), jnp.float32(1.5))
  assert all(np.isfinite(np.asarray(g)) for g in grads), grads


def test_log1mexp_is_accurate_near_zero_and_far_from_it():
  x = jnp.array([-1e-6, -0.1, -0.69, -0.7, -5.0, -50.0], jnp.float32)
  x64 = np.asarray(x, np.float64)
  want = np.where(x64 > -np.log(2), np.log(-np.expm1(x64)), np.log1p(-np.exp(x64)))
  np.testing.assert_allclose(np.asarray(gaussian.log1mexp(x)), want, rtol=1e-5)
