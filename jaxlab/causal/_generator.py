"""Seeded spatial data with a hidden smooth confounder U, interference and known effects.

On an H x W grid (jaxlab interpretation of the paper's SpaCE-style setting):

  U      a GMRF with precision kappa (L + eps I)^order (smoothness knob eps), or white
         noise (the negative control), standardised per draw;
  X      three covariates, X_1 = x1_u U + N(0, 1), X_2, X_3 ~ N(0, 1);
  A_s    ~ Bernoulli(sigmoid(a0 + a_x X_2 + a_u U_s + a_eta eta_s)), eta white (positivity);
  Y_s    = tau A_s + delta Abar_N(s) + y_u U_s + X_s . beta + y_sin sin(X_3) + R_s,

with Abar_N the mean treatment over the Chebyshev r-patch without its centre and R a GMRF
noise field. Because Y is linear in (A_s, Abar_N), the direct effect is tau and the
spillover effect (all neighbours 0 -> 1) is delta, exactly, at every interior site.
"""

import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from jaxlab.causal import _fields, _grid

U_FIELDS = ("gmrf", "white")


@dataclasses.dataclass(frozen=True)
class GridConfig:
  """The data-generating process (defaults: jaxlab interpretation).

  Attributes:
    height: grid rows.
    width: grid columns.
    radius: interference radius r (the Chebyshev patch of the spillover).
    u_field: "gmrf" (smooth latent confounder) or "white" (iid: the negative control).
    u_epsilon: U's smoothness knob (GMRF ridge; smaller = smoother).
    u_order: 1 or 2, the GMRF precision's power (jaxlab interpretation).
    u_connectivity: 4 or 8, contiguity of U's Laplacian.
    x1_u: weight of U in X_1 (a noisy proxy of U among the covariates).
    a_intercept: treatment logit intercept.
    a_x2: treatment logit weight of X_2.
    a_u: treatment logit weight of U (confounding of A).
    a_noise: weight of the white noise eta in the treatment logit (positivity).
    tau: true direct effect.
    delta: true spillover effect.
    y_u: weight of U in Y (confounding of Y).
    beta: outcome weights of X (one per covariate).
    y_sin: weight of sin(X_3) (a nonlinearity the linear heads do not model).
    noise_scale: standard deviation of the GMRF outcome noise R.
    noise_epsilon: the noise GMRF's smoothness (jaxlab interpretation: R is
      "GMRF noise" with no parameter given).
  """
  height: int = 48
  width: int = 48
  radius: int = 1
  u_field: str = "gmrf"
  u_epsilon: float = 0.1
  u_order: int = 1
  u_connectivity: int = 4
  x1_u: float = 0.5
  a_intercept: float = -0.3
  a_x2: float = 0.8
  a_u: float = 1.5
  a_noise: float = 0.5
  tau: float = 1.0
  delta: float = 0.5
  y_u: float = 2.0
  beta: tuple[float, ...] = (0.5, -0.5, 0.3)
  y_sin: float = 0.5
  noise_scale: float = 0.5
  noise_epsilon: float = 1.0

  def __post_init__(self):
    if self.u_field not in U_FIELDS:
      raise ValueError(f"u_field must be one of {U_FIELDS}, got {self.u_field!r}")
    if self.radius < 1:
      raise ValueError(f"radius must be >= 1 (interference), got {self.radius}")
    if min(self.height, self.width) < 2 * self.radius + 1:
      raise ValueError(f"grid {self.height} x {self.width} is smaller than one "
                       f"{2 * self.radius + 1}-wide patch")
    if len(self.beta) != 3:
      raise ValueError(f"beta must have 3 entries (one per covariate), got {self.beta!r}")
    object.__setattr__(self, "beta", tuple(float(b) for b in self.beta))

  @property
  def num_covariates(self) -> int:
    return len(self.beta)


class SpatialData(NamedTuple):
  """One draw of the grid data (leading seed axes under vmap)."""
  a: Float[Array, "h w"]                 # binary treatment (float 0/1)
  x: Float[Array, "h w p"]               # covariates
  y: Float[Array, "h w"]                 # observed outcome
  u: Float[Array, "h w"]                 # the hidden confounder (oracle only)
  a_neighbours: Float[Array, "h w"]      # Abar_N, the interference exposure
  interior: Bool[Array, "h w"]           # sites with a full patch (where effects are judged)


class GridFactors(NamedTuple):
  """Cholesky factors of the GMRF precisions (None for a white-noise U)."""
  u_chol: Float[Array, "n n"] | None
  noise_chol: Float[Array, "n n"]


