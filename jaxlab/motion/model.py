"""The SATA autoencoder in linen: semantic modulation, graph + attention blocks, max-pool latent.

Encoder (spec §1(a)): per joint, dynamic features z_m = MLP(F_m) are modulated
by a condition c = MLP([z_s; z_t]) from the joint's rest geometry z_s
(sinusoidal encoding + MLP) and its description's text embedding z_t (FiLM +
gated residual: x = LN(z_m)(1 + gamma) + beta, g = sigmoid(W_g c),
h = z_m + g x). Spatio-temporal blocks follow: a GINE message-passing branch
over the bones (edge features: depth, inverse depth, direction; aggregated
with `jax.ops.segment_sum`) plus a spatial Transformer over the joints of a
frame, summed, then an MLP; then a temporal Transformer per joint. A masked
max-pool over joints gives one latent per frame (the source topology is
erased) and a diagonal Gaussian (VAE). The decoder broadcasts the latent to
every joint of the *target* skeleton, conditions it on the target's static
features and text with the same modulation, runs the same blocks, and outputs
per joint 6-D rotation + root motion + contact logit (6 + 4 + 1 = 11).

Padding: skeletons of a batch are padded to one joint count; `mask` removes
padding from attention keys, messages and the pool.

Ablations share one compiled program: a model built with `modulation="both"`
(and text and spatial attention on) carries the parameters of every ablation,
and `Switches` (traced scalars in {0, 1}) turn parts off at run time. A part
switched off contributes exactly zero to the output and receives a zero gradient
(so Adam never moves its parameters): the switched model computes the same
function as the static ablation (`SataConfig(modulation="concat")` etc.).

Example:
  >>> import jax, jax.numpy as jnp
  >>> cfg = SataConfig(width=16, num_blocks=1, num_heads=2, latent_dim=8)
  >>> b, t, j = 2, 4, 5
  >>> skel = SkeletonInputs(static=jnp.zeros((b, j, 6)), text=jnp.zeros((b, j, 384)),
  ...                       parents=jnp.array([[-1, 0, 1, 0, 3]] * b),
  ...                       depth=jnp.array([[0, 1, 2, 1, 2]] * b), mask=jnp.ones((b, j), bool))
  >>> model = SataAutoencoder(cfg)
  >>> x = jnp.zeros((b, t, j, 17))
  >>> params = model.init(jax.random.key(0), x, skel, skel)
  >>> out, mu, logvar = model.apply(params, x, skel, skel)
  >>> out.shape, mu.shape
  ((2, 4, 5, 11), (2, 4, 8))
"""

import dataclasses
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import Array
from jaxtyping import Bool, Float, Int

MODULATIONS = ("film", "concat", "both")
NUM_OUTPUTS = 11  # 6-D rotation + 4 root motion + 1 contact logit (jaxlab interpretation)


