"""CVGL-NIG reproduction: does u-adaptive Soft InfoNCE transfer better across cities?

The synthetic two-view geo world (`jaxlab.retrieval.world`): train street -> satellite
retrieval on city 1's training area under each arm (InfoNCE with label smoothing, the full
method = u-adaptive Soft InfoNCE + DER, the same with the batch's mean softening on every
row, DER only, constant soft labels), seeds vmapped, every arm, reading and sweep cell the
same compiled program; test on city 1's held-out area and zero-shot on the same area of
the other cities. A length-scale sweep varies the density of semi-positives, and the
full method and its pooled ablation re-run at each listed reading of which NIG
uncertainty is u (`cvgl.uncertainty_readings`), where the row is judged again. Seeds are
paired across arms: same worlds, init, batches and view noise. Arms resume through
`jaxlab.train.ArmCache`.
"""

import dataclasses
import json
import os
import time

import jax
import numpy as np

import jaxlab.report
import jaxlab.train
from jaxlab.presets import config_names, config_seeds, split_names
from jaxlab.report import seed_summary
from jaxlab.retrieval import metrics, training
from jaxlab.retrieval import world as world_lib
from jaxlab.retrieval.model import CVGLModel

PAPER_CLAIM = ("Soft InfoNCE whose hard-negative labels are softened by an NIG (deep evidential "
               "regression) estimate of environmental complexity u stops pushing semi-positives "
               "away: +18% average R@1 in zero-shot cross-dataset transfer")
METHOD, BASELINE, ABLATION = "soft_u", "infonce", "soft_mean"
READING_ARMS = (METHOD, ABLATION)  # the arms whose loss the u reading changes
RECALLS = ("R@1", "R@5", "R@1%")
U_KINDS = ("epistemic", "aleatoric", "total")
# R@1 criteria compared with the other arms (criterion, other arm, test set).
R1_COMPARISONS = (("adaptive_over_pooled", ABLATION, "cross_city"),
                  ("cross_city_r1", BASELINE, "cross_city"),
                  ("same_area_r1", BASELINE, "same_area"),
                  ("soft_over_der_only", "der_only", "cross_city"),
                  ("adaptive_over_fixed", "fixed_soft", "cross_city"))


def _train_config(config) -> training.TrainConfig:
  t, c = config.train, config.cvgl
  if t.batch_size % (t.block * t.block):
    raise ValueError(f"train.batch_size ({t.batch_size}) must be a multiple of block^2 "
                     f"({t.block * t.block})")
  return training.TrainConfig(
      num_steps=t.num_steps, block=t.block, num_blocks=t.batch_size // (t.block * t.block),
      weight_decay=t.weight_decay, max_grad_norm=t.max_grad_norm, num_hard=c.num_hard,
      hard_temperature=c.hard_temperature, der_reg=c.der_reg, target=c.target,
      num_logs=t.num_logs)


def make_arm(name: str, config, uncertainty: str | None = None) -> training.ArmParams:
  """Arm `name` with the loss settings of `config.cvgl` (u = `uncertainty` or its default)."""
  c = config.cvgl
  return training.make_arm(name, label_smoothing=c.label_smoothing, eps_fixed=c.eps_fixed,
                           eps_max=c.eps_max, der_weight=c.der_weight,
                           uncertainty=uncertainty or c.uncertainty)


def _readings(config) -> list[str]:
  """The readings of `cvgl.uncertainty` the row is judged at, the default first."""
  default = config.cvgl.uncertainty
  readings = split_names(config.cvgl.uncertainty_readings)
  bad = [r for r in [default, *readings] if r not in training.UNCERTAINTIES]
  if bad:
    raise ValueError(f"config.cvgl.uncertainty / uncertainty_readings must name some of "
                     f"{tuple(training.UNCERTAINTIES)}, got {bad}")
  return [default] + [r for r in dict.fromkeys(readings) if r != default]


def _city_names(config) -> list[str]:
  names = list(config.cities.keys())
  if "city1" not in names or len(names) < 2:
    raise ValueError(f"config.cities must hold 'city1' (training) and >= 1 zero-shot city, got "
                     f"{names}")
  return ["city1"] + sorted(n for n in names if n != "city1")


