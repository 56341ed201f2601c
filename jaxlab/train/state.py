"""The train state pytree and the jitted train-step builder."""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import Array


class TrainState(NamedTuple):
  """Everything a run needs to resume bit-exactly.

  step: int32 []; params: the model's pytree; opt_state: the optimizer's
  state; rng: uint32 [2] raw PRNG key (raw so orbax stores it as plain data).
  Per-step randomness is `fold_in(rng, step)`, so it depends on the step only.
  """
  step: Array
  params: Any
  opt_state: Any
  rng: Array


def create_train_state(params: Any, tx: optax.GradientTransformation, *, seed: int) -> TrainState:
  """A fresh state at step 0."""
  return TrainState(step=jnp.zeros([], jnp.int32), params=params, opt_state=tx.init(params),
                    rng=jax.random.PRNGKey(seed))


LossFn = Callable[[Any, Any, Array], tuple[Array, dict[str, Array]]]


def make_train_step(loss_fn: LossFn, tx: optax.GradientTransformation, *,
                    state_sharding: Any = None, batch_sharding: Any = None,
                    donate: bool = True) -> Callable[[TrainState, Any], tuple[TrainState, dict]]:
  """Builds `step(state, batch) -> (state, metrics)`, jitted.

  Args:
    loss_fn: `loss_fn(params, batch, rng) -> (loss, metrics)`; `rng` is this
      step's key.
    tx: the optax transformation.
    state_sharding: optional pytree of shardings for the state (FSDP); the
      updated state keeps the same layout, so step 2 never recompiles.
    batch_sharding: optional sharding of the batch (data parallel).
    donate: donate the old state's buffers to the new one.

  Returns:
    The jitted step. Metrics hold `loss`, `grad_norm` and `loss_fn`'s extras.
  """
  def step(state: TrainState, batch):
    step_rng = jax.random.fold_in(state.rng, state.step)
    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, batch, step_rng)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads), **aux}
    return TrainState(state.step + 1, params, opt_state, state.rng), metrics

  kwargs = {}
  if state_sharding is not None or batch_sharding is not None:
    kwargs = dict(in_shardings=(state_sharding, batch_sharding),
                  out_shardings=(state_sharding, None))
  return jax.jit(step, donate_argnums=(0,) if donate else (), **kwargs)
