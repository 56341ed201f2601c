"""SASRec in linen, with optional per-example row / column gates on W_O and the FFN.

SASRec (Kang & McAuley 2018, RecBole layout): item + position embeddings, LayerNorm and
dropout, then `num_layers` post-LN blocks of causal multi-head self-attention and a GELU
FFN; the hidden state at position t scores every item by a dot product with the (tied)
item embedding table, trained with full-softmax cross-entropy on the next item.

Items are ids 1..num_items; id 0 is padding. Sequences are left-padded, so the last
position holds the most recent item and its hidden state predicts the next one.

Gates (CRAMER): a masked matrix W (out x in) becomes W ⊙ r cᵀ, and
(W ⊙ r cᵀ) x = r ⊙ (W (c ⊙ x)), so a row gate r multiplies the layer's output features
and a column gate c its input features (flax kernels are (in, out): row = out, column =
in). The bias is not masked. `gate_layout` names every gated vector; `split_gates` cuts a
flat [b, d] gate vector into them. A gate of ones multiplies by 1.0, which is exact: op
by op, an all-ones mask reproduces the ungated backbone bit for bit (under jit XLA may lay
out the gated dot differently: equal up to float32 summation order).

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jaxlab.recsys import sasrec
  >>> cfg = sasrec.SASRecConfig(num_items=20, max_len=6, d_model=8, num_heads=2, d_ff=16)
  >>> model = sasrec.SASRec(cfg)
  >>> items = jnp.array([[0, 0, 3, 4, 5, 6]])
  >>> params = model.init(jax.random.key(0), items)["params"]
  >>> h = model.apply({"params": params}, items)
  >>> model.apply({"params": params}, h[:, -1], method=model.scores).shape
  (1, 21)
"""

import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxlab import validation

GATE_SCOPES = ("wo", "ffn", "ffn_wo")
# Logit given to the padding id so that it is never predicted (finite: no inf * 0 NaN).
PAD_LOGIT = -1e9


@dataclasses.dataclass(frozen=True)
class SASRecConfig:
  """SASRec sizes (spec §4(d): RecBole-like, 2 layers, 2 heads, d = 64, FFN 256).

  Attributes:
    num_items: number of real items (ids 1..num_items; 0 is padding).
    max_len: longest input sequence (number of positions).
    d_model: hidden width.
    num_heads: attention heads (must divide d_model).
    num_layers: transformer blocks.
    d_ff: FFN inner width.
    dropout: dropout rate on embeddings, attention output and FFN output (training only).
    dtype: computation dtype.
    param_dtype: parameter dtype.
  """
  num_items: int
  max_len: int = 50
  d_model: int = 64
  num_heads: int = 2
  num_layers: int = 2
  d_ff: int = 256
  dropout: float = 0.2
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def __post_init__(self):
    for name in ("num_items", "max_len", "d_model", "num_heads", "num_layers", "d_ff"):
      v = getattr(self, name)
      if not isinstance(v, int) or v < 1:
        raise ValueError(f"SASRecConfig.{name} must be an int >= 1, got {v!r}")
    if self.d_model % self.num_heads:
      raise ValueError(f"SASRecConfig.num_heads ({self.num_heads}) must divide d_model "
                       f"({self.d_model})")
    if not 0.0 <= self.dropout < 1.0:
      raise ValueError(f"SASRecConfig.dropout must lie in [0, 1), got {self.dropout}")


def gate_layout(config: SASRecConfig, scope: str = "ffn_wo") -> tuple[tuple[str, int], ...]:
  """(name, size) of every gated vector, in the order of the flat gate vector.

  Names are `l<layer>/<matrix>/<row|col>` with matrix `wo` (attention output projection,
  d x d), `ff1` (d_ff x d) and `ff2` (d x d_ff); `row` gates the output features, `col`
  the input features.

  Args:
    config: the backbone's sizes.
    scope: "wo" (W_O only), "ffn" (both FFN matrices) or "ffn_wo" (all three).

  Returns:
    The layout; the total size is d = Σ_l (α_l + β_l) of the spec.

  Example:
    >>> cfg = SASRecConfig(num_items=20, max_len=6, d_model=8, num_heads=2, d_ff=16)
    >>> gate_layout(cfg, "wo")
    (('l0/wo/row', 8), ('l0/wo/col', 8), ('l1/wo/row', 8), ('l1/wo/col', 8))
  """
  if scope not in GATE_SCOPES:
    raise ValueError(f"scope must be one of {GATE_SCOPES}, got {scope!r}")
  d, f = config.d_model, config.d_ff
  layout = []
  for layer in range(config.num_layers):
    if scope in ("wo", "ffn_wo"):
      layout += [(f"l{layer}/wo/row", d), (f"l{layer}/wo/col", d)]
    if scope in ("ffn", "ffn_wo"):
      layout += [(f"l{layer}/ff1/row", f), (f"l{layer}/ff1/col", d),
                 (f"l{layer}/ff2/row", d), (f"l{layer}/ff2/col", f)]
  return tuple(layout)


