"""Semantics -> classifier weights: the ICIS dual autoencoder and GA-ZSCE's grouped heads.

`DualMapping` holds ICIS's two autoencoders sharing one latent space: E_a (semantics ->
z), E_w (weights -> z), D_a (z -> semantics), D_w (z -> weights). With `num_groups = 0` it
is the ICIS shared mapping (one D_w for every class). With `num_groups = k > 0`, D_w gets
k residual heads: w = D_w(z) + sum_g r_g H_g(z), with r the class's routing weights
(`jaxlab.zeroshot.routing`): GA-ZSCE (reconstruction) stages S2/S3, a shared trunk with
one refinement head per discovered group.

`mapping_loss` is L_ICIS (four cosine-distance terms; the three that need a weight target
use seen classes only, att->att uses every class, ICIS `--include_unseen`) + lam_inv L_inv
(invariance of the synthesized weight across sources) + lam_margin L_sep (hinge on the
cosine of same-group predicted weights above kappa), optionally with per-group loss
normalisation. Each extra term is a jaxlab interpretation of the abstract's stages 2-3
and a knob of `LossConfig`.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jaxlab.zeroshot import mapping
  >>> m = mapping.DualMapping(sem_dim=8, weight_dim=5, latent_dim=4, hidden_dim=6)
  >>> a, w, r = jnp.ones((3, 8)), jnp.ones((3, 5)), jnp.ones((3, 1))
  >>> params = m.init(jax.random.key(0), a, w, r)
  >>> m.apply(params, a, r, method=m.synthesize).shape
  (3, 5)
"""

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from jaxlab.zeroshot import routing as routing_lib


def _mlp(hidden: int, out: int, dtype, param_dtype, name: str) -> nn.Module:
  return nn.Sequential([
      nn.Dense(hidden, dtype=dtype, param_dtype=param_dtype, name=f"{name}_0"), nn.relu,
      nn.Dense(out, dtype=dtype, param_dtype=param_dtype, name=f"{name}_1")], name=name)


class DualMapping(nn.Module):
  """ICIS dual autoencoder (2-layer MLPs), optionally with per-group weight heads.

  Attributes:
    sem_dim: dimension of the class semantics.
    weight_dim: dimension of a classifier weight (incl. its bias).
    latent_dim: shared latent width.
    hidden_dim: hidden width of every 2-layer MLP.
    num_groups: residual D_w heads (0 = ICIS shared mapping).
    dtype: computation dtype (params stay in `param_dtype`).
    param_dtype: parameter dtype.
  """
  sem_dim: int
  weight_dim: int
  latent_dim: int = 128
  hidden_dim: int = 256
  num_groups: int = 0
  dtype: Any = None
  param_dtype: Any = jnp.float32

  def setup(self):
    kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    self.enc_a = _mlp(self.hidden_dim, self.latent_dim, name="enc_a", **kw)
    self.enc_w = _mlp(self.hidden_dim, self.latent_dim, name="enc_w", **kw)
    self.dec_a = _mlp(self.hidden_dim, self.sem_dim, name="dec_a", **kw)
    self.dec_w = _mlp(self.hidden_dim, self.weight_dim, name="dec_w", **kw)
    if self.num_groups:
      # Zero-initialised heads: training starts from the shared mapping.
      self.heads = self.param("heads", nn.initializers.zeros,
                              (self.num_groups, self.latent_dim, self.weight_dim),
                              self.param_dtype)

  def decode_weight(self, z: Float[Array, "*b c l"], r: Float[Array, "c k"]
                    ) -> Float[Array, "*b c w"]:
    w = self.dec_w(z)
    if self.num_groups:
      if r.shape[-1] != self.num_groups or r.shape[0] != z.shape[-2]:
        raise ValueError(f"routing weights must be [{z.shape[-2]}, {self.num_groups}], got "
                         f"{r.shape}")
      heads = jnp.asarray(self.heads, self.dtype or z.dtype)
      # Mix each class's head once ([c, l, w]), then apply it to every source's latent:
      # c*k*l*w + b*c*l*w multiply-adds instead of b*c*k*l*w.
      per_class = jnp.einsum("ck,klw->clw", r.astype(z.dtype), heads)
      w = w + jnp.einsum("...cl,clw->...cw", jax.nn.relu(z), per_class)
    return w

  def synthesize(self, a: Float[Array, "*b c s"], r: Float[Array, "c k"]
                 ) -> Float[Array, "*b c w"]:
    """Classifier weights from semantics (the att -> weight path used at test time)."""
    if a.shape[-1] != self.sem_dim:
      raise ValueError(f"semantics must have last dim {self.sem_dim}, got {a.shape}")
    return self.decode_weight(self.enc_a(a), r)

  def __call__(self, a: Float[Array, "*b c s"], w: Float[Array, "*b c w"],
               r: Float[Array, "c k"]) -> dict[str, Float[Array, "*b c _"]]:
    """The four ICIS reconstructions: att->att, weight->att, weight->weight, att->weight.

    Leading axes of `a` and `w` (e.g. sources) share the classes' routing weights `r`.
    """
    if a.shape[-1] != self.sem_dim or w.shape[-1] != self.weight_dim:
      raise ValueError(f"expected semantics [..., c, {self.sem_dim}] and weights "
                       f"[..., c, {self.weight_dim}], got {a.shape} and {w.shape}")
    za, zw = self.enc_a(a), self.enc_w(w)
    return dict(a2a=self.dec_a(za), w2a=self.dec_a(zw), w2w=self.decode_weight(zw, r),
                a2w=self.decode_weight(za, r))


