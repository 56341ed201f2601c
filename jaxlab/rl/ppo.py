"""PPO for discrete actions with a fixed or AES-scheduled entropy coefficient.

Clipped-surrogate PPO with GAE (the purejaxrl layout): rollouts of
`num_steps` in `num_envs` vectorised environments, `update_epochs` passes of
`num_minibatches` minibatches, everything inside one `lax.scan`, so
`jax.vmap(train)` trains many seeds (and both entropy modes, a traced int) at
once. Truncated episodes bootstrap from the value of the final observation.

Entropy modes (`ENT_MODES`):

  * "fixed": `ent_coef = config.ent_coef`.
  * "aes":   `ent_coef = lambda_t` of `aes_scheduler(config.ent_coef, ...)`,
             updated once per rollout with its one-step TD errors
             `r + gamma * V(s') - V(s)` (AES as the PPO entropy coefficient,
             the "offset" rule lambda_0 sqrt(1 + kappa d_t)).
  * "aes_sqrt": the same tracker under the plain square-root rule
             lambda_0 sqrt(d_t / d_ref), clipped (`jaxlab.rl.aes_scheduler`).

The AES plumbing (knobs, mode selection, drifting env, evaluation) is shared
with SAC: `jaxlab.rl.aes_plumbing`. The optimizer is the top level of the
config's `optimizer` section, built by `jaxlab.train.optimizer`; the default
(`DEFAULT_OPTIMIZER`) is purejaxrl's: Adam with eps 1e-5 after a global-norm
clip at 0.5.

Example:
  >>> import jax
  >>> from jaxlab.rl import envs, ppo
  >>> cfg = ppo.PPOConfig(total_updates=4, num_evals=2)
  >>> train = jax.jit(ppo.make_train(envs.CartPole(), cfg))
  >>> out = train(jax.random.key(0), ppo.ent_mode_index("aes"))
  >>> out.metrics["eval_return"].shape
  (2,)
"""

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax import Array
from jax.flatten_util import ravel_pytree
from jax.typing import DTypeLike

from jaxlab.rl import aes_plumbing
from jaxlab.rl import aes_scheduler as aes_lib
from jaxlab.rl.drift import Drift
from jaxlab.train.optimizers import optimizer as build_optimizer

ENT_MODES = ("fixed", "aes", "aes_sqrt")
# What `make_train` builds without an `optimizer`: a constant 1e-3, Adam's eps 1e-5 and the
# global-norm clip at 0.5 of purejaxrl's PPO.
DEFAULT_OPTIMIZER = {"learning_rate": 1e-3, "schedule": "constant", "eps": 1e-5,
                     "grad_clip": 0.5}


def ent_mode_index(name: str) -> Array:
  """The int32 index of an entropy-coefficient mode name."""
  return aes_plumbing.mode_index(ENT_MODES, name, "entropy mode")


