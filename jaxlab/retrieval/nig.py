"""Normal-Inverse-Gamma (deep evidential regression) head, loss and uncertainties.

Deep evidential regression (Amini et al., 2020) puts a Normal-Inverse-Gamma prior
NIG(gamma, nu, alpha, beta) over the mean and variance of a Gaussian target. Its
marginal likelihood is a Student-t, St(y; gamma, 2 alpha, beta (1 + nu) / (nu alpha)),
whose negative log is the DER NLL below; `aleatoric = beta / (alpha - 1)` and
`epistemic = beta / (nu (alpha - 1))` are E[sigma^2] and Var[mu].

`NIGHead` is the CVGL uncertainty head: the CLS vector attends over the spatial tokens
(single-head cross-attention) and the attended vector plus statistics of the attention map
(entropy, max, std, top-k mass) go through an MLP to (gamma, nu, alpha, beta). The head's
exact layout is a jaxlab interpretation (the paper's code was unavailable).

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jaxlab.retrieval import nig
  >>> head = nig.NIGHead(hidden=8)
  >>> cls, spatial = jnp.ones((2, 4)), jnp.ones((2, 3, 4))
  >>> params = head.init(jax.random.key(0), cls, spatial)
  >>> out = head.apply(params, cls, spatial)
  >>> bool((out.alpha > 1).all())
  True
"""

from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln
from jaxtyping import Array, Float

from jaxlab import validation

# Keeps nu, alpha - 1 and beta strictly positive where softplus underflows to 0 in float32.
_MIN = 1e-6


class NIGParams(NamedTuple):
  """The four NIG parameters, each [b]; nu > 0, alpha > 1, beta > 0."""
  gamma: Array
  nu: Array
  alpha: Array
  beta: Array


class NIGOutput(NamedTuple):
  """What `NIGHead` returns: the NIG parameters and the attention map [b, t]."""
  gamma: Array
  nu: Array
  alpha: Array
  beta: Array
  attention: Array

  @property
  def nig(self) -> NIGParams:
    return NIGParams(self.gamma, self.nu, self.alpha, self.beta)


def _check_same_shape(**xs) -> None:
  shapes = {k: tuple(np.shape(v)) for k, v in xs.items()}
  if len(set(shapes.values())) != 1:
    raise ValueError(f"NIG arguments must share one shape [b]; got {shapes}")


def _check_domain(nu, alpha, beta) -> None:
  """Concrete nu, beta must be finite and > 0, alpha finite and > 1 (traced: not checked)."""
  validation.check_positive("nu", nu)
  validation.check_positive("beta", beta)
  a = validation.concrete(alpha)
  if a is not None:
    validation.check_finite("alpha", a)
    if np.any(a <= 1):
      raise ValueError(f"alpha must be > 1 everywhere; min value is {float(np.min(a))}")


def der_nll(y: Float[Array, "*b"], gamma: Float[Array, "*b"], nu: Float[Array, "*b"],
            alpha: Float[Array, "*b"], beta: Float[Array, "*b"]) -> Float[Array, "*b"]:
  """Negative log marginal likelihood of `y` under NIG(gamma, nu, alpha, beta) (per example).

  ::

    NLL = 1/2 log(pi / nu) - alpha log(Omega) + (alpha + 1/2) log((y - gamma)^2 nu + Omega)
          + log Gamma(alpha) - log Gamma(alpha + 1/2),   Omega = 2 beta (1 + nu),

  i.e. minus the Student-t log density with 2 alpha degrees of freedom, location gamma and
  squared scale beta (1 + nu) / (nu alpha).

  Args:
    y: regression targets.
    gamma, nu, alpha, beta: NIG parameters of the same shape (nu > 0, alpha > 1, beta > 0).
      Concrete values outside that domain (or non-finite) raise ValueError; traced values
      are not checked, and an out-of-domain entry gives a meaningless value (possibly
      NaN/inf) for that example only.

  Returns:
    The per-example NLL (same shape as `y`).

  Example:
    >>> float(der_nll(jnp.zeros(()), jnp.zeros(()), jnp.ones(()), 2 * jnp.ones(()),
    ...               jnp.ones(())))  # doctest: +ELLIPSIS
    0.98...
  """
  _check_same_shape(y=y, gamma=gamma, nu=nu, alpha=alpha, beta=beta)
  _check_domain(nu, alpha, beta)
  omega = 2.0 * beta * (1.0 + nu)
  return (0.5 * jnp.log(jnp.pi / nu) - alpha * jnp.log(omega)
          + (alpha + 0.5) * jnp.log(jnp.square(y - gamma) * nu + omega)
          + gammaln(alpha) - gammaln(alpha + 0.5))


