"""The OPL / G-OPL reproduction's pipeline: the arms of a sweep, trained and scored over seeds.

An arm is (G-OPL rank, OPL rank, λ_face) (`arm_table`): "none", OPL(k) and G-OPL(k) +
OPL(k) over k and λ_face. `ArmRunner` runs every arm through ONE compiled program (ranks
and λ_face are traced scalars; `jaxlab.privacy.training`); the seeds of an arm run inside
it with `lax.map` (jaxlab 0.10's batched CPU LAPACK kernels, which a vmap over seeds would
use for the QR, deadlocked on a 2-thread pool). Seeds are paired across arms: same world
draw, same initialisation, same minibatches, same probe subsample.
"""

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from scipy import special

from jaxlab.presets import split_names
from jaxlab.privacy import metrics, projection, training, world
from jaxlab.train import optimizer

METRICS = ("auc", "probe", "chance", "ssc", "ard")
FAMILIES = ("none", "opl", "gopl")


def arm_name(family: str, k: int = 0, lam: float = 0.0) -> str:
  """"none", "opl_k<k>" or "gopl_k<k>_l<λ>".

  Example:
    >>> arm_name("none"), arm_name("opl", 4), arm_name("gopl", 4, 1.0)
    ('none', 'opl_k4', 'gopl_k4_l1')
  """
  if family == "none":
    return "none"
  if family == "opl":
    return f"opl_k{k}"
  return f"gopl_k{k}_l{lam:g}"


def arm_table(config: ml_collections.ConfigDict) -> dict[str, tuple[int, int, float]]:
  """Arm name -> (G-OPL rank, OPL rank, λ_face), in report order.

  Example:
    >>> from launch.configs import load_config
    >>> arm_table(load_config("opl", "smoke"))
    {'none': (0, 0, 0.0), 'opl_k4': (0, 4, 0.0), 'gopl_k4_l1': (4, 4, 1.0)}
  """
  families = split_names(config.opl.arms)
  bad = [f for f in families if f not in FAMILIES]
  if bad or not families:
    raise ValueError(f"config.opl.arms must list families from {FAMILIES}, got {config.opl.arms!r}")
  ks, lams = [int(k) for k in config.opl.ks], [float(x) for x in config.opl.lambdas]
  if not ks or min(ks) < 1:
    raise ValueError(f"config.opl.ks must be positive ranks, got {config.opl.ks}")
  # The criteria judge these arms: one not run would leave every criterion silently unmeasured.
  if int(config.opl.small_k) not in ks:
    raise ValueError(f"config.opl.small_k={config.opl.small_k} must be one of "
                     f"config.opl.ks={ks}")
  if "gopl" in families and float(config.opl.criteria_lambda) not in lams:
    raise ValueError(f"config.opl.criteria_lambda={config.opl.criteria_lambda} must be one of "
                     f"config.opl.lambdas={lams}")
  arms = {}
  if "none" in families:
    arms["none"] = (0, 0, 0.0)
  for k in ks:
    if "opl" in families:
      arms[arm_name("opl", k)] = (0, k, 0.0)
    if "gopl" in families:
      for lam in lams:
        arms[arm_name("gopl", k, lam)] = (k, k, lam)
  return arms


def primary_arms(config: ml_collections.ConfigDict) -> list[str]:
  """The arms the primary criteria read: none, OPL(small_k), G-OPL(small_k, criteria_lambda).

  Example:
    >>> from launch.configs import load_config
    >>> primary_arms(load_config("opl", "smoke"))
    ['none', 'opl_k4', 'gopl_k4_l1']
  """
  k, lam = int(config.opl.small_k), float(config.opl.criteria_lambda)
  return ["none", arm_name("opl", k), arm_name("gopl", k, lam)]


def coupling_readings(config: ml_collections.ConfigDict) -> list[str]:
  """`world.face_coupling` (the default reading) then the other `opl.face_coupling_readings`.

  Example:
    >>> from launch.configs import load_config
    >>> coupling_readings(load_config("opl", "smoke"))
    ['risk_difference', 'phi']
  """
  readings = list(dict.fromkeys([config.world.face_coupling,
                                 *config.opl.face_coupling_readings]))
  bad = [r for r in readings if r not in world.FACE_COUPLINGS]
  if bad:
    raise ValueError(f"config.world.face_coupling / config.opl.face_coupling_readings must be "
                     f"in {world.FACE_COUPLINGS}, got {bad}")
  return readings