def _measure(table: dict, arms: list[str], sweep: dict, *, u_kind: str, num_test: int
             ) -> dict:
  """Per-seed values for each declared criterion.

  Args:
    table: arm -> its per-seed summaries (`run`'s results["table"] layout).
    arms: the arms that ran.
    sweep: length-scale factor -> arm -> per-seed density and R@1.
    u_kind: which NIG uncertainty is u (its Spearman with roughness is judged).
    num_test: N, the test gallery size; a random ranker's R@1 is 1 / N (the floor).

  Returns:
    criterion -> (method, baseline) or (method, baseline, chance reference) per seed.
    R@1 criteria are ratios, so a seed with no hit at all (R@1 = 0, below chance) is
    scored as half a hit, 0.5 / N: still below the floor, and the ratio stays finite.
  """
  chance = 1.0 / num_test

  def r1(arm, where):
    return np.maximum(np.asarray(table[arm][where]["R@1"]["per_seed"], np.float64),
                      0.5 * chance)

  def rho(arm):
    return np.asarray(table[arm]["u_roughness_spearman_by_kind"][u_kind]["city1"]["per_seed"])

  measured = {}
  if METHOD in arms:
    n = len(table[METHOD]["same_area"]["R@1"]["per_seed"])
    for name, other, where in R1_COMPARISONS:
      # An arm that did not run gives NaN seeds ("not measured"): a criterion with a floor
      # is judged from (method, baseline, reference) even when nothing was measured.
      other_r1 = r1(other, where) if other in arms else np.full(n, np.nan)
      measured[name] = (r1(METHOD, where), other_r1, np.full(n, chance))
    measured["u_tracks_roughness"] = (rho(METHOD), np.zeros(n))
    if BASELINE in arms:
      measured["u_tracking_from_der"] = (rho(METHOD), rho(BASELINE))
  cells = [f for f, c in sweep.items() if METHOD in c and BASELINE in c]
  if len(cells) >= 2:
    density = {f: np.mean(sweep[f][BASELINE]["density"]) for f in cells}
    dense, sparse = max(cells, key=density.get), min(cells, key=density.get)
    gain = lambda f: (np.asarray(sweep[f][METHOD]["cross_city_r1"])
                      - np.asarray(sweep[f][BASELINE]["cross_city_r1"]))
    measured["gain_grows_with_density"] = (gain(dense), gain(sparse))
  return measured


def _arm_table(r: dict, zero_shot: list[str], city_names: list[str], u_kind: str) -> dict:
  """One arm's per-seed summaries from its cell's raw results."""
  t = {"same_area": {m: seed_summary(r["city1"][m]) for m in RECALLS}}
  for name in zero_shot:
    t[name] = {m: seed_summary(r[name][m]) for m in RECALLS}
  t["cross_city"] = {m: seed_summary(np.mean([r[n][m] for n in zero_shot], axis=0))
                     for m in RECALLS}
  t["u_roughness_spearman_by_kind"] = {
      u: {n: seed_summary(r[n][f"spearman_{u}"]) for n in city_names} for u in U_KINDS}
  t["u_roughness_spearman"] = t["u_roughness_spearman_by_kind"][u_kind]["city1"]
  t["u_rank_spearman"] = seed_summary(r["city1"][f"rank_spearman_{u_kind}"])
  t["roughness_rank_spearman"] = seed_summary(r["city1"]["roughness_rank_spearman"])
  return t


def _pm(s: dict, pct: bool = True) -> str:
  f = 100.0 if pct else 1.0
  return f"{f * s['mean']:.1f} ± {f * s['std']:.1f}"


