"""A small Llama-style decoder-only LM in linen: RMSNorm, RoPE, SwiGLU, GQA.

Two plug points make the same model serve several papers:
  * `TransformerConfig.dense` builds every projection (attention q/k/v/o, FFN
    gate/up/down, LM head), so a quantized Dense drops in (QAT, FP4 PTQ).
  * `TransformerConfig.ffn` builds each block's FFN, so an MoE layer drops in.

Submodule names are stable and address checkpoints and quantization rules:
`block_{i}/attn/{q,k,v,o}`, `block_{i}/mlp/{gate,up,down}`, `lm_head`. With
`scan_layers=True` the blocks are one scanned module `blocks/...` whose
leaves carry a leading layer axis (`stack_block_params` converts).

A KV cache (`init_cache`) turns the same module into an incremental decoder:
`model.apply(variables, tokens, cache=cache)` appends `tokens` to each row at
that row's own offset (`cache.lengths`), so rows can be at different lengths
(slot-style serving) and prefill + one-token decode equals the full forward.

Example:
  >>> import jax, jax.numpy as jnp
  >>> cfg = TransformerConfig(d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=64)
  >>> model = Transformer(cfg)
  >>> tokens = jnp.zeros((2, 8), jnp.int32)
  >>> params = model.init(jax.random.key(0), tokens)["params"]
  >>> model.apply({"params": params}, tokens).shape
  (2, 8, 256)
"""

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jaxtyping import Float, Int

from jaxlab import validation
from jaxlab.nn.dense import Dense


def default_dense(features: int, *, name: str, dtype: Any, param_dtype: Any) -> nn.Module:
  """The default projection: a bias-free dense layer (`jaxlab.nn.Dense`, same params as
  `nn.Dense(use_bias=False)`, with a weight gradient laid out for the CPU).

  Example:
    >>> layer = default_dense(8, name="proj", dtype=None, param_dtype=jnp.float32)
    >>> params = layer.init(jax.random.key(0), jnp.ones((2, 4)))["params"]
    >>> jax.tree.map(jnp.shape, params)
    {'kernel': (4, 8)}
  """
  return Dense(features, dtype=dtype, param_dtype=param_dtype, name=name)


