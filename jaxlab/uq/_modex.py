"""MoDEX: a mixture of Dirichlet experts ("courtroom") classification head.

Each class k has an *advocate* whose opinion on the class-probability vector
pi is a Dirichlet with concentration `B_k = alpha + tau_k e_k` (shared
evidence `alpha` plus class-specific advocacy `tau_k`); the verdict mixes the
opinions with input-dependent plausibility weights `omega`:

  q(pi | x) = sum_k omega_k Dir(pi; alpha + tau_k e_k).

F-EDL (the flexible Dirichlet) is the special case `tau_k = tau` for all k.
The head parameterisation (exp / softplus / softmax) follows the F-EDL
official code; the closed-form moments and the entropy decomposition are
derived here and checked against Monte Carlo in the tests (jaxlab
interpretation where the MoDEX paper text was not available).

Domain rule (`modex_moments`, `modex_log_mean`, `modex_uncertainty`,
`fedl_moments`): alpha > 0, tau >= 0, omega (or p) on the simplex within
`simplex_atol`, all finite. Concrete inputs off the domain raise `ValueError`
naming the argument. Traced inputs (under `jit`/`vmap`/`grad`) cannot raise:
there every output of an off-domain row (one example, the last axis) is NaN,
and the other rows are computed exactly as if the bad row were absent.
"""

import functools
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.scipy.special import digamma, logsumexp, xlogy
from jax.typing import DTypeLike
from jaxtyping import Float

from jaxlab import validation


class ModexParams(NamedTuple):
  """The courtroom parameters predicted by `MoDEXHead`, each [..., k]."""
  alpha: Array  # shared evidence, > 0
  tau: Array    # class-specific advocacy, >= 0
  omega: Array  # plausibility weights, on the simplex


class ModexMoments(NamedTuple):
  """First two moments of the MoDEX mixture, each [..., k]."""
  mean: Array           # E[pi_j]
  second_moment: Array  # E[pi_j^2]
  variance: Array       # Var[pi_j]


class ModexUncertainty(NamedTuple):
  """Per-example uncertainty measures of a MoDEX (or Dirichlet) prediction, each [...].

  Variance based (F-EDL): `total = epistemic + aleatoric` with
  `total = 1 - sum_j mu_j^2`, `epistemic = sum_j Var_j`,
  `aleatoric = 1 - sum_j E[pi_j^2]`. The epistemic part splits (law of total
  variance over advocates) into `epistemic_disagreement = sum_k omega_k
  ||m_k - mu||^2` and `epistemic_within = sum_k omega_k (1 - ||m_k||^2) /
  (S_k + 1)`, with `m_k = B_k / S_k` the k-th advocate's mean.

  Entropy based: `entropy = H(mu) = expected_entropy + mutual_information`;
  `mutual_information = mi_disagreement + mi_within` with
  `mi_disagreement = H(mu) - sum_k omega_k H(m_k)` (advocates disagree) and
  `mi_within = sum_k omega_k (H(m_k) - E_{Dir(B_k)} H(pi))` (each advocate
  unsure).
  """
  total: Array
  epistemic: Array
  aleatoric: Array
  epistemic_disagreement: Array
  epistemic_within: Array
  entropy: Array
  expected_entropy: Array
  mutual_information: Array
  mi_disagreement: Array
  mi_within: Array
  max_prob: Array


def _validate(alpha, tau, omega, *, simplex_atol: Array | float) -> None:
  validation.check_rank_and_classes("alpha", alpha)
  validation.check_same_shape(("alpha", "tau", "omega"), alpha, tau, omega)
  validation.check_positive("alpha", alpha, strict=True)
  validation.check_positive("tau", tau, strict=False)
  validation.check_simplex("omega", omega, atol=simplex_atol)


def _rows_in_domain(alpha: Array, tau: Array, omega: Array, atol: Array | float) -> Array:
  """Per-row (all but the last axis) domain check, the traced twin of `_validate`."""
  finite = jnp.isfinite(alpha) & jnp.isfinite(tau) & jnp.isfinite(omega)
  ok = finite & (alpha > 0) & (tau >= 0) & (omega >= -atol)
  return jnp.all(ok, axis=-1) & (jnp.abs(jnp.sum(omega, axis=-1) - 1.0) <= atol)