def num_gates(config: SASRecConfig, scope: str = "ffn_wo") -> int:
  """d = Σ_l (α_l + β_l): the length of the flat gate vector of `scope`.

  Example:
    >>> cfg = SASRecConfig(num_items=20, max_len=6, d_model=8, num_heads=2, d_ff=16)
    >>> num_gates(cfg, "wo"), num_gates(cfg, "ffn"), num_gates(cfg)   # 2 layers
    (32, 96, 128)
  """
  return sum(size for _, size in gate_layout(config, scope))


def split_gates(gates: Float[Array, "b d"],
                layout: tuple[tuple[str, int], ...]) -> dict[str, Float[Array, "b _"]]:
  """Cuts a flat gate vector [b, d] into the named pieces of `layout`.

  Example:
    >>> pieces = split_gates(jnp.arange(10.0)[None], (("l0/wo/row", 4), ("l0/wo/col", 6)))
    >>> pieces["l0/wo/row"].tolist(), pieces["l0/wo/col"].shape
    ([[0.0, 1.0, 2.0, 3.0]], (1, 6))
  """
  total = sum(size for _, size in layout)
  if gates.ndim != 2 or gates.shape[-1] != total:
    raise ValueError(f"gates must be [batch, {total}] for this layout, got {gates.shape}")
  out, start = {}, 0
  for name, size in layout:
    out[name] = gates[:, start:start + size]
    start += size
  return out


class GatedDense(nn.Module):
  """y = r ⊙ (W (c ⊙ x)) + b: a Dense whose input (columns) and output (rows) can be gated.

  Attributes:
    features: output width.
    dtype: computation dtype.
    param_dtype: parameter dtype.
  """
  features: int
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, col=None, row=None):
    """x: [b, t, in]; col: [b, in] or None; row: [b, features] or None."""
    kernel = self.param("kernel", nn.initializers.lecun_normal(),
                        (x.shape[-1], self.features), self.param_dtype)
    bias = self.param("bias", nn.initializers.zeros, (self.features,), self.param_dtype)
    x = x.astype(self.dtype)
    if col is not None:
      x = x * col[:, None, :].astype(self.dtype)
    y = jnp.einsum("bti,io->bto", x, kernel.astype(self.dtype))
    if row is not None:
      y = y * row[:, None, :].astype(self.dtype)
    return y + bias.astype(self.dtype)


class _Block(nn.Module):
  config: SASRecConfig
  layer: int

  @nn.compact
  def __call__(self, x, mask, gates, deterministic):
    c = self.config
    b, t, d = x.shape
    h, dh = c.num_heads, d // c.num_heads
    dense = lambda name: nn.Dense(d, dtype=c.dtype, param_dtype=c.param_dtype, name=name)
    q = dense("query")(x).reshape(b, t, h, dh)
    k = dense("key")(x).reshape(b, t, h, dh)
    v = dense("value")(x).reshape(b, t, h, dh)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(dh)
    logits = jnp.where(mask[:, None], logits, jnp.finfo(logits.dtype).min)
    attn = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(c.dtype)
    ctx = jnp.einsum("bhqk,bkhd->bqhd", attn, v).reshape(b, t, d)
    g = lambda name: None if gates is None else gates.get(f"l{self.layer}/{name}")
    out = GatedDense(d, c.dtype, c.param_dtype, name="out")(ctx, g("wo/col"), g("wo/row"))
    out = nn.Dropout(c.dropout)(out, deterministic=deterministic)
    x = nn.LayerNorm(dtype=c.dtype, param_dtype=c.param_dtype, name="ln_attn")(x + out)
    f = GatedDense(c.d_ff, c.dtype, c.param_dtype, name="ff1")(x, g("ff1/col"), g("ff1/row"))
    f = jax.nn.gelu(f)
    f = GatedDense(d, c.dtype, c.param_dtype, name="ff2")(f, g("ff2/col"), g("ff2/row"))
    f = nn.Dropout(c.dropout)(f, deterministic=deterministic)
    return nn.LayerNorm(dtype=c.dtype, param_dtype=c.param_dtype, name="ln_ffn")(x + f)


