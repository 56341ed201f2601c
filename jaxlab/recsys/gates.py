"""CRAMER's gate generator: request embedding -> k-hot row / column gates, trained by STE.

z = W_proj e_q + b_proj ∈ R^d (one logit per row and per column of every masked matrix);
k = ⌈(1−ρ) d⌉ gates are kept: in training the top k of z + Gumbel noise (per instance,
or one noise draw shared by the batch), at inference the top k of z. The forward pass
uses the hard k-hot mask; the backward pass the gradient of v = softmax(z / τ) over all d
logits (straight-through), τ annealed 0.7 -> 0.3. The regulariser is (1/d) KL(Q || p),
Q = Π Bernoulli(σ(z_i)), p = Π Bernoulli(k / d).

`k` may be a traced integer, so one compiled program serves every drop ratio ρ: the mask
keeps the k best ranks of a stable descending sort, exactly k even with ties (computed by
a radix select of the k-th largest logit, without sorting).

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jaxlab.recsys import gates
  >>> z = jnp.array([[0.3, -1.0, 2.0, 0.1]])
  >>> gates.top_k_mask(z, 2)
  Array([[1., 0., 1., 0.]], dtype=float32)
  >>> k = gates.keep_count(4, 0.5)
  >>> m = gates.straight_through(gates.top_k_mask(z, k, jax.random.key(0)), z, 0.7)
  >>> float(m.sum())
  2.0
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.typing import ArrayLike
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab import validation

TAU_SCHEDULES = ("cosine", "linear", "exponential")


def keep_count(num: int, rho: ArrayLike) -> Array:
  """k = ⌈(1 − ρ) d⌉ gates kept out of d = `num`, for a drop ratio ρ in [0, 1).

  Args:
    num: d, the number of gates.
    rho: drop ratio (Python float or traced scalar).

  Returns:
    int32 scalar k in [1, d].

  Example:
    >>> int(keep_count(8, 0.25)), int(keep_count(10, 0.5)), int(keep_count(3, 0.9))
    (6, 5, 1)
  """
  if isinstance(rho, (int, float)) and not 0.0 <= rho < 1.0:
    raise ValueError(f"rho must lie in [0, 1), got {rho}")
  # The 1e-4 absorbs float32 error in (1 - rho) * d so that e.g. rho = 0.25, d = 8 keeps 6.
  k = jnp.ceil((1.0 - jnp.asarray(rho, jnp.float32)) * num - 1e-4).astype(jnp.int32)
  return jnp.clip(k, 1, num)


def top_k_mask(logits: Float[Array, "b d"], k: ArrayLike,
               key: PRNGKeyArray | None = None, shared_noise: ArrayLike = False
               ) -> Float[Array, "b d"]:
  """Hard k-hot mask: 1 on the k largest of z (+ Gumbel(0, 1) noise when `key` is given).

  Args:
    logits: gate logits z.
    k: how many gates each row keeps (int or traced int scalar, 1 <= k <= d). A concrete
      k outside [1, d] raises ValueError; a traced one is not checked (k <= 0 keeps no
      gate, k >= d keeps all).
    key: None for inference (deterministic top-k on z); a key for training (Gumbel-top-k).
    shared_noise: if true, one noise vector is drawn and shared by the whole batch
      (the paper's "shared" ablation); else one draw per row (per instance).

  Returns:
    float32 {0, 1} mask with exactly k ones per row.

  Example:
    >>> z = jnp.array([[0.3, -1.0, 2.0, 0.1]])
    >>> top_k_mask(z, 2)          # inference: the top 2 of z (a key adds Gumbel noise)
    Array([[1., 0., 1., 0.]], dtype=float32)
  """
  if logits.ndim != 2:
    raise ValueError(f"logits must be [batch, d], got {logits.shape}")
  k_np = validation.concrete(k)
  d = logits.shape[-1]
  if k_np is not None and (k_np.ndim != 0 or not 1 <= k_np <= d):
    raise ValueError(f"k must be an integer scalar in [1, {d}] (d = logits.shape[-1]), "
                     f"got {k_np.tolist()}")
  z = logits.astype(jnp.float32)
  if key is not None:
    each = jax.random.gumbel(key, z.shape)
    noise = jnp.where(jnp.asarray(shared_noise), jnp.broadcast_to(each[:1], z.shape), each)
    z = z + noise
  z = jnp.where(jnp.isnan(z), -jnp.inf, z)  # a NaN logit is never kept (rank is defined)
  return _first_k_ranks(_order_keys(z), jnp.asarray(k, jnp.int32)).astype(jnp.float32)


def _order_keys(z: Array) -> Array:
  """uint32 keys ordered as the NaN-free float32 `z` (-0 and +0 equal, as `jnp.sort` has them)."""
  b = jax.lax.bitcast_convert_type(jnp.where(z == 0, 0.0, z), jnp.int32)
  # Non-negative floats order as their bits, negative ones reversed: flip accordingly and
  # move the sign bit, so unsigned comparison follows the floats.
  return jax.lax.bitcast_convert_type(jnp.where(b >= 0, b | jnp.int32(-2**31), ~b), jnp.uint32)


def _first_k_ranks(u: Array, k: Array) -> Array:
  """True on the k first places of a stable descending sort of each row of keys `u`.

  The mask `ranks < k` of a stable descending argsort, without sorting (XLA:CPU sorts
  slowly: a double argsort took about half of a CRAMER training step). t, the k-th
  largest key, is found bit by bit from the top (t gets a bit if at least k
  keys are >= t with it); then every key above t is kept, and the ties at t in index
  order until k are. k <= 0 keeps none, k >= d all, like the ranks.
  """
  def next_bit(i, t):
    cand = t | (jnp.uint32(1 << 31) >> i.astype(jnp.uint32))
    return jnp.where(jnp.sum(u >= cand, axis=-1, keepdims=True, dtype=jnp.int32) >= k, cand, t)

  t = jax.lax.fori_loop(0, 32, next_bit, jnp.zeros((*u.shape[:-1], 1), jnp.uint32),
                        unroll=True)
  above, tie = u > t, u == t
  tie_rank = jnp.cumsum(tie, axis=-1, dtype=jnp.int32) - 1
  return above | (tie & (tie_rank < k - jnp.sum(above, axis=-1, keepdims=True, dtype=jnp.int32)))


def straight_through(hard: Float[Array, "b d"], logits: Float[Array, "b d"],
                     temperature: ArrayLike) -> Float[Array, "b d"]:
  """Forward value `hard` exactly; gradient of v = softmax(logits / τ) with respect to z.

  `hard + (v - stop_gradient(v))`: the bracket is exactly 0 in the forward pass, so the
  mask stays binary (adding and subtracting v would round 1 + v - v away from 1).

  Example:
    >>> z = jnp.array([[0.3, -1.0, 2.0, 0.1]])
    >>> hard = jnp.array([[1.0, 0.0, 1.0, 0.0]])           # top_k_mask(z, 2)
    >>> straight_through(hard, z, 0.5)                     # forward: the hard mask
    Array([[1., 0., 1., 0.]], dtype=float32)
    >>> g = jax.grad(lambda z: (straight_through(hard, z, 0.5) * jnp.arange(4.0)).sum())(z)
    >>> bool((g != 0).all())                               # backward: softmax's, every logit
    True
  """
  if hard.shape != logits.shape:
    raise ValueError(f"hard {hard.shape} and logits {logits.shape} disagree")
  v = jax.nn.softmax(logits.astype(jnp.float32) / temperature, axis=-1)
  return jax.lax.stop_gradient(hard) + (v - jax.lax.stop_gradient(v))


def temperature(step: ArrayLike, num_steps: int, start: float = 0.7, end: float = 0.3,
                schedule: str = "cosine") -> Array:
  """τ annealed from `start` (step 0) to `end` (step num_steps - 1).

  Args:
    step: current step (int or traced).
    num_steps: total steps.
    start, end: τ at the first and last step (> 0).
    schedule: "cosine" (the paper's best), "linear" or "exponential".

  Returns:
    The float32 scalar τ.

  Example:
    >>> [round(float(temperature(s, 11)), 3) for s in (0, 5, 10)]
    [0.7, 0.5, 0.3]
  """
  if schedule not in TAU_SCHEDULES:
    raise ValueError(f"tau schedule must be one of {TAU_SCHEDULES}, got {schedule!r}")
  if start <= 0 or end <= 0:
    raise ValueError(f"temperatures must be > 0, got start={start}, end={end}")
  frac = jnp.clip(jnp.asarray(step, jnp.float32) / max(num_steps - 1, 1), 0.0, 1.0)
  if schedule == "cosine":
    return end + (start - end) * 0.5 * (1.0 + jnp.cos(jnp.pi * frac))
  if schedule == "linear":
    return start + (end - start) * frac
  return start * (end / start) ** frac


def bernoulli_kl(logits: Float[Array, "b d"], prior: ArrayLike) -> Float[Array, "b"]:
  """(1/d) Σ_i KL(Bernoulli(σ(z_i)) || Bernoulli(π₀)), per row.

  Args:
    logits: gate logits z.
    prior: π₀ = k / d; clipped to [1e-6, 1 - 1e-6] so ρ = 0 (π₀ = 1) stays finite.

  Returns:
    The mean KL per row (nats per gate).

  Example:
    >>> z = jnp.array([[0.0, 0.0, 0.0, 0.0], [5.0, 5.0, 5.0, 5.0]])
    >>> [round(x, 3) for x in bernoulli_kl(z, 0.5).tolist()]   # sigma(0) = 0.5: the prior
    [0.0, 0.653]
  """
  z = logits.astype(jnp.float32)
  p0 = jnp.clip(jnp.asarray(prior, jnp.float32), 1e-6, 1.0 - 1e-6)
  pi = jax.nn.sigmoid(z)
  kl = (pi * (jax.nn.log_sigmoid(z) - jnp.log(p0))
        + (1.0 - pi) * (jax.nn.log_sigmoid(-z) - jnp.log1p(-p0)))
  return jnp.mean(kl, axis=-1)


class GateGenerator(nn.Module):
  """F_φ: request embedding e_q [b, h] -> gate logits z = W_proj e_q + b_proj [b, d].

  Attributes:
    num_gates: d.
    dtype: computation dtype.
    param_dtype: parameter dtype.
  """
  num_gates: int
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, request_embedding):
    return nn.Dense(self.num_gates, dtype=self.dtype, param_dtype=self.param_dtype,
                    name="proj")(request_embedding)