@dataclasses.dataclass(frozen=True)
class SataConfig:
  """Architecture knobs (the ablations switch these).

  Attributes:
    width: hidden width d.
    num_blocks: spatio-temporal blocks in the encoder (the decoder mirrors them).
    num_heads: attention heads (spatial and temporal).
    latent_dim: per-frame VAE latent size.
    modulation: "film" (FiLM + gated residual, the paper's), "concat" (the
      no-FiLM ablation: h = z_m + MLP([z_m; c])) or "both" (both branches built;
      `Switches.film` picks one at run time, FiLM by default).
    use_text: whether the condition reads the joint-description embeddings
      (False = the no-text ablation: geometry only).
    gnn: the GINE message-passing branch.
    spatial_attention: the spatial Transformer branch.
    temporal_attention: the temporal Transformer.
    num_freqs: sinusoidal frequencies of the rest-geometry encoding.
    max_frames: longest clip for the temporal positional encoding.
  """
  width: int = 48
  num_blocks: int = 2
  num_heads: int = 4
  latent_dim: int = 32
  modulation: str = "film"
  use_text: bool = True
  gnn: bool = True
  spatial_attention: bool = True
  temporal_attention: bool = True
  num_freqs: int = 4
  max_frames: int = 256

  def __post_init__(self):
    if self.modulation not in MODULATIONS:
      raise ValueError(f"modulation must be one of {MODULATIONS}, got {self.modulation!r}")
    if not (self.gnn or self.spatial_attention):
      raise ValueError("at least one of gnn and spatial_attention must be on")
    if self.width % self.num_heads:
      raise ValueError(f"width {self.width} must be divisible by num_heads {self.num_heads}")
    for name in ("width", "num_blocks", "num_heads", "latent_dim", "num_freqs", "max_frames"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


class Switches(NamedTuple):
  """Run-time on/off switches (0 or 1, traced) of the ablated parts; `None` = all on.

  Attributes:
    text: the text branch z_t of the condition (0 = the no-text ablation).
    film: with `modulation="both"`: 1 = FiLM + gate, 0 = concatenation (no-FiLM).
    spatial_attention: the spatial Transformer branch (0 = GNN only).
  """
  text: Float[Array, ""] | float
  film: Float[Array, ""] | float
  spatial_attention: Float[Array, ""] | float


ALL_ON = Switches(1.0, 1.0, 1.0)


class SkeletonInputs(NamedTuple):
  """Per-joint static inputs of a padded batch of skeletons.

  Attributes:
    static: [B, J, 6] rest position (root-relative) and offset from the parent.
    text: [B, J, E] description embeddings (ignored when `use_text` is False).
    parents: [B, J] int parent indices (-1 root; padding joints may point anywhere valid).
    depth: [B, J] int topological depth.
    mask: [B, J] bool real joints.
  """
  static: Float[Array, "b j 6"]
  text: Float[Array, "b j e"]
  parents: Int[Array, "b j"]
  depth: Int[Array, "b j"]
  mask: Bool[Array, "b j"]


def sinusoidal(x: Float[Array, "*b c"], num_freqs: int) -> Float[Array, "*b f"]:
  """[x, sin(2^k pi x), cos(2^k pi x)] for k < num_freqs (coordinate encoding).

  Example:
    >>> sinusoidal(jnp.zeros((4, 3)), 2).shape   # 3 + 3 * 2 * 2
    (4, 15)
    >>> (sinusoidal(jnp.array([0.5]), 1).round(6) + 0.0).tolist()   # [x, sin(pi x), cos(pi x)]
    [0.5, 1.0, 0.0]
  """
  freqs = (2.0 ** jnp.arange(num_freqs)) * jnp.pi
  ang = x[..., None] * freqs
  feats = jnp.concatenate([jnp.sin(ang), jnp.cos(ang)], axis=-1).reshape(*x.shape[:-1], -1)
  return jnp.concatenate([x, feats], axis=-1)


def time_encoding(num_frames: int, width: int) -> Float[Array, "t d"]:
  """Transformer sinusoidal positional encoding [T, width].

  Example:
    >>> pe = time_encoding(3, 6)
    >>> pe.shape, pe[0].tolist()   # frame 0: sin 0 = 0, cos 0 = 1
    ((3, 6), [0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
  """
  pos = jnp.arange(num_frames, dtype=jnp.float32)[:, None]
  i = jnp.arange(width // 2, dtype=jnp.float32)[None]
  ang = pos / (10000.0 ** (2 * i / width))
  pe = jnp.concatenate([jnp.sin(ang), jnp.cos(ang)], axis=-1)
  return jnp.pad(pe, ((0, 0), (0, width - pe.shape[1])))


class Mlp(nn.Module):
  """Dense -> GELU -> Dense."""
  width: int
  out: int | None = None
  dtype: Any = None
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x):
    kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    h = nn.gelu(nn.Dense(self.width, name="up", **kw)(x))
    return nn.Dense(self.out or self.width, name="down", **kw)(h)


class Modulation(nn.Module):
  """Semantic-aware feature modulation of dynamic features z [B, T, J, d] by c [B, J, d].

  "film": x = LN(z)(1 + gamma) + beta with [gamma, beta] = Psi(c), g = sigmoid(W_g c),
  returns z + g * x. "concat": returns z + MLP([z; c]) (the no-FiLM ablation).
  """
  kind: str
  dtype: Any = None
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, z, c, film=1.0):
    """`film` (0 or 1) picks the branch when `kind == "both"`; ignored otherwise."""
    if self.kind not in MODULATIONS:
      raise ValueError(f"Unknown modulation {self.kind!r}; expected one of {MODULATIONS}")
    kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    d = z.shape[-1]
    c = c[:, None]  # broadcast over frames
    out = z
    if self.kind in ("film", "both"):
      gamma_beta = nn.Dense(2 * d, name="psi", kernel_init=nn.initializers.zeros, **kw)(c)
      gamma, beta = jnp.split(gamma_beta, 2, axis=-1)
      x = nn.LayerNorm(name="norm", **kw)(z) * (1 + gamma) + beta
      gate = nn.sigmoid(nn.Dense(d, name="gate", **kw)(c))
      out = out + (film if self.kind == "both" else 1.0) * gate * x
    if self.kind in ("concat", "both"):
      cb = jnp.broadcast_to(c, z.shape[:-1] + c.shape[-1:])
      mix = Mlp(d, dtype=self.dtype, param_dtype=self.param_dtype, name="mix")(
          jnp.concatenate([z, cb], axis=-1))
      out = out + (1.0 - film if self.kind == "both" else 1.0) * mix
    return out


