"""Log-space Gaussian interval masses (the leaf box integrals) against scipy in float64."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxlab.pc import circuit, gaussian


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
  got = np.asarray(jax.jit(gaussian.log_ndtr_interval)(a, b), np.float64)
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
  got = jax.jit(gaussian.normal_log_interval_mass)(*(jnp.asarray(v, jnp.float32) for v in
                                                     (mean, scale, lo, hi)))
  want = np.array([_scipy_log_interval(a, b) for a, b in
                   zip((lo - mean) / scale, (hi - mean) / scale, strict=True)])
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(np.asarray(gaussian.normal_logpdf(
      jnp.asarray(lo, jnp.float32), jnp.asarray(mean, jnp.float32),
      jnp.asarray(scale, jnp.float32))), stats.norm.logpdf(lo, mean, scale), rtol=1e-5)


# One compile for every case below (the interval ends are traced, infinities included).
_mass_grad = jax.jit(jax.grad(gaussian.normal_log_interval_mass, (0, 1)))


# With mean 0.3 and scale 1.5: (-inf, 21.3] and [-20.7, inf) are the half-lines ending 14
# standard deviations out, where log_ndtr rounds to 0 in float32 (the HFV training NaN).
@pytest.mark.parametrize("lo,hi", [(-np.inf, 0.4), (0.4, np.inf), (-np.inf, np.inf), (1.0, 0.5),
                                   (0.2, 0.9), (0.7, 0.7 + 1e-7), (-np.inf, 21.3),
                                   (-20.7, np.inf), (-np.inf, 80.0), (-80.0, np.inf)])
def test_gradients_are_finite_at_infinite_and_empty_intervals(lo, hi):
  grads = _mass_grad(jnp.float32(0.3), jnp.float32(1.5), jnp.float32(lo), jnp.float32(hi))
  assert all(np.isfinite(np.asarray(g)) for g in grads), grads


def test_hfv_leaf_normaliser_gradient_is_finite_at_the_failing_leaf():
  # A leaf factor of HFV training on circles (seed 1, quick preset) at the step where its
  # gradient first went NaN: component 1 (scale 0.09) owns (-inf, 0.424], whose upper end
  # is 14 standard deviations above its mean, so its log mass rounds to -0.0.
  mean = jnp.array([1.7395757, -0.8385842, 1.6864874, 1.7370138], jnp.float32)
  scale = jnp.array([0.19784647, 0.09027566, 0.63916445, 0.6773263], jnp.float32)

  def log_z(mean, scale):
    lo, hi = circuit.interval_cells(mean)
    return jax.scipy.special.logsumexp(
        gaussian.normal_log_interval_mass(mean, scale, lo, hi) - jnp.log(4.0))

  value, grads = jax.jit(jax.value_and_grad(log_z, (0, 1)))(mean, scale)
  assert np.isfinite(float(value))
  assert all(np.all(np.isfinite(np.asarray(g))) for g in grads), grads
  # The finite gradient is also the right one: compare with central differences in float64.
  m64, s64 = np.asarray(mean, np.float64), np.asarray(scale, np.float64)

  def log_z64(m, s):
    order = np.sort(m)
    mids = 0.5 * (order[1:] + order[:-1])
    rank = np.argsort(np.argsort(m))
    lo = np.concatenate([[-np.inf], mids])[rank]
    hi = np.concatenate([mids, [np.inf]])[rank]
    mass = stats.norm.cdf(hi, m, s) - stats.norm.cdf(lo, m, s)
    return np.log(np.mean(mass))

  eps = 1e-6
  for i in range(4):
    e = np.eye(4)[i] * eps
    dm = (log_z64(m64 + e, s64) - log_z64(m64 - e, s64)) / (2 * eps)
    ds = (log_z64(m64, s64 + e) - log_z64(m64, s64 - e)) / (2 * eps)
    np.testing.assert_allclose(float(grads[0][i]), dm, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(float(grads[1][i]), ds, rtol=1e-3, atol=1e-5)


def test_log1mexp_is_accurate_near_zero_and_far_from_it():
  x = jnp.array([-1e-6, -0.1, -0.69, -0.7, -5.0, -50.0], jnp.float32)
  x64 = np.asarray(x, np.float64)
  want = np.where(x64 > -np.log(2), np.log(-np.expm1(x64)), np.log1p(-np.exp(x64)))
  np.testing.assert_allclose(np.asarray(gaussian.log1mexp(x)), want, rtol=1e-5)