def _nan_rows(outputs, ok: Array):
  """Replaces every output of the rows where `ok` is False by NaN."""
  def mask(x):
    return jnp.where(ok.reshape(ok.shape + (1,) * (x.ndim - ok.ndim)), x, jnp.nan)
  return jax.tree.map(mask, outputs)


def _components(alpha: Array, tau: Array) -> tuple[Array, Array, Array]:
  """Returns B [..., k(advocate), k(class)], S [..., k] and m = B / S."""
  k = alpha.shape[-1]
  b = alpha[..., None, :] + tau[..., :, None] * jnp.eye(k, dtype=alpha.dtype)
  s = jnp.sum(alpha, axis=-1, keepdims=True) + tau
  return b, s, b / s[..., :, None]


def modex_moments(
    alpha: Float[Array | np.ndarray, "*b k"],
    tau: Float[Array | np.ndarray, "*b k"],
    omega: Float[Array | np.ndarray, "*b k"],
    *,
    simplex_atol: float = 1e-3,
) -> ModexMoments:
  """Closed-form mean, second moment and variance of the MoDEX mixture.

  With `B_k = alpha + tau_k e_k`, `S_k = sum_j alpha_j + tau_k` and
  `m_k = B_k / S_k`:

    mu_j      = sum_k omega_k m_kj
    Var_j     = sum_k omega_k m_kj (1 - m_kj) / (S_k + 1)  +  sum_k omega_k (m_kj - mu_j)^2
    E[pi_j^2] = Var_j + mu_j^2 = sum_k omega_k B_kj (B_kj + 1) / (S_k (S_k + 1))

  The variance is computed as within- plus between-advocate variance (both
  non-negative), which avoids the cancellation of `E[pi^2] - mu^2` in
  float32. Memory is O(b k^2).

  Args:
    alpha: shared evidence, [..., k], > 0.
    tau: class-specific advocacy, [..., k], >= 0.
    omega: plausibility weights, [..., k], on the probability simplex.
    simplex_atol: tolerance of the simplex check on concrete `omega`.

  Returns:
    `ModexMoments(mean, second_moment, variance)`, each [..., k].

  Raises:
    ValueError: on mismatched shapes, fewer than 2 classes, or (for concrete
      inputs) non-positive `alpha`, negative `tau`, or `omega` off the simplex.
      Traced off-domain rows give NaN instead (module docstring).

  Example:
    >>> import jax.numpy as jnp
    >>> m = modex_moments(jnp.ones((2, 3)), jnp.full((2, 3), 2.0), jnp.full((2, 3), 1 / 3))
    >>> m.mean.shape
    (2, 3)
  """
  _validate(alpha, tau, omega, simplex_atol=simplex_atol)
  return _moments(*(jnp.asarray(x) for x in (alpha, tau, omega)), simplex_atol)


# The numeric cores are jitted so that eager calls compile once instead of
# dispatching op by op; inside a caller's jit they are simply inlined.
@jax.jit
def _moments(alpha: Array, tau: Array, omega: Array, atol: Array | float) -> ModexMoments:
  _, s, m = _components(alpha, tau)
  w = omega[..., :, None]
  mu = jnp.sum(w * m, axis=-2)
  within = jnp.sum(w * m * (1.0 - m) / (s[..., :, None] + 1.0), axis=-2)
  between = jnp.sum(w * jnp.square(m - mu[..., None, :]), axis=-2)
  var = within + between
  return _nan_rows(ModexMoments(mean=mu, second_moment=var + jnp.square(mu), variance=var),
                   _rows_in_domain(alpha, tau, omega, atol))


def modex_log_mean(
    alpha: Float[Array | np.ndarray, "*b k"],
    tau: Float[Array | np.ndarray, "*b k"],
    omega: Float[Array | np.ndarray, "*b k"],
    *,
    simplex_atol: float = 1e-3,
) -> Float[Array, "*b k"]:
  """`log E[pi_j]` of the mixture, computed in log space (finite for omega_k = 0).

  Domain as in the module docstring (traced off-domain rows give NaN).
  """
  _validate(alpha, tau, omega, simplex_atol=simplex_atol)
  return _log_mean(*(jnp.asarray(x) for x in (alpha, tau, omega)), simplex_atol)


