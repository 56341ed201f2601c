"""The W4A4 QAT scaling law (Chen et al. 2025, arXiv 2505.14302), its fit, and EPM.

  L(N, D, G)  = A / N^alpha + B / D^beta + E + delta(N, D, G)
  delta(N, D, G) = k * D^gamma_D * (log2 G)^gamma_G / N^gamma_N

N = non-embedding parameters, D = training tokens (raw counts), G = group
size along K. delta is the final loss of W4A4 QAT minus that of the full
precision run at the same N and D. EPM (effective parameter multiplier):
eff = (A / (A + delta * N^alpha))^(1 / alpha).

The paper fits with a Huber loss and L-BFGS. `fit_qat_law` does the same in
log-parameter space (log k, and log gamma when `positive_exponents`), with
the features centred on the data's geometric means for conditioning. Where the
residual is taken (`space="linear"`: delta_pred - delta, the default, which
also accepts delta <= 0 from noisy small runs; `space="log"`: log ratio, as
Chinchilla fits do) is a jaxlab interpretation: the paper does not say.

Example:
  >>> round(float(qat_error(74e6, 10e9, 32, TABLE1["W4A4"])), 3)
  0.059
  >>> round(float(chinchilla_loss(74e6, 10e9)), 3)
  3.49
"""

import functools
import itertools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import Array
from jaxtyping import ArrayLike, Float, Real


class QATLaw(NamedTuple):
  """Constants of delta = k * D^gamma_d * (log2 G)^gamma_g / N^gamma_n."""
  k: float
  gamma_n: float
  gamma_d: float
  gamma_g: float


class Chinchilla(NamedTuple):
  """Constants of L = A / N^alpha + B / D^beta + E."""
  a: float
  alpha: float
  b: float
  beta: float
  e: float


# Table 1 of the paper [P] (the gamma_G of the two FC2 rows are parsed from a
# garbled table and are provisional, see the spec).
W4A4 = QATLaw(0.1582, 0.2186, 0.0745, 0.7779)
W4A16 = QATLaw(0.2522, 0.3589, 0.1610, 0.3533)
W16A4 = QATLaw(0.1004, 0.1816, 0.0331, 0.9812)
W4A4_FC2_INT8 = QATLaw(0.3519, 0.2637, 0.0964, 0.3407)
W16A4_FC2_INT8 = QATLaw(0.1273, 0.2347, 0.0827, 0.4491)
TABLE1 = {"W4A4": W4A4, "W4A16": W4A16, "W16A4": W16A4, "W4A4_FC2_INT8": W4A4_FC2_INT8,
          "W16A4_FC2_INT8": W16A4_FC2_INT8}
CHINCHILLA = Chinchilla(a=237.7042, alpha=0.3022, b=596.2490, beta=0.3022, e=1.9279)

# The paper's grid [P]: N in {74, 145, 297, 595}M, D in {10, 20, 50, 100}B,
# G in {32, 64, 128, 256} (plus per-channel, whose G the paper does not state).
PAPER_N = (74e6, 145e6, 297e6, 595e6)
PAPER_D = (10e9, 20e9, 50e9, 100e9)
PAPER_G = (32, 64, 128, 256)


def _check_g(g):
  g = jnp.asarray(g, jnp.float32)
  if not isinstance(g, jax.core.Tracer) and bool(jnp.any(g < 2)):
    raise ValueError(f"group size G must be >= 2 (log2 G > 0), got {g}")
  return g


def _check_positive(name: str, x) -> jax.Array:
  x = jnp.asarray(x, jnp.float32)
  if not isinstance(x, jax.core.Tracer) and not bool(jnp.all(jnp.isfinite(x) & (x > 0))):
    raise ValueError(f"{name} must be finite and > 0 (a count of parameters or tokens), got {x}")
  return x


def _nan_off_domain(value, *counts):
  # Under jit the checks above cannot raise: an off-domain entry gives NaN
  # (only that entry), never a silent inf or 0.
  ok = functools.reduce(jnp.logical_and, [jnp.isfinite(x) & (x > 0) for x in counts])
  return jnp.where(ok, value, jnp.nan)