def swiglu_ffn(config: "TransformerConfig", *, name: str) -> nn.Module:
  """The default FFN factory: a SwiGLU MLP.

  Example:
    >>> cfg = TransformerConfig(d_model=32, num_layers=1, num_heads=4, num_kv_heads=2, d_ff=64)
    >>> y, _ = swiglu_ffn(cfg, name="mlp").init_with_output(jax.random.key(0), jnp.ones((1, 3, 32)))
    >>> y.shape
    (1, 3, 32)
  """
  return SwiGLU(config, name=name)


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Hyper-parameters of `Transformer` (hashable: it is a linen module field).

  Attributes:
    vocab_size: number of token ids (256 for bytes).
    d_model: residual width; must be divisible by `num_heads`.
    num_layers: number of decoder blocks.
    num_heads: query heads.
    num_kv_heads: key/value heads (grouped-query attention); divides `num_heads`.
    d_ff: hidden width of the SwiGLU FFN.
    max_len: longest sequence the model is used with (RoPE has no table, this
      only bounds `init_cache`'s default length).
    rope_base: RoPE frequency base.
    norm_eps: RMSNorm epsilon.
    dtype: computation dtype (logits and softmax stay float32).
    param_dtype: parameter dtype.
    dense: factory `dense(features, *, name, dtype, param_dtype) -> nn.Module`.
    ffn: factory `ffn(config, *, name) -> nn.Module`, [b, t, d] -> [b, t, d].
    attn_block_size: queries per block of the cache-free (training) attention:
      block `i` only meets the keys up to its own end, so the causal upper
      triangle beyond the diagonal blocks is never computed. Any value gives
      the same result up to float rounding; it only trades work for op count.
    scan_layers: run the blocks with `nn.scan` (one compiled block, params
      stacked along a leading layer axis under `blocks/...` instead of
      `block_{i}/...`; see `stack_block_params` / `unstack_block_params`).
    remat: rematerialize each block in the backward pass (`nn.remat`): False,
      True (save nothing but the block inputs), or the name of a
      `jax.checkpoint_policies` policy, e.g. "dots_with_no_batch_dims_saveable".
  """
  vocab_size: int = 256
  d_model: int = 128
  num_layers: int = 4
  num_heads: int = 4
  num_kv_heads: int = 2
  d_ff: int = 384
  max_len: int = 512
  rope_base: float = 10_000.0
  norm_eps: float = 1e-6
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32
  dense: Callable[..., nn.Module] = default_dense
  ffn: Callable[..., nn.Module] = swiglu_ffn
  attn_block_size: int = 64
  scan_layers: bool = False
  remat: bool | str = False

  def __post_init__(self):
    for field in ("vocab_size", "d_model", "num_layers", "num_heads", "num_kv_heads", "d_ff",
                  "max_len", "attn_block_size"):
      if getattr(self, field) < 1:
        raise ValueError(f"TransformerConfig.{field} must be >= 1, got {getattr(self, field)}")
    if self.d_model % self.num_heads:
      raise ValueError(f"d_model={self.d_model} must be divisible by num_heads={self.num_heads}")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(
          f"num_heads={self.num_heads} must be divisible by num_kv_heads={self.num_kv_heads}")
    if self.head_dim % 2:
      raise ValueError(f"head_dim={self.head_dim} must be even for RoPE")
    if not isinstance(self.scan_layers, bool):
      raise ValueError(f"scan_layers must be a bool, got {self.scan_layers!r}")
    if not isinstance(self.remat, bool) and not (
        isinstance(self.remat, str) and callable(getattr(jax.checkpoint_policies, self.remat, None))):
      raise ValueError(f"remat must be a bool or the name of a jax.checkpoint_policies policy, "
                       f"got {self.remat!r}")

  @property
  def head_dim(self) -> int:
    return self.d_model // self.num_heads

  def dense_module(self, features: int, name: str) -> nn.Module:
    return self.dense(features, name=name, dtype=self.dtype, param_dtype=self.param_dtype)


class KVCache(NamedTuple):
  """Keys/values of every layer and the number of cached tokens per row.

  k, v: [num_layers, batch, max_len, num_kv_heads, head_dim]; lengths: int32 [batch].
  """
  k: Array
  v: Array
  lengths: Array


def init_cache(config: TransformerConfig, batch_size: int, max_len: int | None = None,
               dtype: Any = None) -> KVCache:
  """An empty cache for `batch_size` rows of up to `max_len` tokens each.

  The caller keeps `lengths + new_tokens <= max_len` (writes past the end are
  clamped by `lax.dynamic_update_slice` and would overwrite the last slots).

  Example:
    >>> cfg = TransformerConfig(d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=64)
    >>> cache = init_cache(cfg, batch_size=3, max_len=16)
    >>> cache.k.shape, cache.lengths.tolist()
    ((2, 3, 16, 2, 8), [0, 0, 0])
  """
  max_len = config.max_len if max_len is None else max_len
  if batch_size < 1 or max_len < 1:
    raise ValueError(f"batch_size and max_len must be >= 1, got {batch_size}, {max_len}")
  shape = (config.num_layers, batch_size, max_len, config.num_kv_heads, config.head_dim)
  dtype = dtype or config.dtype
  return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype),
                 jnp.zeros((batch_size,), jnp.int32))


class RMSNorm(nn.Module):
  """Root-mean-square layer norm, computed in float32."""
  eps: float = 1e-6
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: Float[Array, "*b d"]) -> Float[Array, "*b d"]:
    scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), self.param_dtype)
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
    return (y * scale.astype(jnp.float32)).astype(self.dtype)


def apply_rope(x: Float[Array, "b t h d"], positions: Int[Array, "b t"],
               base: float = 10_000.0) -> Float[Array, "b t h d"]:
  """Rotary position embedding (rotate-half convention), in float32.

  Example:
    >>> x = jax.random.normal(jax.random.key(0), (1, 4, 2, 8))
    >>> y = apply_rope(x, jnp.arange(4)[None])
    >>> bool(jnp.allclose(y[:, 0], x[:, 0]))  # position 0 is not rotated
    True
    >>> bool(jnp.allclose(jnp.linalg.norm(y, axis=-1), jnp.linalg.norm(x, axis=-1)))  # a rotation
    True
  """
  half = x.shape[-1] // 2
  freq = base ** (-jnp.arange(half, dtype=jnp.float32) / half)
  angle = positions.astype(jnp.float32)[:, :, None, None] * freq  # [b, t, 1, half]
  cos, sin = jnp.cos(angle), jnp.sin(angle)
  x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
  return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def _attend(q: Array, keys: Array, values: Array, mask: Array, dtype: Any) -> Array:
  """Softmax attention of grouped queries over one KV head each.

  q: [b, kv, n, dh] (n = query rows: time x group, group fastest); keys,
  values: [b, kv, s, dh]; mask: bool, broadcastable to [b, kv, n, s].
  Heads live in the batch dimensions, so all three dots (and their transposes
  in the backward) are plain batched matmuls: no 5-D einsum, no transposed
  copies of the [n, s] score tensors.
  """
  scores = jnp.einsum("bknd,bksd->bkns", q, keys.astype(q.dtype)).astype(jnp.float32)
  scores = scores / jnp.sqrt(jnp.float32(q.shape[-1]))
  scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(scores, axis=-1).astype(dtype)
  return jnp.einsum("bkns,bksd->bknd", probs, values.astype(dtype))


def _group_rows(x: Array, num_kv_heads: int) -> Array:
  """[b, t, h, dh] -> [b, kv, t * g, dh]; query head `kv * g + j` of step `i` is row `i * g + j`."""
  b, t, h, dh = x.shape
  g = h // num_kv_heads
  return x.reshape(b, t, num_kv_heads, g, dh).transpose(0, 2, 1, 3, 4).reshape(
      b, num_kv_heads, t * g, dh)


def _row_mask(mask: Array, g: int) -> Array:
  """[b, t, s] bool -> [b, 1, t * g, s]: each query step's mask repeated for its g heads."""
  b, t, s = mask.shape
  return jnp.broadcast_to(mask[:, None, :, None, :], (b, 1, t, g, s)).reshape(b, 1, t * g, s)


class Attention(nn.Module):
  """Causal grouped-query self-attention with RoPE and an optional KV cache.

  Without a cache, positions must increase along time (the `Transformer`
  passes `arange`): queries are processed in blocks of
  `config.attn_block_size`, and block `i` attends only to keys up to its
  own last position, which skips the causal upper triangle.
  """
  config: TransformerConfig

  @nn.compact
  def __call__(self, x: Float[Array, "b t d"], positions: Int[Array, "b t"],
               cache_kv: tuple[Array, Array] | None = None,
               lengths: Int[Array, "b"] | None = None):
    cfg = self.config
    b, t, _ = x.shape
    h, hkv, dh = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    g = h // hkv
    q = cfg.dense_module(h * dh, "q")(x).reshape(b, t, h, dh)
    k = cfg.dense_module(hkv * dh, "k")(x).reshape(b, t, hkv, dh)
    v = cfg.dense_module(hkv * dh, "v")(x).reshape(b, t, hkv, dh)
    q, k = apply_rope(q, positions, cfg.rope_base), apply_rope(k, positions, cfg.rope_base)
    # Grouped layout: heads in the batch dims, the g queries sharing a KV head
    # stacked along the rows ([b, kv, t * g, dh]); only q and the output, the
    # small tensors, are ever transposed.
    qg = _group_rows(q, hkv)

    if cache_kv is None:
      kg, vg = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [b, kv, t, dh]
      outs = []
      for start in range(0, t, cfg.attn_block_size):
        end = min(start + cfg.attn_block_size, t)
        # Causal in absolute positions; keys past `end` are later than every
        # query of this block (positions increase), so they are not computed.
        mask = positions[:, None, :end] <= positions[:, start:end, None]  # [b, tq, end]
        outs.append(_attend(qg[:, :, start * g:end * g], kg[:, :, :end], vg[:, :, :end],
                            _row_mask(mask, g), cfg.dtype))
      out = outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=2)
      new_kv = None
    else:
      write = jax.vmap(lambda c, u, i: jax.lax.dynamic_update_slice(c, u, (i, 0, 0)))
      keys = write(cache_kv[0], k.astype(cache_kv[0].dtype), lengths)
      values = write(cache_kv[1], v.astype(cache_kv[1].dtype), lengths)
      key_pos = jnp.broadcast_to(jnp.arange(keys.shape[1]), (b, keys.shape[1]))
      # Causal in absolute positions: a query sees keys at positions <= its own,
      # which also hides the cache's unwritten slots (they lie in the future).
      mask = key_pos[:, None, :] <= positions[:, :, None]  # [b, t, s]
      out = _attend(qg, keys.transpose(0, 2, 1, 3), values.transpose(0, 2, 1, 3),
                    _row_mask(mask, g), cfg.dtype)
      new_kv = (keys, values)
    # [b, kv, t * g, dh] -> [b, t, h * dh] in query-head order kv * g + j.
    out = out.reshape(b, hkv, t, g, dh).transpose(0, 2, 1, 3, 4).reshape(b, t, h * dh)
    return cfg.dense_module(cfg.d_model, "o")(out), new_kv


