"""Stage 2: outcome models that estimate the direct and spillover effects.

Every estimator fits on the interior sites (a full patch) and returns an
`EffectEstimate`: tau_hat (A_s 0 -> 1), delta_hat (all neighbours 0 -> 1, i.e. the
exposure Abar_N 0 -> 1) and the fitted residuals (for Moran's I). Linear heads read the
effects off their coefficients; the MLP head uses plug-in predictions (the fitted
residual cancels in the difference).

* `ols_effects`: OLS on [1, A, (Abar_N), X, extra]. The naive fit is OLS(A, X); the
  interference-aware one adds Abar_N; the oracle adds the true U as `extra`; the
  CVAE-linear head adds the latent means.

Identifiability: a linear head's unpenalised columns must have full column rank on the
interior sites, else the coefficients are not determined by the data (the tiny ridge
would pick one split silently: the treatment passed again as `extra` took half of
tau). The check is numerical, numpy's `matrix_rank` rule on the weighted design with
unit-norm columns: rank deficient when the smallest singular value is at most
max(rows, columns) * float32 eps times the largest (designs drawn by
`make_generator` sit near 0.1, an exactly collinear one near 1e-7). Called eagerly, an
underdetermined or collinear design raises a ValueError naming the columns; under
`jit` / `vmap` (where data cannot raise) tau_hat and delta_hat are NaN instead.
* `spatial_plus_effects`: Spatial+ (Dupont, Wood & Augustin 2022): the treatments are
  residualised on a penalised spatial spline basis, then Y is regressed on the residual
  treatments, X, extra and the (penalised) basis.
* `mlp_effects`: a small MLP on [A, Abar_N, X, extra] trained with MSE.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float

from jaxlab.causal._generator import SpatialData


class EffectEstimate(NamedTuple):
  """Estimated effects (NaN delta: the model has no spillover term) and residuals."""
  tau: Float[Array, ""]
  delta: Float[Array, ""]
  residuals: Float[Array, "h w"]     # y - fitted on interior sites, 0 elsewhere


def _columns(data: SpatialData, extra: Array | None, spillover: bool) -> Array:
  """[h, w, k] design columns A, (Abar_N), X, extra (no intercept)."""
  cols = [data.a[..., None]]
  if spillover:
    cols.append(data.a_neighbours[..., None])
  cols.append(data.x)
  if extra is not None:
    if extra.shape[:2] != data.a.shape:
      raise ValueError(f"extra must be [h, w, k] with h, w = {data.a.shape}, got {extra.shape}")
    cols.append(extra)
  return jnp.concatenate(cols, axis=-1)


def _column_names(treatments: list[str], data: SpatialData, extra: Array | None) -> list[str]:
  """Names of the design columns [1, treatments, X, extra] (for error messages)."""
  x = [f"X[{i}]" for i in range(data.x.shape[-1])]
  e = [] if extra is None else [f"extra[{i}]" for i in range(extra.shape[-1])]
  return ["intercept", *treatments, *x, *e]


def _rank_deficient(design: Array, weights: Array) -> Array:
  """Whether `design` (on the rows with weight > 0) lacks full column rank (bool scalar)."""
  n, k = design.shape
  if n < k:
    return jnp.asarray(True)
  d = design * jnp.sqrt(weights / weights.sum())[:, None]
  norms = jnp.sqrt((d ** 2).sum(0))
  d = d / jnp.where(norms > 0, norms, 1.0)  # an all-zero column keeps singular value 0
  sv = jnp.linalg.svd(d, compute_uv=False)
  return sv[-1] <= sv[0] * max(n, k) * float(jnp.finfo(jnp.float32).eps)


def _identified(tau: Array, delta: Array, design: Array, weights: Array,
                names: list[str], where: str) -> tuple[Array, Array]:
  """(tau, delta), or a ValueError (eager) / NaNs (traced) when `design` is not identified."""
  deficient = _rank_deficient(design, weights)
  if isinstance(deficient, jax.core.Tracer):
    nan = jnp.asarray(jnp.nan, tau.dtype)
    return jnp.where(deficient, nan, tau), jnp.where(deficient, nan, delta)
  if bool(deficient):
    raise ValueError(f"{where}: tau and delta are not identified: "
                     f"{_why_not_identified(design, weights, names)}")
  return tau, delta


def _why_not_identified(design: Array, weights: Array, names: list[str]) -> str:
  """The message of an unidentified design: too few sites, or which columns are dependent."""
  d, w = np.asarray(design, np.float64), np.asarray(weights, np.float64)
  sites = int((w > 0).sum())
  if sites < d.shape[1]:
    return (f"the design is underdetermined, {sites} interior site(s) for {d.shape[1]} "
            f"coefficients ({', '.join(names)}): use a larger grid or fewer columns")
  rows = d[w > 0]
  rows = rows / np.where(np.linalg.norm(rows, axis=0) > 0, np.linalg.norm(rows, axis=0), 1.0)
  v = np.linalg.svd(rows)[2][-1]  # the near-null direction: its large entries are the culprits
  culprits = [name for name, c in zip(names, v, strict=True) if abs(c) > 0.1 * abs(v).max()]
  return (f"the design's columns {', '.join(culprits)} are collinear on the interior sites: "
          "drop or change one of them")


def _penalised_fit(design: Array, y: Array, weights: Array, penalty: Array) -> Array:
  """argmin_b sum_i w_i (y_i - d_i b)^2 / sum w + sum_j penalty_j b_j^2 (normal equations).

  Columns are scaled to unit RMS before solving (float32 conditioning) and the tiny
  1e-6 ridge keeps an exactly collinear design solvable; coefficients are returned on
  the original scale.
  """
  w = weights / weights.sum()
  scale = jnp.sqrt((w[:, None] * design ** 2).sum(0))
  scale = jnp.where(scale > 0, scale, 1.0)
  d = design / scale
  gram = d.T @ (w[:, None] * d) + jnp.diag(penalty / scale ** 2 + 1e-6)
  coef = jnp.linalg.solve(gram, d.T @ (w * y))
  return coef / scale


def ols_effects(data: SpatialData, extra: Float[Array, "h w k"] | None = None, *,
                spillover: bool = True) -> EffectEstimate:
  """OLS of Y on [1, A, Abar_N (if `spillover`), X, extra] over the interior sites.

  Args:
    data: one draw of the grid data.
    extra: additional adjustment columns (the true U for the oracle, latent means for
      the CVAE-linear head), or None.
    spillover: include the exposure Abar_N (False: the naive OLS(A, X); delta is NaN).

  Returns:
    tau_hat, delta_hat and residuals (tau_hat and delta_hat NaN, under `jit` or `vmap`,
    when the design is not identified).

  Raises:
    ValueError: (eager calls) the design is underdetermined (fewer interior sites than
      coefficients) or has collinear columns on the interior sites, e.g. the treatment
      passed again in `extra`; the message names the columns.

  Example:
    >>> from jaxlab.causal import GridConfig, make_generator
    >>> data = make_generator(GridConfig(height=12, width=12))(jax.random.key(0))
    >>> est = ols_effects(data, data.u[..., None])
    >>> est.residuals.shape
    (12, 12)
  """
  cols = _columns(data, extra, spillover)
  h, w, k = cols.shape
  design = jnp.concatenate([jnp.ones((h * w, 1)), cols.reshape(h * w, k)], axis=1)
  weights = data.interior.reshape(-1).astype(jnp.float32)
  coef = _penalised_fit(design, data.y.reshape(-1), weights, jnp.zeros(k + 1))
  resid = ((data.y.reshape(-1) - design @ coef) * weights).reshape(h, w)
  delta = coef[2] if spillover else jnp.asarray(jnp.nan, coef.dtype)
  names = _column_names(["A", "Abar_N"] if spillover else ["A"], data, extra)
  tau, delta = _identified(coef[1], delta, design, weights, names, "ols_effects")
  return EffectEstimate(tau=tau, delta=delta, residuals=resid)


def spatial_plus_effects(data: SpatialData, basis: Float[Array, "n m"],
                         extra: Float[Array, "h w k"] | None = None, *,
                         lam_treatment: float = 1e-4, lam_outcome: float = 1e-4,
                         spillover: bool = True) -> EffectEstimate:
  """Spatial+: treatments residualised on a spatial spline, then a spline-adjusted regression.

  jaxlab interpretation: the authors use a thin-plate spline with 100 control points and
  tuned penalties; here the basis is a tensor-product cubic B-spline (`spline_basis`)
  with fixed ridge penalties (per-site mean squared error + lam * ||gamma||^2), and the
  exposure Abar_N is residualised like A so that the baseline also estimates a spillover.

  Args:
    data: one draw.
    basis: [h * w, m] spatial basis (rows in row-major site order).
    extra: additional adjustment columns (the CVAE-Spatial+ head's latent means), or None.
    lam_treatment: penalty of the treatment-on-space fit.
    lam_outcome: penalty of the spline term in the outcome fit.
    spillover: include Abar_N.

  Returns:
    tau_hat, delta_hat (NaN without `spillover`) and residuals (tau_hat and delta_hat
    NaN, under `jit` or `vmap`, when the unpenalised columns are not identified).

  Raises:
    ValueError: (eager calls) the unpenalised columns (intercept, residualised
      treatments, X, extra) are underdetermined or collinear on the interior sites.

  Example:
    >>> from jaxlab.causal import GridConfig, make_generator, spline_basis
    >>> data = make_generator(GridConfig(height=12, width=12))(jax.random.key(0))
    >>> est = spatial_plus_effects(data, jnp.asarray(spline_basis(12, 12, 5)))
    >>> bool(jnp.isfinite(est.tau))
    True
  """
  h, w = data.a.shape
  n, m = basis.shape
  if n != h * w:
    raise ValueError(f"basis must have one row per site ({h * w}), got {basis.shape}")
  weights = data.interior.reshape(-1).astype(jnp.float32)
  ones = jnp.ones((n, 1))
  space = jnp.concatenate([ones, basis], axis=1)
  pen_space = jnp.concatenate([jnp.zeros(1), jnp.full((m,), lam_treatment)])
  treatments = [data.a] + ([data.a_neighbours] if spillover else [])
  resid_t = []
  for t in treatments:
    coef = _penalised_fit(space, t.reshape(-1), weights, pen_space)
    resid_t.append(t.reshape(-1) - space @ coef)
  others = [data.x.reshape(n, -1)] + ([] if extra is None else [extra.reshape(n, -1)])
  if extra is not None and extra.shape[:2] != (h, w):
    raise ValueError(f"extra must be [h, w, k] with h, w = {(h, w)}, got {extra.shape}")
  design = jnp.concatenate([ones, jnp.stack(resid_t, axis=1), *others, basis], axis=1)
  k = design.shape[1]
  penalty = jnp.concatenate([jnp.zeros(k - m), jnp.full((m,), lam_outcome)])
  coef = _penalised_fit(design, data.y.reshape(-1), weights, penalty)
  resid = ((data.y.reshape(-1) - design @ coef) * weights).reshape(h, w)
  delta = coef[2] if spillover else jnp.asarray(jnp.nan, coef.dtype)
  names = _column_names(["A (residualised)", "Abar_N (residualised)"][:len(resid_t)], data,
                        extra)
  tau, delta = _identified(coef[1], delta, design[:, :k - m], weights, names,
                           "spatial_plus_effects")
  return EffectEstimate(tau=tau, delta=delta, residuals=resid)


class OutcomeMLP(nn.Module):
  """A small MLP outcome head f(A, Abar_N, X, extra) -> Y.

  Attributes:
    hidden: width of the hidden layers.
    depth: number of hidden layers.
    dtype: computation dtype.
    param_dtype: parameter dtype.

  Example:
    >>> m = OutcomeMLP(hidden=8)
    >>> v = m.init(jax.random.key(0), jnp.zeros((4, 5)))
    >>> m.apply(v, jnp.zeros((4, 5))).shape
    (4,)
  """
  hidden: int = 32
  depth: int = 2
  dtype: Any = None
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, features: Float[Array, "b k"]) -> Float[Array, "b"]:
    h = features
    for i in range(self.depth):
      h = nn.gelu(nn.Dense(self.hidden, dtype=self.dtype, param_dtype=self.param_dtype,
                           name=f"hidden{i}")(h))
    return nn.Dense(1, dtype=self.dtype, param_dtype=self.param_dtype, name="out")(h)[:, 0]


def make_mlp_head(tx: optax.GradientTransformation, *, hidden: int = 32, depth: int = 2,
                  num_steps: int = 300
                  ) -> Callable[[jax.Array, SpatialData, Array | None], EffectEstimate]:
  """A pure `fit(key, data, extra) -> EffectEstimate` with the MLP head (vmap over seeds).

  Full-batch training with `tx` on the interior sites' MSE (inputs other than the treatments, and Y,
  standardised over the interior). tau_hat = mean_s f(A_s = 1) - f(A_s = 0) and
  delta_hat = mean_s f(Abar_N = 1) - f(Abar_N = 0), over the interior sites.
  jaxlab interpretation: the authors' second head is a small U-Net on the patch; a small
  MLP stands in for it.

  Args:
    tx: the optimizer (`jaxlab.train.optimizer`).
    hidden: hidden width.
    depth: hidden layers.
    num_steps: full-batch steps.

  Returns:
    The fit function.

  Example:
    >>> from jaxlab.causal import GridConfig, make_generator
    >>> data = make_generator(GridConfig(height=8, width=8))(jax.random.key(0))
    >>> import optax
    >>> fit = make_mlp_head(optax.adam(1e-2), hidden=8, num_steps=5)
    >>> fit(jax.random.key(1), data, None).residuals.shape
    (8, 8)
  """
  model = OutcomeMLP(hidden=hidden, depth=depth)

  def fit(key: jax.Array, data: SpatialData, extra: Array | None) -> EffectEstimate:
    cols = _columns(data, extra, spillover=True)
    h, w, k = cols.shape
    feats = cols.reshape(h * w, k)
    wts = data.interior.reshape(-1).astype(jnp.float32)
    n = wts.sum()
    mean = (feats * wts[:, None]).sum(0) / n
    std = jnp.sqrt((((feats - mean) ** 2) * wts[:, None]).sum(0) / n)
    # The treatments stay 0/1 (the counterfactual inputs are exactly 0 and 1).
    keep = jnp.arange(k) < 2
    mean, std = jnp.where(keep, 0.0, mean), jnp.where(keep | (std == 0), 1.0, std)
    feats = (feats - mean) / std
    y = data.y.reshape(-1)
    y_mean = (y * wts).sum() / n
    y_sd = jnp.sqrt((((y - y_mean) ** 2) * wts).sum() / n)
    target = (y - y_mean) / y_sd
    params = model.init(key, feats[:1])["params"]

    def loss_fn(p):
      pred = model.apply({"params": p}, feats)
      return (wts * (pred - target) ** 2).sum() / n

    def step(carry, _):
      p, s = carry
      loss, g = jax.value_and_grad(loss_fn)(p)
      u, s = tx.update(g, s, p)
      return (optax.apply_updates(p, u), s), loss

    (params, _), _ = jax.lax.scan(step, (params, tx.init(params)), None, length=num_steps)
    predict = lambda f: model.apply({"params": params}, f) * y_sd + y_mean  # noqa: E731

    def contrast(col):
      hi, lo = feats.at[:, col].set(1.0), feats.at[:, col].set(0.0)
      return ((predict(hi) - predict(lo)) * wts).sum() / n

    resid = ((y - predict(feats)) * wts).reshape(h, w)
    return EffectEstimate(tau=contrast(0), delta=contrast(1), residuals=resid)

  return fit