def qat_error(n: Real[ArrayLike, "*s"], d: Real[ArrayLike, "*s"], g: Real[ArrayLike, "*s"],
              law: QATLaw = W4A4) -> Float[Array, "*s"]:
  """delta(N, D, G) = k * D^gamma_d * (log2 G)^gamma_g / N^gamma_n (broadcasting).

  Domain: N > 0 and D > 0 finite, G >= 2. Concrete inputs off the domain
  raise `ValueError`; under `jit` (traced inputs) the entries with N or D off
  the domain are NaN and the others are unaffected.

  Raises:
    ValueError: N or D not finite and > 0, or G < 2 (concrete inputs).

  Example:
    >>> round(float(qat_error(74e6, 10e9, 32)), 3)  # W4A4, 74M parameters, 10B tokens, G = 32
    0.059
  """
  n, d = _check_positive("N (n)", n), _check_positive("D (d)", d)
  g = _check_g(g)
  value = law.k * jnp.exp(law.gamma_d * jnp.log(d) + law.gamma_g * jnp.log(jnp.log2(g))
                          - law.gamma_n * jnp.log(n))
  return _nan_off_domain(value, n, d)


def chinchilla_loss(n: Real[ArrayLike, "*s"], d: Real[ArrayLike, "*s"],
                    c: Chinchilla = CHINCHILLA) -> Float[Array, "*s"]:
  """Full-precision loss A / N^alpha + B / D^beta + E (domain as in `qat_error`).

  Example:
    >>> round(float(chinchilla_loss(74e6, 10e9)), 3)
    3.49
  """
  n, d = _check_positive("N (n)", n), _check_positive("D (d)", d)
  return _nan_off_domain(c.a * n ** -c.alpha + c.b * d ** -c.beta + c.e, n, d)


def qat_loss(n: Real[ArrayLike, "*s"], d: Real[ArrayLike, "*s"], g: Real[ArrayLike, "*s"],
             law: QATLaw = W4A4, c: Chinchilla = CHINCHILLA) -> Float[Array, "*s"]:
  """QAT loss L(N, D, G) = Chinchilla part + delta.

  Example:
    >>> round(float(qat_loss(74e6, 10e9, 32) - chinchilla_loss(74e6, 10e9)), 3)  # = qat_error
    0.059
  """
  return chinchilla_loss(n, d, c) + qat_error(n, d, g, law)


def effective_param_multiplier(n: Real[ArrayLike, "*s"], d: Real[ArrayLike, "*s"],
                               g: Real[ArrayLike, "*s"], law: QATLaw = W4A4,
                               c: Chinchilla = CHINCHILLA) -> Float[Array, "*s"]:
  """EPM: the fraction of N a full-precision model needs for the QAT loss,
  (A / (A + delta * N^alpha))^(1 / alpha).

  Example:
    >>> round(float(effective_param_multiplier(74e6, 10e9, 32)), 3)  # W4A4 is worth 83% of N
    0.828
  """
  n = jnp.asarray(n, jnp.float32)
  delta = qat_error(n, d, g, law)
  return (c.a / (c.a + delta * n ** c.alpha)) ** (1.0 / c.alpha)


class FitResult(NamedTuple):
  """A fitted law, its R^2 on delta (linear space) and the final objective."""
  law: QATLaw
  r2: float
  objective: float
  num_points: int


def _huber(r, delta):
  a = jnp.abs(r)
  return jnp.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))


def _lbfgs(objective, theta0, iters):
  opt = optax.lbfgs()
  value_and_grad = optax.value_and_grad_from_state(objective)

  def body(_, carry):
    theta, state = carry
    value, grad = value_and_grad(theta, state=state)
    updates, state = opt.update(grad, state, theta, value=value, grad=grad, value_fn=objective)
    return optax.apply_updates(theta, updates), state

  theta, _ = jax.lax.fori_loop(0, iters, body, (theta0, opt.init(theta0)))
  return theta, objective(theta)


def _objective(theta, x, y, mask, huber_delta, positive_exponents, space):
  e = (jnp.exp(theta[1:]) if positive_exponents else theta[1:]) * mask
  log_pred = theta[0] + x @ e
  r = log_pred - jnp.log(y) if space == "log" else jnp.exp(log_pred) - y
  return jnp.sum(_huber(r, huber_delta))


@functools.partial(jax.jit, static_argnames=("positive_exponents", "space", "iters"))
def _solve(theta0, x, y, mask, huber_delta, *, positive_exponents, space, iters):
  """L-BFGS from each row of `theta0` (vmapped); returns (thetas, objectives)."""
  objective = lambda t: _objective(t, x, y, mask, huber_delta, positive_exponents, space)
  return jax.vmap(lambda t: _lbfgs(objective, t, iters))(theta0)


