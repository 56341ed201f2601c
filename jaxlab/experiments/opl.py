"""OPL / G-OPL reproduction: do orthogonal projections hide faces without hurting detection?

The synthetic MIL video world of `jaxlab.privacy.world` (faces correlated with anomalies),
a light RTFM scorer, and the arms none / OPL(k) / G-OPL(k) + OPL(k) over k and λ_face
(`configs/opl.py`). Every arm runs through ONE compiled program (ranks and λ_face are
traced scalars; `jaxlab.privacy.training`); the seeds of an arm run inside it with
`lax.map` (jaxlab 0.10's batched CPU LAPACK kernels, which a vmap over seeds would use for
the QR, deadlocked on a 2-thread pool here). Arms resume through `jaxlab.train.ArmCache`.
Seeds are paired across arms: same world draw, same initialisation, same minibatches,
same probe subsample.
"""

import dataclasses
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special

import jaxlab.report
import jaxlab.train
from jaxlab.presets import config_seeds, split_names
from jaxlab.privacy import metrics, projection, training, world
from jaxlab.report import seed_summary

PAPER_CLAIM = ("G-OPL (an orthogonal projection whose removed subspace is aligned with face "
               "crops) brings a face-presence probe near chance while keeping anomaly-detection "
               "AUC (ShanghaiTech, RTFM + I3D: 97.3 at k = 4 vs 97.0 without); plain OPL "
               "removes far less face information")
METRICS = ("auc", "probe", "chance", "ssc", "ard")
FAMILIES = ("none", "opl", "gopl")


def arm_name(family: str, k: int = 0, lam: float = 0.0) -> str:
  """"none", "opl_k<k>" or "gopl_k<k>_l<λ>"."""
  if family == "none":
    return "none"
  if family == "opl":
    return f"opl_k{k}"
  return f"gopl_k{k}_l{lam:g}"


def arm_table(config) -> dict[str, tuple[int, int, float]]:
  """Arm name -> (G-OPL rank, OPL rank, λ_face), in report order."""
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


def world_config(config) -> world.WorldConfig:
  """The simulated world of `config.world`."""
  return world.WorldConfig(**{**config.world.to_dict(),
                              "anomaly_len": tuple(config.world.anomaly_len)})


def train_config(config) -> training.TrainConfig:
  """The training settings; the learning rate is `config.optimizer`'s (schedule included)."""
  t, o = config.train, config.opl
  lr = jaxlab.train.make_schedule(config.optimizer, t.num_steps)
  return training.TrainConfig(
      num_steps=t.num_steps, batch_size=t.batch_size, learning_rate=lr, top_k=t.top_k,
      lam_orth=o.lam_orth, hidden=t.hidden, max_rank=max(int(k) for k in o.ks), mode=o.mode,
      opl_placement=o.opl_placement)


def _arm_metrics(out: dict, arm: training.Arm, worlds, probe_idx, tcfg, config) -> dict:
  """Per-seed metrics of one arm from its (numpy) test outputs [seeds, ...]."""
  e = config.eval
  rows = {m: [] for m in METRICS}
  for i, w in enumerate(worlds):
    o = {k: np.asarray(v[i]) for k, v in out.items()}
    rows["auc"].append(metrics.snippet_auc(o["logits"], w.test.snippet_labels))
    feats = o["private"].reshape(-1, o["private"].shape[-1])[probe_idx[i]]
    faces = w.test.faces.ravel()[probe_idx[i]]
    rows["probe"].append(metrics.face_probe_accuracy(feats, faces, folds=e.probe_folds,
                                                     c=e.probe_c, seed=i))
    rows["chance"].append(metrics.chance_rate(faces))
    q = training.first_basis(o, arm, tcfg)
    rows["ssc"].append(None if q is None else float(projection.subspace_similarity(
        jnp.asarray(w.test.face_crops), jnp.asarray(q), jnp.asarray(w.test.faces))))
    rows["ard"].append(metrics.score_kl(special.expit(o["raw_logits"]).ravel(),
                                        special.expit(o["logits"]).ravel()))
  return rows


def _measure(table: dict, config) -> dict:
  """Per-seed (method, baseline) values for each declared criterion that can be measured."""
  k, lam = int(config.opl.small_k), float(config.opl.criteria_lambda)
  big = max(int(x) for x in config.opl.ks)
  g, o = arm_name("gopl", k, lam), arm_name("opl", k)
  g_big = arm_name("gopl", big, lam)

  def s(arm, metric):
    return table[arm][metric]["per_seed"]

  measured = {}
  if g in table:
    measured["probe_near_chance"] = (s(g, "probe"), s(g, "chance"))
    if "none" in table:
      measured["auc_kept"] = (s(g, "auc"), s("none", "auc"))
    if o in table:
      measured["opl_probe_weaker"] = (s(g, "probe"), s(o, "probe"))
      measured["ssc_rises"] = (s(g, "ssc"), s(o, "ssc"))
    if big != k and g_big in table:
      measured["auc_falls_with_k"] = (s(g_big, "auc"), s(g, "auc"))
      measured["ard_grows_with_k"] = (s(g_big, "ard"), s(g, "ard"))
  return measured


