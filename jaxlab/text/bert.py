"""A BERT encoder in linen with mean pooling: the network of all-MiniLM-L6-v2.

The architecture is Hugging Face's `BertModel` (post-norm blocks, learned
absolute positions, token types, exact erf GELU, LayerNorm eps 1e-12) followed
by sentence-transformers' mask-aware mean pooling and L2 normalisation. The
pooler (`pooler.dense`) of `BertModel` is not used by sentence-transformers'
mean pooling and is not part of this module.

Submodule names follow the checkpoint's keys (`jaxlab.text.weights` maps them):
`embeddings/{word,position,token_type,norm}`, `layer_{i}/attention/{query,key,
value,output}`, `layer_{i}/{attention_norm,intermediate,output,output_norm}`.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jaxlab.text import BertConfig, SentenceBert
  >>> cfg = BertConfig(vocab_size=100, hidden_size=32, num_layers=2, num_heads=4,
  ...                  intermediate_size=64, max_position_embeddings=16)
  >>> model = SentenceBert(cfg)
  >>> ids = jnp.ones((2, 8), jnp.int32)
  >>> mask = jnp.ones((2, 8), jnp.int32)
  >>> params = model.init(jax.random.key(0), ids, mask)["params"]
  >>> model.apply({"params": params}, ids, mask).shape
  (2, 32)
"""

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jaxtyping import Float, Int


@dataclasses.dataclass(frozen=True)
class BertConfig:
  """Hyper-parameters of `BertEncoder` (defaults: all-MiniLM-L6-v2).

  Attributes:
    vocab_size: WordPiece vocabulary size.
    hidden_size: residual width; divisible by `num_heads`.
    num_layers: number of encoder blocks.
    num_heads: attention heads.
    intermediate_size: hidden width of the GELU FFN.
    max_position_embeddings: rows of the learned absolute position table.
    type_vocab_size: rows of the token-type (segment) table.
    layer_norm_eps: LayerNorm epsilon.
    dtype: computation dtype (LayerNorm statistics, softmax and pooling stay float32).
    param_dtype: parameter dtype.
  """
  vocab_size: int = 30522
  hidden_size: int = 384
  num_layers: int = 6
  num_heads: int = 12
  intermediate_size: int = 1536
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  layer_norm_eps: float = 1e-12
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def __post_init__(self):
    for field in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                  "max_position_embeddings", "type_vocab_size"):
      if getattr(self, field) < 1:
        raise ValueError(f"BertConfig.{field} must be >= 1, got {getattr(self, field)}")
    if self.hidden_size % self.num_heads:
      raise ValueError(f"hidden_size={self.hidden_size} must be divisible by "
                       f"num_heads={self.num_heads}")

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads

  @classmethod
  def from_hf(cls, hf: dict, **overrides) -> "BertConfig":
    """The config of a Hugging Face `config.json` of a BERT model.

    Raises:
      ValueError: if it is not a BERT with exact GELU and absolute positions.
    """
    if hf.get("model_type", "bert") != "bert":
      raise ValueError(f"config.json: model_type must be 'bert', got {hf.get('model_type')!r}")
    if hf.get("hidden_act", "gelu") != "gelu":
      raise ValueError(f"config.json: hidden_act must be 'gelu' (exact erf GELU), "
                       f"got {hf.get('hidden_act')!r}")
    if hf.get("position_embedding_type", "absolute") != "absolute":
      raise ValueError("config.json: only absolute position embeddings are supported, got "
                       f"{hf.get('position_embedding_type')!r}")
    return cls(vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
               num_layers=hf["num_hidden_layers"], num_heads=hf["num_attention_heads"],
               intermediate_size=hf["intermediate_size"],
               max_position_embeddings=hf["max_position_embeddings"],
               type_vocab_size=hf.get("type_vocab_size", 2),
               layer_norm_eps=hf.get("layer_norm_eps", 1e-12), **overrides)


def _layer_norm(cfg: BertConfig, name: str) -> nn.LayerNorm:
  # flax computes LayerNorm statistics in float32 even for a bf16 `dtype`.
  return nn.LayerNorm(epsilon=cfg.layer_norm_eps, dtype=cfg.dtype, param_dtype=cfg.param_dtype,
                      name=name)


def _dense(cfg: BertConfig, features: int, name: str) -> nn.Dense:
  return nn.Dense(features, dtype=cfg.dtype, param_dtype=cfg.param_dtype, name=name)


class SelfAttention(nn.Module):
  """Bidirectional multi-head self-attention; padded keys (mask 0) get no weight."""
  config: BertConfig

  @nn.compact
  def __call__(self, x: Float[Array, "b t d"], mask: Int[Array, "b t"]) -> Float[Array, "b t d"]:
    cfg = self.config
    b, t, _ = x.shape
    h, dh = cfg.num_heads, cfg.head_dim
    q = _dense(cfg, cfg.hidden_size, "query")(x).reshape(b, t, h, dh)
    k = _dense(cfg, cfg.hidden_size, "key")(x).reshape(b, t, h, dh)
    v = _dense(cfg, cfg.hidden_size, "value")(x).reshape(b, t, h, dh)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / np.sqrt(dh)
    # A finite minimum (as Hugging Face's extended mask) instead of -inf: an
    # all-padding row then gets uniform weights rather than NaN.
    keep = mask[:, None, None, :].astype(bool)
    scores = jnp.where(keep, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
    out = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, t, h * dh)
    return _dense(cfg, cfg.hidden_size, "output")(out)