@dataclasses.dataclass(frozen=True)
class LossConfig:
  """Which terms the mapping loss uses (each a jaxlab interpretation of the abstract's stages 2-3).

  Attributes:
    lam_inv: weight of L_inv, the invariance of synthesized weights across sources.
    lam_margin: weight of L_sep, the intra-group margin.
    margin: kappa: same-group predicted weights are pushed apart while cos > kappa.
    group_norm: per-group loss normalisation (mean in each group, then across groups).
    margin_unseen: include unseen classes (their semantics only) in the margin pairs.
  """
  lam_inv: float = 0.0
  lam_margin: float = 0.0
  margin: float = 0.5
  group_norm: bool = False
  margin_unseen: bool = True


def cosine_distance(x: Float[Array, "*bx d"], y: Float[Array, "*by d"]) -> Float[Array, "..."]:
  """1 - cos(x, y) along the last axis (leading axes broadcast); a zero vector gives 1."""
  return 1.0 - jnp.sum(_unit(x) * _unit(y), -1)


def _unit(x):
  # eps inside the sqrt: the norm's gradient at an exactly-zero vector (ICIS' w->att path
  # of a zero-initialised net) would otherwise be NaN.
  return x / jnp.sqrt(jnp.sum(x * x, -1, keepdims=True) + 1e-12)


def invariance_loss(pred: Float[Array, "m c w"]) -> Float[Array, ""]:
  """L_inv = mean_{c, m} (1 - cos(G(e_c^m), mean_m G(e_c^m)))."""
  if pred.ndim != 3:
    raise ValueError(f"pred must be [sources, classes, dim], got {pred.shape}")
  return jnp.mean(cosine_distance(pred, jnp.mean(pred, 0, keepdims=True)))


def intra_group_margin(pred: Float[Array, "c w"], groups: Float[Array, "c k"],
                       mask: Bool[Array, " c"], margin: float) -> Float[Array, ""]:
  """Mean over same-group class pairs (i != j, both in `mask`) of relu(cos(w_i, w_j) - margin).

  `groups` are routing weights; pairs count by the product of their memberships.
  """
  if pred.ndim != 2 or groups.shape[0] != pred.shape[0] or mask.shape != (pred.shape[0],):
    raise ValueError(f"pred [c, w], groups [c, k], mask [c] must agree; got {pred.shape}, "
                     f"{groups.shape}, {mask.shape}")
  cos = _unit(pred) @ _unit(pred).T
  same = groups @ groups.T
  m = mask.astype(pred.dtype)
  pair = same * m[:, None] * m[None, :] * (1.0 - jnp.eye(pred.shape[0], dtype=pred.dtype))
  return jnp.sum(pair * jax.nn.relu(cos - margin)) / jnp.maximum(jnp.sum(pair), 1e-8)


def mapping_loss(model: DualMapping, params, semantics: Float[Array, "m c s"],
                 weights: Float[Array, "c w"], seen: Bool[Array, " c"],
                 routes: Float[Array, "c k"], cfg: LossConfig) -> tuple[Float[Array, ""], dict]:
  """The training loss of one arm on every (source, class) pair (full batch).

  Args:
    model: the mapping.
    params: its parameters.
    semantics: per-source class semantics, [m, c, s].
    weights: seen-class classifier weights (rows of unseen classes are ignored), [c, w].
    seen: seen-class mask, [c].
    routes: routing weights of each class over the groups (one column for ICIS), [c, k].
    cfg: which terms to use.

  Returns:
    (loss, dict of its terms).
  """
  m, c, _ = semantics.shape
  if weights.shape[0] != c or seen.shape != (c,) or routes.shape[0] != c:
    raise ValueError(f"weights [c, w], seen [c], routes [c, k] must have c = {c}; got "
                     f"{weights.shape}, {seen.shape}, {routes.shape}")
  w = jnp.broadcast_to(weights, (m,) + weights.shape)
  seen_f = seen.astype(jnp.float32)
  out = model.apply(params, semantics, w, routes)
  per = (cosine_distance(out["a2a"], semantics)
         + seen_f * (cosine_distance(out["w2a"], semantics) + cosine_distance(out["w2w"], w)
                     + cosine_distance(out["a2w"], w)))                       # [m, c]
  if cfg.group_norm:
    base = routing_lib.group_mean(per.reshape(-1), jnp.tile(routes, (m, 1)))
  else:
    base = jnp.mean(per)
  pred = out["a2w"]
  terms = {"icis": base}
  loss = base
  if cfg.lam_inv:
    terms["inv"] = invariance_loss(pred)
    loss = loss + cfg.lam_inv * terms["inv"]
  if cfg.lam_margin:
    mask = jnp.ones_like(seen) if cfg.margin_unseen else seen
    terms["sep"] = intra_group_margin(jnp.mean(pred, 0), routes, mask, cfg.margin)
    loss = loss + cfg.lam_margin * terms["sep"]
  return loss, terms