def run(config, workdir: str) -> dict:
  """Runs every arm, reading and sweep cell (resuming finished ones), writes results.json.

  Returns:
    The results dict (also in `workdir/results.json`): the table per arm, the sweep, the
    alternative readings' tables, training logs, the report row with its verdict.
  """
  os.makedirs(workdir, exist_ok=True)
  t0 = time.time()
  arms = config_names(config, "arms", choices=training.ARMS)
  seeds = config_seeds(config)
  readings = _readings(config)
  default_u = readings[0]
  factors = [float(f) for f in config.sweep.length_scale_factors]
  if not all(f > 0 and np.isfinite(f) for f in factors):
    # Checked here: the sweep cells run after the main arms, minutes into the run.
    raise ValueError(f"config.sweep.length_scale_factors must be finite and > 0, got "
                     f"{tuple(config.sweep.length_scale_factors)}")
  sweep_arms = config_names(config.sweep, "arms", choices=training.ARMS)
  city_names = _city_names(config)
  wc = world_lib.WorldConfig(**config.world.to_dict())
  tcfg = _train_config(config)
  model = CVGLModel(**config.model.to_dict())
  schedule = jaxlab.train.make_schedule(config.optimizer, tcfg.num_steps)
  train = training.make_train(model, wc, tcfg, schedule)
  evaluate = training.make_evaluate(model, wc)
  seed_array = np.asarray(seeds, np.int32)
  eval_seed = np.int32(10_000)  # test-view noise, shared by every arm and seed (paired)
  num_test = wc.grid * (wc.grid - wc.split)

  def cities(factor: float) -> dict[str, world_lib.City]:
    out = {}
    for name in city_names:
      spec = dict(config.cities[name].to_dict())
      spec["length_scale"] = spec["length_scale"] * factor
      spec = world_lib.CitySpec(**spec)
      out[name] = world_lib.stack_cities([world_lib.make_city(wc, spec, s) for s in seeds])
    return out

  def run_cell(arm: str, factor: float, reading: str) -> dict:
    start = time.time()
    world = cities(factor)
    params, logs = jax.block_until_ready(
        train(world["city1"], make_arm(arm, config, reading), seed_array))
    out = {"logs": {k: np.asarray(v) for k, v in jax.device_get(logs).items()}}
    for name, city in world.items():
      ev = jax.device_get(evaluate(params, city, eval_seed))
      ev["total"] = ev["epistemic"] + ev["aleatoric"]
      rec = [metrics.recall_at_k(ev["similarities"][i], (1, 5), one_percent=True)
             for i in range(len(seeds))]
      out[name] = {m: [r[m] for r in rec] for m in RECALLS}
      # Diagnostics: does u follow the realised difficulty (the true reference's rank),
      # and are rough locations harder to retrieve at all?
      rank = [metrics.ranks(ev["similarities"][i]) for i in range(len(seeds))]
      out[name]["roughness_rank_spearman"] = [metrics.spearman(ev["roughness"][i], rank[i])
                                              for i in range(len(seeds))]
      for u in U_KINDS:
        out[name][f"spearman_{u}"] = [metrics.spearman(ev[u][i], ev["roughness"][i])
                                      for i in range(len(seeds))]
        out[name][f"rank_spearman_{u}"] = [metrics.spearman(ev[u][i], rank[i])
                                           for i in range(len(seeds))]
      if name == "city1":
        out["density"] = ev["density"].tolist()
    out["seconds"] = time.time() - start
    return out

  cache = jaxlab.train.ArmCache(workdir)
  # The readings list only says which extra cells run; each cell's key names its own u.
  cvgl_knobs = {k: v for k, v in config.cvgl.to_dict().items()
                if k not in ("uncertainty", "uncertainty_readings")}
  base_key = jaxlab.train.config_hash(config.seeds, config.world, config.cities, config.model,
                                      config.train, config.optimizer, cvgl_knobs)
  plan = [(a, 1.0, default_u) for a in arms]
  plan += [(a, f, default_u) for f in factors if f != 1.0 for a in sweep_arms]
  plan += [(a, 1.0, r) for r in readings[1:] for a in READING_ARMS if a in arms]
  cells = {}
  for a, f, r in plan:
    tag = a + ("" if f == 1.0 else f"@l{f:g}") + ("" if r == default_u else f"@{r}")
    cells[(a, f, r)] = cache.get_or_run(tag, jaxlab.train.config_hash(base_key, a, f, r),
                                        lambda a=a, f=f, r=r: run_cell(a, f, r))

  zero_shot = city_names[1:]
  tables = {r: {a: _arm_table(cells.get((a, 1.0, r), cells[(a, 1.0, default_u)]), zero_shot,
                              city_names, r)
                for a in arms}
            for r in readings}
  table = tables[default_u]
  sweep = {}
  for factor in sorted({1.0, *factors}):
    sweep[factor] = {}
    for a in sweep_arms:
      if (a, factor, default_u) in cells:
        c = cells[(a, factor, default_u)]
        sweep[factor][a] = dict(
            density=c["density"], same_area_r1=c["city1"]["R@1"],
            cross_city_r1=np.mean([c[n]["R@1"] for n in zero_shot], axis=0).tolist())
  measured = {r: _measure(tables[r], arms, sweep, u_kind=r, num_test=num_test)
              for r in readings}
  row_verdict, criteria = jaxlab.report.judge_all(config.criteria, measured[default_u])
  interpretations = []
  if len(readings) > 1:
    interpretations = [jaxlab.report.interpretation(
        "cvgl.uncertainty", r, config.criteria, measured[r], default=r == default_u,
        source="jaxlab interpretation") for r in readings]
  facts = []
  if METHOD in arms and ABLATION in arms:
    logs = {a: cells[(a, 1.0, default_u)]["logs"] for a in (METHOD, ABLATION)}
    facts.append(jaxlab.report.Fact(
        name="pooled_softening",
        statement=(f"{ABLATION} gives every row of a batch the batch mean of eps_max u~_i: the "
                   f"softening mass u-adaptive eps gives on the same u, spread evenly"),
        value=(f"mean eps over training {METHOD} {np.mean(logs[METHOD]['eps']):.3f}, "
               f"{ABLATION} {np.mean(logs[ABLATION]['eps']):.3f}; within-batch std "
               f"{np.mean(logs[METHOD]['eps_spread']):.3f} vs "
               f"{np.mean(logs[ABLATION]['eps_spread']):.1g}")))
  plots = _plots(workdir, table, sweep, arms)

  def describe(arm):
    t = table[arm]
    return (f"{arm}: same-area R@1 {_pm(t['same_area']['R@1'])} %, cross-city R@1 "
            f"{_pm(t['cross_city']['R@1'])} %, R@5 {_pm(t['cross_city']['R@5'])} %")

  lines = [f"Arm x test set, mean ± std over {len(seeds)} paired seeds, in % "
           f"(R@1 / R@5 / R@1%; ties count against the query; a random ranker's R@1 is "
           f"{100 / num_test:.2f} %):"]
  for a in arms:
    cells_txt = "; ".join(f"{where} " + " / ".join(_pm(table[a][where][m]) for m in RECALLS)
                          for where in ["same_area", *zero_shot, "cross_city"])
    lines.append(f"{a}: {cells_txt}.")
  rel = None
  if METHOD in arms and BASELINE in arms:
    ours = np.asarray(table[METHOD]["cross_city"]["R@1"]["per_seed"])
    base = np.asarray(table[BASELINE]["cross_city"]["R@1"]["per_seed"])
    rel = float(np.mean(ours) / max(np.mean(base), 1e-12) - 1.0)
    lines.append(f"Cross-city R@1 of {METHOD} vs {BASELINE}: {100 * rel:+.1f}% relative "
                 "(paper: +18% average zero-shot cross-dataset R@1).")
  lines.append(f"Spearman(u, local roughness) on city 1's held-out area, u = {default_u}: " +
               ", ".join(f"{a} {_pm(table[a]['u_roughness_spearman'], pct=False)}"
                         for a in arms) + " (the NIG head trains only in "
               "soft_u, soft_mean and der_only); Spearman(u, rank of the true reference): " +
               ", ".join(f"{a} {_pm(table[a]['u_rank_spearman'], pct=False)}" for a in arms) +
               "; Spearman(roughness, rank of the true reference): " +
               ", ".join(f"{a} {_pm(table[a]['roughness_rank_spearman'], pct=False)}"
                         for a in arms) + ".")
  for r in readings[1:]:
    txt = "; ".join(f"{a} same-area R@1 {_pm(tables[r][a]['same_area']['R@1'])} %, cross-city "
                    f"{_pm(tables[r][a]['cross_city']['R@1'])} %, Spearman(u, roughness) "
                    f"{_pm(tables[r][a]['u_roughness_spearman'], pct=False)}"
                    for a in READING_ARMS if a in arms)
    lines.append(f"Reading u = {r}: {txt}.")
  for factor, cell in sweep.items():
    txt = ", ".join(f"{a} cross-city R@1 {100 * np.mean(v['cross_city_r1']):.1f} %"
                    for a, v in cell.items())
    dens = next(iter(cell.values()))["density"] if cell else [np.nan]
    lines.append(f"Sweep l x{factor:g} (semi-positive density {np.mean(dens):.2f}): {txt}.")
  lines.append(
      f"World: {wc.grid}x{wc.grid} lattice, train on city 1's x < {wc.split} "
      f"({wc.split * wc.grid} locations), test on the {num_test} locations x >= {wc.split} of "
      f"every city; batches of {config.train.batch_size} pairs from {config.train.block}x"
      f"{config.train.block} GPS tiles; {tcfg.num_steps} AdamW steps.")
  lines.append(
      "jaxlab interpretations (unverified against the paper, whose code was unavailable): "
      f"u = the NIG head's {default_u} uncertainty (also judged at: "
      f"{', '.join(readings[1:]) or 'none'}); DER target y = {tcfg.target}; eps_i = "
      f"{config.cvgl.eps_max} * u_i / (u_i + median u) over the {tcfg.num_hard} most similar "
      f"negatives (softmax at tau_h = {tcfg.hard_temperature}); fixed_soft eps = "
      f"{config.cvgl.eps_fixed}; w_DER = {config.cvgl.der_weight}; NIG head = CLS->spatial "
      "single-head cross-attention + attention entropy/max/std/top-2 mass; the synthetic "
      "world and its cities.")
  report = jaxlab.report.ReportRow(
      method="CVGL-NIG (uncertainty-adaptive Soft InfoNCE)", paper_claim=PAPER_CLAIM,
      baseline=describe(BASELINE) if BASELINE in arms else "no baseline arm run",
      ours=describe(METHOD) if METHOD in arms else "soft_u arm not run",
      verdict=row_verdict, details=" ".join(lines), plots=tuple(plots), criteria=criteria,
      facts=tuple(facts), interpretations=tuple(interpretations))
  results = dict(
      experiment="cvgl", preset=config.preset, seeds=seeds, arms=arms, table=table,
      readings={r: {a: tables[r][a] for a in READING_ARMS if a in arms}
                for r in readings[1:]},
      relative_cross_city_r1=rel, num_test=num_test,
      sweep={f"{f:g}": v for f, v in sweep.items()},
      logs={a: cells[(a, 1.0, default_u)]["logs"] for a in arms},
      arm_seconds={f"{a}@l{f:g}@{r}": c["seconds"] for (a, f, r), c in cells.items()},
      seconds=time.time() - t0, config=json.loads(config.to_json_best_effort()),
      report=dataclasses.asdict(report))
  jaxlab.report.write_results(workdir, results)
  return results