def der_regularizer(y: Float[Array, "*b"], gamma: Float[Array, "*b"], nu: Float[Array, "*b"],
                    alpha: Float[Array, "*b"]) -> Float[Array, "*b"]:
  """Evidence regulariser ``|y - gamma| (2 nu + alpha)``: penalises evidence on errors (per example).

  Example:
    >>> float(der_regularizer(jnp.ones(()), jnp.zeros(()), jnp.ones(()), 2 * jnp.ones(())))
    4.0
  """
  _check_same_shape(y=y, gamma=gamma, nu=nu, alpha=alpha)
  return jnp.abs(y - gamma) * (2.0 * nu + alpha)


def der_loss(y: Float[Array, "*b"], nig: NIGParams, *, reg_weight: float = 1e-2
             ) -> Float[Array, "*b"]:
  """``L_DER = NLL + reg_weight * |y - gamma| (2 nu + alpha)``, per example.

  Args:
    y: regression targets.
    nig: the head's NIG parameters (nu > 0, alpha > 1, beta > 0; checked as in `der_nll`).
    reg_weight: lambda_R of the evidence regulariser (Amini et al. use ~1e-2).

  Returns:
    The per-example DER loss.

  Example:
    >>> p = NIGParams(jnp.zeros(2), jnp.ones(2), 2 * jnp.ones(2), jnp.ones(2))
    >>> der_loss(jnp.zeros(2), p).shape
    (2,)
  """
  return (der_nll(y, nig.gamma, nig.nu, nig.alpha, nig.beta)
          + reg_weight * der_regularizer(y, nig.gamma, nig.nu, nig.alpha))


def nig_uncertainty(nig: NIGParams) -> dict[str, Array]:
  """Aleatoric E[sigma^2] = beta / (alpha - 1) and epistemic Var[mu] = beta / (nu (alpha - 1)).

  Args:
    nig: NIG parameters with nu > 0, alpha > 1, beta > 0. Concrete values outside that
      domain (or non-finite) raise ValueError; traced values are not checked, and an
      out-of-domain entry gives a meaningless value (possibly NaN/inf or negative) for
      that example only.

  Returns:
    dict with "aleatoric", "epistemic" and "total" (their sum), each of the parameters' shape.

  Example:
    >>> p = NIGParams(jnp.zeros(()), 2 * jnp.ones(()), 3 * jnp.ones(()), jnp.ones(()))
    >>> {k: float(v) for k, v in nig_uncertainty(p).items()}
    {'aleatoric': 0.5, 'epistemic': 0.25, 'total': 0.75}
  """
  _check_domain(nig.nu, nig.alpha, nig.beta)
  aleatoric = nig.beta / (nig.alpha - 1.0)
  epistemic = aleatoric / nig.nu
  return {"aleatoric": aleatoric, "epistemic": epistemic, "total": aleatoric + epistemic}


