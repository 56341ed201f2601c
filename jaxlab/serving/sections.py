"""The EB / EB+ paper's simulated sections, one workload seed at a time.

Zhang et al. (ICML 2026) compare vLLM v1's mixed batching (MB), exclusive
batching (EB) and the adaptive EB+ on Qwen3-8B: Fig. 4's three synthetic
workloads, Table 4's load sweep, Table 5's distribution and concurrency shifts,
and (ours) a sweep of HBM bandwidth. `run_seed` runs them all for one workload
seed on the physics roofline backend (`cost.RooflineModel`), with EB and EB+
deciding by the linear step model fitted to that backend by the paper's
calibration sweep (`sim.backend="linear"`: both are the shipped calibration).
`sim` is the `sim` section of `configs/ebplus.py` (scheduler knobs, request
counts, concurrencies), `sweep` its `sweep` section.
"""

import dataclasses
import math
from typing import Any

import ml_collections

from jaxlab.serving import cost, simulator, solver
from jaxlab.serving import schedulers as S
from jaxlab.serving import workload as W

GPUS = {
    "H200": (cost.H200_QWEN3_8B, cost.H200_SPEC, 0.8),
    "RTX PRO 6000": (cost.RTX_PRO_6000_QWEN3_8B, cost.RTX_PRO_6000_SPEC, 0.2),
}
# The authors' calibrations before the interference refit.
SHIPPED = {"H200": cost.H200_QWEN3_8B_SHIPPED, "RTX PRO 6000": cost.RTX_PRO_6000_QWEN3_8B_SHIPPED}
WORKLOADS = (W.DECODE_HEAVY, W.BALANCED, W.PREFILL_HEAVY)
BACKENDS = ("roofline", "linear")
KINDS = ("MB", "EB", "EB+")
# Paper values (Fig. 4 RPS v1 -> EB); only printed next to ours.
PAPER_FIG4_EB_GAIN = {("RTX PRO 6000", "decode-heavy"): 6.1 / 5.3 - 1,
                      ("RTX PRO 6000", "balanced"): 9.2 / 7.7 - 1,
                      ("RTX PRO 6000", "prefill-heavy"): 0.419,
                      ("H200", "decode-heavy"): 13.8 / 14.0 - 1, ("H200", "balanced"): 20.5 / 20.3 - 1,
                      ("H200", "prefill-heavy"): 28.5 / 28.2 - 1}


def gpu_models(gpu: str, sim: ml_collections.ConfigDict) -> tuple[cost.LinearStepModel, Any]:
  """(the step model EB / EB+ decide with, the backend that prices the steps) for one GPU.

  "roofline": the backend is the physics roofline with `sim.roofline_kappa`, and
  the schedulers get the linear model fitted to its calibration sweep (what the
  paper does on a real GPU). "linear": both are the shipped calibration with b
  refitted to the paper's crossover share (the gain is then measured inside the
  schedulers' own model).

  Example:
    >>> from configs import ebplus                        # the experiment's config
    >>> sim = ebplus.get_config("smoke").sim
    >>> model, backend = gpu_models("H200", sim)
    >>> type(model).__name__, type(backend).__name__, backend.hw.name
    ('LinearStepModel', 'RooflineModel', 'H200')
  """
  if sim.backend not in BACKENDS:
    raise ValueError(f"sim.backend must be one of {BACKENDS}, got {sim.backend!r}")
  m, hw, _ = GPUS[gpu]
  if sim.backend == "linear":
    return m, m
  backend = cost.RooflineModel(hw, kappa=sim.roofline_kappa)
  return cost.calibrate_roofline(backend), backend


def _schedulers(model, sim, capacity):
  def make(kind):
    mb = S.MBScheduler(sim.max_num_seqs, sim.token_budget)
    eb = S.EBScheduler(model, sim.max_num_seqs, sim.token_budget, capacity=capacity, eps=sim.eps,
                       ifr=sim.ifr, n_form=sim.n_form)
    if kind == "MB":
      return mb
    if kind == "EB":
      return eb
    return S.EBPlusScheduler(model, mb, eb, delta=sim.delta, n_obs_up=sim.n_obs_up,
                             n_obs_down=sim.n_obs_down, crossover_theta=sim.crossover_theta)
  return make