class EncoderLayer(nn.Module):
  """Post-norm BERT block: norm(x + attn(x)), then norm(x + ffn(x))."""
  config: BertConfig

  @nn.compact
  def __call__(self, x: Float[Array, "b t d"], mask: Int[Array, "b t"]) -> Float[Array, "b t d"]:
    cfg = self.config
    x = _layer_norm(cfg, "attention_norm")(x + SelfAttention(cfg, name="attention")(x, mask))
    y = nn.gelu(_dense(cfg, cfg.intermediate_size, "intermediate")(x), approximate=False)
    return _layer_norm(cfg, "output_norm")(x + _dense(cfg, cfg.hidden_size, "output")(y))


class Embeddings(nn.Module):
  """Word + absolute position + token-type embeddings, then LayerNorm."""
  config: BertConfig

  @nn.compact
  def __call__(self, input_ids: Int[Array, "b t"],
               token_type_ids: Int[Array, "b t"]) -> Float[Array, "b t d"]:
    cfg = self.config
    embed = lambda n, name: nn.Embed(n, cfg.hidden_size, dtype=cfg.dtype,
                                     param_dtype=cfg.param_dtype, name=name)
    positions = jnp.arange(input_ids.shape[1], dtype=jnp.int32)[None, :]
    x = (embed(cfg.vocab_size, "word")(input_ids)
         + embed(cfg.max_position_embeddings, "position")(positions)
         + embed(cfg.type_vocab_size, "token_type")(token_type_ids))
    return _layer_norm(cfg, "norm")(x)


class BertEncoder(nn.Module):
  """BERT token encoder: token ids and attention mask -> last hidden states."""
  config: BertConfig

  @nn.compact
  def __call__(self, input_ids: Int[Array, "b t"], attention_mask: Int[Array, "b t"],
               token_type_ids: Int[Array, "b t"] | None = None) -> Float[Array, "b t d"]:
    cfg = self.config
    if input_ids.shape != attention_mask.shape:
      raise ValueError(f"input_ids {input_ids.shape} and attention_mask "
                       f"{attention_mask.shape} must have the same [batch, time] shape")
    if input_ids.shape[1] > cfg.max_position_embeddings:
      raise ValueError(f"sequence length {input_ids.shape[1]} exceeds "
                       f"max_position_embeddings={cfg.max_position_embeddings}")
    if token_type_ids is None:
      token_type_ids = jnp.zeros_like(input_ids)
    x = Embeddings(cfg, name="embeddings")(input_ids, token_type_ids)
    for i in range(cfg.num_layers):
      x = EncoderLayer(cfg, name=f"layer_{i}")(x, attention_mask)
    return x


def mean_pool(hidden: Float[Array, "b t d"], mask: Int[Array, "b t"]) -> Float[Array, "b d"]:
  """Mean of the unmasked token states, in float32 (sentence-transformers' Pooling).

  A row with no unmasked token gives zeros (the count is clamped at 1e-9, as in
  sentence-transformers), never NaN.

  Example:
    >>> hidden = jnp.arange(6.0).reshape(1, 3, 2)          # token states [1, 2], [3, 4], [5, 6]
    >>> mean_pool(hidden, jnp.array([[1, 1, 0]])).tolist()  # the padded token is left out
    [[1.0, 2.0]]
  """
  m = mask.astype(jnp.float32)[..., None]
  total = jnp.sum(hidden.astype(jnp.float32) * m, axis=1)
  return total / jnp.maximum(jnp.sum(m, axis=1), 1e-9)


def l2_normalize(x: Float[Array, "b d"], eps: float = 1e-12) -> Float[Array, "b d"]:
  """Rows scaled to unit L2 norm (norm clamped at `eps`, as torch's F.normalize).

  Example:
    >>> l2_normalize(jnp.array([[3.0, 4.0], [0.0, 0.0]])).tolist()  # a zero row stays zero
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
  """
  norm = jnp.linalg.norm(x, axis=-1, keepdims=True)
  return x / jnp.maximum(norm, eps)


class SentenceBert(nn.Module):
  """Sentence embeddings: BERT, mask-aware mean pooling, L2 normalisation.

  Returns float32 unit vectors [batch, hidden_size] whatever `config.dtype`.
  """
  config: BertConfig
  normalize: bool = True

  @nn.compact
  def __call__(self, input_ids: Int[Array, "b t"], attention_mask: Int[Array, "b t"],
               token_type_ids: Int[Array, "b t"] | None = None) -> Float[Array, "b d"]:
    hidden = BertEncoder(self.config, name="bert")(input_ids, attention_mask, token_type_ids)
    pooled = mean_pool(hidden, attention_mask)
    return l2_normalize(pooled) if self.normalize else pooled
