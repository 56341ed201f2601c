"""A small DiT with in-context reference tokens (OminiControl-style joint attention).

One sequence holds M images of N patch tokens each: the K reference views (clean) and the
noisy target last. All tokens attend to each other in one bidirectional attention whose
queries and keys are rotated by a 3-axis RoPE of each token's position (SAPE anchors, or the
2-D grid with the image index on axis 0). Each block is adaLN-Zero conditioned on the flow
time (and, for the baselines, a global code such as the target pose). The velocity is read
off the target's tokens only. Missing references are masked out of the keys.

Pieces reused from `jaxlab.nn`: `Dense` for every projection, `SwiGLU` as the FFN.
Attention itself is `jax.nn.dot_product_attention`.

Example:
  >>> import jax, jax.numpy as jnp
  >>> cfg = DiTConfig(d_model=32, num_layers=1, num_heads=2, patch_dim=12)
  >>> model = DiT(cfg)
  >>> b, m, n = 2, 3, 4
  >>> args = (jnp.zeros((b, m, n, 12)), jnp.zeros((b, m, n, 3)), jnp.ones((b, m), bool),
  ...         jnp.zeros((b,)))
  >>> params = model.init(jax.random.key(0), *args)["params"]
  >>> model.apply({"params": params}, *args).shape
  (2, 4, 12)
"""

import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import Array
from jaxtyping import Bool, Float

from jaxlab.diffusion.rope import apply_rope_nd, even_sections
from jaxlab.nn import Dense, SwiGLU, TransformerConfig


@dataclasses.dataclass(frozen=True)
class DiTConfig:
  """Hyper-parameters of `DiT`.

  Attributes:
    d_model: residual width (divisible by num_heads).
    num_layers: transformer blocks.
    num_heads: attention heads.
    d_ff: SwiGLU hidden width (default 2 * d_model).
    patch_dim: pixels x channels of one patch token (input and output width).
    num_axes: position axes of the RoPE (3: SAPE's x, y, z or grid's index, row, col).
    rope_base: RoPE frequency base (jaxlab interpretation: 100, since positions span only a
      few units at toy scale; FLUX uses 10000 over 64+ units).
    dtype: computation dtype.
    param_dtype: parameter dtype.
  """
  d_model: int = 64
  num_layers: int = 2
  num_heads: int = 4
  d_ff: int = 0
  patch_dim: int = 48
  num_axes: int = 3
  rope_base: float = 100.0
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def __post_init__(self):
    for f in ("d_model", "num_layers", "num_heads", "patch_dim", "num_axes"):
      if getattr(self, f) < 1:
        raise ValueError(f"DiTConfig.{f} must be >= 1, got {getattr(self, f)}")
    if self.d_model % self.num_heads:
      raise ValueError(f"d_model={self.d_model} must be divisible by num_heads={self.num_heads}")
    even_sections(self.head_dim, self.num_axes)  # raises for an unusable head_dim

  @property
  def head_dim(self) -> int:
    return self.d_model // self.num_heads

  @property
  def ffn_width(self) -> int:
    return self.d_ff or 2 * self.d_model


def timestep_embedding(t: Float[Array, "b"], dim: int, max_period: float = 1000.0
                       ) -> Float[Array, "b dim"]:
  """Sinusoidal embedding of flow times t in [0, 1] (scaled by 1000, as DiT's).

  Example:
    >>> timestep_embedding(jnp.array([0.0, 1.0]), 8).shape
    (2, 8)
  """
  half = dim // 2
  freqs = jnp.exp(-math.log(max_period) * jnp.arange(half, dtype=jnp.float32) / half)
  args = 1000.0 * t.astype(jnp.float32)[:, None] * freqs
  emb = jnp.concatenate([jnp.cos(args), jnp.sin(args)], -1)
  return jnp.pad(emb, ((0, 0), (0, dim - 2 * half)))


def _modulate(x, shift, scale):
  return x * (1 + scale[:, None]) + shift[:, None]


