"""KernelBand reproduction: does the hardware-aware bandit tune kernel configs most sample-
efficiently?

Every method (`jaxlab.autotune.benchmark.METHODS`) tunes every task (op, shape,
device) from the default config with the same budget, under the tile-roofline
cost model with 3 % timing noise; seeds are paired across methods (each
(task, seed) has one random stream). The best measured config after T
proposals is scored on noise-free times against the exhaustive oracle. Each
method is an arm of a `jaxlab.study.Study` (cached, so a rerun resumes).
KernelBand's best configs for the two Pallas kernels (FP4 dequant-matmul,
grouped matmul) are written to `workdir/tuning.json`, the table
`pallas_kernels.tuning` reads.

Interpretation readings: the parent rule (`config.kernelband.parent_rule`)
decides the verdict, so the methods that draw parents by it (KernelBand and its
no-mask and K = 1 ablations) are rerun at each reading of
`config.parent_rule_readings` and the row is judged again; the baselines do not
depend on it. The default reading is the authors' code.
"""

import json
import os

import numpy as np

from jaxlab.autotune import benchmark, cost_model, space
from jaxlab.presets import split_names
from jaxlab.study import Study
from pallas_kernels.fp4 import ops as fp4_ops
from pallas_kernels.moe import ops as moe_ops

PAPER_CLAIM = ("KernelBand (clustered, hardware-masked UCB over optimisation strategies) beats "
               "best-of-N and GEAK at equal budget: 1.45-1.91x geo-mean speedup at T = 20 on "
               "TritonBench-G, with the best sample efficiency")
METHOD = "kernelband"
# The methods whose policy draws parents by `parent_rule`: rerun at each reading.
_RULE_METHODS = ("kernelband", "no_mask", "k1")
_RULE_SOURCES = {
    "code": "the authors' code (kernelband/mab/ucb.py: UCBSelector.sample_from_cluster)",
    "all_profiled": "jaxlab interpretation (every kernel profiled, the spec's earlier reading)",
    "uniform": "jaxlab interpretation",
    "fastest": "the authors' code without hardware signatures (sample_from_cluster fallback)",
}
_TUNING_OPS = {"fp4_dequant_matmul": fp4_ops.TUNING_OP, "gmm": moe_ops.TUNING_OP}


def _kb(config) -> dict:
  kb = config.kernelband.to_dict()
  if isinstance(kb["theta_sat"], (list, tuple)):
    kb["theta_sat"] = tuple(kb["theta_sat"])
  return kb


def _measure(summ: dict, methods: list[str], bi: int, default_regret: float) -> dict:
  """Per-seed values of each declared criterion at budget index bi.

  Args:
    summ: method -> `benchmark.summarize` output.
    methods: the methods that ran.
    bi: index of the judged budget in the config's budgets.
    default_regret: the default config's mean simple regret over the tasks, the floor's
      reference for the regret criterion (the speedup criteria's floor is the constant 1.0x).

  Returns:
    criterion name -> (method, baseline) or (method, baseline, reference) per seed.
  """
  def gm(m):
    return np.asarray(summ[m]["geomean_speedup"])[:, bi]

  measured = {}
  if METHOD not in methods:
    return measured
  for name, other in (("speedup_vs_bon", "bon"), ("speedup_vs_greedy", "greedy"),
                      ("speedup_vs_egreedy", "egreedy"), ("mask_helps", "no_mask"),
                      ("clustering_helps", "k1"),
                      ("bandit_beats_heuristic_strategy", "heuristic_strategy")):
    if other in methods:
      measured[name] = (gm(METHOD), gm(other))
  base = [m for m in benchmark.BASELINES if m in methods]
  if base:
    best = np.min([np.asarray(summ[m]["regret"])[:, bi] for m in base], axis=0)
    measured["regret_vs_best_baseline"] = (np.asarray(summ[METHOD]["regret"])[:, bi], best,
                                           np.full(len(best), default_regret))
  return measured


def _plot(study, summ, methods, budgets):
  def draw(ax):
    for m in methods:
      r = np.asarray(summ[m]["regret"])
      ax.errorbar(budgets, r.mean(0), yerr=r.std(0), label=m, marker="o", capsize=2)
    ax.set_xlabel("budget T (proposals)")
    ax.set_ylabel("mean simple regret vs oracle")
    ax.set_yscale("log")
    ax.set_title("KernelBand vs baselines / ablations (cost model)")
    ax.legend(fontsize=7)
  return study.plot("kernelband_regret.png", draw)