def _run(make, kind, backend, wl, sim, capacity, seed, **kw):
  return simulator.simulate(make(kind), backend, wl, capacity=capacity, seed=seed, mb_share=sim.mb_share,
                            **kw)


def _run_steady(make, kind, backend, wl, sim, capacity, seed, *, concurrency, num_requests):
  """Steady-state throughput: `num_requests` completions measured after a warm-up of
  `sim.warmup_per_client` x c completions, with the server kept at concurrency c throughout."""
  warm = int(math.ceil(sim.warmup_per_client * concurrency))
  return _run(make, kind, backend, wl, sim, capacity, seed, concurrency=concurrency,
              num_requests=num_requests + warm, warmup_requests=warm, keep_loaded=True)


def crossover_shares(sim: ml_collections.ConfigDict) -> dict[str, dict[str, float]]:
  """Crossover decode shares: the refit paper calibrations, the shipped ones, and the fit EB+ sees.

  Example:
    >>> shares = crossover_shares(ml_collections.ConfigDict(dict(backend="linear")))
    >>> round(shares["H200"]["calibrated"], 2), round(shares["H200"]["shipped"], 3)
    (0.8, 0.365)
  """
  shares = {}
  for g, (m, _, target) in GPUS.items():
    seen, _ = gpu_models(g, sim)
    shares[g] = {"calibrated": cost.crossover_share(m), "target": target,
                 "shipped": cost.crossover_share(SHIPPED[g]), "scheduler_model": cost.crossover_share(seen)}
  return shares


def fig4_table4(sim: ml_collections.ConfigDict, seed: int) -> dict[str, Any]:
  """Fig. 4's workloads and Table 4's load sweep, MB / EB / EB+ per GPU, one workload seed.

  Example (skipped: it simulates 6 workloads x 3 schedulers and every Table 4 cell)::

    >>> from configs import ebplus  # doctest: +SKIP
    >>> out = fig4_table4(ebplus.get_config("smoke").sim, seed=0)  # doctest: +SKIP
    >>> sorted(out["fig4"])[:2], sorted(out["table4"])  # doctest: +SKIP
    (['H200/balanced', 'H200/decode-heavy'], ['H200/c=16', 'H200/c=64', 'RTX PRO 6000/c=16', 'RTX PRO 6000/c=64'])
  """
  fig4, table4 = {}, {}
  for g, (_, hw, _) in GPUS.items():
    model, backend = gpu_models(g, sim)
    cap = cost.kv_capacity_tokens(hw, memory_utilization=sim.memory_utilization)
    make = _schedulers(model, sim, cap)
    for wl in WORKLOADS:
      row = {k: _run_steady(make, k, backend, wl, sim, cap, seed, concurrency=sim.fig4_concurrency,
                            num_requests=sim.num_requests) for k in KINDS}
      th = {k: float(v.throughput) for k, v in row.items()}
      theta0 = solver.theta_cfr(model, 1.0 / wl.mu_o)
      pred = solver.crossover(model, wl.mu_l, wl.mu_o, float(row["EB+"].mean_occupancy), theta0)
      fig4[f"{g}/{wl.name}"] = {
          "throughput": th, "rps": {k: float(v.rps) for k, v in row.items()},
          "eb_over_mb": th["EB"] / th["MB"], "ebplus_over_best": th["EB+"] / max(th["MB"], th["EB"]),
          "paper_eb_gain": PAPER_FIG4_EB_GAIN[(g, wl.name)], "theta0": theta0,
          "crossover_eb_wins": pred.eb_wins, "preemptions": {k: v.preemptions for k, v in row.items()}}
    for c in sim.table4_concurrency:
      table4[f"{g}/c={c}"] = _table4_cell(make, backend, sim, cap, seed, c)
  return {"fig4": fig4, "table4": table4}