class SwiGLU(nn.Module):
  """SwiGLU FFN: down(silu(gate(x)) * up(x))."""
  config: TransformerConfig

  @nn.compact
  def __call__(self, x: Float[Array, "b t d"]) -> Float[Array, "b t d"]:
    cfg = self.config
    gate = cfg.dense_module(cfg.d_ff, "gate")(x)
    up = cfg.dense_module(cfg.d_ff, "up")(x)
    return cfg.dense_module(cfg.d_model, "down")(nn.silu(gate) * up)


class Block(nn.Module):
  """Pre-norm decoder block: x + attn(norm(x)), then x + ffn(norm(x))."""
  config: TransformerConfig

  @nn.compact
  def __call__(self, x, positions, cache_kv=None, lengths=None):
    cfg = self.config
    norm = lambda name: RMSNorm(cfg.norm_eps, cfg.dtype, cfg.param_dtype, name=name)
    y, new_kv = Attention(cfg, name="attn")(norm("attn_norm")(x), positions, cache_kv, lengths)
    x = x + y
    x = x + cfg.ffn(cfg, name="mlp")(norm("mlp_norm")(x))
    return x, new_kv


class Transformer(nn.Module):
  """Decoder-only LM. Call with int32 tokens [b, t]; returns float32 logits.

  With `cache=KVCache` it returns `(logits, new_cache)` instead, new tokens
  placed at positions `cache.lengths[i] + arange(t)` of each row `i`.
  """
  config: TransformerConfig

  @nn.compact
  def __call__(self, tokens: Int[Array | np.ndarray, "b t"], *, cache: KVCache | None = None):
    cfg = self.config
    if tokens.ndim != 2:
      raise ValueError(f"tokens must be [batch, time], got shape {tokens.shape}")
    if not jnp.issubdtype(tokens.dtype, jnp.integer):
      raise ValueError(f"tokens must be integers, got {tokens.dtype}")
    b, t = tokens.shape
    if t == 0:
      raise ValueError(f"tokens must hold at least one position, got shape {tokens.shape}")
    # Concrete tokens outside the vocabulary raise (Embed would give a NaN row, and attention
    # spreads it to every position; a negative id would wrap). Traced tokens are not checked.
    ids = validation.concrete(tokens)
    if ids is not None and ids.size and not (0 <= ids.min() and ids.max() < cfg.vocab_size):
      raise ValueError(f"tokens must lie in [0, {cfg.vocab_size}) (vocab_size), got values in "
                       f"[{ids.min()}, {ids.max()}]")
    if cache is None:
      positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    else:
      if cache.k.shape[:2] != (cfg.num_layers, b):
        raise ValueError(f"cache holds {cache.k.shape[:2]} (layers, batch), "
                         f"tokens need ({cfg.num_layers}, {b})")
      if t > cache.k.shape[2]:
        raise ValueError(f"{t} tokens do not fit a cache of length {cache.k.shape[2]}")
      positions = cache.lengths[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :]

    x = nn.Embed(cfg.vocab_size, cfg.d_model, dtype=cfg.dtype, param_dtype=cfg.param_dtype,
                 name="embed")(tokens)
    lengths = None if cache is None else cache.lengths
    block = Block
    if cfg.remat is not False:
      policy = None if cfg.remat is True else getattr(jax.checkpoint_policies, cfg.remat)
      # Inside scan the loop boundary already keeps XLA from CSE-ing the
      # recomputation away, so prevent_cse (extra barriers) is only needed unrolled.
      block = nn.remat(Block, policy=policy, prevent_cse=not cfg.scan_layers)
    if cfg.scan_layers:
      blocks = nn.scan(block, variable_axes={True: 0}, split_rngs={"params": True},
                       in_axes=(nn.broadcast, 0, nn.broadcast), length=cfg.num_layers,
                       metadata_params={nn.PARTITION_NAME: None})
      layer_kv = None if cache is None else (cache.k, cache.v)
      x, kv = blocks(cfg, name="blocks")(x, positions, layer_kv, lengths)
      new_k, new_v = (None, None) if kv is None else kv
    else:
      ks, vs = [], []
      for i in range(cfg.num_layers):
        layer_kv = None if cache is None else (cache.k[i], cache.v[i])
        x, kv = block(cfg, name=f"block_{i}")(x, positions, layer_kv, lengths)
        if kv is not None:
          ks.append(kv[0])
          vs.append(kv[1])
      new_k, new_v = (jnp.stack(ks), jnp.stack(vs)) if ks else (None, None)
    x = RMSNorm(cfg.norm_eps, cfg.dtype, cfg.param_dtype, name="final_norm")(x)
    logits = cfg.dense_module(cfg.vocab_size, "lm_head")(x).astype(jnp.float32)
    if cache is None:
      return logits
    return logits, KVCache(new_k, new_v, cache.lengths + t)