@jax.jit
def _log_mean(alpha: Array, tau: Array, omega: Array, atol: Array | float) -> Array:
  b, s, _ = _components(alpha, tau)
  log_m = jnp.log(b) - jnp.log(s)[..., :, None]
  return _nan_rows(logsumexp(log_m, axis=-2, b=omega[..., :, None]),
                   _rows_in_domain(alpha, tau, omega, atol))


def _entropy(p: Array) -> Array:
  return -jnp.sum(xlogy(p, p), axis=-1)


def modex_uncertainty(
    alpha: Float[Array | np.ndarray, "*b k"],
    tau: Float[Array | np.ndarray, "*b k"],
    omega: Float[Array | np.ndarray, "*b k"],
    *,
    simplex_atol: float = 1e-3,
) -> ModexUncertainty:
  """Variance- and entropy-based uncertainty of a MoDEX prediction.

  Entropy terms use `E_{Dir(B)}[H(pi)] = psi(S + 1) - sum_j (B_j / S) psi(B_j + 1)`
  (exact for a Dirichlet; the mixture's expected entropy is its omega-average).
  See `ModexUncertainty` for the definitions. `TU = EU + AU` and
  `H(mu) = E[H] + MI` hold by construction; the entropy split of MI into
  advocate disagreement / within-advocate uncertainty is a jaxlab
  interpretation (spec tag [I]).

  Args:
    alpha: shared evidence, [..., k], > 0.
    tau: class-specific advocacy, [..., k], >= 0.
    omega: plausibility weights, [..., k], on the probability simplex.
    simplex_atol: tolerance of the simplex check on concrete `omega`.

  Returns:
    `ModexUncertainty`, each field [...]; NaN in the traced rows off the
    domain (module docstring), a `ValueError` for concrete ones.

  Example:
    >>> import jax.numpy as jnp
    >>> u = modex_uncertainty(jnp.ones((4, 3)), jnp.zeros((4, 3)), jnp.full((4, 3), 1 / 3))
    >>> bool(jnp.allclose(u.total, u.epistemic + u.aleatoric))
    True
  """
  _validate(alpha, tau, omega, simplex_atol=simplex_atol)
  return _uncertainty(*(jnp.asarray(x) for x in (alpha, tau, omega)), simplex_atol)


@jax.jit
def _uncertainty(alpha: Array, tau: Array, omega: Array, atol: Array | float) -> ModexUncertainty:
  b, s, m = _components(alpha, tau)
  w = omega[..., :, None]
  mu = jnp.sum(w * m, axis=-2)
  within = jnp.sum(omega * (1.0 - jnp.sum(jnp.square(m), axis=-1)) / (s + 1.0), axis=-1)
  between = jnp.sum(omega * jnp.sum(jnp.square(m - mu[..., None, :]), axis=-1), axis=-1)
  total = 1.0 - jnp.sum(jnp.square(mu), axis=-1)
  epistemic = within + between

  h_mu = _entropy(mu)
  h_m = _entropy(m)                                                    # [..., k]
  e_h = digamma(s + 1.0) - jnp.sum(m * digamma(b + 1.0), axis=-1)      # [..., k]
  expected_entropy = jnp.sum(omega * e_h, axis=-1)
  mean_h_m = jnp.sum(omega * h_m, axis=-1)
  return _nan_rows(ModexUncertainty(
      total=total,
      epistemic=epistemic,
      aleatoric=total - epistemic,
      epistemic_disagreement=between,
      epistemic_within=within,
      entropy=h_mu,
      expected_entropy=expected_entropy,
      mutual_information=h_mu - expected_entropy,
      mi_disagreement=h_mu - mean_h_m,
      mi_within=mean_h_m - expected_entropy,
      max_prob=jnp.max(mu, axis=-1),
  ), _rows_in_domain(alpha, tau, omega, atol))


