"""A tiny two-tower cross-view model: token encoders, a learnable logit scale, the NIG head.

Each view is a set of tokens (street: ring samples; satellite: a 3 x 3 patch). A
`ViewEncoder` maps every token through a shared GELU MLP (the spatial features), optionally
adds a learned position embedding, pools them with a learned-query attention plus the mean
(the CLS vector), and projects the CLS vector to an L2-normalised embedding. `CVGLModel`
holds a street and a satellite encoder (separate weights: the views come from different
maps), Sample4Geo's learnable logit scale (init log(1 / 0.07)), and the `NIGHead` on the
query (street) side. Sizes are CPU-tiny; the layout is a jaxlab interpretation.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jaxlab.retrieval import model
  >>> m = model.CVGLModel(hidden=16, embed_dim=8)
  >>> street, sat = jnp.ones((4, 8, 8)), jnp.ones((4, 9, 8))
  >>> params = m.init(jax.random.key(0), street, sat)
  >>> out = m.apply(params, street, sat)
  >>> out.query.shape, out.nig.alpha.shape
  ((4, 8), (4,))
"""

from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxlab.retrieval.nig import NIGHead, NIGOutput


class ViewEncoder(nn.Module):
  """Tokens -> (embedding, CLS vector, spatial features).

  Attributes:
    hidden: width of the token MLP and the CLS vector.
    embed_dim: embedding size.
    positional: add a learned position embedding (order-aware view, e.g. satellite).
    dtype: computation dtype.
    param_dtype: parameter dtype.
  """
  hidden: int = 32
  embed_dim: int = 64
  positional: bool = False
  dtype: Any = None
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, tokens: Float[Array, "b t d"]
               ) -> tuple[Float[Array, "b e"], Float[Array, "b h"], Float[Array, "b t h"]]:
    if tokens.ndim != 3:
      raise ValueError(f"tokens must be [b, t, d], got shape {tokens.shape}")
    dense = lambda n, name: nn.Dense(n, dtype=self.dtype, param_dtype=self.param_dtype,
                                     name=name)
    h = dense(self.hidden, "token_out")(nn.gelu(dense(self.hidden, "token_in")(tokens)))
    if self.positional:
      pos = self.param("position", nn.initializers.normal(0.02), tokens.shape[1:2] + (self.hidden,),
                       self.param_dtype)
      h = h + pos.astype(h.dtype)
    query = self.param("cls_query", nn.initializers.normal(1.0), (self.hidden,), self.param_dtype)
    scores = jnp.einsum("bth,h->bt", dense(self.hidden, "pool_key")(h), query.astype(h.dtype))
    w = jax.nn.softmax(scores.astype(jnp.float32) / np.sqrt(self.hidden), axis=-1)
    cls = jnp.einsum("bt,bth->bh", w.astype(h.dtype), h) + h.mean(1)
    cls = dense(self.hidden, "cls")(cls)
    emb = dense(self.embed_dim, "embed")(nn.gelu(cls)).astype(jnp.float32)
    emb = emb / jnp.maximum(jnp.linalg.norm(emb, axis=-1, keepdims=True), 1e-6)
    return emb, cls, h


class CVGLOutput(NamedTuple):
  """Query / reference embeddings [b, e], the logit scale [] and the NIG head's output."""
  query: Array
  reference: Array
  logit_scale: Array
  nig: NIGOutput


class CVGLModel(nn.Module):
  """Street and satellite encoders, a learnable logit scale and the NIG uncertainty head.

  Attributes:
    hidden: encoder / head width.
    embed_dim: embedding size.
    head_hidden: NIG head width.
    head_stop_gradient: stop the DER loss's gradient at the backbone (a jaxlab ablation).
    dtype: computation dtype.
    param_dtype: parameter dtype.
  """
  hidden: int = 32
  embed_dim: int = 64
  head_hidden: int = 32
  head_stop_gradient: bool = False
  dtype: Any = None
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, street: Float[Array, "b ts d"], sat: Float[Array, "b tr d"]) -> CVGLOutput:
    kw = dict(hidden=self.hidden, embed_dim=self.embed_dim, dtype=self.dtype,
              param_dtype=self.param_dtype)
    q, cls, spatial = ViewEncoder(positional=False, name="street", **kw)(street)
    r, _, _ = ViewEncoder(positional=True, name="satellite", **kw)(sat)
    scale = self.param("logit_scale", nn.initializers.constant(np.log(1 / 0.07)), (),
                       self.param_dtype)
    if self.head_stop_gradient:
      cls, spatial = jax.lax.stop_gradient(cls), jax.lax.stop_gradient(spatial)
    nig = NIGHead(hidden=self.head_hidden, dtype=self.dtype, param_dtype=self.param_dtype,
                  name="nig_head")(cls, spatial)
    return CVGLOutput(q, r, jnp.exp(scale.astype(jnp.float32)), nig)
