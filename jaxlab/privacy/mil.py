"""A light RTFM-style multiple-instance anomaly scorer with G-OPL / OPL layers.

Weak supervision: only the video label is known. Each snippet gets an anomaly score in
(0, 1); a video's score is the mean of its top-k snippet scores, trained with binary
cross-entropy against the video label (RTFM's top-k MIL, without its feature-magnitude
term: jaxlab interpretation, a "light RTFM").

`PrivacyVAD` places G-OPL right after the backbone feature (early suppression, as the paper
recommends) and OPL after it, either on the same features (`opl_placement="input"`) or on
the scorer's hidden layer (`"hidden"`, the paper's "deeper"); which one is a jaxlab
interpretation and a config knob. The ranks are call arguments (traced ints are fine), so
one compiled program serves every k of a sweep.

Example:
  >>> import jax, jax.numpy as jnp
  >>> model = PrivacyVAD(hidden=16, max_rank=4)
  >>> f = jnp.ones((2, 8, 32))
  >>> params = model.init(jax.random.key(0), f, 2, 2)
  >>> out = model.apply(params, f, 2, 2)
  >>> out.logits.shape, out.private.shape
  ((2, 8), (2, 8, 32))
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import linen as nn
from jax.typing import DTypeLike
from jaxtyping import Array, Float, Int

from jaxlab.privacy.projection import OrthogonalProjection

PLACEMENTS = ("input", "hidden")


def topk_mean(scores: Float[Array, "b t"], k: int) -> Float[Array, " b"]:
  """Mean of each row's k largest scores (RTFM's video-level score).

  Example:
    >>> import jax.numpy as jnp
    >>> [round(float(x), 4) for x in topk_mean(jnp.array([[0.1, 0.9, 0.5, 0.3]]), 2)]
    [0.7]
  """
  if not 1 <= k <= scores.shape[-1]:
    raise ValueError(f"k must lie in [1, {scores.shape[-1]}] (snippets per video), got {k}")
  return jnp.mean(jax.lax.top_k(scores, k)[0], axis=-1)


def topk_mil_loss(logits: Float[Array, "b t"], labels: Int[Array, " b"] | Float[Array, " b"],
                  *, k: int = 3) -> Float[Array, " b"]:
  """Per-video BCE between the top-k mean snippet score and the video label.

  Args:
    logits: snippet logits; scores are sigmoid(logits).
    labels: 1 for an abnormal video, 0 for a normal one.
    k: how many top snippets make the video score.

  Returns:
    Per-video loss (callers reduce, the optax.losses convention).

  Example:
    >>> import jax.numpy as jnp
    >>> loss = topk_mil_loss(jnp.zeros((2, 4)), jnp.array([0, 1]), k=2)
    >>> [round(float(x), 4) for x in loss]
    [0.6931, 0.6931]
  """
  if labels.shape != logits.shape[:1]:
    raise ValueError(f"labels must be [{logits.shape[0]}] (one per video), got {labels.shape}")
  video = topk_mean(jax.nn.sigmoid(logits.astype(jnp.float32)), k)
  # Clipped so a saturated score gives a large finite loss, never inf/NaN.
  video = jnp.clip(video, 1e-6, 1.0 - 1e-6)
  y = labels.astype(jnp.float32)
  return -(y * jnp.log(video) + (1.0 - y) * jnp.log1p(-video))


class VADOutput(NamedTuple):
  """What `PrivacyVAD` returns."""
  logits: jax.Array    # [*b, t] snippet anomaly logits
  private: jax.Array   # [*b, t, d] the features after the input-level projections (probed)
  q_gopl: jax.Array    # [d, max_rank] G-OPL basis (masked columns are zero)
  q_opl: jax.Array     # [d or hidden, max_rank] OPL basis


class PrivacyVAD(nn.Module):
  """Backbone feature -> G-OPL -> (OPL) -> 2-layer MLP scorer (-> OPL on hidden).

  Attributes:
    hidden: width of the scorer's hidden layer.
    max_rank: rows of each projection's W (largest k of the sweep).
    mode: "qr" or "direct" (see `jaxlab.privacy.projection`).
    opl_placement: "input" (OPL on the features after G-OPL) or "hidden" (on the scorer's
      hidden layer). jaxlab interpretation: the synthetic features have one level.
    dtype: computation dtype.
    param_dtype: parameter dtype.
  """
  hidden: int = 32
  max_rank: int = 64
  mode: str = "qr"
  opl_placement: str = "input"
  dtype: DTypeLike | None = None
  param_dtype: DTypeLike = jnp.float32

  @nn.compact
  def __call__(self, f: Float[Array, "*b t d"], gopl_rank: int | Int[Array, ""],
               opl_rank: int | Int[Array, ""]) -> VADOutput:
    if self.opl_placement not in PLACEMENTS:
      raise ValueError(f"opl_placement must be one of {PLACEMENTS}, got {self.opl_placement!r}")
    kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    x, q_g = OrthogonalProjection(self.max_rank, self.mode, name="gopl", **kw)(f, gopl_rank)
    opl = OrthogonalProjection(self.max_rank, self.mode, name="opl", **kw)
    if self.opl_placement == "input":
      x, q_o = opl(x, opl_rank)
    private = x
    h = nn.relu(nn.Dense(self.hidden, name="hidden", **kw)(x))
    if self.opl_placement == "hidden":
      h, q_o = opl(h, opl_rank)
    logits = nn.Dense(1, name="score", **kw)(h)[..., 0]
    return VADOutput(logits, private, q_g, q_o)

