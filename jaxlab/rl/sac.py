"""Soft Actor-Critic with a fixed, learned (auto) or AES-scheduled temperature.

The whole training run is one jitted function: vectorised environments,
a replay buffer in the scan carry, and `lax.scan` over environment steps, so
`jax.vmap(train)` over seeds (and over temperature modes, which are a traced
integer) trains many agents at once.

Temperature modes (`ALPHA_MODES`, selected by the traced `alpha_mode` index):

  * "fixed":      alpha = `config.alpha`.
  * "auto":       alpha = exp(log_alpha), learned towards the target entropy
                  `H_0` (default `-action_dim`), as in SAC v2.
  * "aes":        alpha = lambda_t from `aes_scheduler(config.alpha, ...)` fed
                  with each minibatch's critic TD errors (AES as temperature,
                  the "offset" rule lambda_0 sqrt(1 + kappa d_t)).
  * "aes_sqrt":   the same tracker under the plain square-root rule
                  lambda_0 sqrt(d_t / d_ref), clipped (below lambda_0 when the
                  drift proxy is small; `jaxlab.rl.aes_scheduler`).
  * "aes_target": auto-alpha whose target entropy follows the AES tracker,
                  `H_t = min(H_0 + target_entropy_scale * (lambda_t / alpha - 1),
                  target_entropy_max)` (jaxlab interpretation of the paper's
                  "target-entropy schedule" variant; the scale and cap are
                  knobs).

The TD errors given to AES are `mean(Q1, Q2) - y` on the critic minibatch.

The three networks (actor, critic, temperature) each have an optimizer, built by
`jaxlab.train.optimizer` from the sections `optimizer.actor`, `optimizer.critic`
and `optimizer.alpha` of the config's `optimizer`. A section inherits only the
schedule keys of the top level (`SCHEDULE_KEYS`: the learning rate and its
schedule): the top level may be another trainer's (PPO's clipped Adam in the aes
config), whose clip and eps SAC's Adams never had.

The AES plumbing (knobs, mode selection, drifting env, evaluation) is shared
with PPO: `jaxlab.rl.aes_plumbing`.

Example:
  >>> import jax
  >>> from jaxlab.rl import envs, sac
  >>> env = envs.Pendulum()
  >>> cfg = sac.SACConfig(total_steps=200, num_evals=2, learning_starts=50)
  >>> train = jax.jit(sac.make_train(env, cfg))
  >>> out = train(jax.random.key(0), sac.alpha_mode_index("aes"))
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
from jaxlab.train.optimizers import SCHEDULE_KEYS
from jaxlab.train.optimizers import optimizer as build_optimizer

ALPHA_MODES = ("fixed", "auto", "aes", "aes_target", "aes_sqrt")
# The networks' optimizer sections, `optimizer.<network>`.
NETWORKS = ("actor", "critic", "alpha")
# Adam at a constant 1e-3 for each network, what `make_train` builds without an `optimizer`.
DEFAULT_OPTIMIZER = {"learning_rate": 1e-3, "schedule": "constant",
                     **{net: {} for net in NETWORKS}}


def alpha_mode_index(name: str) -> Array:
  """The int32 index of a temperature mode name (for `train(key, mode)`)."""
  return aes_plumbing.mode_index(ALPHA_MODES, name, "alpha mode")


@dataclasses.dataclass(frozen=True)
class SACConfig(aes_plumbing.AESKnobs, aes_plumbing.NetworkDtypes):
  """SAC settings. Steps count vectorised environment steps.

  Each step adds `num_envs` transitions and does one gradient update (after
  `learning_starts` steps of uniform random actions). The `aes_*` fields come
  from `aes_plumbing.AESKnobs`; AES's reference weight is `alpha`. `dtype` and
  `param_dtype` (from `aes_plumbing.NetworkDtypes`) set the actor's and critics'.
  `validate` (run by `make_train`) also requires `0 < tau <= 1` and
  `0 <= gamma < 1`. The optimizers are `make_train`'s `optimizer` argument.
  """
  num_envs: int = 4
  total_steps: int = 12_000
  learning_starts: int = 250
  num_evals: int = 60
  eval_envs: int = 8
  buffer_size: int = 50_000
  batch_size: int = 128
  hidden: int = 64
  num_layers: int = 2
  gamma: float = 0.99
  tau: float = 0.005
  alpha: float = 0.1
  target_entropy: float | None = None
  target_entropy_scale: float = 0.5
  target_entropy_max: float = 0.0

  def validate(self) -> None:
    """ValueError, naming the field and its value, for an out-of-range setting."""
    self._check_counts(("num_envs", "total_steps", "num_evals", "eval_envs", "buffer_size",
                        "batch_size", "hidden", "num_layers"), "total_steps", "num_evals")
    self.network_dtypes()
    if not 0 <= self.learning_starts < self.total_steps:
      raise ValueError("SACConfig.learning_starts must be in [0, total_steps)"
                       f", got {self.learning_starts!r}")
    if not 0.0 < self.tau <= 1.0 or not 0.0 <= self.gamma < 1.0:
      raise ValueError(f"need 0 < tau <= 1 and 0 <= gamma < 1, got tau="
                       f"{self.tau!r}, gamma={self.gamma!r}")


class _MLP(nn.Module):
  hidden: int
  num_layers: int
  out: int
  dtype: DTypeLike | None = None
  param_dtype: DTypeLike = jnp.float32

  @nn.compact
  def __call__(self, x):
    kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    for _ in range(self.num_layers):
      x = nn.relu(nn.Dense(self.hidden, **kw)(x))
    return nn.Dense(self.out, **kw)(x)


class Actor(nn.Module):
  """Tanh-squashed Gaussian policy: returns (mean, log_std), each [..., A].

  `dtype` is the computation dtype and `param_dtype` the weights' (float32 by
  default), as in `flax.linen.Dense`; the same pair is on `DoubleCritic`.
  """
  action_dim: int
  hidden: int = 64
  num_layers: int = 2
  dtype: DTypeLike | None = None
  param_dtype: DTypeLike = jnp.float32

  @nn.compact
  def __call__(self, obs):
    h = _MLP(self.hidden, self.num_layers, 2 * self.action_dim, self.dtype,
             self.param_dtype)(obs)
    mean, log_std = jnp.split(h, 2, axis=-1)
    log_std = -5.0 + 3.5 * (jnp.tanh(log_std) + 1.0)  # in [-5, 2]
    return mean, log_std


class DoubleCritic(nn.Module):
  """Two Q networks; returns [2, ...] Q values."""
  hidden: int = 64
  num_layers: int = 2
  dtype: DTypeLike | None = None
  param_dtype: DTypeLike = jnp.float32

  @nn.compact
  def __call__(self, obs, action):
    x = jnp.concatenate([obs, action], axis=-1)
    qs = [_MLP(self.hidden, self.num_layers, 1, self.dtype, self.param_dtype)(x)[..., 0]
          for _ in range(2)]
    return jnp.stack(qs)


def _float32(tree):
  return jax.tree.map(lambda x: x.astype(jnp.float32), tree)


def sample_action(mean: Array, log_std: Array, key: Array
                  ) -> tuple[Array, Array]:
  """Samples a = tanh(mean + std * eps); returns (a [..., A], log_prob [...])."""
  eps = jax.random.normal(key, mean.shape)
  pre = mean + jnp.exp(log_std) * eps
  a = jnp.tanh(pre)
  logp = -0.5 * eps ** 2 - log_std - 0.5 * math.log(2 * math.pi)
  # log(1 - tanh(x)^2) = 2 * (log 2 - x - softplus(-2x)), stable for large |x|.
  logp = logp - 2.0 * (math.log(2.0) - pre - jax.nn.softplus(-2.0 * pre))
  return a, jnp.sum(logp, axis=-1)


class Buffer(NamedTuple):
  """The replay buffer: transitions in a fixed-size ring, one row per slot."""
  obs: Array
  action: Array
  reward: Array
  next_obs: Array
  terminated: Array


class SACState(NamedTuple):
  """Everything that changes during training."""
  actor: Any
  critic: Any
  target: Any
  actor_opt: Any
  critic_opt: Any
  log_alpha: Array
  alpha_opt: Any
  sched: aes_lib.AESState
  lams: dict[str, Array]  # lambda_t per AES rule after the last update
  buffer: Buffer
  env_state: Any
  obs: Array
  ep_return: Array
  key: Array


_LEARNED = ("actor", "critic", "target", "actor_opt", "critic_opt", "log_alpha",
            "alpha_opt", "sched", "lams")


def _initial_lams(sched: aes_plumbing.AESWeights) -> dict[str, Array]:
  # Before the first update: the rules' values at zero drift.
  return sched.update(sched.init(), jnp.ones((1,)))[0]


class TrainOutput(NamedTuple):
  """The final state and the metrics at each evaluation."""
  state: SACState
  metrics: dict[str, Array]  # each [num_evals]


def make_train(env: Any, config: SACConfig, drift: Drift | None = None,
               optimizer: Any = None) -> Callable[[Array, Array], TrainOutput]:
  """Builds `train(key, alpha_mode) -> TrainOutput` (pure; jit and vmap it).

  Args:
    env: a `jaxlab.rl.envs` continuous-action environment.
    config: `SACConfig`.
    drift: optional `Drift` whose schedule has `config.total_steps` levels; the
      env params at step t are `drift.params_at(t)`. None: stationary default
      params.
    optimizer: the config's `optimizer` section (a ConfigDict or mapping) with a
      section per network of `NETWORKS`, each built by `jaxlab.train.optimizer`
      over `total_steps - learning_starts` updates, inheriting only the top
      level's `SCHEDULE_KEYS`; None: `DEFAULT_OPTIMIZER`.

  Returns:
    `train(key, alpha_mode)`; `alpha_mode` an int32 scalar from
    `alpha_mode_index`. Metrics, one entry per evaluation (every
    `total_steps / num_evals` steps): "step", "eval_return" (deterministic
    policy, `eval_envs` episodes under the current params), "train_return"
    (mean return of training episodes finished in the window, NaN if none),
    "alpha", "lam" / "lam_sqrt" (the AES weight under each rule), "proxy", "entropy", "critic_loss", "td_quantile" (window
    means) and "drift_level".
  """
  config.validate()
  if env.num_actions:
    raise ValueError(f"SAC needs a continuous-action env, got {env.name}")
  denv = aes_plumbing.DriftingEnv(env, drift, config.total_steps, "config.total_steps")
  params_at = denv.params_at
  n, od, ad = config.num_envs, env.obs_dim, env.action_dim
  actor = Actor(ad, config.hidden, config.num_layers, **config.network_dtypes())
  critic = DoubleCritic(config.hidden, config.num_layers, **config.network_dtypes())
  actor_tx, critic_tx, alpha_tx = (
      build_optimizer(DEFAULT_OPTIMIZER if optimizer is None else optimizer,
                      config.total_steps - config.learning_starts, stage=net,
                      inherit=SCHEDULE_KEYS) for net in NETWORKS)
  sched = aes_plumbing.AESWeights(config.alpha, config)
  h0 = -float(ad) if config.target_entropy is None else config.target_entropy
  scale = env.action_scale
  steps_per_eval = config.total_steps // config.num_evals

  # Parameters live as flat vectors: one optimizer leaf per network keeps the
  # compiled program (and its compile time) small.
  _, a_unravel = ravel_pytree(actor.init(jax.random.key(0),
                                               jnp.zeros((od,))))
  _, c_unravel = ravel_pytree(critic.init(
      jax.random.key(0), jnp.zeros((od,)), jnp.zeros((ad,))))

  # float32 outputs: log-probabilities and TD targets stay float32 under a bf16 `config.dtype`.
  def actor_apply(flat, obs):
    return _float32(actor.apply(a_unravel(flat), obs))

  def critic_apply(flat, obs, action):
    return _float32(critic.apply(c_unravel(flat), obs, action))

  def init(key):
    k_a, k_c, k_env, key = jax.random.split(key, 4)
    a_params = ravel_pytree(actor.init(k_a, jnp.zeros((od,))))[0]
    c_params = ravel_pytree(critic.init(k_c, jnp.zeros((od,)),
                                        jnp.zeros((ad,))))[0]
    log_alpha = jnp.float32(math.log(config.alpha))
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
        jax.random.split(k_env, n), params_at(0))
    nb = config.buffer_size
    buf = Buffer(jnp.zeros((nb, od)), jnp.zeros((nb, ad)), jnp.zeros((nb,)),
                 jnp.zeros((nb, od)), jnp.zeros((nb,)))
    return SACState(a_params, c_params, c_params, actor_tx.init(a_params),
                    critic_tx.init(c_params), log_alpha,
                    alpha_tx.init(log_alpha), sched.init(), _initial_lams(sched), buf,
                    env_state, obs,
                    jnp.zeros((n,)), key)

  def select_alpha(mode, log_alpha, lams):
    learned = jnp.exp(log_alpha)
    return aes_plumbing.select(mode, ALPHA_MODES, dict(
        fixed=config.alpha, auto=learned, aes_target=learned, **aes_plumbing.aes_values(lams)))

  def update(s: SACState, mode, t):
    key, k_b, k_next, k_pi = jax.random.split(s.key, 4)
    size = jnp.minimum((t + 1) * n, config.buffer_size)
    idx = jax.random.randint(k_b, (config.batch_size,), 0, size)
    b = jax.tree.map(lambda x: x[idx], s.buffer)
    alpha = select_alpha(mode, s.log_alpha, s.lams)

    mean2, log_std2 = actor_apply(s.actor, b.next_obs)
    a2, logp2 = sample_action(mean2, log_std2, k_next)
    q_next = jnp.min(critic_apply(s.target, b.next_obs, a2), axis=0)
    y = b.reward + config.gamma * (1.0 - b.terminated) * (
        q_next - alpha * logp2)
    y = jax.lax.stop_gradient(y)

    def critic_loss(cp):
      q = critic_apply(cp, b.obs, b.action)
      return 0.5 * jnp.mean(jnp.sum((q - y) ** 2, axis=0)), jnp.mean(q, 0) - y

    (c_loss, td), c_grad = jax.value_and_grad(critic_loss, has_aux=True)(
        s.critic)
    c_upd, c_opt = critic_tx.update(c_grad, s.critic_opt, s.critic)
    c_params = optax.apply_updates(s.critic, c_upd)
    lams, sched_state = sched.update(s.sched, td)
    lam = lams["offset"]

    def actor_loss(ap):
      mean, log_std = actor_apply(ap, b.obs)
      a, logp = sample_action(mean, log_std, k_pi)
      q = jnp.min(critic_apply(c_params, b.obs, a), axis=0)
      return jnp.mean(alpha * logp - q), logp

    (_, logp), a_grad = jax.value_and_grad(actor_loss, has_aux=True)(s.actor)
    a_upd, a_opt = actor_tx.update(a_grad, s.actor_opt, s.actor)
    a_params = optax.apply_updates(s.actor, a_upd)

    target_h = jnp.where(
        mode == ALPHA_MODES.index("aes_target"),
        jnp.minimum(h0 + config.target_entropy_scale * (lam / config.alpha - 1),
                    jnp.maximum(config.target_entropy_max, h0)), h0)
    slack = jax.lax.stop_gradient(jnp.mean(logp) + target_h)
    al_grad = jax.grad(lambda la: -la * slack)(s.log_alpha)
    al_upd, al_opt = alpha_tx.update(al_grad, s.alpha_opt, s.log_alpha)
    log_alpha = optax.apply_updates(s.log_alpha, al_upd)
    target = optax.incremental_update(c_params, s.target, config.tau)
    new = s._replace(actor=a_params, critic=c_params, target=target,
                     actor_opt=a_opt, critic_opt=c_opt, log_alpha=log_alpha,
                     alpha_opt=al_opt, sched=sched_state, lams=lams, key=key)
    info = dict(alpha=alpha, lam=lam, lam_sqrt=lams["sqrt"], proxy=sched_state.proxy,
                entropy=-jnp.mean(logp), critic_loss=c_loss,
                td_quantile=sched_state.fast)
    return new, info

  def env_step(s: SACState, t):
    key, k_act, k_rand, k_env = jax.random.split(s.key, 4)
    mean, log_std = actor_apply(s.actor, s.obs)
    a, _ = sample_action(mean, log_std, k_act)
    a_rand = jax.random.uniform(k_rand, a.shape, minval=-1.0, maxval=1.0)
    a = jnp.where(t < config.learning_starts, a_rand, a)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
        jax.random.split(k_env, n), s.env_state, a * scale, params_at(t))
    pos = (t * n + jnp.arange(n)) % config.buffer_size
    buf = s.buffer
    buf = Buffer(buf.obs.at[pos].set(s.obs), buf.action.at[pos].set(a),
                 buf.reward.at[pos].set(step.reward),
                 buf.next_obs.at[pos].set(step.final_obs),
                 buf.terminated.at[pos].set(step.terminated.astype(jnp.float32)))
    done = step.terminated | step.truncated
    ep = s.ep_return + step.reward
    finished = (jnp.sum(jnp.where(done, ep, 0.0)), jnp.sum(done))
    s = s._replace(buffer=buf, env_state=step.state, obs=step.obs,
                   ep_return=jnp.where(done, 0.0, ep), key=key)
    return s, finished

  def train(key: Array, alpha_mode: Array) -> TrainOutput:
    mode = jnp.asarray(alpha_mode, jnp.int32)
    state = init(key)

    def one_step(s, t):
      s, (ret_sum, ret_cnt) = env_step(s, t)
      s_upd, info = update(s, mode, t)
      learn = t >= config.learning_starts
      # Select only the learned fields (never copy the replay buffer).
      sel = {f: jax.tree.map(lambda a, b: jnp.where(learn, a, b),
                             getattr(s_upd, f), getattr(s, f))
             for f in _LEARNED}
      s = s_upd._replace(**sel)
      return s, dict(info, ret_sum=ret_sum, ret_cnt=ret_cnt)

    def chunk(s, c):
      ts = c * steps_per_eval + jnp.arange(steps_per_eval)
      s, infos = jax.lax.scan(one_step, s, ts)
      t_end = (c + 1) * steps_per_eval - 1

      def policy(obs):
        mean, _ = actor_apply(s.actor, obs)
        return jnp.tanh(mean) * scale

      key, out = denv.evaluate(s.key, policy, t_end, infos, config.eval_envs)
      return s._replace(key=key), out

    state, metrics = jax.lax.scan(chunk, state, jnp.arange(config.num_evals))
    return TrainOutput(state, metrics)

  return train
