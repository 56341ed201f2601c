"""Adapter: a gymnax environment + params as a `jaxlab.rl.envs` environment.

`GymnaxEnv(env, params)` exposes the interface `jaxlab.rl.sac` / `ppo` train
on (`reset(key, params)`, an auto-resetting `step(key, state, action,
params) -> envs.Step`, and `name`, `obs_dim`, `action_dim`, `num_actions`,
`action_scale`, `default_params`). One step is gymnax's own `env.step`: the
key is split into (step, reset) keys the same way, so observation, state and
reward are identical to gymnax's; the adapter adds what gymnax's `step`
drops, the observation reached before the auto-reset (`final_obs`, which
SAC/PPO bootstrap from on truncation).

Terminated vs truncated: truncated = `state.time >= params.max_steps_in_episode`
(gymnax's time limit). gymnax releases differ in what `step_env` reports:
where the env has `is_truncated` (the API whose `step` returns terminated and
truncated separately) `step_env` reports natural termination only; older
releases fold the time limit into `step_env`'s `done`, and there a step that
is both terminal and at the time limit counts as truncated (jaxlab
interpretation: the older API cannot tell the two apart).

Observations are flattened to float32 vectors [obs_dim] (the SAC/PPO networks
are MLPs). Continuous actions: the action space must be a Box symmetric about
0; SAC's tanh actions in [-1, 1] are scaled by `action_scale` = the Box's
high bound. The module imports no gymnax: it works on any object with the
gymnax `Environment` methods.

Example (needs gymnax, the `gymnax` extra):
  >>> import gymnax, jax
  >>> from jaxlab.rl import gymnax_adapter, ppo
  >>> env = gymnax_adapter.GymnaxEnv(*gymnax.make("CartPole-v1"))
  >>> train = jax.jit(ppo.make_train(env, ppo.PPOConfig(total_updates=4, num_evals=2)))
  >>> train(jax.random.key(0), ppo.ent_mode_index("fixed")).metrics["eval_return"].shape
  (2,)
"""

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaxlab.rl.envs import Step


class GymnaxEnv:
  """A gymnax environment in jaxlab's env interface (see the module docstring).

  Args:
    env: a gymnax `Environment` (e.g. the first value of `gymnax.make(name)`).
    params: its `EnvParams` (the second value of `gymnax.make`), used as
      `default_params`; it must have `max_steps_in_episode`.

  Raises:
    ValueError: if `params` has no `max_steps_in_episode`, or the action space
      is neither discrete nor a Box symmetric about 0.
  """

  def __init__(self, env: Any, params: Any):
    if not hasattr(params, "max_steps_in_episode"):
      raise ValueError("params must be gymnax EnvParams with a max_steps_in_episode field, "
                       f"got {type(params).__name__}")
    self.env = env
    self.default_params = params
    self.name = str(getattr(env, "name", type(env).__name__))
    self.obs_dim = int(math.prod(env.observation_space(params).shape))
    space = env.action_space(params)
    if hasattr(space, "n"):  # gymnax spaces.Discrete
      self.num_actions, self.action_dim, self.action_scale = int(space.n), 1, 1.0
    elif hasattr(space, "low") and hasattr(space, "high"):  # gymnax spaces.Box
      low = np.broadcast_to(np.asarray(space.low, np.float32), space.shape)
      high = np.broadcast_to(np.asarray(space.high, np.float32), space.shape)
      if not np.allclose(low, -high) or not np.all(high > 0) or not np.all(np.isfinite(high)):
        raise ValueError(f"{self.name}: a continuous action space must be a finite Box "
                         f"symmetric about 0, got low={low}, high={high}")
      self.num_actions, self.action_dim = 0, int(math.prod(space.shape))
      # A scalar scale where all bounds agree, as in jaxlab's own envs.
      self.action_scale = float(high.flat[0]) if np.all(high == high.flat[0]) else jnp.asarray(
          high.reshape(-1))
    else:
      raise ValueError(f"{self.name}: unsupported action space {type(space).__name__} "
                       "(expected gymnax Discrete or Box)")
    self._action_shape = tuple(space.shape)
    # Newer gymnax reports natural termination and truncation separately.
    self._separate_truncation = hasattr(env, "is_truncated")

  def _flat_obs(self, obs: Array) -> Array:
    return jnp.reshape(obs, (self.obs_dim,)).astype(jnp.float32)

  def reset(self, key: Array, params: Any) -> tuple[Array, Any]:
    """`gymnax env.reset(key, params)`, the observation flattened to [obs_dim]."""
    obs, state = self.env.reset_env(key, params)
    return self._flat_obs(obs), state

  def step(self, key: Array, state: Any, action: Array, params: Any) -> Step:
    """One auto-resetting step, equal to gymnax's `env.step` plus `final_obs`."""
    if not self.num_actions:
      action = jnp.reshape(action, self._action_shape)
    key_step, key_reset = jax.random.split(key)  # as gymnax's Environment.step
    obs_st, state_st, reward, done, _ = self.env.step_env(key_step, state, action, params)
    at_limit = state_st.time >= params.max_steps_in_episode
    if self._separate_truncation:
      terminated = jnp.asarray(done, bool)
    else:
      terminated = jnp.logical_and(done, jnp.logical_not(at_limit))
    truncated = jnp.logical_and(at_limit, jnp.logical_not(terminated))
    obs_re, state_re = self.env.reset_env(key_reset, params)
    reset = jnp.logical_or(terminated, truncated)
    new_state = jax.tree.map(lambda a, b: jax.lax.select(reset, a, b), state_re, state_st)
    final_obs = self._flat_obs(obs_st)
    new_obs = jnp.where(reset, self._flat_obs(obs_re), final_obs)
    return Step(new_obs, new_state, jnp.asarray(reward, jnp.float32).reshape(()), terminated,
                truncated, final_obs)
