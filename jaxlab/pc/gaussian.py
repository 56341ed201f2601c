"""Log-space Gaussian interval masses: the leaf box integrals of a probabilistic circuit.

A box integral of a smooth, decomposable circuit with Gaussian leaves is the circuit
evaluated with each leaf replaced by its interval mass F(b) - F(a). In a circuit that mass
is multiplied across many variables, so it is kept in log space: with Phi the standard
normal CDF and a < b,

  log(Phi(b) - Phi(a)) = log_ndtr(b) + log1mexp(log_ndtr(a) - log_ndtr(b)),

evaluated on the side of zero where the CDF is small (by the symmetry
Phi(b) - Phi(a) = Phi(-a) - Phi(-b)), so far tails keep their relative precision.
"""

import jax.numpy as jnp
from jax.scipy.special import log_ndtr
from jaxtyping import Array, ArrayLike, Float

LOG_SQRT_2PI = 0.5 * float(jnp.log(2.0 * jnp.pi))
# Intervals narrower than this (in standard deviations) use the midpoint rule.
NARROW = 1e-3


def log1mexp(x: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
  """log(1 - exp(x)) for x <= 0, accurate near 0 and for very negative x.

  Args:
    x: non-positive values (0 gives -inf).

  Returns:
    log(1 - exp(x)), elementwise.

  Example::

    log1mexp(jnp.log(0.25))  # == log(0.75)
  """
  x = jnp.asarray(x)
  # Maechler (2012): expm1 near 0, log1p far from it. The unselected branch is fed a safe
  # value so that its gradient never produces a NaN.
  near = x > -0.6931471805599453
  safe_near = jnp.where(near, x, -1.0)
  safe_far = jnp.where(near, -1.0, x)
  return jnp.where(near, jnp.log(-jnp.expm1(safe_near)), jnp.log1p(-jnp.exp(safe_far)))


def log_ndtr_interval(a: Float[ArrayLike, "..."], b: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
  """log(Phi(b) - Phi(a)) for the standard normal CDF Phi; -inf where a >= b.

  Infinite endpoints are allowed (a = -inf, b = +inf gives 0). Gradients are finite
  wherever the interval is non-empty.

  Args:
    a: lower endpoints.
    b: upper endpoints (broadcast against `a`).

  Returns:
    The log mass of [a, b] under N(0, 1).

  Example::

    log_ndtr_interval(-1.96, 1.96)  # ~ log(0.95)
  """
  a, b = jnp.broadcast_arrays(jnp.asarray(a), jnp.asarray(b))
  empty = ~(b > a)
  # Work where the CDF is small: reflect intervals whose midpoint is positive (a + b is NaN
  # for (-inf, inf), which is not reflected).
  flip = (a + b) > 0
  lo = jnp.where(flip, -b, a)
  hi = jnp.where(flip, -a, b)
  # After reflection only lo can be -inf, and hi = +inf only together with it. Every branch
  # gets finite stand-ins (with lo < hi) so that no gradient is 0 * inf = NaN.
  lo_inf = jnp.isneginf(lo)
  hi_inf = jnp.isposinf(hi)
  hi_s = jnp.where(hi_inf | empty, 0.0, hi)
  lo_s = jnp.where(lo_inf | empty, hi_s - 1.0, lo)
  log_hi = log_ndtr(hi_s)
  # A narrow interval would round log_ndtr(lo) - log_ndtr(hi) to 0 (and its gradient to
  # NaN): there the midpoint rule log(width) + log phi(mid) is exact to ~width^2 / 24.
  width = hi_s - lo_s
  narrow = width < NARROW
  # The two-sided branch gets its own stand-in (-1, 0) wherever it is not selected. Reusing
  # (hi - 1, hi) there is not safe: for (-inf, hi] with hi >~ 13, log_ndtr rounds to 0 at
  # both ends, log1mexp(0) has an infinite gradient, and 0 * inf = NaN leaks through the
  # untaken `where` branch into the leaf parameters (the HFV training NaN).
  use_both = ~(lo_inf | empty | narrow)
  both_lo = jnp.where(use_both, lo_s, -1.0)
  both_hi = jnp.where(use_both, hi_s, 0.0)
  log_both_hi = log_ndtr(both_hi)
  both = log_both_hi + log1mexp(jnp.minimum(log_ndtr(both_lo) - log_both_hi, 0.0))
  mid = 0.5 * (lo_s + hi_s)
  small = jnp.log(jnp.where(narrow, width, 1.0)) - 0.5 * mid * mid - LOG_SQRT_2PI
  out = jnp.where(lo_inf, jnp.where(hi_inf, 0.0, log_hi), jnp.where(narrow, small, both))
  return jnp.where(empty, -jnp.inf, out)


def normal_log_interval_mass(mean: Float[ArrayLike, "..."], scale: Float[ArrayLike, "..."],
                             lo: Float[ArrayLike, "..."], hi: Float[ArrayLike, "..."]
                             ) -> Float[Array, "..."]:
  """log P(lo <= X <= hi) for X ~ N(mean, scale^2), elementwise with broadcasting.

  Args:
    mean: the Gaussians' means.
    scale: their standard deviations (> 0).
    lo: interval lower ends (may be -inf).
    hi: interval upper ends (may be +inf).

  Returns:
    The log interval masses (-inf for empty intervals).

  Example::

    normal_log_interval_mass(1.0, 2.0, -jnp.inf, 1.0)  # == log(0.5)
  """
  mean, scale = jnp.asarray(mean), jnp.asarray(scale)
  lo, hi = jnp.asarray(lo), jnp.asarray(hi)
  # Standardise finite ends only: (inf - mean) / scale would give NaN gradients.
  lo_inf, hi_inf = jnp.isneginf(lo), jnp.isposinf(hi)
  za = jnp.where(lo_inf, -jnp.inf, (jnp.where(lo_inf, 0.0, lo) - mean) / scale)
  zb = jnp.where(hi_inf, jnp.inf, (jnp.where(hi_inf, 0.0, hi) - mean) / scale)
  return log_ndtr_interval(za, zb)


def normal_logpdf(x: Float[ArrayLike, "..."], mean: Float[ArrayLike, "..."],
                  scale: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
  """log N(x; mean, scale^2), elementwise with broadcasting.

  Example::

    normal_logpdf(0.0, 0.0, 1.0)  # == -0.5 log(2 pi)
  """
  z = (jnp.asarray(x) - mean) / scale
  return -0.5 * z * z - jnp.log(scale) - LOG_SQRT_2PI