def _plots(workdir: str, table: dict, sweep: dict, arms: list[str]) -> list[str]:
  def draw_recall(ax):
    where = ["same_area", "cross_city"]
    width = 0.8 / len(arms)
    x = np.arange(len(where))
    for i, a in enumerate(arms):
      ax.bar(x + i * width, [table[a][w]["R@1"]["mean"] for w in where], width,
             yerr=[table[a][w]["R@1"]["std"] for w in where], label=a)
    ax.set_xticks(x + 0.4 - width / 2, ["same area (city 1)", "cross-city (zero-shot)"])
    ax.set_ylabel("R@1")
    ax.set_title("Street -> satellite R@1 per arm")
    ax.legend(fontsize=7)

  def draw_sweep(ax):
    for a in (BASELINE, METHOD):
      pts = sorted((np.mean(c[a]["density"]), np.mean(c[a]["cross_city_r1"]))
                   for c in sweep.values() if a in c)
      if pts:
        ax.plot(*zip(*pts, strict=True), "o-", label=a)
    ax.set_xlabel("semi-positive density (city 1)")
    ax.set_ylabel("cross-city R@1")
    ax.set_title("Length-scale sweep")
    ax.legend(fontsize=7)

  return [jaxlab.report.save_plot(workdir, "cvgl_recall.png", draw_recall),
          jaxlab.report.save_plot(workdir, "cvgl_sweep.png", draw_sweep)]