class SASRec(nn.Module):
  """SASRec encoder: left-padded item ids [b, t] -> hidden states [b, t, d].

  `__call__(items, gates=None, last_token=None, deterministic=True)`:

  * items: int [b, t], 0 = padding, t <= max_len.
  * gates: None, or a dict from `split_gates` ([b, size] per name; missing names are
    ungated).
  * last_token: None, or [b, d] input embeddings that replace the last position's item
    embedding (the "request as a token" fine-tuning baseline); that position is then
    always attended.

  `scores(h)`: [..., d] -> [..., num_items + 1] dot products with the item table (the
  padding id gets `PAD_LOGIT`).
  """
  config: SASRecConfig

  def setup(self):
    c = self.config
    init = nn.initializers.normal(0.02)
    self.item_embed = self.param("item_embed", init, (c.num_items + 1, c.d_model),
                                 c.param_dtype)
    self.pos_embed = self.param("pos_embed", init, (c.max_len, c.d_model), c.param_dtype)
    self.ln = nn.LayerNorm(dtype=c.dtype, param_dtype=c.param_dtype)
    self.drop = nn.Dropout(c.dropout)
    self.blocks = [_Block(c, i) for i in range(c.num_layers)]

  def __call__(self, items, gates=None, last_token=None, deterministic: bool = True):
    c = self.config
    if items.ndim != 2 or items.shape[1] > c.max_len:
      raise ValueError(f"items must be [batch, t <= {c.max_len}], got {items.shape}")
    b, t = items.shape
    ids = validation.concrete(items)
    if ids is not None and ids.size and (ids.min() < 0 or ids.max() > c.num_items):
      raise ValueError(f"items must be ids in [0, {c.num_items}] (0 is padding); got ids from "
                       f"{ids.min()} to {ids.max()}")
    valid = items > 0
    # Traced, an id outside [0, num_items] embeds as NaN (its row's states turn NaN): a
    # negative id is sent past the table rather than wrapped to the last items.
    x = jnp.take(self.item_embed, jnp.where(items < 0, c.num_items + 1, items), axis=0,
                 mode="fill", fill_value=jnp.nan)
    if last_token is not None:
      if last_token.shape != (b, c.d_model):
        raise ValueError(f"last_token must be [{b}, {c.d_model}], got {last_token.shape}")
      x = x.at[:, -1].set(last_token.astype(x.dtype))
      valid = valid.at[:, -1].set(True)
    x = x + self.pos_embed[c.max_len - t:][None]  # left padding: the last slot is max_len-1
    x = self.drop(self.ln(x.astype(c.dtype)), deterministic=deterministic)
    causal = jnp.tril(jnp.ones((t, t), bool))
    # Padding keys are never attended; the diagonal always is, so no softmax row is empty.
    mask = (causal[None] & valid[:, None, :]) | jnp.eye(t, dtype=bool)[None]
    for block in self.blocks:
      x = block(x, mask, gates, deterministic)
    return x

  def scores(self, h):
    logits = jnp.einsum("...d,nd->...n", h, self.item_embed.astype(h.dtype))
    return logits.at[..., 0].set(PAD_LOGIT)


def next_item_loss(logits: Float[Array, "*b n"], targets: Int[Array, "*b"]) -> Float[Array, ""]:
  """Full-softmax cross-entropy, averaged over targets != 0 (0 = padding, no loss).

  Args:
    logits: scores over ids 0..num_items.
    targets: next item ids; 0 marks a position without a target.

  Returns:
    The mean loss over real targets (0 if there is none).

  Example:
    >>> logits = jnp.zeros((1, 3, 5))                     # uniform over ids 0..4
    >>> round(float(next_item_loss(logits, jnp.array([[0, 2, 4]]))), 4)   # ln 5, 2 targets
    1.6094
    >>> float(next_item_loss(logits, jnp.zeros((1, 3), jnp.int32)))     # no target
    0.0
  """
  if logits.shape[:-1] != targets.shape:
    raise ValueError(f"logits {logits.shape} and targets {targets.shape} disagree")
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
  w = (targets > 0).astype(jnp.float32)
  return jnp.sum(nll * w) / jnp.maximum(jnp.sum(w), 1.0)
