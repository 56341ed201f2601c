"""A small log-domain entropic OT solver (Sinkhorn) in jnp.

jaxlab uses its own ~40-line solver instead of ott-jax: ott-jax 0.6 pulls
equinox, lineax and jaxopt, and its support of both jax lines jaxlab runs on
(0.10 and 0.12) could not be checked here. The solver is the textbook
log-domain iteration (Cuturi 2013; Peyre & Cuturi 2019, Alg. 3), and its
coupling matches POT's `ot.sinkhorn(..., method="sinkhorn_log")` (a test).

It solves  min_P <P, C> + eps sum_ij P_ij (log P_ij - 1)  s.t.  P 1 = a, P^T 1 = b
with the potentials f, g: P_ij = exp((f_i + g_j - C_ij) / eps). Entries with zero
mass (padding) get a potential of -inf and a zero row/column, so padded
problems batch with `jax.vmap` (one span per problem, or one sequence).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import Array
from jax.scipy.special import logsumexp
from jaxtyping import Float


class SinkhornOutput(NamedTuple):
  """coupling: [n, m]; f: [n], g: [m] dual potentials; error: L1 error of the row marginal."""
  coupling: Array
  f: Array
  g: Array
  error: Array


def sinkhorn(cost: Float[Array, "n m"], a: Float[Array, " n"], b: Float[Array, " m"], *,
             epsilon: float = 0.05, num_iters: int = 200) -> SinkhornOutput:
  """Entropic OT between `a` and `b` under `cost` (log-domain Sinkhorn, fixed iterations).

  Args:
    cost: [n, m] ground cost (finite).
    a: [n] source masses (>= 0, same total as `b`); zeros mark padding.
    b: [m] target masses (>= 0).
    epsilon: entropic regularisation (> 0), in the units of `cost`.
    num_iters: Sinkhorn iterations (each updates f then g; run by `lax.scan`).

  Returns:
    A `SinkhornOutput`; `error` = sum_i |(P 1)_i - a_i| measures convergence
    (the column marginal is exact after each g update).

  Raises:
    ValueError: shapes disagree or epsilon/num_iters are not positive.

  Example:
    >>> import jax.numpy as jnp
    >>> out = sinkhorn(jnp.array([[0., 1.], [1., 0.]]), jnp.array([.5, .5]), jnp.array([.5, .5]),
    ...                epsilon=0.01)
    >>> [round(float(x), 3) for x in out.coupling.ravel()]
    [0.5, 0.0, 0.0, 0.5]
  """
  if cost.shape != (a.shape[0], b.shape[0]):
    raise ValueError(f"cost must have shape [len(a), len(b)] = {(a.shape[0], b.shape[0])}, "
                     f"got {cost.shape}")
  if not epsilon > 0 or num_iters < 1:
    raise ValueError(f"epsilon must be > 0 and num_iters >= 1, got {epsilon}, {num_iters}")
  cost = cost.astype(jnp.float32)
  log_a = jnp.where(a > 0, jnp.log(jnp.where(a > 0, a, 1.0)), -jnp.inf)
  log_b = jnp.where(b > 0, jnp.log(jnp.where(b > 0, b, 1.0)), -jnp.inf)

  def lse(x, axis):
    # A row of -inf only (padding) stays -inf instead of producing NaN.
    m = jnp.max(x, axis=axis, keepdims=True)
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    return logsumexp(x - m, axis=axis) + jnp.squeeze(m, axis)

  def body(carry, _):
    f, g = carry
    f = epsilon * (log_a - lse((g[None, :] - cost) / epsilon, 1))
    g = epsilon * (log_b - lse((f[:, None] - cost) / epsilon, 0))
    return (f, g), None

  init = (jnp.zeros_like(log_a), jnp.zeros_like(log_b))
  (f, g), _ = jax.lax.scan(body, init, None, length=num_iters)
  f = jnp.where(a > 0, f, -jnp.inf)
  g = jnp.where(b > 0, g, -jnp.inf)
  coupling = jnp.exp((f[:, None] + g[None, :] - cost) / epsilon)
  error = jnp.sum(jnp.abs(coupling.sum(1) - a))
  # A NaN mass would otherwise read as padding (NaN > 0 is false) and a NaN cost in a
  # padded row would vanish: any NaN input gives a NaN plan, potentials and error.
  bad = jnp.any(jnp.isnan(a)) | jnp.any(jnp.isnan(b)) | jnp.any(jnp.isnan(cost))
  return SinkhornOutput(*(jnp.where(bad, jnp.nan, x) for x in (coupling, f, g, error)))