def fedl_moments(
    alpha: Float[Array | np.ndarray, "*b k"],
    tau: Float[Array | np.ndarray, "*b"],
    p: Float[Array | np.ndarray, "*b k"],
    *,
    simplex_atol: float = 1e-3,
) -> ModexMoments:
  """Moments of F-EDL's flexible Dirichlet FD(alpha, p, tau) (scalar `tau`).

  Written from the flexible-Dirichlet formulas, independently of
  `modex_moments` (with `S = sum_j alpha_j + tau`):

    E[pi_j]   = (alpha_j + tau p_j) / S
    E[pi_j^2] = (alpha_j (alpha_j + 1) + p_j tau (2 alpha_j + tau + 1)) / (S (S + 1))

  Args:
    alpha: evidence, [..., k], > 0.
    tau: scalar advocacy per example, [...], >= 0.
    p: mixing weights, [..., k], on the simplex.
    simplex_atol: tolerance of the simplex check on concrete `p`.

  Returns:
    `ModexMoments`, each [..., k]; NaN in the traced rows off the domain
    (module docstring), a `ValueError` for concrete ones.

  Example:
    >>> import jax.numpy as jnp
    >>> fedl_moments(jnp.ones((2, 3)), jnp.ones((2,)), jnp.full((2, 3), 1 / 3)).mean.shape
    (2, 3)
  """
  validation.check_rank_and_classes("alpha", alpha)
  validation.check_same_shape(("alpha", "p"), alpha, p)
  if tuple(np.shape(tau)) != tuple(np.shape(alpha))[:-1]:
    raise ValueError(f"tau must have shape {tuple(np.shape(alpha))[:-1]} (alpha's batch shape), "
                     f"got {tuple(np.shape(tau))}")
  validation.check_positive("alpha", alpha, strict=True)
  validation.check_positive("tau", tau, strict=False)
  validation.check_simplex("p", p, atol=simplex_atol)
  return _fedl_moments(*(jnp.asarray(x) for x in (alpha, tau, p)), simplex_atol)


@jax.jit
def _fedl_moments(alpha: Array, tau: Array, p: Array, atol: Array | float) -> ModexMoments:
  t = tau[..., None]
  s = jnp.sum(alpha, axis=-1, keepdims=True) + t
  mean = (alpha + t * p) / s
  second = (alpha * (alpha + 1.0) + p * t * (2.0 * alpha + t + 1.0)) / (s * (s + 1.0))
  ok = _rows_in_domain(alpha, jnp.broadcast_to(t, alpha.shape), p, atol)
  return _nan_rows(ModexMoments(mean=mean, second_moment=second,
                                variance=second - jnp.square(mean)), ok)


def modex_activations(
    alpha_logits: Float[Array, "*b k"],
    tau_logits: Float[Array, "*b k"],
    omega_logits: Float[Array, "*b k"],
    *,
    log_alpha_clip: float = 10.0,
    tau_max: float = 1e4,
) -> ModexParams:
  """Maps raw head outputs to (alpha, tau, omega); finite with finite gradients for any finite logits.

  `alpha = exp(clip(z_alpha, -c, c))`, `tau = min(softplus(z_tau), tau_max)`,
  `omega = softmax(z_omega)`. exp / softplus / softmax follow F-EDL's code;
  the clip `c = log_alpha_clip` and `tau_max` are a jaxlab interpretation.

  Example:
    >>> import jax.numpy as jnp
    >>> p = modex_activations(jnp.zeros((1, 2)), jnp.zeros((1, 2)), jnp.zeros((1, 2)))
    >>> p.alpha.tolist(), p.omega.tolist()
    ([[1.0, 1.0]], [[0.5, 0.5]])
  """
  validation.check_same_shape(("alpha_logits", "tau_logits", "omega_logits"),
                           alpha_logits, tau_logits, omega_logits)
  if log_alpha_clip <= 0 or tau_max <= 0:
    raise ValueError(f"log_alpha_clip and tau_max must be > 0, got {log_alpha_clip}, {tau_max}")
  return _activations(alpha_logits, tau_logits, omega_logits, float(log_alpha_clip),
                      float(tau_max))


@functools.partial(jax.jit, static_argnums=(3, 4))
def _activations(za: Array, zt: Array, zw: Array, clip: float, tau_max: float) -> ModexParams:
  alpha = jnp.exp(jnp.clip(za, -clip, clip))
  tau = jnp.minimum(jax.nn.softplus(zt), tau_max)
  return ModexParams(alpha=alpha, tau=tau, omega=jax.nn.softmax(zw, axis=-1))