def _plots(workdir: str, table: dict, config) -> list[str]:
  ks = [int(k) for k in config.opl.ks]
  lams = [float(x) for x in config.opl.lambdas]
  lines = [("OPL(k)", [arm_name("opl", k) for k in ks])]
  lines += [(f"G-OPL(k) + OPL(k), λ_face={lam:g}", [arm_name("gopl", k, lam) for k in ks])
            for lam in lams]

  def draw(metric, ylabel, title):
    def fn(ax):
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
    return fn

  return [
      jaxlab.report.save_plot(workdir, "opl_auc.png",
                              draw("auc", "snippet AUC", "Detection utility vs k")),
      jaxlab.report.save_plot(workdir, "opl_probe.png",
                              draw("probe", "face-probe accuracy (5-fold LinearSVC)",
                                   "Face leakage vs k (lower = more private)"))]


def _pm(s: dict, scale: float = 100.0, digits: int = 1) -> str:
  if s["mean"] is None:
    return "n/a"
  return f"{scale * s['mean']:.{digits}f} ± {scale * s['std']:.{digits}f}"


def _reading_text(reading: str, w_cfg: world.WorldConfig, table: dict, verdict: str,
                  config) -> str:
  """One line of the details: the primary arms and the row's verdict at one coupling."""
  q1, q0 = world.face_probabilities(w_cfg)
  cells = []
  for a in primary_arms(config):
    if a in table:
      t = table[a]
      cells.append(f"{a} AUC {_pm(t['auc'])} %, probe {_pm(t['probe'])} %")
  chance = next(iter(table.values()))["chance"]
  return (f"At world.face_coupling={reading} (P(face | anomalous) {q1:.2f} vs {q0:.2f} "
          f"normal): {'; '.join(cells)} (chance {_pm(chance)} %); row {verdict}.")


def primary_arms(config) -> list[str]:
  """The arms the primary criteria read: none, OPL(small_k), G-OPL(small_k, criteria_lambda)."""
  k, lam = int(config.opl.small_k), float(config.opl.criteria_lambda)
  return ["none", arm_name("opl", k), arm_name("gopl", k, lam)]


def coupling_readings(config) -> list[str]:
  """`world.face_coupling` (the default reading) then the other `opl.face_coupling_readings`."""
  readings = list(dict.fromkeys([config.world.face_coupling,
                                 *config.opl.face_coupling_readings]))
  bad = [r for r in readings if r not in world.FACE_COUPLINGS]
  if bad:
    raise ValueError(f"config.world.face_coupling / config.opl.face_coupling_readings must be "
                     f"in {world.FACE_COUPLINGS}, got {bad}")
  return readings


def _table(per_arm: dict) -> dict:
  return {a: {m: seed_summary(r["metrics"][m], skip_missing=True) for m in METRICS}
          for a, r in per_arm.items()}