@functools.lru_cache(maxsize=8)
def _cholesky(height: int, width: int, epsilon: float, order: int,
              connectivity: int) -> Array:
  # Cached: the noise field's factor is the same for every setting of a sweep.
  return _fields.precision_cholesky(_fields.gmrf_precision(
      height, width, epsilon=epsilon, order=order, connectivity=connectivity))


def grid_factors(config: GridConfig) -> GridFactors:
  """The dense Cholesky factors `simulate` needs (float64 numpy, then float32; cached).

  Example:
    >>> grid_factors(GridConfig(height=4, width=4)).noise_chol.shape
    (16, 16)
  """
  c = config
  u_chol = None
  if c.u_field == "gmrf":
    u_chol = _cholesky(c.height, c.width, c.u_epsilon, c.u_order, c.u_connectivity)
  return GridFactors(u_chol, _cholesky(c.height, c.width, c.noise_epsilon, 1, 4))


def simulate(key: jax.Array, factors: GridFactors, config: GridConfig) -> SpatialData:
  """One draw of the data-generating process (pure; `config` is static under jit).

  The factors are an argument rather than a closure constant, so a jitted sampler does
  not embed n x n matrices in its program.

  Args:
    key: PRNG key.
    factors: `grid_factors(config)`.
    config: the process.

  Returns:
    The draw.

  Example:
    >>> cfg = GridConfig(height=6, width=6)
    >>> simulate(jax.random.key(0), grid_factors(cfg), cfg).a.shape
    (6, 6)
  """
  c = config
  h, w = c.height, c.width
  k_u, k_x, k_eta, k_a, k_r = jax.random.split(key, 5)
  if factors.u_chol is None:
    u = jax.random.normal(k_u, (h * w,))
  else:
    u = _fields.sample_gmrf(k_u, factors.u_chol)
  u = _fields.standardize(u).reshape(h, w)
  x = jax.random.normal(k_x, (h, w, c.num_covariates))
  x = x.at[..., 0].add(c.x1_u * u)
  eta = jax.random.normal(k_eta, (h, w))
  logit = c.a_intercept + c.a_x2 * x[..., 1] + c.a_u * u + c.a_noise * eta
  a = jax.random.bernoulli(k_a, jax.nn.sigmoid(logit)).astype(jnp.float32)
  a_nb = _grid.neighbour_mean(a, c.radius)
  r = _fields.standardize(_fields.sample_gmrf(k_r, factors.noise_chol)).reshape(h, w)
  y = (c.tau * a + c.delta * a_nb + c.y_u * u + x @ jnp.asarray(c.beta, jnp.float32)
       + c.y_sin * jnp.sin(x[..., 2]) + c.noise_scale * r)
  interior = jnp.asarray(_grid.interior_mask(h, w, c.radius))
  return SpatialData(a=a, x=x, y=y, u=u, a_neighbours=a_nb, interior=interior)


def make_generator(config: GridConfig) -> Callable[[jax.Array], SpatialData]:
  """A pure `sample(key) -> SpatialData` for `config` (jit/vmap over keys).

  The GMRF Cholesky factors are computed once here (dense float64, then float32) and
  closed over; for many jitted settings prefer `simulate` with the factors as arguments.

  Args:
    config: the data-generating process.

  Returns:
    The sampler.

  Example:
    >>> sample = make_generator(GridConfig(height=8, width=8))
    >>> data = jax.vmap(sample)(jax.random.split(jax.random.key(0), 3))
    >>> data.y.shape, data.x.shape
    ((3, 8, 8), (3, 8, 8, 3))
  """
  factors = grid_factors(config)
  return lambda key: simulate(key, factors, config)


def effect_errors(tau_hat: Float[Array, "*b"], delta_hat: Float[Array, "*b"],
                  data: SpatialData, config: GridConfig) -> tuple[Array, Array]:
  """Standardised absolute errors ``|tau_hat - tau| / sd(Y)``, ``|delta_hat - delta| / sd(Y)``.

  sd(Y) is the observed outcome's standard deviation over the interior sites (the
  Spatial-CI benchmark's normalisation).

  Example:
    >>> cfg = GridConfig(height=8, width=8)
    >>> data = make_generator(cfg)(jax.random.key(0))
    >>> e_tau, e_delta = effect_errors(jnp.array(cfg.tau), jnp.array(cfg.delta), data, cfg)
    >>> float(e_tau), float(e_delta)
    (0.0, 0.0)
  """
  m = data.interior.astype(jnp.float32)
  axes = (-2, -1)
  n = m.sum(axes)
  mean = (data.y * m).sum(axes) / n
  sd = jnp.sqrt((((data.y - mean[..., None, None]) * m) ** 2).sum(axes) / n)
  return jnp.abs(tau_hat - config.tau) / sd, jnp.abs(delta_hat - config.delta) / sd
