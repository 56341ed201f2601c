"""EB / EB+ batching: the simulator reproduction on a backend EB+ does not see.

Claims under test (Zhang et al., ICML 2026, spec: systems.md Sec. 1), declared
as criteria in `configs/ebplus.py` and judged on paired workload seeds by
`jaxlab.study.Study`:
  * Fig. 4: EB beats MB on RTX PRO 6000 in all three synthetic workloads
    (prefill-heavy +41.9%), and H200 is within a few percent;
  * Table 4: EB+ equals MB at low concurrency and EB at high concurrency;
  * EB+ is never more than ~0.5% below the better pure mode in a steady workload;
  * Table 5: EB+ over MB under distribution / concurrency shift (+37.5% RTX);
  * the EB gain falls as bandwidth grows (0.8 -> 8 TB/s);
  * Prop. 4's crossover predicts the faster of MB / EB, checked on the tiny
    JAX engine (`jaxlab.serving.engine`) with its own step model calibrated on
    this machine, against always predicting MB.

The simulated sections (`jaxlab.serving.sections`, one arm per workload seed)
run on the physics roofline (`cost.RooflineModel`); EB and EB+ decide with the
linear model fitted to it by the paper's calibration sweep, so a gain is
measured outside the model EB+ decides with (`sim.backend="linear"` runs the
old in-model variant). What is true by
construction (the crossover shares b was refitted to hit, the crossover share
of the fit EB+ sees) is reported as a `Fact`.
"""

import functools
import math
from typing import Any

import ml_collections
import numpy as np

from jaxlab import report
from jaxlab.serving.engine_grid import run_engine_grid
from jaxlab.serving.sections import (
    BACKENDS,
    GPUS,
    WORKLOADS,
    crossover_shares,
    gpu_models,
    run_seed,
    table4_ablation,
    table4_summary,
)
from jaxlab.study import Study

__all__ = ["GPUS", "WORKLOADS", "facts", "gpu_models", "measure", "run", "run_seed"]


def _nan_if_failed(fn, seed: int) -> dict[str, Any] | None:
  """A seed whose run raises (a KV overflow, a scheduler stall) is recorded as missing, not dropped."""
  try:
    return fn()
  except (RuntimeError, FloatingPointError) as e:
    return {"failed": f"seed {seed}: {type(e).__name__}: {e}"}


def measure(per_seed: list[dict[str, Any] | None], config: ml_collections.ConfigDict) -> dict[str, Any]:
  """Per-seed values of every criterion (seed order; NaN where a seed failed or a section is off)."""
  sim = config.sim
  c_lo, c_hi = min(sim.table4_concurrency), max(sim.table4_concurrency)

  def per(fn):
    vals = []
    for s in per_seed:
      try:
        vals.append(float(fn(s)))
      except (KeyError, TypeError):  # a failed seed or a section that was not run
        vals.append(math.nan)
    return vals

  def steady(s):
    cells = list(s["fig4"].values()) + list(s["table4"].values())
    return min(v["ebplus_over_best"] for v in cells)

  def bw(s):
    sweep = sorted(s["bandwidth_sweep"], key=lambda x: x["bandwidth_tbs"])
    return sweep[0]["eb_over_mb"] / sweep[-1]["eb_over_mb"]

  measured = {
      "fig4_rtx": per(lambda s: min(s["fig4"][f"RTX PRO 6000/{wl.name}"]["eb_over_mb"] for wl in WORKLOADS)),
      "fig4_h200": per(lambda s: max(abs(s["fig4"][f"H200/{wl.name}"]["eb_over_mb"] - 1) for wl in WORKLOADS)),
      "table4_low": per(lambda s: min(s["table4"][f"{g}/c={c_lo}"]["ebplus_over_mb"] for g in GPUS)),
      "table4_high": per(lambda s: min(s["table4"][f"{g}/c={c_hi}"]["ebplus_over_eb"] for g in GPUS)),
      "ebplus_vs_best": per(steady),
      "table5_rtx": per(lambda s: s["table5"]["RTX PRO 6000/distribution"]["ebplus_over_mb"]),
      "table5_h200": per(lambda s: s["table5"]["H200/distribution"]["ebplus_over_mb"]),
      "table5_conc_rtx": per(lambda s: s["table5"]["RTX PRO 6000/concurrency"]["ebplus_over_mb"]),
      "bandwidth": per(bw),
  }
  if config.engine.enabled:
    measured["engine_prop4"] = (per(lambda s: s["engine"]["accuracy"]),
                                per(lambda s: s["engine"]["always_mb_accuracy"]))
    measured["engine_ebplus"] = per(lambda s: s["engine"]["median_ebplus_over_best"])
  return {k: v for k, v in measured.items() if k in config.criteria}