@dataclasses.dataclass(frozen=True)
class PPOConfig(aes_plumbing.AESKnobs, aes_plumbing.NetworkDtypes):
  """PPO settings; an update = one rollout of `num_envs * num_steps` steps.

  The `aes_*` fields come from `aes_plumbing.AESKnobs` (PPO's tracker sees one
  rollout per update, so its EMAs decay faster); AES's reference weight is
  `ent_coef`. `dtype` and `param_dtype` (from `aes_plumbing.NetworkDtypes`) set
  the actor-critic's.

  `validate` (run by `make_train`) requires, besides positive int counts, finite
  floats with `0 <= gamma <= 1`, `0 <= gae_lambda <= 1`, `clip_eps > 0`,
  `vf_coef >= 0` and `ent_coef > 0` (AES's reference weight, which its modes
  scale). The optimizer is `make_train`'s `optimizer` argument.
  """
  num_envs: int = 8
  num_steps: int = 64
  total_updates: int = 200
  num_evals: int = 20
  eval_envs: int = 8
  update_epochs: int = 4
  num_minibatches: int = 4
  gamma: float = 0.99
  gae_lambda: float = 0.95
  clip_eps: float = 0.2
  vf_coef: float = 0.5
  ent_coef: float = 0.01
  hidden: int = 64
  aes_fast_decay: float = 0.8
  aes_slow_decay: float = 0.98

  @property
  def total_env_steps(self) -> int:
    """Vectorised environment steps = length of a drift schedule."""
    return self.total_updates * self.num_steps

  @property
  def num_gradient_steps(self) -> int:
    """Optimizer updates in a run: `update_epochs` x `num_minibatches` per update."""
    return self.total_updates * self.update_epochs * self.num_minibatches

  def validate(self) -> None:
    """ValueError, naming the field and its value, for an out-of-range setting."""
    self._check_counts(("num_envs", "num_steps", "total_updates", "num_evals", "eval_envs",
                        "update_epochs", "num_minibatches", "hidden"),
                       "total_updates", "num_evals")
    self.network_dtypes()
    for name in ("gamma", "gae_lambda"):
      self._check_float(name, 0.0, 1.0)
    for name in ("clip_eps", "ent_coef"):
      self._check_float(name, 0.0, open_low=True)
    self._check_float("vf_coef", 0.0)
    if (self.num_envs * self.num_steps) % self.num_minibatches:
      raise ValueError("PPOConfig.num_envs * num_steps must be divisible by "
                       f"num_minibatches ({self.num_minibatches})")


def orthogonal_init(scale: float = 1.0):
  """A Haar-orthogonal kernel initializer (as `nn.initializers.orthogonal`) in plain jnp.

  The `[rows, cols]` kernel is the Q factor, with a positive-diagonal R, of a
  standard normal matrix, computed by twice-iterated Gram-Schmidt rather than
  LAPACK: XLA:CPU runs batched LAPACK QR (what `vmap` over seeds makes of the
  stock initializer) on its intra-op thread pool, and two of them at once can
  deadlock a 2-thread pool.
  """
  def init(key, shape, dtype=jnp.float32):
    if len(shape) != 2:
      raise ValueError(f"orthogonal_init needs a 2-D kernel shape, got {shape}")
    rows, cols = shape
    tall = rows >= cols
    m, k = (rows, cols) if tall else (cols, rows)
    a = jax.random.normal(key, (m, k), jnp.float32)

    def column(j, q):
      v = a[:, j]
      for _ in range(2):  # "twice is enough" for orthogonality in float32
        v = v - q @ (q.T @ v)
      return q.at[:, j].set(v / jnp.linalg.norm(v))

    q = jax.lax.fori_loop(0, k, column, jnp.zeros((m, k), jnp.float32))
    return (scale * (q if tall else q.T)).astype(dtype)
  return init


class ActorCritic(nn.Module):
  """Separate tanh MLPs: returns (logits [..., num_actions], value [...]).

  `dtype` is the computation dtype and `param_dtype` the weights' (float32 by
  default), as in `flax.linen.Dense`.
  """
  num_actions: int
  hidden: int = 64
  dtype: DTypeLike | None = None
  param_dtype: DTypeLike = jnp.float32

  @nn.compact
  def __call__(self, obs):
    ortho = orthogonal_init
    kw = dict(bias_init=nn.initializers.zeros, dtype=self.dtype, param_dtype=self.param_dtype)
    h = obs
    for _ in range(2):
      h = nn.tanh(nn.Dense(self.hidden, kernel_init=ortho(math.sqrt(2)), **kw)(h))
    logits = nn.Dense(self.num_actions, kernel_init=ortho(0.01), **kw)(h)
    v = obs
    for _ in range(2):
      v = nn.tanh(nn.Dense(self.hidden, kernel_init=ortho(math.sqrt(2)), **kw)(v))
    v = nn.Dense(1, kernel_init=ortho(1.0), **kw)(v)
    return logits, v[..., 0]


class PPOState(NamedTuple):
  """Everything that changes during training."""
  params: Array  # flat parameter vector
  opt: Any
  sched: aes_lib.AESState
  env_state: Any
  obs: Array
  ep_return: Array
  key: Array