class DiTBlock(nn.Module):
  """adaLN-Zero block: joint attention with N-D RoPE, then a SwiGLU FFN."""
  config: DiTConfig

  @nn.compact
  def __call__(self, x, c, positions, key_mask):
    cfg = self.config
    b, t, d = x.shape
    h, dh = cfg.num_heads, cfg.head_dim
    dense = lambda f, name: Dense(f, dtype=cfg.dtype, param_dtype=cfg.param_dtype, name=name)
    mod = nn.Dense(6 * d, kernel_init=nn.initializers.zeros, dtype=cfg.dtype,
                   param_dtype=cfg.param_dtype, name="adaln")(nn.silu(c))
    shift1, scale1, gate1, shift2, scale2, gate2 = jnp.split(mod, 6, -1)
    norm = lambda name: nn.LayerNorm(use_scale=False, use_bias=False, dtype=cfg.dtype,
                                     param_dtype=cfg.param_dtype, name=name)
    y = _modulate(norm("attn_norm")(x), shift1, scale1)
    q = dense(d, "q")(y).reshape(b, t, h, dh)
    k = dense(d, "k")(y).reshape(b, t, h, dh)
    v = dense(d, "v")(y).reshape(b, t, h, dh)
    sections = even_sections(dh, cfg.num_axes)
    q = apply_rope_nd(q, positions, sections, cfg.rope_base)
    k = apply_rope_nd(k, positions, sections, cfg.rope_base)
    out = jax.nn.dot_product_attention(q, k, v, mask=key_mask[:, None, None, :])
    x = x + gate1[:, None] * dense(d, "o")(out.reshape(b, t, d))
    ffn_cfg = TransformerConfig(d_model=d, num_heads=h, num_kv_heads=h, d_ff=cfg.ffn_width,
                                dtype=cfg.dtype, param_dtype=cfg.param_dtype)
    y = _modulate(norm("mlp_norm")(x), shift2, scale2)
    return x + gate2[:, None] * SwiGLU(ffn_cfg, name="mlp")(y)


class DiT(nn.Module):
  """In-context DiT: references + noisy target in one sequence; returns the target's velocity.

  Call with:

  * patches [b, M, N, patch_dim]: M images (references first, the noisy target last);
  * positions [b, M, N, A]: each token's RoPE position;
  * image_mask [b, M] bool: which images are present (the target must be);
  * t [b]: flow time in [0, 1];
  * cond [b, C] (optional): a global code added to the time embedding (adaLN);
  * token_features [b, M, N, F] (optional): per-token features added to the token embedding
    (per-image pose codes, Plücker rays).

  Returns the velocity of the target's tokens [b, N, patch_dim].
  """
  config: DiTConfig

  @nn.compact
  def __call__(self, patches: Float[Array, "b m n p"], positions: Float[Array, "b m n a"],
               image_mask: Bool[Array, "b m"], t: Float[Array, "b"],
               cond: Float[Array, "b c"] | None = None,
               token_features: Float[Array, "b m n f"] | None = None) -> Float[Array, "b n p"]:
    cfg = self.config
    b, m, n, p = patches.shape
    if p != cfg.patch_dim:
      raise ValueError(f"patches' last axis must be patch_dim={cfg.patch_dim}, got {p}")
    if positions.shape[-1] != cfg.num_axes:
      raise ValueError(f"positions need {cfg.num_axes} axes, got {positions.shape[-1]}")
    d = cfg.d_model
    dense = lambda f, name: nn.Dense(f, dtype=cfg.dtype, param_dtype=cfg.param_dtype, name=name)
    x = dense(d, "patch_embed")(patches)
    # Reference vs target: a learned per-role embedding (refs are clean, the target noisy).
    role = self.param("role_embed", nn.initializers.normal(0.02), (2, d), cfg.param_dtype)
    is_target = jnp.arange(m) == m - 1
    x = x + jnp.where(is_target[:, None, None], role[1], role[0]).astype(cfg.dtype)
    if token_features is not None:
      x = x + dense(d, "feature_embed")(token_features)
    c = timestep_embedding(t, d)
    if cond is not None:
      c = c + dense(d, "cond_embed")(cond)
    c = dense(d, "cond_mlp_2")(nn.silu(dense(d, "cond_mlp_1")(c)))
    x = x.reshape(b, m * n, d)
    pos = positions.reshape(b, m * n, -1)
    key_mask = jnp.repeat(image_mask | is_target, n, axis=1)  # [b, m * n]
    for i in range(cfg.num_layers):
      x = DiTBlock(cfg, name=f"block_{i}")(x, c, pos, key_mask)
    x = x.reshape(b, m, n, d)[:, -1]
    shift, scale = jnp.split(dense(2 * d, "final_adaln")(nn.silu(c)), 2, -1)
    x = _modulate(nn.LayerNorm(use_scale=False, use_bias=False, dtype=cfg.dtype,
                               name="final_norm")(x), shift, scale)
    out = nn.Dense(p, kernel_init=nn.initializers.zeros, dtype=cfg.dtype,
                   param_dtype=cfg.param_dtype, name="out")(x)
    return out.astype(jnp.float32)