def bone_edges(parents: Int[Array, "b j"], depth: Int[Array, "b j"], mask: Bool[Array, "b j"]):
  """Both directions of every bone: (src, dst [B, 2J], features [B, 2J, 3], valid [B, 2J]).

  Edge features (spec: depth and inverse depth) are the child's depth / 8, 1 / (1 + depth)
  and the direction (+1 parent -> child, -1 child -> parent).

  Example:
    >>> parents, depth = jnp.array([[-1, 0, 1]]), jnp.array([[0, 1, 2]])
    >>> src, dst, feats, valid = bone_edges(parents, depth, jnp.ones((1, 3), bool))
    >>> src.tolist(), dst.tolist(), valid.tolist()   # the root has no bone
    ([[0, 0, 1, 0, 1, 2]], [[0, 1, 2, 0, 0, 1]], [[False, True, True, False, True, True]])
    >>> feats.shape
    (1, 6, 3)
  """
  j = parents.shape[-1]
  child = jnp.broadcast_to(jnp.arange(j), parents.shape)
  parent = jnp.clip(parents, 0, j - 1)
  valid = mask & (parents >= 0)
  src = jnp.concatenate([parent, child], axis=-1)
  dst = jnp.concatenate([child, parent], axis=-1)
  d = depth.astype(jnp.float32)
  base = jnp.stack([d / 8.0, 1.0 / (1.0 + d)], axis=-1)
  direction = jnp.concatenate([jnp.ones_like(d), -jnp.ones_like(d)], axis=-1)[..., None]
  feats = jnp.concatenate([jnp.concatenate([base, base], axis=-2), direction], axis=-1)
  return src, dst, feats, jnp.concatenate([valid, valid], axis=-1)


class GINEConv(nn.Module):
  """GINE message passing: h' = MLP((1 + eps) h + sum_{i->j} relu(h_i + W e_ij)).

  Messages are summed into their destination joint with `jax.ops.segment_sum`.
  """
  width: int
  dtype: Any = None
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, h, src, dst, efeat, evalid):
    num_joints = h.shape[2]
    e = nn.Dense(h.shape[-1], name="edge", dtype=self.dtype, param_dtype=self.param_dtype)(efeat)
    h_src = jnp.take_along_axis(h, src[:, None, :, None], axis=2)           # [B, T, E, d]
    msg = nn.relu(h_src + e[:, None]) * evalid[:, None, :, None].astype(h.dtype)

    def aggregate(m, d):  # m [T, E, d], d [E] -> [T, J, d]
      return jnp.moveaxis(jax.ops.segment_sum(jnp.moveaxis(m, 1, 0), d,
                                              num_segments=num_joints), 0, 1)

    agg = jax.vmap(aggregate)(msg, dst)
    eps = self.param("eps", nn.initializers.zeros, (), self.param_dtype)
    return Mlp(self.width, dtype=self.dtype, param_dtype=self.param_dtype, name="mlp")(
        (1 + eps) * h + agg)


class STBlock(nn.Module):
  """Spatial (GINE + spatial Transformer, summed, MLP) then temporal Transformer, residual."""
  config: SataConfig
  dtype: Any = None
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, h, edges, mask, spatial_attention=1.0):
    cfg = self.config
    kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    x = nn.LayerNorm(name="norm_spatial", **kw)(h)
    s = jnp.zeros_like(h)
    if cfg.gnn:
      s = s + GINEConv(cfg.width, name="gine", **kw)(x, *edges)
    if cfg.spatial_attention:
      key_mask = mask[:, None, None, None, :]  # [B, T, heads, Jq, Jk] by broadcasting
      s = s + spatial_attention * nn.MultiHeadDotProductAttention(
          cfg.num_heads, name="spatial_attn", **kw)(x, mask=key_mask)
    h = h + s
    h = h + Mlp(2 * cfg.width, cfg.width, name="mlp", **kw)(nn.LayerNorm(name="norm_mlp", **kw)(h))
    if cfg.temporal_attention:
      x = nn.LayerNorm(name="norm_temporal", **kw)(h)
      x = jnp.swapaxes(x, 1, 2) + time_encoding(h.shape[1], cfg.width).astype(x.dtype)
      t = nn.MultiHeadDotProductAttention(cfg.num_heads, name="temporal_attn", **kw)(x)
      h = h + jnp.swapaxes(t, 1, 2)
    return h


