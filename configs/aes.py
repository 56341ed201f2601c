"""AES: adaptive entropy scheduling under environment drift.

Command:
  python -m launch.main --config=configs/aes.py:quick --workdir=runs/aes

Presets:
  smoke  Pendulum SAC, abrupt drift, 4 arms x 2 seeds, a few hundred steps
         (pipeline check only, mostly compilation).
  quick  Pendulum SAC, abrupt drift (actuator polarity flipped at T/3 and
         back at 2T/3), fixed alpha / auto-alpha / AES under both square-root
         rules, 3 paired seeds vmapped, 12k vector steps each.
  full   adds AES-as-target-entropy, all four drift modes, CartPole PPO
         (fixed entropy coefficient vs AES; abrupt: force sign flip) and the
         2-D multi-goal env (goal ring rotated by 45 degrees); 5 seeds (~1 h).

AES rules (`aes_rule` selects the judged arm; both are run and reported):
"offset" = arm "aes", lambda_0 sqrt(1 + kappa d_t); "sqrt" = arm "aes_sqrt",
lambda_0 sqrt(d_t / d_ref) clipped (see jaxlab.rl.aes_scheduler).

Criteria (declared below, judged by jaxlab.report on paired seeds): each
compares the judged AES arm with one baseline (fixed and auto temperature),
per seed pooled over every task and drift mode run in which both arms ran
(recovery: geometric mean over runs; degradation / nAUC: arithmetic mean).
Recovery and degradation exist only where the drift has abrupt change points.

Drift (jaxlab interpretation): each task has `abrupt_deltas` (used by the
abrupt mode) and `deltas` (ramp / periodic / random walk). Pendulum's abrupt
drift sets m = 1 -> -1: m enters gymnax's Pendulum dynamics only through the
control gain 3 / (m l^2), so this is an actuator polarity flip; the smooth
modes raise g by 5 and m by 0.5 (the flip would pass through m = 0).

Expected result (paper): AES recovers about 2x faster than fixed / auto
temperature after abrupt changes and loses less performance to drift.
"""

import ml_collections

import jaxlab.presets


def _network_dtypes():
  # The networks' computation / weight dtypes (e.g. --config.pendulum.sac.dtype=bfloat16);
  # None computes in the weights' dtype.
  return dict(dtype=ml_collections.config_dict.placeholder(str), param_dtype="float32")


def _sac(**kw):
  base = dict(num_envs=4, total_steps=12_000, learning_starts=250,
              num_evals=80, eval_envs=8, buffer_size=8_000, batch_size=128,
              hidden=64, num_layers=2, gamma=0.99, tau=0.005, alpha=0.1,
              target_entropy_scale=0.5, target_entropy_max=0.0, aes_kappa=4.0,
              aes_quantile=0.9, aes_fast_decay=0.99, aes_slow_decay=0.999,
              aes_lambda_max=1.0, **_network_dtypes())
  base.update(kw)
  return ml_collections.ConfigDict(base)


def _ppo(**kw):
  base = dict(num_envs=8, num_steps=64, total_updates=300, num_evals=30,
              eval_envs=8, update_epochs=4, num_minibatches=4,
              gamma=0.99, gae_lambda=0.95, clip_eps=0.2, vf_coef=0.5,
              ent_coef=0.01, hidden=64, aes_kappa=4.0,
              aes_quantile=0.9, aes_fast_decay=0.8, aes_slow_decay=0.98,
              aes_lambda_max=0.1, **_network_dtypes())
  base.update(kw)
  return ml_collections.ConfigDict(base)


