"""Baselines: softmax (max prob / entropy), EDL (Sensoy et al., 2018), F-EDL.

F-EDL is `MoDEXHead(shared_advocacy=True)`; its uncertainty is
`modex_uncertainty` with a tau that is equal across classes.
"""

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import DTypeLike
from jaxtyping import Float

from jaxlab import validation
from jaxlab.uq._modex import MoDEXHead, ModexUncertainty, modex_uncertainty

_EVIDENCE = ("softplus", "relu", "exp")


class EDLHead(nn.Module):
  """Dirichlet head of EDL: `alpha = evidence(Dense(h)) + 1`.

  Attributes:
    num_classes: k.
    evidence: "softplus" (default), "relu" (Sensoy et al.) or "exp"
      (logits clipped to +-log_clip).
    log_clip: clip of the logits for the "exp" evidence.
    dtype: computation dtype of the Dense layer (None: inferred, as in
      `flax.linen.Dense`); the evidence and alpha stay at least float32 (the
      Dirichlet math needs it, as in `MoDEXHead`).
    param_dtype: dtype of the weights (float32 by default).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> head = EDLHead(num_classes=3)
    >>> p = head.init(jax.random.key(0), jnp.zeros((2, 4)))
    >>> bool((head.apply(p, jnp.zeros((2, 4))) >= 1).all())
    True
  """
  num_classes: int
  evidence: str = "softplus"
  log_clip: float = 10.0
  dtype: DTypeLike | None = None
  param_dtype: DTypeLike = jnp.float32

  @nn.compact
  def __call__(self, h: Float[Array, "*b d"]) -> Float[Array, "*b k"]:
    if self.evidence not in _EVIDENCE:
      raise ValueError(f"evidence must be one of {_EVIDENCE}, got {self.evidence!r}")
    z = nn.Dense(self.num_classes, dtype=self.dtype, param_dtype=self.param_dtype,
                 name="evidence")(h)
    z = z.astype(jnp.promote_types(z.dtype, jnp.float32))
    if self.evidence == "softplus":
      e = jax.nn.softplus(z)
    elif self.evidence == "relu":
      e = jax.nn.relu(z)
    else:
      e = jnp.exp(jnp.clip(z, -self.log_clip, self.log_clip))
    return e + 1.0


class FEDLHead(MoDEXHead):
  """F-EDL head: `MoDEXHead` with one scalar advocacy tau per example.

  Inherits `MoDEXHead`'s fields, `dtype` / `param_dtype` included.
  """
  shared_advocacy: bool = True


def dirichlet_uncertainty(alpha: Float[Array | np.ndarray, "*b k"]) -> ModexUncertainty:
  """Uncertainty of a single Dirichlet (EDL): MoDEX with tau = 0.

  With tau = 0 every advocate equals Dir(alpha), so the mixture is Dir(alpha)
  and the disagreement terms are 0.

  Example:
    >>> import jax.numpy as jnp
    >>> round(float(dirichlet_uncertainty(jnp.ones((3,))).epistemic_disagreement), 6)
    0.0
  """
  k = validation.check_rank_and_classes("alpha", alpha)
  alpha = jnp.asarray(alpha)
  return modex_uncertainty(alpha, jnp.zeros_like(alpha), jnp.full_like(alpha, 1.0 / k))


class SoftmaxUncertainty(NamedTuple):
  """Softmax baseline scores, each [...]."""
  max_prob: Array  # confidence (MSP)
  entropy: Array   # predictive entropy


def softmax_uncertainty(logits: Float[Array | np.ndarray, "*b k"]) -> SoftmaxUncertainty:
  """Max softmax probability and entropy, finite for extreme logits.

  Example:
    >>> import jax.numpy as jnp
    >>> u = softmax_uncertainty(jnp.array([[0.0, 0.0]]))
    >>> round(float(u.entropy[0]), 4)
    0.6931
  """
  validation.check_rank_and_classes("logits", logits)
  validation.check_finite("logits", logits)
  logp = jax.nn.log_softmax(jnp.asarray(logits), axis=-1)
  p = jnp.exp(logp)
  return SoftmaxUncertainty(max_prob=jnp.max(p, axis=-1), entropy=-jnp.sum(p * logp, axis=-1))
