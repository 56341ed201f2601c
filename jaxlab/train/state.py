"""The train state pytree and the jitted train-step builder.

Params may hold `jaxlab.optim.QParam` leaves (low-precision storage, ECO): the
optimizer is initialised on their float view, the loss sees and is
differentiated w.r.t. the dequantized weights, and the updates land with
`jaxlab.optim.apply_eco`.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import Array

from jaxlab.optim import apply_eco, is_qparam


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


def _has_qparams(params: Any) -> bool:
  return any(is_qparam(x) for x in jax.tree.leaves(params, is_leaf=is_qparam))


def _float_view(params: Any) -> Any:
  """QParam leaves dequantized, float leaves as they are (what the loss and grads see)."""
  return jax.tree.map(lambda p: p.dequantize() if is_qparam(p) else p, params, is_leaf=is_qparam)


# optax.MultiSteps is used as an optimizer directly but is not a GradientTransformation.
Optimizer = optax.GradientTransformation | optax.MultiSteps


def create_train_state(params: Any, tx: Optimizer, *, seed: int) -> TrainState:
  """A fresh state at step 0.

  With QParam leaves, `tx` is initialised on the float view of `params` (the
  structure of the gradients), so gradient-shaped wrappers such as
  `optax.MultiSteps` work.
  """
  init_params = _float_view(params) if _has_qparams(params) else params
  return TrainState(step=jnp.zeros([], jnp.int32), params=params, opt_state=tx.init(init_params),
                    rng=jax.random.PRNGKey(seed))


LossFn = Callable[[Any, Any, Array], tuple[Array, dict[str, Array]]]


def make_train_step(loss_fn: LossFn, tx: Optimizer, *,
                    state_sharding: Any = None, batch_sharding: Any = None,
                    donate: bool = True) -> Callable[[TrainState, Any], tuple[TrainState, dict]]:
  """Builds `step(state, batch) -> (state, metrics)`, jitted.

  Args:
    loss_fn: `loss_fn(params, batch, rng) -> (loss, metrics)`; `rng` is this
      step's key. With QParam leaves in the state's params, `loss_fn` gets
      the float (dequantized) weights and the gradient is taken w.r.t. them;
      `tx.update` gets the QParam tree as `params` and `jaxlab.optim.apply_eco`
      lands the updates (ECO).
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
    quantized = _has_qparams(state.params)  # static: decided at trace time
    weights = _float_view(state.params) if quantized else state.params
    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(weights, batch, step_rng)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    if quantized:
      params = apply_eco(state.params, updates)
    else:
      params = optax.apply_updates(state.params, updates)
    metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads), **aux}
    return TrainState(state.step + 1, params, opt_state, state.rng), metrics

  kwargs = {}
  if state_sharding is not None or batch_sharding is not None:
    kwargs = dict(in_shardings=(state_sharding, batch_sharding),
                  out_shardings=(state_sharding, None))
  return jax.jit(step, donate_argnums=(0,) if donate else (), **kwargs)
