"""AES: adaptive entropy scheduling under environment drift.

Command:
  python -m launch.main --config=configs/aes.py:quick --workdir=runs/aes

Presets:
  smoke  Pendulum SAC, abrupt drift, 3 arms x 3 seeds, a few hundred steps
         (pipeline check only; ~20 s on 2 cores, mostly compilation).
  quick  Pendulum SAC, abrupt drift (actuator polarity flipped at T/3 and
         back at 2T/3), fixed alpha / auto-alpha / AES, 3 seeds vmapped,
         12k vector steps each (~3 min on 2 unloaded cores).
  full   adds AES-as-target-entropy, all four drift modes, CartPole PPO
         (fixed entropy coefficient vs AES; abrupt: force sign flip) and the
         2-D multi-goal env (goal ring rotated by 45 degrees); 5 seeds (~1 h).

Drift (jaxlab interpretation): each task has `abrupt_deltas` (used by the
abrupt mode) and `deltas` (ramp / periodic / random walk). Pendulum's abrupt
drift sets m = 1 -> -1: m enters gymnax's Pendulum dynamics only through the
control gain 3 / (m l^2), so this is an actuator polarity flip; the smooth
modes raise g by 5 and m by 0.5 (the flip would pass through m = 0).

Expected result: recovery time (% of training) and degradation per arm with
mean +- std over seeds; the report states whether AES recovers faster than
both baselines (the paper: about 2x faster) from the measured numbers.
"""

import ml_collections

import jaxlab.presets


def _sac(**kw):
  base = dict(num_envs=4, total_steps=12_000, learning_starts=250,
              num_evals=80, eval_envs=8, buffer_size=8_000, batch_size=128,
              hidden=64, num_layers=2, gamma=0.99, tau=0.005, alpha=0.1,
              target_entropy_scale=0.5, target_entropy_max=0.0, aes_kappa=4.0,
              aes_quantile=0.9, aes_fast_decay=0.99, aes_slow_decay=0.999,
              aes_lambda_max=1.0)
  base.update(kw)
  return ml_collections.ConfigDict(base)


def _ppo(**kw):
  base = dict(num_envs=8, num_steps=64, total_updates=300, num_evals=30,
              eval_envs=8, update_epochs=4, num_minibatches=4,
              gamma=0.99, gae_lambda=0.95, clip_eps=0.2, vf_coef=0.5,
              ent_coef=0.01, max_grad_norm=0.5, hidden=64, aes_kappa=4.0,
              aes_quantile=0.9, aes_fast_decay=0.8, aes_slow_decay=0.98,
              aes_lambda_max=0.1)
  base.update(kw)
  return ml_collections.ConfigDict(base)


def get_config(arg=None):
  preset = jaxlab.presets.parse_preset(arg)
  config = ml_collections.ConfigDict()
  config.experiment = "aes"
  config.preset = preset
  config.seed = 0
  config.num_seeds = 3
  # Comma-separated; tasks are the sub-configs below.
  config.tasks = "pendulum"
  config.drift_modes = "abrupt"
  # Learning rates of every task: SAC's three Adams (actor, critic, temperature)
  # and PPO's single Adam (`optimizer.learning_rate`).
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=1e-3, schedule="constant",
      actor=dict(learning_rate=1e-3), critic=dict(learning_rate=1e-3),
      alpha=dict(learning_rate=1e-3)))

  # Drift schedule (jaxlab interpretation of the paper's drift modes).
  config.drift = ml_collections.ConfigDict(dict(
      start=1 / 3, end=2 / 3, period=0.25, sigma=0.25, drift_seed=1234))
  # Metric settings (see jaxlab.rl.metrics).
  config.metrics = ml_collections.ConfigDict(dict(
      pre_window=0.05, smooth=3, threshold=0.9, settle=1 / 6,
      drift_window=0.1))
  # AES counts as faster when baseline / AES recovery time >= this ratio.
  config.faster_ratio = 1.5

  config.pendulum = ml_collections.ConfigDict(dict(
      env="pendulum", algo="sac", arms="fixed,auto,aes",
      abrupt_deltas=ml_collections.ConfigDict(dict(m=-2.0)),
      deltas=ml_collections.ConfigDict(dict(g=5.0, m=0.5)),
      return_low=-1600.0, return_high=-100.0, sac=_sac()))
  config.cartpole = ml_collections.ConfigDict(dict(
      env="cartpole", algo="ppo", arms="fixed,aes",
      abrupt_deltas=ml_collections.ConfigDict(dict(force_mag=-20.0)),
      deltas=ml_collections.ConfigDict(dict(length=0.5, force_mag=-5.0)),
      return_low=0.0, return_high=500.0, ppo=_ppo()))
  config.multigoal = ml_collections.ConfigDict(dict(
      env="multigoal", algo="sac", arms="fixed,auto,aes",
      abrupt_deltas=ml_collections.ConfigDict(dict(
          goal_angle=0.7853981633974483)),
      deltas=ml_collections.ConfigDict(dict(goal_angle=0.7853981633974483)),
      return_low=-60.0, return_high=-5.0,
      sac=_sac(total_steps=6_000, num_evals=60, learning_starts=200)))

  if preset == "smoke":
    config.pendulum.sac.total_steps = 600
    config.pendulum.sac.num_evals = 12
    config.pendulum.sac.learning_starts = 50
    config.pendulum.sac.buffer_size = 2_400
    config.pendulum.sac.eval_envs = 2
  elif preset == "full":
    config.num_seeds = 5
    config.tasks = "pendulum,cartpole,multigoal"
    config.drift_modes = "abrupt,ramp,periodic,random_walk"
    config.pendulum.arms = "fixed,auto,aes,aes_target"
    config.multigoal.arms = "fixed,auto,aes,aes_target"
  return config
