"""Training objectives for MoDEX / F-EDL and the EDL baseline (per-example values).

All losses take `targets` either as integer class indices [...] (in
`[0, k)`) or as soft / one-hot rows [..., k] on the simplex, return one value
per example (callers reduce, as in `optax.losses`) and are keyword-only.

Label rule: concrete integer labels out of `[0, k)` raise `ValueError`;
traced ones (under `jit`/`vmap`/`grad`) cannot raise, so the loss of an
example with an out-of-range label is NaN (never a silent zero-target loss),
and the other examples are unaffected.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.scipy.special import digamma, gammaln
from jaxtyping import Float, Integer

from jaxlab import validation
from jaxlab.uq._modex import modex_log_mean, modex_moments

Targets = Float[Array | np.ndarray, "*b k"] | Integer[Array | np.ndarray, "*b"]


def _as_targets(targets, like) -> Array:
  """Validates `targets` against the prediction `like` [..., k]; returns rows [..., k].

  Integer class indices [...] become one-hot rows in `like`'s float dtype
  (NaN rows for traced out-of-range labels, see the module docstring); float
  targets must have `like`'s shape and lie on the simplex.
  """
  k = validation.check_rank_and_classes("alpha", like)
  shape, target_shape = tuple(np.shape(like)), tuple(np.shape(targets))
  dtype = jnp.result_type(targets)
  if jnp.issubdtype(dtype, jnp.integer):
    if target_shape != shape[:-1]:
      raise ValueError(
          f"targets as integer class indices must have shape {shape[:-1]} (the prediction's "
          f"batch shape; the prediction has shape {shape}), got {target_shape}")
    v = validation.concrete(targets)
    if v is not None and v.size and (v.min() < 0 or v.max() >= k):
      raise ValueError(f"targets as integer class indices must lie in [0, {k}); got values in "
                       f"[{int(v.min())}, {int(v.max())}]")
    return _one_hot(jnp.asarray(targets), k, jnp.result_type(like, jnp.float32))
  if not jnp.issubdtype(dtype, jnp.floating):
    raise ValueError(f"targets must be integer class indices {shape[:-1]} or float rows {shape} "
                     f"on the simplex, got dtype {dtype}")
  if target_shape != shape:
    raise ValueError(
        f"targets must be integer class indices of shape {shape[:-1]} or float rows of the "
        f"prediction's shape {shape}; got float targets of shape {target_shape}")
  validation.check_simplex("targets", targets)
  return jnp.asarray(targets)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _one_hot(labels: Array, k: int, dtype) -> Array:
  ok = (labels >= 0) & (labels < k)
  return jnp.where(ok[..., None], jax.nn.one_hot(labels, k, dtype=dtype), jnp.nan)


def modex_brier_loss(
    *,
    alpha: Float[Array | np.ndarray, "*b k"],
    tau: Float[Array | np.ndarray, "*b k"],
    omega: Float[Array | np.ndarray, "*b k"],
    targets: Targets,
    omega_weight: float = 1.0,
) -> Float[Array, "*b"]:
  """Expected Brier score under the mixture plus a Brier regulariser on omega.

    L = ||y - mu||^2 + sum_j Var_j + omega_weight * ||y - omega||^2

  This is F-EDL's official objective with its mixing weights p replaced by the
  plausibility weights omega (the MoDEX objective itself is not published in
  the material we could read: jaxlab interpretation, `omega_weight` is the
  knob; F-EDL uses 1).

  Args:
    alpha: shared evidence, [..., k], > 0.
    tau: class-specific advocacy, [..., k], >= 0.
    omega: plausibility weights, [..., k], on the simplex.
    targets: integer class indices [...] in [0, k), or soft / one-hot rows
      [..., k] on the simplex.
    omega_weight: weight of the Brier regulariser on omega.

  Returns:
    The loss of each example, [...].

  Raises:
    ValueError: on a targets shape that is neither [...] (integers) nor
      [..., k] (floats), and for concrete out-of-range integer labels or
      float rows off the simplex (traced ones give NaN; module docstring).

  Example:
    >>> import jax.numpy as jnp
    >>> y = jnp.eye(3)[:2]
    >>> kw = dict(alpha=jnp.ones((2, 3)), tau=jnp.ones((2, 3)), omega=jnp.full((2, 3), 1 / 3))
    >>> modex_brier_loss(targets=y, **kw).shape
    (2,)
    >>> bool(jnp.allclose(modex_brier_loss(targets=jnp.array([0, 1]), **kw),
    ...                   modex_brier_loss(targets=y, **kw)))
    True
  """
  targets = _as_targets(targets, alpha)
  mom = modex_moments(alpha, tau, omega)
  return _brier(mom.mean, mom.variance, jnp.asarray(omega), targets,
                jnp.asarray(omega_weight, jnp.float32))


@jax.jit
def _brier(mean: Array, var: Array, omega: Array, targets: Array, omega_weight: Array) -> Array:
  brier = jnp.sum(jnp.square(targets - mean) + var, axis=-1)
  return brier + omega_weight * jnp.sum(jnp.square(targets - omega), axis=-1)


def modex_nll_loss(
    *,
    alpha: Float[Array | np.ndarray, "*b k"],
    tau: Float[Array | np.ndarray, "*b k"],
    omega: Float[Array | np.ndarray, "*b k"],
    targets: Targets,
) -> Float[Array, "*b"]:
  """Mixture NLL: `-sum_j y_j log E_q[pi_j]` (cross-entropy on the mixture mean).

  The alternative objective of the spec (UCE-style); log-space, finite for
  extreme parameters. `targets`: integer class indices [...] or rows
  [..., k] on the simplex, as in `modex_brier_loss`.

  Example:
    >>> import jax.numpy as jnp
    >>> loss = modex_nll_loss(alpha=jnp.ones((1, 2)), tau=jnp.zeros((1, 2)),
    ...                       omega=jnp.full((1, 2), 0.5), targets=jnp.eye(2)[:1])
    >>> round(float(loss[0]), 4)  # log 2
    0.6931
  """
  targets = _as_targets(targets, alpha)
  return -jnp.sum(targets * modex_log_mean(alpha, tau, omega), axis=-1)


def dirichlet_kl_uniform(alpha: Float[Array | np.ndarray, "*b k"]) -> Float[Array, "*b"]:
  """KL(Dir(alpha) || Dir(1, ..., 1)), closed form.

  Example:
    >>> import jax.numpy as jnp
    >>> round(float(dirichlet_kl_uniform(jnp.ones((3,)))), 4) + 0.0
    0.0
  """
  validation.check_rank_and_classes("alpha", alpha)
  validation.check_positive("alpha", alpha, strict=True)
  return _kl_uniform(jnp.asarray(alpha))


@jax.jit
def _kl_uniform(alpha: Array) -> Array:
  k = alpha.shape[-1]
  s = jnp.sum(alpha, axis=-1)
  return (gammaln(s) - gammaln(float(k)) - jnp.sum(gammaln(alpha), axis=-1)
          + jnp.sum((alpha - 1.0) * (digamma(alpha) - digamma(s)[..., None]), axis=-1))


def edl_kl_weight(epoch: float | int | Array, *, anneal_epochs: float | Array = 10.0
                  ) -> Array:
  """Sensoy et al. (2018) annealing coefficient `min(1, epoch / anneal_epochs)`.

  `anneal_epochs` must be finite and > 0: a concrete value that is not raises
  ValueError; a traced one (e.g. under `jit`) is not checked (0 gives a weight of 1,
  NaN at epoch 0; a negative value gives a weight <= 0).
  """
  validation.check_positive("anneal_epochs", anneal_epochs)
  return jnp.minimum(1.0, jnp.asarray(epoch, jnp.float32) / anneal_epochs)


def edl_loss(
    *,
    alpha: Float[Array | np.ndarray, "*b k"],
    targets: Targets,
    kl_weight: float | Array = 1.0,
) -> Float[Array, "*b"]:
  """EDL (Sensoy et al., 2018) MSE-Dirichlet loss with the KL evidence regulariser::

    L = sum_j (y_j - p_j)^2 + p_j (1 - p_j) / (S + 1)
        + kl_weight * KL(Dir(alpha_tilde) || Dir(1)),
    p = alpha / S,  alpha_tilde = 1 + (1 - y) (alpha - 1).

  For one-hot `y`, `alpha_tilde = y + (1 - y) alpha` as in the paper; the
  form above extends it to soft labels (jaxlab interpretation). Use
  `edl_kl_weight(epoch)` for the annealed weight. `targets`: integer class
  indices [...] or rows [..., k] on the simplex, as in `modex_brier_loss`.

  Example:
    >>> import jax.numpy as jnp
    >>> edl_loss(alpha=jnp.array([[5.0, 1.0]]), targets=jnp.array([[1.0, 0.0]])).shape
    (1,)
  """
  validation.check_rank_and_classes("alpha", alpha)
  targets = _as_targets(targets, alpha)
  validation.check_positive("alpha", alpha, strict=True)
  return _edl(jnp.asarray(alpha), targets, jnp.asarray(kl_weight, jnp.float32))


@jax.jit
def _edl(alpha: Array, targets: Array, kl_weight: Array) -> Array:
  s = jnp.sum(alpha, axis=-1, keepdims=True)
  p = alpha / s
  mse = jnp.sum(jnp.square(targets - p) + p * (1.0 - p) / (s + 1.0), axis=-1)
  alpha_tilde = 1.0 + (1.0 - targets) * (alpha - 1.0)
  return mse + kl_weight * _kl_uniform(alpha_tilde)