def world_config(config: ml_collections.ConfigDict) -> world.WorldConfig:
  """The simulated world of `config.world`.

  Example:
    >>> from launch.configs import load_config
    >>> world_config(load_config("opl", "smoke")).num_train
    48
  """
  return world.WorldConfig(**{**config.world.to_dict(),
                              "anomaly_len": tuple(config.world.anomaly_len)})


def train_config(config: ml_collections.ConfigDict) -> training.TrainConfig:
  """The training settings of `config.train` and `config.opl` (the optimizer is separate).

  Example:
    >>> from launch.configs import load_config
    >>> train_config(load_config("opl", "quick")).max_rank
    64
  """
  t, o = config.train, config.opl
  return training.TrainConfig(
      num_steps=t.num_steps, batch_size=t.batch_size, top_k=t.top_k, lam_orth=o.lam_orth,
      hidden=t.hidden, max_rank=max(int(k) for k in o.ks), mode=o.mode,
      opl_placement=o.opl_placement)


def arm_metrics(out: dict, arm: training.Arm, worlds: Sequence[world.World],
                probe_idx: Sequence[np.ndarray], tcfg: training.TrainConfig,
                eval_config: ml_collections.ConfigDict) -> dict[str, list]:
  """Per-seed metrics of one arm from its (numpy) test outputs [seeds, ...].

  Args:
    out: `training.evaluate`'s outputs stacked over seeds.
    arm: the arm.
    worlds: each seed's world.
    probe_idx: each seed's test snippets for the face probe.
    tcfg: the training settings.
    eval_config: `config.eval` (probe folds and C).

  Returns:
    metric (`METRICS`) -> per-seed values (SSC None without an input-level projection).

  Example:
    >>> from launch.configs import load_config                          # doctest: +SKIP
    >>> runner = ArmRunner(load_config("opl", "smoke"))                  # doctest: +SKIP
    >>> runner.run("none", (0, 0, 0.0))["metrics"]["auc"]                # doctest: +SKIP
  """
  rows = {m: [] for m in METRICS}
  for i, w in enumerate(worlds):
    o = {k: np.asarray(v[i]) for k, v in out.items()}
    rows["auc"].append(metrics.snippet_auc(o["logits"], w.test.snippet_labels))
    feats = o["private"].reshape(-1, o["private"].shape[-1])[probe_idx[i]]
    faces = w.test.faces.ravel()[probe_idx[i]]
    rows["probe"].append(metrics.face_probe_accuracy(
        feats, faces, folds=eval_config.probe_folds, c=eval_config.probe_c, seed=i))
    rows["chance"].append(metrics.chance_rate(faces))
    q = training.first_basis(o, arm, tcfg)
    rows["ssc"].append(None if q is None else float(projection.subspace_similarity(
        jnp.asarray(w.test.face_crops), jnp.asarray(q), jnp.asarray(w.test.faces))))
    rows["ard"].append(metrics.score_kl(special.expit(o["raw_logits"]).ravel(),
                                        special.expit(o["logits"]).ravel()))
  return rows