def attention_statistics(attention: Float[Array, "b t"], *, top_k: int = 2
                         ) -> Float[Array, "b 4"]:
  """Per-row statistics of an attention map: [normalised entropy, max, std, top-k mass].

  Args:
    attention: rows on the simplex, [b, t] with t >= 2.
    top_k: how many of the largest weights the last statistic sums (1 <= top_k <= t).

  Returns:
    [b, 4]; the entropy is divided by log t so every statistic lies in [0, 1]. A row
    holding a NaN (or a negative weight) has a NaN entropy, as its other statistics are
    NaN: a zero weight adds 0 log 0 = 0, nothing else is dropped.

  Example:
    >>> attention_statistics(jnp.full((1, 4), 0.25)).round(3).tolist()
    [[1.0, 0.25, 0.0, 0.5]]
  """
  if attention.ndim != 2 or attention.shape[1] < 2:
    raise ValueError(f"attention must be [b, t] with t >= 2, got shape {attention.shape}")
  t = attention.shape[1]
  if not 1 <= top_k <= t:
    raise ValueError(f"top_k must lie in [1, {t}], got {top_k}")
  plogp = jnp.where(attention > 0, attention * jnp.log(attention),
                    jnp.where(attention == 0, 0.0, jnp.nan))
  entropy = -jnp.sum(plogp, -1)
  top = jax.lax.top_k(attention, top_k)[0]
  return jnp.stack([entropy / np.log(t), attention.max(-1), attention.std(-1), top.sum(-1)], -1)


class NIGHead(nn.Module):
  """CLS -> spatial cross-attention + attention statistics -> (gamma, nu, alpha, beta).

  jaxlab interpretation of the CVGL uncertainty head: layer-normed inputs, one cosine
  attention head (query from the CLS vector, keys/values from the spatial tokens), features = [attended vector, entropy,
  max, std and top-k mass of the attention map], a one-hidden-layer GELU MLP, then
  gamma linear, nu = softplus + 1e-6, alpha = 1 + softplus + 1e-6, beta = softplus + 1e-6.

  Attributes:
    hidden: width of the attention projections and the MLP.
    top_k: the top-k mass statistic's k.
    temperature: the cosine attention's temperature (scores = cos(q, k) / temperature).
    dtype: computation dtype (the outputs are float32).
    param_dtype: parameter dtype.
  """
  hidden: int = 32
  top_k: int = 2
  temperature: float = 0.1
  dtype: Any = None
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, cls: Float[Array, "b h"], spatial: Float[Array, "b t h2"]) -> NIGOutput:
    if spatial.ndim != 3 or spatial.shape[0] != cls.shape[0]:
      raise ValueError(f"spatial must be [b, t, h] with b = {cls.shape[0]}, got {spatial.shape}")
    dense = lambda n, name: nn.Dense(n, dtype=self.dtype, param_dtype=self.param_dtype,
                                     name=name)
    # Layer norms make the head invariant to its inputs' scale.
    norm = lambda name: nn.LayerNorm(dtype=self.dtype, param_dtype=self.param_dtype, name=name)
    cls, spatial = norm("cls_norm")(cls), norm("spatial_norm")(spatial)
    q = dense(self.hidden, "query")(cls)
    k = dense(self.hidden, "key")(spatial)
    v = dense(self.hidden, "value")(spatial)
    # Cosine attention (L2-normalised q, k at a fixed temperature): scores stay in
    # [-1/T, 1/T] whatever the weights, so the softmax can never see inf - inf.
    unit = lambda x: x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-6)
    q, k = unit(q.astype(jnp.float32)), unit(k.astype(jnp.float32))
    scores = jnp.einsum("bh,bth->bt", q, k) / self.temperature
    attention = jax.nn.softmax(scores, axis=-1)
    attended = jnp.einsum("bt,bth->bh", attention.astype(v.dtype), v)
    stats = attention_statistics(attention, top_k=min(self.top_k, spatial.shape[1]))
    feats = jnp.concatenate([attended, stats.astype(attended.dtype)], -1)
    h = nn.gelu(dense(self.hidden, "mlp")(feats))
    out = dense(4, "out")(h).astype(jnp.float32)
    gamma = out[:, 0]
    nu = jax.nn.softplus(out[:, 1]) + _MIN
    alpha = jax.nn.softplus(out[:, 2]) + 1.0 + _MIN
    beta = jax.nn.softplus(out[:, 3]) + _MIN
    return NIGOutput(gamma, nu, alpha, beta, attention)