class _GateMLP(nn.Module):
  """[Dense -> ReLU -> LayerNorm] x num_layers -> Dense(out) (F-EDL's tau/p heads)."""
  out_dim: int
  hidden_dim: int
  num_layers: int
  dtype: DTypeLike | None = None
  param_dtype: DTypeLike = jnp.float32

  @nn.compact
  def __call__(self, h: Array) -> Array:
    kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    for i in range(self.num_layers):
      h = nn.relu(nn.Dense(self.hidden_dim, name=f"dense_{i}", **kw)(h))
      h = nn.LayerNorm(name=f"norm_{i}", **kw)(h)
    return nn.Dense(self.out_dim, name="out", **kw)(h)


class MoDEXHead(nn.Module):
  """Predicts the courtroom parameters (alpha, tau, omega) from features.

  `alpha = exp(clip(g_alpha(h), +-log_alpha_clip))` (shared evidence; exp as in
  F-EDL's code, the clip keeps gradients finite for extreme logits),
  `tau = min(softplus(g_tau(h)), tau_max)` (advocacy), `omega =
  softmax(g_omega(h))` (plausibility). `g_alpha` is one Dense layer; `g_tau`
  and `g_omega` are small MLPs with ReLU + LayerNorm (F-EDL code: hidden 256,
  2 layers). The clip values are a jaxlab interpretation.

  Attributes:
    num_classes: k.
    hidden_dim: width of the tau / omega MLPs.
    num_layers: hidden layers of the tau / omega MLPs.
    shared_advocacy: if True, one scalar tau per example broadcast to all
      classes: the F-EDL head.
    log_alpha_clip: ``|log alpha|`` is clipped to this.
    tau_max: upper bound of tau.
    dtype: computation dtype of the layers (None: inferred from inputs and
      params, as in `flax.linen.Dense`). The activations and the returned
      (alpha, tau, omega) stay at least float32: omega must pass the simplex
      check (sums to 1 within 1e-3, which a bfloat16 softmax misses) and the
      Dirichlet moments lose their accuracy in bfloat16.
    param_dtype: dtype of the weights (float32 by default, also under a
      bfloat16 `dtype`).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> head = MoDEXHead(num_classes=3, hidden_dim=8)
    >>> params = head.init(jax.random.key(0), jnp.zeros((2, 5)))
    >>> head.apply(params, jnp.zeros((2, 5))).alpha.shape
    (2, 3)
    >>> bf16 = MoDEXHead(num_classes=3, hidden_dim=8, dtype=jnp.bfloat16)
    >>> bf16.apply(params, jnp.zeros((2, 5))).alpha.dtype  # layers in bf16
    dtype('float32')
  """
  num_classes: int
  hidden_dim: int = 64
  num_layers: int = 2
  shared_advocacy: bool = False
  log_alpha_clip: float = 10.0
  tau_max: float = 1e4
  dtype: DTypeLike | None = None
  param_dtype: DTypeLike = jnp.float32

  @nn.compact
  def __call__(self, h: Float[Array, "*b d"]) -> ModexParams:
    if self.num_classes < 2:
      raise ValueError(f"num_classes must be >= 2, got {self.num_classes}")
    k = self.num_classes
    kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    alpha_logits = nn.Dense(k, name="alpha", **kw)(h)
    tau_logits = _GateMLP(1 if self.shared_advocacy else k, self.hidden_dim, self.num_layers,
                          name="tau", **kw)(h)
    omega_logits = _GateMLP(k, self.hidden_dim, self.num_layers, name="omega", **kw)(h)
    # Activations in >= float32 (see `dtype` above), as a transformer keeps its softmax.
    up = lambda z: z.astype(jnp.promote_types(z.dtype, jnp.float32))
    return modex_activations(up(alpha_logits),
                             up(jnp.broadcast_to(tau_logits, alpha_logits.shape)),
                             up(omega_logits), log_alpha_clip=self.log_alpha_clip,
                             tau_max=self.tau_max)