def run(config, workdir: str) -> dict:
  """Runs every method (resuming finished ones), writes results.json and tuning.json."""
  methods, budgets = split_names(config.methods), [int(b) for b in config.budgets]
  if not methods:
    raise ValueError("config.methods must be non-empty")
  if config.criteria_budget not in budgets:
    raise ValueError(f"config.criteria_budget={config.criteria_budget} must be one of "
                     f"config.budgets={budgets}")
  kb = _kb(config)
  readings = [r for r in split_names(config.parent_rule_readings) if r != kb["parent_rule"]]
  for m in methods:  # a clear error for an unknown name or reading, before any work
    for r in [kb["parent_rule"], *readings]:
      benchmark.make_policy(m, {**kb, "parent_rule": r})
  # What determines a method's result besides its name (the readings' arms are named apart).
  study = Study(config, workdir, key=(split_names(config.devices), config.seeds, config.budgets,
                                      config.noise, config.kernelband))
  seeds = study.seeds
  tasks = benchmark.default_tasks(tuple(split_names(config.devices)))
  ev = cost_model.CostModelEvaluator(config.noise)
  oracle = {t.name: ev.oracle(t)[1] for t in tasks}
  default_regret = float(np.mean([
      ev.true_time(t, space.default_config(t, ev.device_kind(t))) / oracle[t.name] - 1.0
      for t in tasks]))

  def method(m: str, rule: str):
    return lambda: benchmark.run_method(m, tasks, seeds, budgets, noise=config.noise,
                                        kb={**kb, "parent_rule": rule}, oracle=oracle)

  # Every method at the config's parent rule, then the rule's methods at each other reading.
  arms = {m: method(m, kb["parent_rule"]) for m in methods}
  arms.update({f"{m}@parent_rule={r}": method(m, r) for r in readings
               for m in methods if m in _RULE_METHODS})
  done = study.arms(arms)
  per_method = {m: done[m] for m in methods}
  per_reading = {name: res for name, res in done.items() if name not in per_method}
  summ = {m: benchmark.summarize(r) for m, r in per_method.items()}
  bi = budgets.index(int(config.criteria_budget))
  measured = _measure(summ, methods, bi, default_regret)
  study.judge(measured)
  knob = "kernelband.parent_rule"
  study.interpretation(knob, kb["parent_rule"], measured, default=True,
                       source=_RULE_SOURCES[kb["parent_rule"]])
  for r in readings:
    alt = dict(summ)
    for m in (m for m in methods if m in _RULE_METHODS):
      alt[m] = benchmark.summarize(per_reading[f"{m}@parent_rule={r}"])
    study.interpretation(knob, r, _measure(alt, methods, bi, default_regret),
                         source=_RULE_SOURCES[r])

  table = benchmark.tuning_table(tasks, kb, _TUNING_OPS, budget=max(budgets), seed=seeds[0],
                                 noise=config.noise)
  tuning_path = os.path.join(workdir, "tuning.json")
  table.save(tuning_path)
  timing_result = None
  if config.timing.enabled:
    t = config.timing
    timing_result = benchmark.timing_run(space.Task(t.op, tuple(t.shape), t.dtype, "cpu"), kb,
                                         budget=t.budget, repeats=t.repeats)
  _plot(study, summ, methods, budgets)

  def cell(m, b):
    s = summ[m]
    gm, f1 = np.asarray(s["geomean_speedup"])[:, b], np.asarray(s["fast1"])[:, b]
    co, rg = np.asarray(s["correct"])[:, b], np.asarray(s["regret"])[:, b]
    return (f"{gm.mean():.2f}x ± {gm.std():.2f} / {100 * f1.mean():.0f}% / "
            f"{100 * co.mean():.0f}% / {rg.mean():.2f}")

  lines = [f"{len(tasks)} tasks, {len(seeds)} paired seeds; cells = geo-mean speedup over the "
           "default (± std over seeds) / Fast@1 / Correct / mean simple regret vs the "
           "exhaustive oracle, at T = " + " / ".join(map(str, budgets)) + ":"]
  for m in methods:
    lines.append(f"{m}: " + " | ".join(cell(m, b) for b in range(len(budgets))) + ".")
  lines.append("Cost model: jaxlab's tile roofline (systems.md 3d) with 3% log-normal noise; "
               "strategies are local config edits (no LLM), so gaps are expected to be smaller "
               f"than the paper's. Parent rule {kb['parent_rule']!r} "
               f"({_RULE_SOURCES[kb['parent_rule']]}), temperature "
               f"{kb['parent_temperature']} over headroom in %; theta_sat {kb['theta_sat']}%.")
  for i in study.interpretations[1:]:
    lines.append(f"Parent rule {i.reading!r}: row {i.verdict}; {i.mechanism_effect}.")
  if timing_result:
    lines.append(f"CPU timing (XLA blocked equivalent, {timing_result['task']}): KernelBand "
                 f"T = {timing_result['trials']} found {timing_result['speedup']:.2f}x over the "
                 f"default ({1e3 * timing_result['default_seconds']:.2f} -> "
                 f"{1e3 * timing_result['best_seconds']:.2f} ms).")
  return study.finish(
      method="KernelBand (bandit kernel autotuning)", paper_claim=PAPER_CLAIM,
      baseline="; ".join(f"{m}: {cell(m, bi)}" for m in benchmark.BASELINES if m in methods)
      or "no baseline run",
      ours=f"{METHOD}: {cell(METHOD, bi)}" if METHOD in methods else "kernelband not run",
      details=" ".join(lines),
      results=dict(
          experiment="kernelband", preset=config.preset, seeds=seeds, methods=methods,
          budgets=budgets, tasks=[t.name for t in tasks], oracle_seconds=oracle, summary=summ,
          per_method=per_method, per_reading=per_reading, tuning_file=tuning_path,
          tuning_entries=len(table), timing=timing_result,
          config=json.loads(config.to_json_best_effort())))
