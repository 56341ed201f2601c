"""Maximum-likelihood training of a `PCModel` (minibatches, one `lax.scan`).

Objective: minimise -mean log f(x). For the base and HFV models f is normalised, so this
is exact maximum likelihood. For the VT root f is the soft-gated output, whose integral is
<= 1 (soft gates are <= 1 and the children are normalised): -mean log f bounds the
negative log-likelihood from above, so training maximises a lower bound (jaxlab
interpretation: the paper does not spell out the training-time normaliser). The soft
gate's alpha is annealed linearly from `alpha_start` to `alpha_end` over the steps (the
paper: 1 -> 50), centroids trained jointly; evaluation uses hard gates.
"""

from typing import Any

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float

from jaxlab.pc.models import PCModel

# Parameters frozen by default: the HFV leaves' 1-D cell offsets (see `with_frozen`).
FROZEN_BY_DEFAULT = ("centroid_offset",)
MAX_BAD_STEPS = 10


def with_frozen(tx: optax.GradientTransformation, params: Any, *,
                frozen: tuple[str, ...] = FROZEN_BY_DEFAULT) -> optax.GradientTransformation:
  """`tx` on every parameter except those whose name is in `frozen` (kept fixed).

  jaxlab interpretation: with hard 1-D gates the data term is piecewise constant in the
  HFV cell boundaries, so their gradient only comes from the normaliser, which pulls the
  boundaries into the data; by default they stay where the initialisation put them
  (around each component's initial mean). Pass `frozen=()` to train them.

  Args:
    tx: the optimizer of the trained parameters (`jaxlab.train.optimizer`).
    params: the parameter tree (to label).
    frozen: parameter names to keep fixed.

  Returns:
    An optax transformation that skips a step whose gradient is not finite.

  Example:
    >>> import jax.numpy as jnp, ml_collections
    >>> from jaxlab.train import optimizer
    >>> params = {"leaf_mean": jnp.zeros(2), "centroid_offset": jnp.zeros(2)}
    >>> opt = ml_collections.ConfigDict(dict(learning_rate=0.01, schedule="constant"))
    >>> tx = with_frozen(optimizer(opt, num_steps=10), params)
    >>> grads = {"leaf_mean": jnp.ones(2), "centroid_offset": jnp.ones(2)}
    >>> updates, _ = tx.update(grads, tx.init(params), params)
    >>> [round(float(u[0]), 4) for u in (updates["leaf_mean"], updates["centroid_offset"])]
    [-0.01, 0.0]
  """

  def label(path, _):
    names = {getattr(k, "key", None) for k in path}
    return "frozen" if names & set(frozen) else "train"

  labels = jax.tree_util.tree_map_with_path(label, params)
  inner = optax.multi_transform({"train": tx, "frozen": optax.set_to_zero()}, labels)
  # Non-finite rule: a step whose gradient has a NaN/Inf is skipped (params unchanged) and
  # counted (`fit` returns the count); after `MAX_BAD_STEPS` consecutive ones the update
  # is applied anyway, so a persistent NaN shows up in the parameters instead of hiding.
  return optax.apply_if_finite(inner, MAX_BAD_STEPS)


def alpha_at(step: Array | int, num_steps: int, alpha_start: float, alpha_end: float) -> Array:
  """The linearly annealed soft-gate alpha at `step` of `num_steps` (start at 0, end at n-1).

  Example::

    alpha_at(0, 100, 1.0, 50.0), alpha_at(99, 100, 1.0, 50.0)  # 1.0, 50.0
  """
  frac = jnp.asarray(step, jnp.float32) / max(num_steps - 1, 1)
  return alpha_start + (alpha_end - alpha_start) * frac


def fit(model: PCModel, params: Any, x: Float[Array, "n d"], key: Array, *,
        tx: optax.GradientTransformation, num_steps: int, batch_size: int,
        alpha_start: float = 1.0, alpha_end: float = 50.0
        ) -> tuple[Any, Float[Array, "s"], Array]:
  """Trains `params` for `num_steps` steps of `tx` on random minibatches of `x`.

  Jit- and vmap-compatible (the experiment vmaps it over seeds).

  Args:
    model: the `PCModel`.
    params: initial parameters (`models.init_params`).
    x: training points [N, D].
    key: PRNG key for the minibatches.
    tx: the optimizer (`with_frozen`).
    num_steps: training steps (>= 1).
    batch_size: points per step (with replacement).
    alpha_start: the VT soft gate's alpha at the first step (ignored by mixture roots).
    alpha_end: alpha at the last step.

  Returns:
    (trained params, [num_steps] training losses = -mean log f of each batch, the number
    of steps skipped for a non-finite gradient (0 unless `tx` counts them; see
    `with_frozen`)).
  """
  if num_steps < 1 or batch_size < 1:
    raise ValueError(f"num_steps and batch_size must be >= 1, got {num_steps}, {batch_size}")
  vt = model.root == "vt"

  def loss_fn(p, xb, alpha):
    return -jnp.mean(model.apply(p, xb, alpha=alpha if vt else None))

  def step(carry, t):
    p, opt_state = carry
    idx = jax.random.randint(jax.random.fold_in(key, t), (batch_size,), 0, x.shape[0])
    loss, grads = jax.value_and_grad(loss_fn)(p, x[idx], alpha_at(t, num_steps, alpha_start,
                                                                   alpha_end))
    updates, opt_state = tx.update(grads, opt_state, p)
    return (optax.apply_updates(p, updates), opt_state), loss

  (params, state), losses = jax.lax.scan(step, (params, tx.init(params)), jnp.arange(num_steps))
  skipped = getattr(state, "total_notfinite", jnp.zeros((), jnp.int32))
  return params, losses, skipped