def stack_block_params(params: dict, num_layers: int) -> dict:
  """Loop-layout params (`block_{i}/...`) -> scan layout (`blocks/...`, leaves stacked on axis 0).

  Use it to run a checkpoint of a `scan_layers=False` model with
  `scan_layers=True`; `unstack_block_params` is the inverse.

  Example:
    >>> cfg = TransformerConfig(d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=64)
    >>> tokens = jnp.zeros((1, 8), jnp.int32)
    >>> params = Transformer(cfg).init(jax.random.key(0), tokens)["params"]
    >>> scanned = stack_block_params(params, cfg.num_layers)
    >>> scanned["blocks"]["attn"]["q"]["kernel"].shape
    (2, 32, 32)
  """
  names = [f"block_{i}" for i in range(num_layers)]
  missing = [n for n in names if n not in params]
  if missing or "blocks" in params:
    raise ValueError(f"params must hold {names[0]}..{names[-1]} and no 'blocks' entry "
                     f"(loop layout); missing {missing}")
  out = {k: v for k, v in params.items() if k not in names}
  out["blocks"] = jax.tree.map(lambda *xs: jnp.stack(xs), *(params[n] for n in names))
  return out


def unstack_block_params(params: dict) -> dict:
  """Scan-layout params (`blocks/...`) -> loop layout (`block_{i}/...`).

  Example:
    >>> cfg = TransformerConfig(d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=64)
    >>> params = Transformer(cfg).init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
    >>> loop = unstack_block_params(stack_block_params(params, cfg.num_layers))
    >>> sorted(loop) == sorted(params)
    True
  """
  if "blocks" not in params:
    raise ValueError("params must hold a 'blocks' entry (scan layout, scan_layers=True)")
  sizes = {x.shape[0] for x in jax.tree.leaves(params["blocks"])}
  if len(sizes) != 1:
    raise ValueError(f"'blocks' leaves disagree on the layer axis: sizes {sorted(sizes)}")
  out = {k: v for k, v in params.items() if k != "blocks"}
  for i in range(sizes.pop()):
    out[f"block_{i}"] = jax.tree.map(lambda x, i=i: x[i], params["blocks"])
  return out
