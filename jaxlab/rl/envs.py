"""Small pure-JAX environments with gymnax-compatible dynamics and params.

`Pendulum` (Pendulum-v1) and `CartPole` (CartPole-v1) reproduce gymnax 1.0's
`step_env`/`reset_env` equations and `EnvParams` field names exactly (checked
against gymnax in the tests when it is installed), so drift is injected the
gymnax way, by `params.replace(g=...)`. `MultiGoal` is a 2-D point mass with
goals on a ring (after the multi-goal toy of Soft Q-Learning); its drift
rotates the ring (`goal_angle`).

They are re-implemented rather than imported so that `jaxlab.rl` runs without
gymnax (whose 1.0.1 wheel imports `six`, pandas and seaborn at import time) and
so that the truncated episode's final observation is returned for
bootstrapping.

Interface (all pure, jit/vmap-safe, unbatched; vmap for vectorised envs):

  obs, state = env.reset(key, params)
  step = env.step(key, state, action, params)  # a `Step`, auto-resets
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct
from jax import Array


class Step(NamedTuple):
  """One auto-resetting environment step."""
  obs: Array          # next observation (the reset one when the episode ended)
  state: Any          # next env state (reset when the episode ended)
  reward: Array       # float32 scalar
  terminated: Array   # bool: a true terminal state (no bootstrapping)
  truncated: Array    # bool: time limit reached
  final_obs: Array    # observation reached by this action, before any reset


def _auto_reset(env, key, state, obs, reward, terminated, params):
  truncated = jnp.logical_and(state.time >= params.max_steps_in_episode,
                              jnp.logical_not(terminated))
  done = jnp.logical_or(terminated, truncated)
  obs_re, state_re = env.reset(key, params)
  new_state = jax.tree.map(lambda a, b: jnp.where(done, a, b), state_re, state)
  new_obs = jnp.where(done, obs_re, obs)
  return Step(new_obs, new_state, jnp.asarray(reward, jnp.float32),
              terminated, truncated, obs)


# ----------------------------------------------------------------- Pendulum-v1
@struct.dataclass
class PendulumParams:
  """gymnax `pendulum.EnvParams` (same fields and defaults)."""
  max_speed: float | Array = 8.0
  max_torque: float | Array = 2.0
  dt: float | Array = 0.05
  g: float | Array = 10.0
  m: float | Array = 1.0
  l: float | Array = 1.0  # noqa: E741  (gymnax's field name)
  max_steps_in_episode: int | Array = 200


@struct.dataclass
class PendulumState:
  """Angle (rad), angular velocity, last torque and step count."""
  theta: Array
  theta_dot: Array
  last_u: Array
  time: Array


def _angle_normalize(x):
  return ((x + jnp.pi) % (2 * jnp.pi)) - jnp.pi


class Pendulum:
  """Pendulum-v1: swing up and balance; 1 continuous action in [-2, 2]."""
  name = "Pendulum-v1"
  obs_dim = 3
  action_dim = 1
  num_actions = 0
  action_scale = 2.0  # policy outputs in [-1, 1] are scaled by this.
  default_params = PendulumParams()

  def reset(self, key: Array, params: PendulumParams) -> tuple[Array, Any]:
    del params
    high = jnp.array([jnp.pi, 1.0])
    s = jax.random.uniform(key, (2,), minval=-high, maxval=high)
    state = PendulumState(theta=s[0], theta_dot=s[1], last_u=jnp.float32(0.0),
                          time=jnp.int32(0))
    return self.obs(state), state

  def obs(self, state: PendulumState) -> Array:
    return jnp.stack([jnp.cos(state.theta), jnp.sin(state.theta),
                      state.theta_dot])

  def step(self, key: Array, state: PendulumState, action: Array,
           params: PendulumParams) -> Step:
    u = jnp.clip(jnp.reshape(action, ()), -params.max_torque, params.max_torque)
    reward = -(_angle_normalize(state.theta) ** 2
               + 0.1 * state.theta_dot ** 2 + 0.001 * u ** 2)
    thdot = state.theta_dot + (
        3 * params.g / (2 * params.l) * jnp.sin(state.theta)
        + 3.0 / (params.m * params.l ** 2) * u) * params.dt
    thdot = jnp.clip(thdot, -params.max_speed, params.max_speed)
    th = state.theta + thdot * params.dt
    new = PendulumState(theta=th, theta_dot=thdot, last_u=u,
                        time=state.time + 1)
    return _auto_reset(self, key, new, self.obs(new), reward,
                       jnp.array(False), params)


# ----------------------------------------------------------------- CartPole-v1
@struct.dataclass
class CartPoleParams:
  """gymnax `cartpole.EnvParams` (same fields and defaults).

  `total_mass` and `polemass_length` are derived fields, as in gymnax; after
  changing `masscart`, `masspole` or `length` call `with_derived()` (the drift
  wrappers do).
  """
  gravity: float | Array = 9.8
  masscart: float | Array = 1.0
  masspole: float | Array = 0.1
  total_mass: float | Array = 1.0 + 0.1
  length: float | Array = 0.5
  polemass_length: float | Array = 0.05
  force_mag: float | Array = 10.0
  tau: float | Array = 0.02
  theta_threshold_radians: float | Array = 12 * 2 * 3.141592653589793 / 360
  x_threshold: float | Array = 2.4
  max_steps_in_episode: int | Array = 500

  def with_derived(self) -> "CartPoleParams":
    return self.replace(total_mass=self.masscart + self.masspole,
                        polemass_length=self.masspole * self.length)


@struct.dataclass
class CartPoleState:
  """Cart position and velocity, pole angle and angular velocity, step count."""
  x: Array
  x_dot: Array
  theta: Array
  theta_dot: Array
  time: Array


class CartPole:
  """CartPole-v1: balance a pole; 2 discrete actions (push left / right)."""
  name = "CartPole-v1"
  obs_dim = 4
  action_dim = 1
  num_actions = 2
  action_scale = 1.0
  default_params = CartPoleParams()

  def reset(self, key: Array, params: CartPoleParams) -> tuple[Array, Any]:
    del params
    s = jax.random.uniform(key, (4,), minval=-0.05, maxval=0.05)
    state = CartPoleState(x=s[0], x_dot=s[1], theta=s[2], theta_dot=s[3],
                          time=jnp.int32(0))
    return self.obs(state), state

  def obs(self, state: CartPoleState) -> Array:
    return jnp.stack([state.x, state.x_dot, state.theta, state.theta_dot])

  def _terminal(self, state, params):
    return ((state.x < -params.x_threshold) | (state.x > params.x_threshold)
            | (state.theta < -params.theta_threshold_radians)
            | (state.theta > params.theta_threshold_radians))

  def step(self, key: Array, state: CartPoleState, action: Array,
           params: CartPoleParams) -> Step:
    a = jnp.reshape(action, ()).astype(jnp.float32)
    force = params.force_mag * a - params.force_mag * (1 - a)
    cos, sin = jnp.cos(state.theta), jnp.sin(state.theta)
    temp = (force + params.polemass_length * state.theta_dot ** 2 * sin
            ) / params.total_mass
    thetaacc = (params.gravity * sin - cos * temp) / (
        params.length * (4.0 / 3.0 - params.masspole * cos ** 2
                         / params.total_mass))
    xacc = temp - params.polemass_length * thetaacc * cos / params.total_mass
    new = CartPoleState(
        x=state.x + params.tau * state.x_dot,
        x_dot=state.x_dot + params.tau * xacc,
        theta=state.theta + params.tau * state.theta_dot,
        theta_dot=state.theta_dot + params.tau * thetaacc,
        time=state.time + 1)
    # Called only on live states (auto-reset), so the reward is always 1.
    return _auto_reset(self, key, new, self.obs(new), jnp.float32(1.0),
                       self._terminal(new, params), params)


# ------------------------------------------------------------ 2-D multi-goal
@struct.dataclass
class MultiGoalParams:
  """2-D multi-goal point environment.

  Goals sit on a ring of radius `goal_distance`, the first at angle
  `goal_angle` (radians). Reward: `-min_i |x' - g_i| - action_cost * |a|^2`.
  """
  goal_distance: float | Array = 1.0
  goal_angle: float | Array = 0.0
  max_step: float | Array = 0.1
  action_cost: float | Array = 0.1
  bound: float | Array = 2.0
  max_steps_in_episode: int | Array = 50
  num_goals: int = struct.field(pytree_node=False, default=4)


@struct.dataclass
class MultiGoalState:
  """Point position [2] and step count."""
  pos: Array
  time: Array


class MultiGoal:
  """Point mass moved by a 2-D action in [-1, 1]^2 towards any of K goals."""
  name = "MultiGoal2D"
  obs_dim = 2
  action_dim = 2
  num_actions = 0
  action_scale = 1.0
  default_params = MultiGoalParams()

  def goals(self, params: MultiGoalParams) -> Array:
    ang = params.goal_angle + 2 * jnp.pi * jnp.arange(params.num_goals) / (
        params.num_goals)
    return params.goal_distance * jnp.stack([jnp.cos(ang), jnp.sin(ang)], -1)

  def reset(self, key: Array, params: MultiGoalParams) -> tuple[Array, Any]:
    del params
    pos = jax.random.uniform(key, (2,), minval=-0.1, maxval=0.1)
    state = MultiGoalState(pos=pos, time=jnp.int32(0))
    return state.pos, state

  def step(self, key: Array, state: MultiGoalState, action: Array,
           params: MultiGoalParams) -> Step:
    a = jnp.clip(jnp.reshape(action, (2,)), -1.0, 1.0)
    pos = jnp.clip(state.pos + params.max_step * a, -params.bound,
                   params.bound)
    dist = jnp.min(jnp.linalg.norm(pos[None] - self.goals(params), axis=-1))
    reward = -dist - params.action_cost * jnp.sum(a ** 2)
    new = MultiGoalState(pos=pos, time=state.time + 1)
    return _auto_reset(self, key, new, pos, reward, jnp.array(False), params)


ENVS = {"pendulum": Pendulum, "cartpole": CartPole, "multigoal": MultiGoal}


def make(name: str):
  """Returns an env instance: "pendulum", "cartpole" or "multigoal"."""
  if name not in ENVS:
    raise ValueError(f"Unknown env {name!r}; expected one of {sorted(ENVS)}")
  return ENVS[name]()


def evaluate(env, params: Any, policy: Any, key: Array, num_envs: int,
             num_steps: int | None = None) -> Array:
  """Mean undiscounted return of `policy(obs) -> action` over `num_envs` episodes.

  Each episode starts from a fresh reset under `params` and runs until its
  first termination or truncation (at most `num_steps`, default the params'
  `max_steps_in_episode`).

  Returns:
    float32 scalar.
  """
  if num_steps is None:
    num_steps = int(env.default_params.max_steps_in_episode)
  k_reset, k_step = jax.random.split(key)
  obs, state = jax.vmap(env.reset, in_axes=(0, None))(
      jax.random.split(k_reset, num_envs), params)

  def body(carry, k):
    obs, state, ret, alive = carry
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
        jax.random.split(k, num_envs), state, policy(obs), params)
    ret = ret + jnp.where(alive, step.reward, 0.0)
    alive = alive & ~(step.terminated | step.truncated)
    return (step.obs, step.state, ret, alive), None

  init = (obs, state, jnp.zeros((num_envs,)), jnp.ones((num_envs,), bool))
  (_, _, ret, _), _ = jax.lax.scan(body, init,
                                   jax.random.split(k_step, num_steps))
  return jnp.mean(ret)


def summarize_chunk(infos: dict, eval_return, t_end, drift_level) -> dict:
  """Metrics of one training chunk between two evaluations (SAC and PPO alike).

  `infos` holds per-step means plus `ret_sum`/`ret_cnt` of finished training
  episodes; `train_return` is NaN when no episode finished in the chunk (a
  documented marker, never averaged into results).
  """
  infos = dict(infos)
  cnt = jnp.sum(infos.pop("ret_cnt"))
  train_return = jnp.sum(infos.pop("ret_sum")) / jnp.maximum(cnt, 1)
  out = {k: jnp.mean(v) for k, v in infos.items()}
  out.update(step=t_end + 1, eval_return=eval_return,
             train_return=jnp.where(cnt > 0, train_return, jnp.nan), drift_level=drift_level)
  return out