def table5(sim: ml_collections.ConfigDict, seed: int) -> dict[str, Any]:
  """Table 5: whole-run throughput under distribution and concurrency shifts, one workload seed.

  Example (skipped: it simulates both shifts, 3 schedulers, both GPUs)::

    >>> from configs import ebplus  # doctest: +SKIP
    >>> out = table5(ebplus.get_config("smoke").sim, seed=0)  # doctest: +SKIP
    >>> sorted(out), sorted(out["H200/distribution"])  # doctest: +SKIP
    (['H200/concurrency', 'H200/distribution', 'RTX PRO 6000/concurrency', 'RTX PRO 6000/distribution'], ['ebplus_over_mb', 'throughput'])
  """
  out = {}
  n_ph = sim.table5_requests_per_phase
  dist = [W.Phase(W.PREFILL_HEAVY, sim.table5_concurrency, n_ph), W.Phase(W.BALANCED, sim.table5_concurrency, n_ph),
          W.Phase(W.DECODE_HEAVY, sim.table5_concurrency, n_ph)]
  conc = [W.Phase(W.TABLE4, c, n_ph) for c in sim.table5_concurrency_phases]
  for g, (_, hw, _) in GPUS.items():
    model, backend = gpu_models(g, sim)
    cap = cost.kv_capacity_tokens(hw, memory_utilization=sim.memory_utilization)
    make = _schedulers(model, sim, cap)
    for name, phases in (("distribution", dist), ("concurrency", conc)):
      th = {k: float(_run(make, k, backend, phases, sim, cap, seed, warmup_frac=0.0).overall_throughput)
            for k in KINDS}
      out[f"{g}/{name}"] = {"throughput": th, "ebplus_over_mb": th["EB+"] / th["MB"]}
  return out


def bandwidth_sweep(sim: ml_collections.ConfigDict, sw: ml_collections.ConfigDict,
                    seed: int) -> list[dict[str, Any]]:
  """MB vs EB on the roofline backend as HBM bandwidth grows (H200 otherwise), one workload seed.

  Example:
    >>> from configs import ebplus
    >>> config = ebplus.get_config("smoke")
    >>> config.sweep.update(num_requests=8, concurrency=8)    # a tiny sweep
    >>> sweep = bandwidth_sweep(config.sim, config.sweep, seed=0)
    >>> [row["bandwidth_tbs"] for row in sweep], sorted(sweep[0]["throughput"])
    ([0.8, 8.0], ['EB', 'MB'])
  """
  sweep = []
  for bw in sw.bandwidths_tbs:
    hw = dataclasses.replace(cost.H200_SPEC, bandwidth=bw * 1e12, name=f"H200@{bw:g}TB/s")
    backend = cost.RooflineModel(hw, kappa=sw.kappa)
    lm = cost.calibrate_roofline(backend)
    cap = cost.kv_capacity_tokens(hw, memory_utilization=sim.memory_utilization)
    make = _schedulers(lm, sim, cap)
    th = {k: float(_run_steady(make, k, backend, W.BALANCED, sim, cap, seed,
                               concurrency=sw.concurrency, num_requests=sw.num_requests).throughput)
          for k in ("MB", "EB")}
    sweep.append({"bandwidth_tbs": bw, "throughput": th, "eb_over_mb": th["EB"] / th["MB"],
                  "crossover_share": cost.crossover_share(lm)})
  return sweep


def _table4_cell(make, backend, sim, capacity, seed, concurrency) -> dict:
  """MB / EB / EB+ steady-state throughput on Table 4's workload at one concurrency."""
  th = {k: float(_run_steady(make, k, backend, W.TABLE4, sim, capacity, seed, concurrency=concurrency,
                             num_requests=sim.num_requests).throughput) for k in KINDS}
  return {"throughput": th, "ebplus_over_mb": th["EB+"] / th["MB"],
          "ebplus_over_eb": th["EB+"] / th["EB"],
          "ebplus_over_best": th["EB+"] / max(th["MB"], th["EB"])}


