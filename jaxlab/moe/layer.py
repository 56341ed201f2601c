"""A linen mixture-of-experts SwiGLU FFN that plugs into `jaxlab.nn.Transformer`.

Data flow (MaxText/megablox convention, systems.md 2e): router logits ->
top-k / pruned / OEA mask -> renormalized weights -> sort token slots by
expert -> group sizes -> grouped matmul gate/up -> SwiGLU -> grouped matmul
down -> unsort -> weighted sum over each token's experts.

Routing groups. A [b, t, d] input is read as t decode steps of a batch of b
sequences: OEA's batch (the set whose base experts are pooled) is the b rows
at one position, and the number of activated experts T is counted per
position over the b rows. Teacher-forced evaluation of [B, L] windows thus
sees exactly the routing an incremental decoder with batch B would see.
(jaxlab interpretation: the paper applies OEA at decode only; here the same
rule is applied per position of a teacher-forced forward, `routing` is the
knob, training uses "topk".)

The module sows into the "intermediates" collection:
`load_balance_loss` (Switch-style `N * sum_e f_e * P_e`, f_e the fraction of
token-expert slots on e, P_e the mean router probability) and
`active_experts` (mean T per position). `load_balance_loss(intermediates)`
sums the former over layers for the training loss.

Non-finite rule (the routers' rule, `jaxlab.moe.routing`): a token whose
router logits hold a NaN or +Inf (or are all -Inf) uses no expert and its
output is NaN, for every `impl`; it does not count toward T and leaves every
other token's routing and output exactly as without it. The sown
`load_balance_loss` of such a batch is NaN (it averages every token's router
probabilities), so a training run sees the fault instead of a silent value.

Example:
  >>> import jax, jax.numpy as jnp
  >>> moe = MoE(num_experts=8, k=2, d_ff=16)
  >>> x = jnp.ones((4, 3, 8))
  >>> params = moe.init(jax.random.key(0), x)["params"]
  >>> y, inter = moe.apply({"params": params}, x, mutable=["intermediates"])
  >>> y.shape, sorted(inter["intermediates"])
  ((4, 3, 8), ['active_experts', 'load_balance_loss'])

Flax NNX. The expert weights carry a partitioning annotation ("expert", None, None),
which `jaxlab.train.state_sharding` reads to shard them over a mesh's 'expert' axis.
Under flax >= 0.12's eager sharding default, `nnx.bridge.ToNNX(MoE(...))` therefore
needs a mesh to place them on: initialise it inside `jax.set_mesh(jaxlab.train.make_mesh())`
(a mesh with the 'expert' axis), or without sharding inside
`nnx.use_eager_sharding(False)`; outside both, flax raises "An auto mesh context or
metadata is required".

  >>> from flax import nnx
  >>> with nnx.use_eager_sharding(False):
  ...   layer = nnx.bridge.lazy_init(nnx.bridge.ToNNX(moe, rngs=nnx.Rngs(0)), x)
  >>> layer(x).shape
  (4, 3, 8)
"""

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import Array
from jaxtyping import Bool, Float, Int

from jaxlab.moe import routing as routing_lib
from pallas_kernels import moe as moe_kernels

ROUTINGS = routing_lib.ROUTINGS
IMPLS = ("ragged_dot", "pallas", "dense")


def sort_by_expert(mask: Bool[Array, "m n"], weights: Float[Array, "m n"], slots: int):
  """Token-expert slots sorted by expert, without a Python loop.

  Each token gets `slots` slots (its chosen experts in index order, the unused
  ones pointing at the sentinel expert N, which sorts last).

  Returns:
    order int32 [m * slots] (sorted position -> flat slot), slot_weights
    [m, slots], group_sizes int32 [N] (tokens per expert).

  Example:
    >>> mask = jnp.array([[True, False, True], [False, True, True]])
    >>> order, w, sizes = sort_by_expert(mask, mask * 0.5, slots=2)
    >>> order.tolist(), sizes.tolist()  # slots of expert 0, then 1, then 2
    ([0, 2, 1, 3], [1, 1, 2])
  """
  m, n = mask.shape
  pos = jnp.cumsum(mask, axis=-1) - 1
  onehot = mask[:, :, None] & (pos[:, :, None] == jnp.arange(slots))  # [m, n, slots]
  used = onehot.any(1)
  slot_expert = jnp.where(used, jnp.argmax(onehot, axis=1), n)  # [m, slots]
  slot_weights = jnp.einsum("mn,mns->ms", weights, onehot.astype(weights.dtype))
  order = jnp.argsort(slot_expert.reshape(-1), stable=True).astype(jnp.int32)
  group_sizes = mask.sum(0).astype(jnp.int32)
  return order, slot_weights, group_sizes


