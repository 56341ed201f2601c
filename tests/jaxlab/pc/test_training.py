"""`training.with_frozen`: the builder's optimizer on the trained parameters, the HFV cell
offsets held, a non-finite step skipped: the Adam chain the pc experiment always trained with."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from configs import pc as pc_config
from jaxlab.pc import training
from jaxlab.train import optimizer


def _trajectory(tx, params, steps: int = 6):
  state, out = tx.init(params), []
  for i in range(steps):
    grads = jax.tree.map(lambda p, i=i: jnp.sin(p + 0.3 * i) * 3.0, params)
    if i == 2:  # one non-finite gradient: the step is skipped
      grads = {**grads, "leaf_mean": grads["leaf_mean"].at[0].set(jnp.nan)}
    updates, state = tx.update(grads, state, params)
    params = optax.apply_updates(params, updates)
    out.append(params)
  return out, state


def test_the_pc_config_builds_the_frozen_adam_it_always_did():
  params = {"leaf_mean": jnp.asarray([0.5, -1.0, 2.0]),
            "body": {"centroid_offset": jnp.asarray([0.1, 0.2])}}
  config = pc_config.get_config("smoke")
  tx = training.with_frozen(optimizer(config.optimizer, config.train.num_steps), params)
  labels = {"leaf_mean": "train", "body": {"centroid_offset": "frozen"}}
  old = optax.apply_if_finite(optax.multi_transform(
      {"train": optax.adam(0.01), "frozen": optax.set_to_zero()}, labels), 10)
  got, state = _trajectory(tx, params)
  want, _ = _trajectory(old, params)
  for g, w in zip(got, want, strict=True):
    np.testing.assert_array_equal(np.asarray(g["leaf_mean"]), np.asarray(w["leaf_mean"]))
    np.testing.assert_array_equal(np.asarray(g["body"]["centroid_offset"]),
                                  np.asarray(params["body"]["centroid_offset"]))
  assert int(state.total_notfinite) == 1
  assert not np.array_equal(np.asarray(got[-1]["leaf_mean"]), [0.5, -1.0, 2.0])
  # frozen=() trains the offsets too.
  free, _ = _trajectory(training.with_frozen(optax.adam(0.01), params, frozen=()), params)
  assert not np.array_equal(np.asarray(free[-1]["body"]["centroid_offset"]),
                            np.asarray(params["body"]["centroid_offset"]))