def run(config, workdir: str) -> dict:
  """Runs every arm (resuming finished ones), writes results.json, returns the results."""
  os.makedirs(workdir, exist_ok=True)
  t0 = time.time()
  seeds = config_seeds(config)
  arms = arm_table(config)
  readings = coupling_readings(config)
  wcfg, tcfg = world_config(config), train_config(config)
  keys = jax.vmap(jax.random.key)(jnp.asarray(seeds))
  n_snip = wcfg.num_test * wcfg.num_snippets
  probe_n = min(int(config.eval.probe_samples), n_snip)
  probe_idx = [np.random.default_rng(s).choice(n_snip, probe_n, replace=False) for s in seeds]

  @jax.jit
  def run_seeds(data, test, keys, arm):
    def one(args):
      d, x, k = args
      params, curve = training.train(d, arm, k, tcfg)
      return training.evaluate(params, x, arm, tcfg), curve[-1]
    return jax.lax.map(one, (data, test, keys))

  cache = jaxlab.train.ArmCache(workdir)

  def run_world(w_cfg: world.WorldConfig, names: list[str], prefix: str = "") -> dict:
    """The arms `names` on the worlds of `w_cfg` (one per seed), through the arm cache."""
    worlds = [world.make_world(w_cfg, s) for s in seeds]
    data = training.stack([training.as_arrays(w.train) for w in worlds])
    test = jnp.stack([jnp.asarray(w.test.features) for w in worlds])

    def run_arm(name):
      start = time.time()
      arm = training.make_arm(*arms[name])
      out, final = jax.block_until_ready(run_seeds(data, test, keys, arm))
      train_s = time.time() - start
      out = jax.device_get(out)
      rows = _arm_metrics(out, arm, worlds, probe_idx, tcfg, config)
      final = np.asarray(final)
      return dict(metrics=rows,
                  final_loss={t: final[:, i].tolist() for i, t in enumerate(training.LOSS_TERMS)},
                  train_seconds=train_s, seconds=time.time() - start)

    shared = jaxlab.train.config_hash(config.seeds, dataclasses.asdict(w_cfg), config.train,
                                      config.optimizer, config.opl.lam_orth, config.opl.mode,
                                      config.opl.opl_placement, tcfg.max_rank, config.eval)
    return {a: cache.get_or_run(prefix + a, jaxlab.train.config_hash(shared, a, arms[a]),
                                lambda a=a: run_arm(a)) for a in names}

  per_arm = run_world(wcfg, list(arms))
  table = _table(per_arm)
  row_verdict, criteria = jaxlab.report.judge_all(config.criteria, _measure(table, config))
  plots = _plots(workdir, table, config)

  # The row at every reading of the face-anomaly coupling: the default is the run above;
  # another reading reruns only the arms the primary criteria read.
  reading_tables, interpretations = {}, []
  for r in readings:
    if r == wcfg.face_coupling:
      reading_tables[r] = table
    else:
      names = [a for a in primary_arms(config) if a in arms]
      reading_tables[r] = _table(run_world(dataclasses.replace(wcfg, face_coupling=r), names,
                                           prefix=f"face_coupling={r}."))
    interpretations.append(jaxlab.report.interpretation(
        "world.face_coupling", r, config.criteria, _measure(reading_tables[r], config),
        default=r == wcfg.face_coupling,
        source="jaxlab interpretation of the spec's 'correlated 0.3' (the paper gives none)"))

  k, lam = int(config.opl.small_k), float(config.opl.criteria_lambda)

  def describe(a):
    if a not in table:
      return f"{a} not run"
    t = table[a]
    return (f"{a}: AUC {_pm(t['auc'])} %, face probe {_pm(t['probe'])} % (chance "
            f"{_pm(t['chance'])} %)")

  lines = [f"Arm: AUC % / face-probe accuracy % / SSC / ARD (nats), mean ± std over "
           f"{len(seeds)} paired seeds:"]
  for a in arms:
    t = table[a]
    lines.append(f"{a}: {_pm(t['auc'])} / {_pm(t['probe'])} / {_pm(t['ssc'], 1.0, 3)} / "
                 f"{_pm(t['ard'], 1.0, 3)}.")
  lines.append(
      f"World: {wcfg.num_train} train / {wcfg.num_test} test videos x T = {wcfg.num_snippets}, "
      f"d = {wcfg.feat_dim} (task {wcfg.task_dim} / face {wcfg.face_dim} / nuisance "
      f"{wcfg.nuisance_dim} dims), face rate {wcfg.face_rate}, face-anomaly coupling "
      f"{wcfg.face_anomaly_corr} read as {wcfg.face_coupling}; {tcfg.num_steps} Adam steps of "
      f"{tcfg.batch_size} videos; "
      f"face probe on {probe_n} test snippets, {config.eval.probe_folds}-fold LinearSVC. "
      "Paper anchor (ShanghaiTech, RTFM + I3D): AUC 97.3 at k = 4 vs 97.0 without, "
      "falling to 92.5 at k_G-OPL = 64.")
  lines.append(
      "jaxlab interpretation (unverified against the paper's code): light RTFM = 2-layer MLP, "
      f"top-{tcfg.top_k} MIL BCE; QR mode '{tcfg.mode}', λ_orth = {tcfg.lam_orth}; OPL placed "
      f"at the '{tcfg.opl_placement}' level after G-OPL; faces shift the feature mean "
      f"(face_mean = {wcfg.face_mean}); perfect face detector; the probe reads the features "
      "after the input-level projections.")
  for r, i in zip(readings, interpretations, strict=True):
    lines.append(_reading_text(r, dataclasses.replace(wcfg, face_coupling=r),
                               reading_tables[r], i.verdict, config))
  report = jaxlab.report.ReportRow(
      method="OPL / G-OPL (privacy-aware VAD by orthogonal projection)", paper_claim=PAPER_CLAIM,
      baseline="; ".join(describe(a) for a in ("none", arm_name("opl", k))),
      ours=describe(arm_name("gopl", k, lam)), verdict=row_verdict, details=" ".join(lines),
      plots=tuple(plots), criteria=criteria, interpretations=tuple(interpretations))
  results = dict(
      experiment="opl", preset=config.preset, seeds=seeds, arms=list(arms),
      arm_settings={a: dict(gopl_rank=v[0], opl_rank=v[1], lam_face=v[2])
                    for a, v in arms.items()},
      table=table, face_coupling_tables=reading_tables,
      final_loss={a: r["final_loss"] for a, r in per_arm.items()},
      arm_seconds={a: r["seconds"] for a, r in per_arm.items()},
      seconds=time.time() - t0, config=json.loads(config.to_json_best_effort()),
      report=dataclasses.asdict(report))
  jaxlab.report.write_results(workdir, results)
  return results