def grouped_matmul(lhs: Float[Array, "m k"], rhs: Float[Array, "g k n"],
                   group_sizes: Int[Array, "g"], impl: str) -> Float[Array, "m n"]:
  """`jax.lax.ragged_dot` or the Pallas kernel (`impl` in {"ragged_dot", "pallas"}).

  Example:
    >>> lhs, rhs = jnp.ones((3, 4)), jnp.stack([jnp.ones((4, 2)), 2 * jnp.ones((4, 2))])
    >>> grouped_matmul(lhs, rhs, jnp.array([1, 2]), "ragged_dot").tolist()  # row 0: group 0
    [[4.0, 4.0], [8.0, 8.0], [8.0, 8.0]]
  """
  if impl == "ragged_dot":
    return jax.lax.ragged_dot(lhs, rhs, group_sizes, preferred_element_type=jnp.float32)
  if impl == "pallas":
    # Asked for by name: the kernel runs (interpreted on CPU), never the XLA fallback.
    return moe_kernels.gmm(lhs, rhs, group_sizes, implementation="pallas")
  raise ValueError(f"impl must be 'ragged_dot' or 'pallas', got {impl!r}")


class MoE(nn.Module):
  """Mixture of SwiGLU experts with softmax top-k / pruned / OEA routing.

  Attributes:
    num_experts: N.
    k: experts per token in training ("topk"); OEA's k_max.
    d_ff: hidden width of each expert.
    routing: "topk" (vanilla), "pruned" (top-k0) or "oea" (batch-aware).
    k0: base experts for "pruned" and "oea".
    p: OEA top-p threshold (1.0 = the simplified form).
    max_p: OEA piggyback rank limit (None = N).
    impl: "ragged_dot" (sorted slots, `jax.lax.ragged_dot`), "pallas" (sorted
      slots, the megablox-style Pallas kernel) or "dense" (every expert on
      every token, combined with the routing weights: exact, and the fastest
      choice on CPU for tiny models, where ragged_dot lowers to a masked dense
      product over all groups).
    dtype: computation dtype; router logits and weights stay float32.
    param_dtype: parameter dtype.
  """
  num_experts: int
  k: int
  d_ff: int
  routing: str = "topk"
  k0: int | None = None
  p: float = 1.0
  max_p: int | None = None
  impl: str = "ragged_dot"
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def _route(self, logits: Array) -> tuple[Array, Array]:
    """Routes [b, t, N] logits; OEA pools the b rows of each position."""
    b, t, n = logits.shape
    if self.routing == "oea":
      route = lambda lg: routing_lib.oea_route(lg, k0=self.k0, k_max=self.k, p=self.p,
                                               max_p=self.max_p)
      mask, w = jax.vmap(route, in_axes=1, out_axes=1)(logits)
      return mask.reshape(b * t, n), w.reshape(b * t, n)
    return routing_lib.route(logits.reshape(b * t, n), routing=self.routing, k=self.k,
                             k0=self.k0)

  @nn.compact
  def __call__(self, x: Float[Array, "b t d"]) -> Float[Array, "b t d"]:
    if x.ndim != 3:
      raise ValueError(f"x must be [batch, time, d_model], got shape {x.shape}")
    if self.routing not in ROUTINGS:
      raise ValueError(f"routing must be one of {ROUTINGS}, got {self.routing!r}")
    if self.impl not in IMPLS:
      raise ValueError(f"impl must be one of {IMPLS}, got {self.impl!r}")
    if not 1 <= self.k <= self.num_experts:
      raise ValueError(f"k must be in [1, num_experts={self.num_experts}], got {self.k}")
    b, t, d = x.shape
    n, f = self.num_experts, self.d_ff
    expert_init = lambda: nn.with_partitioning(
        nn.initializers.variance_scaling(1.0, "fan_in", "truncated_normal", in_axis=-2,
                                         out_axis=-1, batch_axis=(0,)),
        ("expert", None, None))
    w_gate = self.param("w_gate", expert_init(), (n, d, f), self.param_dtype)
    w_up = self.param("w_up", expert_init(), (n, d, f), self.param_dtype)
    w_down = self.param("w_down", expert_init(), (n, f, d), self.param_dtype)
    router = nn.Dense(n, use_bias=False, dtype=jnp.float32, param_dtype=self.param_dtype,
                      kernel_init=nn.initializers.normal(0.02), name="router")
    logits = router(x.astype(jnp.float32))  # [b, t, N]

    mask, weights = self._route(logits)  # [b*t, N]
    probs = jax.nn.softmax(logits.reshape(b * t, n), axis=-1)
    slots_per_token = self.k0 if self.routing == "pruned" else self.k
    frac = mask.sum(0) / jnp.maximum(mask.sum(), 1)  # f_e: share of token-expert slots
    self.sow("intermediates", "load_balance_loss", n * jnp.sum(frac * probs.mean(0)))
    per_pos = mask.reshape(b, t, n).any(axis=0).sum(-1)  # T of each position's batch
    self.sow("intermediates", "active_experts", per_pos.astype(jnp.float32).mean())

    xf = x.reshape(b * t, d).astype(self.dtype)
    wg, wu, wd = (w.astype(self.dtype) for w in (w_gate, w_up, w_down))
    if self.impl == "dense":
      h = nn.silu(jnp.einsum("md,edf->mef", xf, wg)) * jnp.einsum("md,edf->mef", xf, wu)
      y = jnp.einsum("mef,efd,me->md", h, wd, weights.astype(h.dtype))
    else:
      order, slot_w, group_sizes = sort_by_expert(mask, weights, slots_per_token)
      xs = xf[order // slots_per_token]
      gate = grouped_matmul(xs, wg, group_sizes, self.impl)
      up = grouped_matmul(xs, wu, group_sizes, self.impl)
      ys = grouped_matmul((nn.silu(gate) * up).astype(self.dtype), wd, group_sizes, self.impl)
      y_slots = jnp.zeros_like(ys).at[order].set(ys).reshape(b * t, slots_per_token, d)
      y = jnp.einsum("ms,msd->md", slot_w.astype(ys.dtype), y_slots)
    return y.reshape(b, t, d).astype(self.dtype)


@dataclasses.dataclass(frozen=True)
class MoEFFN:
  """Hashable FFN factory for `TransformerConfig(ffn=MoEFFN(...))`.

  Builds `MoE(num_experts, k, d_ff, ...)` with the transformer's dtypes (the
  config's own `d_ff` is ignored: each expert has `d_ff` here).

  Example:
    >>> from jaxlab.nn import Transformer, TransformerConfig
    >>> cfg = TransformerConfig(d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
    ...                         ffn=MoEFFN(num_experts=8, k=2, d_ff=16))
    >>> model = Transformer(cfg)
  """
  num_experts: int
  k: int
  d_ff: int
  routing: str = "topk"
  k0: int | None = None
  p: float = 1.0
  max_p: int | None = None
  impl: str = "ragged_dot"

  def __call__(self, config: Any, *, name: str) -> nn.Module:
    return MoE(**dataclasses.asdict(self), dtype=config.dtype, param_dtype=config.param_dtype,
               name=name)


def load_balance_loss(intermediates: Any) -> Array:
  """Sum of every `load_balance_loss` sown in an intermediates tree (0 if none).

  Example:
    >>> inter = {"layer_0": {"load_balance_loss": (jnp.float32(1.5),)},
    ...          "layer_1": {"load_balance_loss": (jnp.float32(0.5),)}}
    >>> float(load_balance_loss(inter))
    2.0
  """
  total = jnp.zeros((), jnp.float32)
  flat = jax.tree_util.tree_flatten_with_path(intermediates)[0]
  for path, leaf in flat:
    if any(getattr(p, "key", None) == "load_balance_loss" for p in path):
      total = total + jnp.asarray(leaf, jnp.float32).sum()
  return total


def mean_active_experts(intermediates: Any) -> Array:
  """Mean over layers of the sown `active_experts` (T per decode step).

  Example:
    >>> inter = {"layer_0": {"active_experts": (jnp.float32(3.0),)},
    ...          "layer_1": {"active_experts": (jnp.float32(5.0),)}}
    >>> float(mean_active_experts(inter))
    4.0
  """
  vals = [jnp.asarray(leaf, jnp.float32).mean()
          for path, leaf in jax.tree_util.tree_flatten_with_path(intermediates)[0]
          if any(getattr(p, "key", None) == "active_experts" for p in path)]
  if not vals:
    raise ValueError("intermediates hold no 'active_experts' (was the model an MoE?)")
  return jnp.stack(vals).mean()