def fit_qat_law(n: ArrayLike | Sequence[float | int], d: ArrayLike | Sequence[float | int],
                g: ArrayLike | Sequence[float | int], delta: ArrayLike | Sequence[float | int],
                *, huber_delta: float = 1e-3,
                positive_exponents: bool = True, space: str = "linear",
                init_exponents: tuple[float, ...] = (0.1, 0.5), iters: int = 200,
                fit_exponents: tuple[str, ...] = ("gamma_n", "gamma_d", "gamma_g")) -> FitResult:
  """Huber + L-BFGS fit of `QATLaw` to measured (N, D, G, delta), best of a grid of inits.

  Args:
    n, d, g, delta: 1-D arrays of the same length m (G >= 2).
    huber_delta: Huber threshold (the paper: 1e-3).
    positive_exponents: parameterize gamma = exp(theta) (the paper's gammas are
      all > 0); False fits signed gammas, so a reversed trend shows as a sign.
    space: "linear" (residual delta_pred - delta) or "log" (log ratio; needs
      delta > 0). See the module doc.
    init_exponents: starting values tried for each exponent (all combinations).
    iters: L-BFGS iterations per start.
    fit_exponents: which exponents to fit; the others are held at 0 (for
      grids too small to determine all four constants).

  Returns:
    `FitResult(law, r2, objective, num_points)`.
  """
  arrays = [np.asarray(v, np.float64).reshape(-1) for v in (n, d, g, delta)]
  m = arrays[0].size
  if any(a.size != m for a in arrays) or m < 2:
    raise ValueError(f"n, d, g, delta must be 1-D of one length >= 2, got sizes "
                     f"{[a.size for a in arrays]}")
  n, d, g, delta = arrays
  if np.any(n <= 0) or np.any(d <= 0) or np.any(g < 2):
    raise ValueError("n and d must be > 0 and g >= 2")
  if not np.all(np.isfinite(delta)):
    raise ValueError("delta must be finite")
  if space not in ("linear", "log"):
    raise ValueError(f"space must be 'linear' or 'log', got {space!r}")
  if space == "log" and np.any(delta <= 0):
    raise ValueError("space='log' needs delta > 0; use space='linear'")
  names = ("gamma_n", "gamma_d", "gamma_g")
  bad = sorted(set(fit_exponents) - set(names))
  if bad:
    raise ValueError(f"fit_exponents has unknown names {bad}; expected a subset of {names}")
  mask = np.array([nm in fit_exponents for nm in names], np.float32)
  # Centred features: log delta = log k' - gN x_n + gD x_d + gG x_g.
  ln, ld, lg = np.log(n), np.log(d), np.log(np.log2(g))
  cn, cd, cg = ln.mean(), ld.mean(), lg.mean()
  x = jnp.asarray(np.stack([-(ln - cn), ld - cd, lg - cg], 1), jnp.float32)
  y = jnp.asarray(delta, jnp.float32)
  scale = float(np.mean(np.abs(delta))) or 1.0

  inits = np.asarray(list(itertools.product(init_exponents, repeat=3)), np.float32)
  t0 = np.concatenate([np.full((len(inits), 1), np.log(scale), np.float32),
                       np.log(inits) if positive_exponents else inits], 1)
  thetas, objs = _solve(jnp.asarray(t0), x, y, jnp.asarray(mask), jnp.float32(huber_delta),
                        positive_exponents=positive_exponents, space=space, iters=iters)
  objs = np.where(np.isfinite(np.asarray(objs)), np.asarray(objs), np.inf)
  if not np.isfinite(objs).any():
    raise ValueError("the fit diverged from every initialization")
  i = int(np.argmin(objs))
  best = (np.asarray(thetas[i], np.float64), float(objs[i]))
  theta, obj = best
  gam = np.exp(theta[1:]) if positive_exponents else theta[1:]
  gam = gam * mask
  # Undo the centring (x_n = -(ln - cn), x_d = ld - cd, x_g = lg - cg).
  log_k = theta[0] + gam[0] * cn - gam[1] * cd - gam[2] * cg
  law = QATLaw(float(np.exp(log_k)), float(gam[0]), float(gam[1]), float(gam[2]))
  pred = np.exp(log_k - gam[0] * ln + gam[1] * ld + gam[2] * lg)
  ss_tot = float(np.sum((delta - delta.mean()) ** 2))
  r2 = 1.0 - float(np.sum((delta - pred) ** 2)) / ss_tot if ss_tot > 0 else float("nan")
  return FitResult(law, r2, obj, m)


def paper_grid(g_values: tuple[float, ...] = PAPER_G) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(N, D, G) flattened over the paper's grid (default 4 x 4 x 4 = 64 points).

  Example:
    >>> n, d, g = paper_grid()
    >>> n.shape, sorted(set(g.tolist()))
    ((64,), [32.0, 64.0, 128.0, 256.0])
  """
  nn_, dd, gg = np.meshgrid(PAPER_N, PAPER_D, np.asarray(g_values, np.float64), indexing="ij")
  return nn_.reshape(-1), dd.reshape(-1), gg.reshape(-1)