def get_config(arg=None):
  preset = jaxlab.presets.parse_preset(arg)
  config = ml_collections.ConfigDict()
  config.experiment = "aes"
  config.preset = preset
  # Paired seeds: every arm of a run trains on the same seeds.
  config.seeds = (0, 1, 2)
  # Which square-root rule the primary criteria judge ("offset" or "sqrt");
  # the other rule's arm is reported with secondary criteria.
  config.aes_rule = "offset"
  config.criteria = ml_collections.ConfigDict()
  rec_claim = ('"recovers faster after abrupt changes" (target from the spec: '
               '"~2x faster" than {b})')
  deg_claim = ('"AES lowers the fraction of performance lost to drift" '
               '(vs {b})')
  for b, name in (("fixed", "fixed alpha / ent. coef."), ("auto", "auto-alpha")):
    for prefix, primary, who in (("", True, "judged AES rule"),
                                 ("alt_", False, "the other AES rule")):
      config.criteria[f"{prefix}recovery_vs_{b}"] = dict(
          claim=rec_claim.format(b=name) + ("" if primary else f"; {who}"),
          metric="recovery time after each abrupt change, % of training",
          direction="lower", threshold=2.0, kind="ratio", primary=primary,
          unit="% of T", mechanism=True)  # the same agent; only the temperature rule differs
      config.criteria[f"{prefix}degradation_vs_{b}"] = dict(
          claim=deg_claim.format(b=name) + ("" if primary else f"; {who}"),
          metric="degradation after each abrupt change (fraction of pre-drift "
                 "normalised return lost)",
          direction="lower", threshold=0.0, primary=primary, unit="", mechanism=True)
    # Smooth drift modes have no change point: nAUC under drift is the only
    # measure there (a diagnostic, not the paper's headline metric).
    config.criteria[f"nauc_drift_vs_{b}"] = dict(
        claim=deg_claim.format(b=name) + "; normalised return while drifting",
        metric="nAUC(drift): mean normalised return within 10% of T after a "
               "level change", direction="higher", threshold=0.0, primary=False)
  # Comma-separated; tasks are the sub-configs below.
  config.tasks = "pendulum"
  config.drift_modes = "abrupt"
  # Every task's optimizers (jaxlab.train.optimizer): the top level is PPO's single Adam
  # (purejaxrl's eps 1e-5 and global-norm clip 0.5); SAC's three Adams (actor, critic,
  # temperature) are the sections, which inherit only the top level's schedule keys
  # (jaxlab.rl.sac): no clip, optax's eps.
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=1e-3, schedule="constant", eps=1e-5, grad_clip=0.5,
      actor=dict(learning_rate=1e-3), critic=dict(learning_rate=1e-3),
      alpha=dict(learning_rate=1e-3)))

  # Drift schedule (jaxlab interpretation of the paper's drift modes).
  config.drift = ml_collections.ConfigDict(dict(
      start=1 / 3, end=2 / 3, period=0.25, sigma=0.25, drift_seed=1234))
  # Metric settings (see jaxlab.rl.metrics).
  config.metrics = ml_collections.ConfigDict(dict(
      pre_window=0.05, smooth=3, threshold=0.9, settle=1 / 6,
      drift_window=0.1))

  config.pendulum = ml_collections.ConfigDict(dict(
      env="pendulum", algo="sac", arms="fixed,auto,aes,aes_sqrt",
      abrupt_deltas=ml_collections.ConfigDict(dict(m=-2.0)),
      deltas=ml_collections.ConfigDict(dict(g=5.0, m=0.5)),
      return_low=-1600.0, return_high=-100.0, sac=_sac()))
  config.cartpole = ml_collections.ConfigDict(dict(
      env="cartpole", algo="ppo", arms="fixed,aes,aes_sqrt",
      abrupt_deltas=ml_collections.ConfigDict(dict(force_mag=-20.0)),
      deltas=ml_collections.ConfigDict(dict(length=0.5, force_mag=-5.0)),
      return_low=0.0, return_high=500.0, ppo=_ppo()))
  config.multigoal = ml_collections.ConfigDict(dict(
      env="multigoal", algo="sac", arms="fixed,auto,aes,aes_sqrt",
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
    config.seeds = (0, 1)
  elif preset == "full":
    config.seeds = (0, 1, 2, 3, 4)
    config.tasks = "pendulum,cartpole,multigoal"
    config.drift_modes = "abrupt,ramp,periodic,random_walk"
    config.pendulum.arms = "fixed,auto,aes,aes_sqrt,aes_target"
    config.multigoal.arms = "fixed,auto,aes,aes_sqrt,aes_target"
  return config