class ArmRunner:
  """Trains and scores arms over the config's seeds, one compiled program for all of them.

  Args:
    config: the experiment config (`seeds`, `world`, `train`, `optimizer`, `opl`, `eval`).

  Example:
    >>> from launch.configs import load_config
    >>> runner = ArmRunner(load_config("opl", "smoke"))
    >>> runner.tcfg.max_rank, runner.probe_n
    (4, 400)
  """

  def __init__(self, config: ml_collections.ConfigDict):
    self.config = config
    self.seeds = [int(s) for s in config.seeds]
    self.wcfg, self.tcfg = world_config(config), train_config(config)
    self.keys = jax.vmap(jax.random.key)(jnp.asarray(self.seeds))
    n_snip = self.wcfg.num_test * self.wcfg.num_snippets
    self.probe_n = min(int(config.eval.probe_samples), n_snip)
    self.probe_idx = [np.random.default_rng(s).choice(n_snip, self.probe_n, replace=False)
                      for s in self.seeds]
    tcfg, tx = self.tcfg, optimizer(config.optimizer, self.tcfg.num_steps)

    @jax.jit
    def run_seeds(data, test, keys, arm):
      def one(args):
        d, x, k = args
        params, curve = training.train(d, arm, k, tcfg, tx)
        return training.evaluate(params, x, arm, tcfg), curve[-1]
      return jax.lax.map(one, (data, test, keys))

    self._run_seeds = run_seeds

  @functools.lru_cache(maxsize=4)  # noqa: B019 (one runner per run; its worlds live as long)
  def worlds(self, face_coupling: str):
    """(worlds, stacked training arrays, stacked test features) at one coupling reading."""
    w_cfg = dataclasses.replace(self.wcfg, face_coupling=face_coupling)
    worlds = [world.make_world(w_cfg, s) for s in self.seeds]
    data = training.stack([training.as_arrays(w.train) for w in worlds])
    test = jnp.stack([jnp.asarray(w.test.features) for w in worlds])
    return worlds, data, test

  def run(self, settings: tuple[int, int, float], face_coupling: str | None = None
          ) -> dict[str, Any]:
    """One arm (G-OPL rank, OPL rank, λ_face) on every seed, at `face_coupling`.

    Returns:
      {"metrics": `arm_metrics`, "final_loss": loss term -> per-seed last training loss}.
    """
    worlds, data, test = self.worlds(face_coupling or self.wcfg.face_coupling)
    arm = training.make_arm(*settings)
    out, final = jax.device_get(self._run_seeds(data, test, self.keys, arm))
    rows = arm_metrics(out, arm, worlds, self.probe_idx, self.tcfg, self.config.eval)
    final = np.asarray(final)
    return dict(metrics=rows,
                final_loss={t: final[:, i].tolist() for i, t in enumerate(training.LOSS_TERMS)})


def draw_vs_k(table: dict, config: ml_collections.ConfigDict, metric: str, ylabel: str,
              title: str) -> Callable[[Any], None]:
  """A metric against k, one line per family (and λ_face), the unprojected arm dashed.

  Args:
    table: arm -> metric -> `seed_summary`.
    config: the experiment config (`opl.ks`, `opl.lambdas`).
    metric: a metric of `METRICS`.
    ylabel: the y label.
    title: the title.

  Returns:
    `draw(ax)` for `jaxlab.study.Study.plot`.

  Example:
    >>> import matplotlib.pyplot as plt
    >>> from launch.configs import load_config
    >>> cell = lambda: {m: dict(mean=0.5, std=0.1) for m in METRICS}
    >>> table = {a: cell() for a in ("none", "opl_k4", "gopl_k4_l1")}
    >>> fig, ax = plt.subplots()
    >>> draw_vs_k(table, load_config("opl", "smoke"), "auc", "AUC", "AUC vs k")(ax)
    >>> plt.close(fig)
  """
  ks = [int(k) for k in config.opl.ks]
  lines = [("OPL(k)", [arm_name("opl", k) for k in ks])]
  lines += [(f"G-OPL(k) + OPL(k), λ_face={lam:g}", [arm_name("gopl", k, lam) for k in ks])
            for lam in [float(x) for x in config.opl.lambdas]]

  def draw(ax):
    for label, names in lines:
      if all(n in table for n in names):
        means = np.array([table[n][metric]["mean"] for n in names])
        stds = np.array([table[n][metric]["std"] for n in names])
        ax.errorbar(ks, means, yerr=stds, marker="o", capsize=3, label=label)
    if "none" in table:
      ax.axhline(table["none"][metric]["mean"], color="k", ls="--", label="no projection")
    if metric == "probe" and "none" in table:
      ax.axhline(table["none"]["chance"]["mean"], color="gray", ls=":", label="chance")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k (rank removed)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
  return draw