def table4_ablation(sim: ml_collections.ConfigDict, seed: int) -> dict[str, Any]:
  """Prop. 4 at Table 4's workload for the paper's calibrations (refit and shipped b).

  With b refitted to r-dagger = 0.8, H200's left side is negative, so the
  crossover picks MB at every N. With `sim.table4_shipped`, Table 4 is also
  simulated in-model on the shipped H200 calibration (r-dagger 0.365).

  Example:
    >>> from configs import ebplus                        # the experiment's config
    >>> sim = ebplus.get_config("smoke").sim
    >>> out = table4_ablation(sim, seed=0)      # sim.table4_shipped is False: no simulation
    >>> out["table4_crossover"]["H200/refit"]["eb_wins"], out["table4_shipped"]
    (False, {})
  """
  wl, n = W.TABLE4, sim.max_num_seqs
  cross = {}
  for g, (m, _, _) in GPUS.items():
    for name, model in (("refit", m), ("shipped", SHIPPED[g])):
      x = solver.crossover(model, wl.mu_l, wl.mu_o, n, solver.theta_cfr(model, 1.0 / wl.mu_o))
      cross[f"{g}/{name}"] = {"left_us": x.left * 1e6, "right_us": x.right * 1e6,
                              "eb_wins": x.eb_wins, "crossover_share": cost.crossover_share(model)}
  runs = {}
  if sim.table4_shipped:
    m = SHIPPED["H200"]
    cap = cost.kv_capacity_tokens(cost.H200_SPEC, memory_utilization=sim.memory_utilization)
    make = _schedulers(m, sim, cap)
    for c in sim.table4_concurrency:
      runs[f"H200 shipped/c={c}"] = _table4_cell(make, m, sim, cap, seed, c)
  return {"table4_crossover": cross, "table4_shipped": runs}


def table4_summary(ablation: dict[str, Any], c_lo: int, c_hi: int) -> str:
  """One report sentence on `table4_ablation`'s output, at concurrencies `c_lo` and `c_hi`.

  Example:
    >>> from configs import ebplus                        # the experiment's config
    >>> sim = ebplus.get_config("smoke").sim
    >>> sentence = table4_summary(table4_ablation(sim, seed=0), 16, 64)
    >>> sentence[:40], "(r-dagger 0.80: MB at every N)" in sentence
    ("Paper calibrations at Table 4's workload", True)
  """
  cross, runs = ablation["table4_crossover"], ablation["table4_shipped"]
  r, sh = cross["H200/refit"], cross["H200/shipped"]
  out = (f"Paper calibrations at Table 4's workload, Prop. 4 at N=max_num_seqs: H200 left {r['left_us']:+.2f} vs "
         f"right {r['right_us']:.2f} us/token with b refitted (r-dagger {r['crossover_share']:.2f}: MB at "
         f"every N), left {sh['left_us']:+.2f} vs {sh['right_us']:.2f} with the shipped b (r-dagger "
         f"{sh['crossover_share']:.2f})")
  lo, hi = runs.get(f"H200 shipped/c={c_lo}"), runs.get(f"H200 shipped/c={c_hi}")
  if lo and hi:
    out += (f"; simulated in-model on the shipped H200 model, EB+ vs MB at c={c_lo} "
            f"{lo['ebplus_over_mb'] - 1:+.2%}, EB+ vs EB at c={c_hi} {hi['ebplus_over_eb'] - 1:+.2%}")
  return out + ". "


def run_seed(config: ml_collections.ConfigDict, seed: int) -> dict[str, Any]:
  """Every simulated section for one workload seed.

  Args:
    config: a config with the `sim` and `sweep` sections of `configs/ebplus.py`.
    seed: the workload seed (request lengths).

  Returns:
    {"fig4", "table4", "table5", "bandwidth_sweep"}: `fig4_table4`, `table5` and
    `bandwidth_sweep` of this seed.

  Example (skipped: it simulates every section, seconds of CPU)::

    >>> from configs import ebplus  # doctest: +SKIP
    >>> sorted(run_seed(ebplus.get_config("smoke"), seed=0))  # doctest: +SKIP
    ['bandwidth_sweep', 'fig4', 'table4', 'table5']
  """
  out = fig4_table4(config.sim, seed)
  out["table5"] = table5(config.sim, seed)
  out["bandwidth_sweep"] = bandwidth_sweep(config.sim, config.sweep, seed)
  return out