class _Condition(nn.Module):
  """c = MLP([z_s; z_t]) per joint: rest geometry (+ text) -> [B, J, d]."""
  config: SataConfig
  dtype: Any = None
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, skel: SkeletonInputs, text=1.0):
    cfg = self.config
    kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    z = Mlp(cfg.width, name="phi_s", **kw)(sinusoidal(skel.static, cfg.num_freqs))
    if cfg.use_text:
      z_t = text * nn.Dense(cfg.width, name="phi_t", **kw)(skel.text)
      z = jnp.concatenate([z, z_t], axis=-1)
    return Mlp(cfg.width, name="Phi", **kw)(z)


class SataAutoencoder(nn.Module):
  """Topology-agnostic motion VAE (see the module docstring).

  Attributes:
    config: `SataConfig`.
    dtype: computation dtype (None: float32 params' dtype).
    param_dtype: parameter dtype.
  """
  config: SataConfig
  dtype: Any = None
  param_dtype: Any = jnp.float32

  def setup(self):
    cfg, kw = self.config, dict(dtype=self.dtype, param_dtype=self.param_dtype)
    self.enc_in = Mlp(cfg.width, name="phi_m", **kw)
    self.enc_cond = _Condition(cfg, name="enc_condition", **kw)
    self.enc_mod = Modulation(cfg.modulation, name="enc_modulation", **kw)
    self.enc_blocks = [STBlock(cfg, name=f"enc_block{i}", **kw) for i in range(cfg.num_blocks)]
    self.to_latent = nn.Dense(2 * cfg.latent_dim, name="to_latent", **kw)
    self.dec_in = nn.Dense(cfg.width, name="from_latent", **kw)
    self.dec_cond = _Condition(cfg, name="dec_condition", **kw)
    self.dec_mod = Modulation(cfg.modulation, name="dec_modulation", **kw)
    self.dec_blocks = [STBlock(cfg, name=f"dec_block{i}", **kw) for i in range(cfg.num_blocks)]
    self.head = nn.Dense(NUM_OUTPUTS, name="head", **kw)

  def encode(self, features: Float[Array, "b t j f"], skel: SkeletonInputs,
             switches: Switches | None = None
             ) -> tuple[Float[Array, "b t k"], Float[Array, "b t k"]]:
    """(mean, log-variance) of the per-frame latent of a clip on its own skeleton."""
    _check(features, skel)
    sw = ALL_ON if switches is None else switches
    edges = bone_edges(skel.parents, skel.depth, skel.mask)
    h = self.enc_mod(self.enc_in(features), self.enc_cond(skel, sw.text), sw.film)
    for block in self.enc_blocks:
      h = block(h, edges, skel.mask, sw.spatial_attention)
    pooled = jnp.max(jnp.where(skel.mask[:, None, :, None], h, -jnp.inf), axis=2)
    mu, logvar = jnp.split(self.to_latent(pooled), 2, axis=-1)
    return mu, jnp.clip(logvar, -10.0, 10.0)

  def decode(self, z: Float[Array, "b t k"], skel: SkeletonInputs,
             switches: Switches | None = None) -> Float[Array, "b t j 11"]:
    """Per-joint outputs (6-D rotation, root motion, contact logit) on the target skeleton."""
    sw = ALL_ON if switches is None else switches
    edges = bone_edges(skel.parents, skel.depth, skel.mask)
    j = skel.mask.shape[-1]
    h = jnp.broadcast_to(self.dec_in(z)[:, :, None], (*z.shape[:2], j, self.config.width))
    h = self.dec_mod(h, self.dec_cond(skel, sw.text), sw.film)
    for block in self.dec_blocks:
      h = block(h, edges, skel.mask, sw.spatial_attention)
    return self.head(h)

  def __call__(self, features: Float[Array, "b t j f"], source: SkeletonInputs,
               target: SkeletonInputs, rng: jax.Array | None = None,
               switches: Switches | None = None
               ) -> tuple[Float[Array, "b t j 11"], Float[Array, "b t k"], Float[Array, "b t k"]]:
    """Encodes on `source`, decodes on `target`; samples the latent when `rng` is given.

    Args:
      features: [B, T, J_source, F] dynamic features on the source skeletons.
      source: the source skeletons.
      target: the target skeletons (`source` again for reconstruction).
      rng: key of the VAE's latent sample; None decodes the mean.
      switches: run-time ablation switches (`Switches`); None = all on.

    Returns:
      (outputs [B, T, J_target, 11], latent mean, latent log-variance).
    """
    mu, logvar = self.encode(features, source, switches)
    z = mu if rng is None else mu + jnp.exp(0.5 * logvar) * jax.random.normal(rng, mu.shape)
    return self.decode(z, target, switches), mu, logvar


def _check(features, skel: SkeletonInputs) -> None:
  b, _, j, _ = features.shape
  if skel.mask.shape != (b, j):
    raise ValueError(f"skeleton mask must have shape ({b}, {j}) to match features "
                     f"{features.shape}, got {skel.mask.shape}")