def facts(shares: dict[str, dict[str, float]], sim: ml_collections.ConfigDict) -> list[report.Fact]:
  """What holds by construction: reported beside the criteria, never judged."""
  out = [report.Fact(f"refit_share_{g.split()[0].lower()}",
                     f"crossover share of the paper's {g} calibration with b refitted to the paper's "
                     f"r-dagger {shares[g]['target']:g} (a refit target)", round(shares[g]["calibrated"], 4))
         for g in GPUS]
  out += [report.Fact(f"shipped_share_{g.split()[0].lower()}",
                      f"crossover share of the authors' shipped {g} calibration", round(shares[g]["shipped"], 4))
          for g in GPUS]
  if sim.backend == "roofline":
    out += [report.Fact(f"seen_share_{g.split()[0].lower()}",
                        f"crossover share of the linear model EB/EB+ fit to the {g} roofline "
                        f"(kappa={sim.roofline_kappa:g}); the paper's r-dagger is unreachable by the fit",
                        round(shares[g]["scheduler_model"], 4)) for g in GPUS]
  return out


def _mean(xs) -> float:
  xs = [x for x in xs if x is not None and math.isfinite(x)]
  return float(np.mean(xs)) if xs else math.nan


def run(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  """Runs every section per seed (one `Study` arm per seed) and judges the declared criteria."""
  sim = config.sim
  if sim.backend not in BACKENDS:
    raise ValueError(f"sim.backend must be one of {BACKENDS}, got {sim.backend!r}")
  # Table 4's criteria compare the lowest with the highest concurrency and the bandwidth one
  # the lowest with the highest bandwidth: one value would judge a point against itself (after
  # the whole simulation, or as a crash in `measure` for an empty list).
  if len(set(sim.table4_concurrency)) < 2:
    raise ValueError(f"sim.table4_concurrency needs >= 2 distinct concurrencies, got "
                     f"{tuple(sim.table4_concurrency)}")
  if len(set(config.sweep.bandwidths_tbs)) < 2:
    raise ValueError(f"sweep.bandwidths_tbs needs >= 2 distinct bandwidths, got "
                     f"{tuple(config.sweep.bandwidths_tbs)}")
  study = Study(config, workdir, key=(sim, config.sweep, config.engine, config.seed),
                total=len(config.seeds) + bool(config.engine.enabled))
  seeds = study.seeds
  runs = study.arms({f"seed_{s}": functools.partial(_nan_if_failed, functools.partial(
      run_seed, config, s), s) for s in seeds})
  per_seed = [runs[f"seed_{s}"] for s in seeds]
  if config.engine.enabled:
    # One compiled engine and one calibration on this machine; the grid runs once per workload
    # seed. A seed whose simulated sections failed keeps its engine result.
    engine = study.arm("engine", lambda: run_engine_grid(config.engine, config.seed,
                                                         workload_seeds=seeds), seeds)
    for s, e in zip(per_seed, engine["per_seed"], strict=True):
      s["engine"] = e
  else:
    engine = {"status": "not measured"}
  shares = crossover_shares(sim)
  ablation = table4_ablation(sim, seeds[0])
  study.judge(measure(per_seed, config))
  fact_list = facts(shares, sim)

  ok = [s for s in per_seed if "failed" not in s]
  first = ok[0] if ok else None
  if first is not None:
    study.plot("table4.png", lambda ax: _plot_table4(ax, ok, sim))
    study.plot("bandwidth_sweep.png", lambda ax: _plot_sweep(ax, ok))

  def avg(fn):
    return _mean([fn(s) for s in ok])

  rtx_pf = avg(lambda s: s["fig4"]["RTX PRO 6000/prefill-heavy"]["eb_over_mb"] - 1)
  rtx_t5 = avg(lambda s: s["table5"]["RTX PRO 6000/distribution"]["ebplus_over_mb"] - 1)
  h200 = {wl.name: avg(lambda s, w=wl: s["fig4"][f"H200/{w.name}"]["eb_over_mb"] - 1) for wl in WORKLOADS}
  worst = avg(lambda s: min(v["ebplus_over_best"] for v in list(s["fig4"].values())
                            + list(s["table4"].values())) - 1)
  mb_pf = avg(lambda s: s["fig4"]["RTX PRO 6000/prefill-heavy"]["throughput"]["MB"])
  bw_gains = [avg(lambda s, i=i: sorted(s["bandwidth_sweep"], key=lambda x: x["bandwidth_tbs"])[i]
                  ["eb_over_mb"] - 1) for i in range(len(config.sweep.bandwidths_tbs))]
  failed = [s["failed"] for s in per_seed if "failed" in s]
  backend_text = (f"roofline backend (kappa={sim.roofline_kappa:g}); EB/EB+ decide with the linear model "
                  f"fitted to it by the paper's calibration sweep" if sim.backend == "roofline" else
                  "in-model linear backend (the shipped calibrations, b refitted to r-dagger 0.8 / 0.2)")
  details = (
      f"{len(seeds)} paired workload seeds {seeds}; {backend_text}. Steady-state throughput of "
      f"{sim.num_requests} completions after a warm-up of {sim.warmup_per_client:g}c, the server kept at "
      f"concurrency c (Fig. 4 at c={sim.fig4_concurrency}); Table 5 {sim.table5_requests_per_phase} requests "
      f"per phase. Seed means: RTX prefill-heavy EB {rtx_pf:+.1%} (paper +41.9%); H200 EB/MB - 1 "
      + ", ".join(f"{k} {v:+.1%}" for k, v in h200.items())
      + f"; worst EB+ gap to the better pure mode {worst:+.2%}; Table 5 RTX distribution EB+ {rtx_t5:+.1%} "
      f"(paper +37.5%); EB gain by bandwidth {config.sweep.bandwidths_tbs} TB/s: "
      + ", ".join(f"{g:+.1%}" for g in bw_gains) + ". "
      + (f"Failed seeds (counted as missing): {'; '.join(failed)}. " if failed else "")
      + table4_summary(ablation, min(sim.table4_concurrency), max(sim.table4_concurrency))
      + _engine_summary([s.get("engine") for s in per_seed])
      + "jaxlab interpretations: MB steps priced at the recent decode share; occupancy EMA weights; "
      "roofline kappa fixed (0.8/0.2 unreachable by the roofline fit); engine EB+ evaluation period "
      "and occupancy floor scaled down to the tiny runs.")
  return study.finish(
      method="EB / EB+ batching (threshold-based exclusive batching)",
      paper_claim="EB+ matches the better of MB/EB at every load (within ~0.5%); EB gains where "
                  "MB interference is high (RTX prefill-heavy +41.9%); Table 5 EB+ over v1 +37.5% (RTX); "
                  "the gain falls with bandwidth; Prop. 4 predicts the faster mode",
      baseline=f"MB (vLLM v1 chunked prefill): RTX prefill-heavy {mb_pf:.0f} tok/s (roofline)",
      ours=f"EB {rtx_pf:+.1%} on RTX prefill-heavy; EB+ worst gap {worst:+.2%}; Table 5 RTX EB+ {rtx_t5:+.1%}",
      details=details, facts=fact_list,
      results={
          "experiment": "ebplus", "preset": config.preset, "seeds": seeds, "config": config.to_dict(),
          "per_seed": per_seed, "crossover_shares": shares, **ablation,
          "fig4": first["fig4"] if first else {}, "table4": first["table4"] if first else {},
          "table5": first["table5"] if first else {},
          "bandwidth_sweep": first["bandwidth_sweep"] if first else [],
          "engine": {k: v for k, v in engine.items() if k != "per_seed"}})


def _engine_summary(engs: list[dict | None]) -> str:
  engs = [e for e in engs if e]
  if not engs:
    return "The tiny JAX engine grid was not measured. "
  e0 = engs[0]
  return (f"Tiny JAX engine ({e0['cells_total']} (mu_L, mu_O, c) cells per seed, medians of {e0['repeats']} "
          f"interleaved runs): Prop. 4 predicted the faster of MB/EB in "
          f"{[e['matches'] for e in engs]} of {e0['cells_total']} cells per seed (always-MB "
          f"{[round(e['always_mb_accuracy'] * e['cells_total']) for e in engs]}); median EB/MB "
          f"{_mean([e['median_eb_over_mb'] for e in engs]):.3f}, EB+/best "
          f"{_mean([e['median_ebplus_over_best'] for e in engs]):.3f}; engine crossover share "
          f"{_mean([e['calibration']['crossover_share'] for e in engs]):.2f}; timing noise floor (EB+ running "
          f"MB's exact steps vs MB) {_mean([e['noise_floor'] for e in engs]):.1%}. ")


def _plot_table4(ax, per_seed, sim):
  cs = list(sim.table4_concurrency)
  for g, ls in (("H200", "-"), ("RTX PRO 6000", "--")):
    for k, color in (("MB", "C0"), ("EB", "C1"), ("EB+", "C2")):
      ax.plot(cs, [_mean([s["table4"][f"{g}/c={c}"]["throughput"][k] for s in per_seed]) for c in cs], ls,
              color=color, marker="o", label=f"{g} {k}")
  ax.set_xscale("log")
  ax.set_xlabel("concurrency c")
  ax.set_ylabel("tokens/s (simulated, seed mean)")
  ax.set_title("Table 4 load sweep (mu_L=512, mu_O=256)")
  ax.legend(fontsize=6)


def _plot_sweep(ax, per_seed):
  for i, s in enumerate(per_seed):
    sweep = sorted(s["bandwidth_sweep"], key=lambda x: x["bandwidth_tbs"])
    ax.plot([x["bandwidth_tbs"] for x in sweep], [100 * (x["eb_over_mb"] - 1) for x in sweep], marker="o",
            color="C0", alpha=0.6, label="per seed" if i == 0 else None)
  ax.axhline(0, color="k", lw=0.5)
  ax.set_xlabel("HBM bandwidth (TB/s)")
  ax.set_ylabel("EB gain over MB (%)")
  ax.set_title("Roofline bandwidth sweep (balanced, H200 otherwise)")
  ax.legend(fontsize=7)