class TrainOutput(NamedTuple):
  """The final state and the metrics at each evaluation."""
  state: PPOState
  metrics: dict[str, Array]  # each [num_evals]


def make_train(env: Any, config: PPOConfig, drift: Drift | None = None,
               optimizer: Any = None) -> Callable[[Array, Array], TrainOutput]:
  """Builds `train(key, ent_mode) -> TrainOutput` (pure; jit and vmap it).

  Args:
    env: a discrete-action `jaxlab.rl.envs` environment.
    config: `PPOConfig`.
    drift: optional `Drift` with `config.total_env_steps` levels.
    optimizer: the config's `optimizer` section (a ConfigDict or mapping; its
      top level, sections aside), built by `jaxlab.train.optimizer` over
      `config.num_gradient_steps`; None: `DEFAULT_OPTIMIZER`.

  Returns:
    `train(key, ent_mode)` with `ent_mode` from `ent_mode_index`. Metrics, one
    entry per evaluation: "step" (vectorised env steps so far), "eval_return"
    (greedy policy, `eval_envs` episodes under the current params),
    "train_return", "ent_coef", "lam" / "lam_sqrt" (the AES weight under each
    rule), "proxy", "entropy" (window means) and
    "drift_level".
  """
  config.validate()
  if not env.num_actions:
    raise ValueError(f"PPO here needs a discrete-action env, got {env.name}")
  denv = aes_plumbing.DriftingEnv(env, drift, config.total_env_steps,
                                  "config.total_env_steps")
  params_at = denv.params_at
  n, ns = config.num_envs, config.num_steps
  # Built first: a bad optimizer key fails before any network is initialised.
  tx = build_optimizer(DEFAULT_OPTIMIZER if optimizer is None else optimizer,
                       config.num_gradient_steps)
  net = ActorCritic(env.num_actions, config.hidden, **config.network_dtypes())
  _, unravel = ravel_pytree(net.init(jax.random.key(0),
                                     jnp.zeros((env.obs_dim,))))
  sched = aes_plumbing.AESWeights(config.ent_coef, config)
  per_eval = config.total_updates // config.num_evals
  mb = n * ns // config.num_minibatches

  def apply(flat, obs):
    # float32 outputs: the log-softmax and value loss stay float32 under a bf16 `config.dtype`.
    return jax.tree.map(lambda x: x.astype(jnp.float32), net.apply(unravel(flat), obs))

  def init(key):
    k_p, k_env, key = jax.random.split(key, 3)
    flat = ravel_pytree(net.init(k_p, jnp.zeros((env.obs_dim,))))[0]
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
        jax.random.split(k_env, n), params_at(0))
    return PPOState(flat, tx.init(flat), sched.init(), env_state, obs,
                    jnp.zeros((n,)), key)

  def rollout_step(s: PPOState, t):
    key, k_act, k_env = jax.random.split(s.key, 3)
    logits, value = apply(s.params, s.obs)
    action = jax.random.categorical(k_act, logits)
    logp = jax.nn.log_softmax(logits)[jnp.arange(n), action]
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
        jax.random.split(k_env, n), s.env_state, action, params_at(t))
    _, v_final = apply(s.params, step.final_obs)
    # Truncation is not termination: bootstrap from the final observation.
    reward = step.reward + config.gamma * jnp.where(step.truncated, v_final, 0.)
    done = step.terminated | step.truncated
    ep = s.ep_return + step.reward
    tr = dict(obs=s.obs, action=action, logp=logp, value=value, reward=reward,
              done=done.astype(jnp.float32), ret_sum=jnp.where(done, ep, 0.0),
              ret_cnt=done.astype(jnp.float32))
    s = s._replace(env_state=step.state, obs=step.obs,
                   ep_return=jnp.where(done, 0.0, ep), key=key)
    return s, tr

  def gae(traj, last_value):
    def body(carry, x):
      next_adv, next_value = carry
      nonterm = 1.0 - x["done"]
      delta = x["reward"] + config.gamma * next_value * nonterm - x["value"]
      adv = delta + config.gamma * config.gae_lambda * nonterm * next_adv
      return (adv, x["value"]), (adv, delta)

    _, (adv, delta) = jax.lax.scan(
        body, (jnp.zeros_like(last_value), last_value), traj, reverse=True)
    return adv, adv + traj["value"], delta

  def loss_fn(flat, batch, ent_coef):
    logits, value = apply(flat, batch["obs"])
    logp_all = jax.nn.log_softmax(logits)
    logp = jnp.take_along_axis(logp_all, batch["action"][:, None], 1)[:, 0]
    ratio = jnp.exp(logp - batch["logp"])
    adv = batch["adv"]
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg = -jnp.mean(jnp.minimum(
        ratio * adv,
        jnp.clip(ratio, 1 - config.clip_eps, 1 + config.clip_eps) * adv))
    v_clip = batch["value"] + jnp.clip(value - batch["value"],
                                       -config.clip_eps, config.clip_eps)
    v_loss = 0.5 * jnp.mean(jnp.maximum((value - batch["ret"]) ** 2,
                                        (v_clip - batch["ret"]) ** 2))
    entropy = -jnp.mean(jnp.sum(jnp.exp(logp_all) * logp_all, -1))
    return pg + config.vf_coef * v_loss - ent_coef * entropy, entropy

  def iteration(s: PPOState, u, mode):
    ts = u * ns + jnp.arange(ns)
    s, traj = jax.lax.scan(rollout_step, s, ts)
    ret_sum, ret_cnt = jnp.sum(traj.pop("ret_sum")), jnp.sum(
        traj.pop("ret_cnt"))
    _, last_value = apply(s.params, s.obs)
    adv, ret, delta = gae(traj, last_value)
    lams, sched_state = sched.update(s.sched, delta)
    ent_coef = aes_plumbing.select(mode, ENT_MODES, dict(
        fixed=config.ent_coef, **aes_plumbing.aes_values(lams)))
    data = dict(traj, adv=adv, ret=ret)
    data = jax.tree.map(lambda x: x.reshape((n * ns,) + x.shape[2:]), data)
    data.pop("reward"), data.pop("done")

    def epoch(carry, k):
      flat, opt = carry
      perm = jax.random.permutation(k, n * ns)
      batches = jax.tree.map(
          lambda x: x[perm].reshape((config.num_minibatches, mb) + x.shape[1:]),
          data)

      def minibatch(carry, batch):
        flat, opt = carry
        (_, ent), grad = jax.value_and_grad(loss_fn, has_aux=True)(
            flat, batch, ent_coef)
        upd, opt = tx.update(grad, opt, flat)
        return (optax.apply_updates(flat, upd), opt), ent

      return jax.lax.scan(minibatch, (flat, opt), batches)

    key, k_ep = jax.random.split(s.key)
    (flat, opt), ents = jax.lax.scan(
        epoch, (s.params, s.opt), jax.random.split(k_ep, config.update_epochs))
    s = s._replace(params=flat, opt=opt, sched=sched_state, key=key)
    info = dict(ent_coef=ent_coef, lam=lams["offset"], lam_sqrt=lams["sqrt"],
                proxy=sched_state.proxy,
                entropy=jnp.mean(ents), ret_sum=ret_sum, ret_cnt=ret_cnt)
    return s, info

  def train(key: Array, ent_mode: Array) -> TrainOutput:
    mode = jnp.asarray(ent_mode, jnp.int32)
    state = init(key)

    def chunk(s, c):
      us = c * per_eval + jnp.arange(per_eval)
      s, infos = jax.lax.scan(lambda s, u: iteration(s, u, mode), s, us)
      t_end = (c + 1) * per_eval * ns - 1

      def policy(obs):
        return jnp.argmax(apply(s.params, obs)[0], axis=-1)

      key, out = denv.evaluate(s.key, policy, t_end, infos, config.eval_envs)
      return s._replace(key=key), out

    state, metrics = jax.lax.scan(chunk, state, jnp.arange(config.num_evals))
    return TrainOutput(state, metrics)

  return train
