"""MB, EB and EB+ on the tiny JAX engine over a (mu_L, mu_O, c) grid, timed on this machine.

Calibrates the engine's own linear step model, predicts the faster of MB / EB
per cell with the crossover condition, and measures all three schedulers
interleaved on the same requests (step-wise medians over repeats).
"""

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import jax
import ml_collections
import numpy as np

from jaxlab.nn import TransformerConfig
from jaxlab.serving import cost, simulator
from jaxlab.serving import engine as E
from jaxlab.serving import schedulers as S
from jaxlab.serving import workload as W


def run_engine_grid(ecfg: ml_collections.ConfigDict, seed: int = 0,
                    workload_seeds: Sequence[int] | None = None) -> dict[str, Any]:
  """MB, EB and EB+ on the tiny JAX engine over a (mu_L, mu_O, c) grid.

  Calibrates the engine's linear step model on this machine, predicts the
  faster of MB / EB per cell with the crossover condition (N = c, CFR
  theta_0 at p = 1/mu_O), then runs the three schedulers interleaved
  (MB, EB, EB+, then EB, EB+, MB, ...) `repeats` times per cell on the same requests.
  Throughput = all tokens of the run / sum over steps of the step's median
  measured time across repeats (schedules do not depend on time, so every
  repeat runs the same step sequence; this is checked).

  `seed` seeds the engine's weights; `workload_seeds` (default `[seed]`) seed the
  request lengths. With several, the compiled engine and its calibration are
  shared, the grid runs once per workload seed, and `per_seed` holds each
  seed's summary (the top-level summary is the first seed's).

  Example:
    >>> ecfg = ml_collections.ConfigDict(dict(
    ...     model=dict(vocab_size=32, d_model=16, num_layers=1, num_heads=2, num_kv_heads=1, d_ff=32),
    ...     mu_l=(6,), mu_o=(4,), concurrency=(2,), jitter=0.5, output_dist="uniform",
    ...     token_budget=2, midpoints=False, requests_per_client=2, min_requests=4, repeats=1,
    ...     calibration_repeats=1, ebplus_eval_every=8, ebplus_n_obs_min=2.0, eb_min_samples=8,
    ...     eb_update_every=8, crossover_theta="cfr"))
    >>> # Not run in the doctests: it compiles and times the engine for several seconds.
    >>> out = run_engine_grid(ecfg)  # doctest: +SKIP
    >>> out["cells_total"], out["compiles_after_warmup"]  # doctest: +SKIP
    (1, 0)
  """
  workload_seeds = [seed] if workload_seeds is None else [int(s) for s in workload_seeds]
  if not workload_seeds:
    raise ValueError("workload_seeds must name at least one seed")
  t0 = time.time()
  mcfg = TransformerConfig(**ecfg.model.to_dict())
  slots = int(max(ecfg.concurrency))
  max_len = max(E.max_len_for(ml, mo, ecfg.jitter) for ml in ecfg.mu_l for mo in ecfg.mu_o)
  eng = E.Engine.create(mcfg, jax.random.key(seed), num_slots=slots, max_len=max_len,
                        max_tokens=ecfg.token_budget + slots, midpoints=ecfg.midpoints)
  eng.precompile()
  compiles_warm = eng.compiles
  t_compile = time.time() - t0
  model, r2, samples = E.calibrate(eng, repeats=ecfg.calibration_repeats)
  calib = {"alpha_p": model.alpha_p, "beta_p": model.beta_p, "alpha_d": model.alpha_d,
           "beta_d": model.beta_d, "mb_abc": (model.mb_a, model.mb_b, model.mb_c), "r2": r2,
           "crossover_share": cost.crossover_share(model),
           "samples": [dataclasses.astuple(x) for x in samples]}

  def make(kind, c):
    mb = S.MBScheduler(c, ecfg.token_budget)
    eb = S.EBScheduler(model, c, ecfg.token_budget, capacity=eng.capacity, min_samples=ecfg.eb_min_samples,
                       update_every=ecfg.eb_update_every)
    if kind == "MB":
      return mb
    if kind == "EB":
      return eb
    return S.EBPlusScheduler(model, mb, eb, eval_every=ecfg.ebplus_eval_every, n_obs_min=ecfg.ebplus_n_obs_min,
                             crossover_theta=ecfg.crossover_theta)

  def grid(wseed):
    cells = []
    kinds = ("MB", "EB", "EB+")
    for mu_l in ecfg.mu_l:
      for mu_o in ecfg.mu_o:
        wl = W.Workload(float(mu_l), float(mu_o), jitter=ecfg.jitter, output_dist=ecfg.output_dist)
        for c in ecfg.concurrency:
          n_req = max(ecfg.min_requests, ecfg.requests_per_client * c)
          logs = {k: [] for k in kinds}
          tokens, eb_share = {}, 0.0
          for rep in range(ecfg.repeats):
            # Interleaved, with the order rotated each repeat to cancel order effects.
            for k in kinds[rep % 3:] + kinds[:rep % 3]:
              eng.reset()
              r = simulator.simulate(make(k, c), eng, wl, concurrency=c, num_requests=n_req, seed=wseed,
                                     capacity=eng.capacity, num_slots=c, warmup_frac=0.0)
              logs[k].append(np.asarray(eng.step_log, np.float64))
              tokens[k] = r.overall_throughput * r.duration
              if k == "EB+":
                eb_share = r.eb_step_share
          # Schedules do not depend on time, so the repeats run the same steps: the
          # step-wise median over repeats filters out spikes from other load.
          med, same = {}, True
          for k in kinds:
            runs = logs[k]
            same &= all(x.shape == runs[0].shape and np.array_equal(x[:, :2], runs[0][:, :2]) for x in runs)
            if same:
              med[k] = float(tokens[k] / np.median(np.stack([x[:, 2] for x in runs]), axis=0).sum())
            else:
              med[k] = float(np.median([tokens[k] / x[:, 2].sum() for x in runs]))
          th = {k: [float(tokens[k] / x[:, 2].sum()) for x in logs[k]] for k in kinds}
          pred = E.crossover_prediction(model, mu_l, mu_o, c)
          eb_faster = med["EB"] > med["MB"]
          cells.append({"mu_l": mu_l, "mu_o": mu_o, "c": c, "throughput_median": med, "throughput_runs": th,
                        "steps": {k: int(len(logs[k][0])) for k in kinds}, "identical_repeats": bool(same),
                        "predicted_eb": bool(pred), "measured_eb_faster": bool(eb_faster),
                        "match": bool(pred == eb_faster), "eb_over_mb": med["EB"] / med["MB"],
                        "ebplus_over_mb": med["EB+"] / med["MB"],
                        "ebplus_over_best": med["EB+"] / max(med["MB"], med["EB"]),
                        "ebplus_eb_step_share": float(eb_share)})
    n = len(cells)
    matches = sum(x["match"] for x in cells)
    # Noise floor: where EB+ never left MB it ran exactly MB's steps, so |EB+/MB - 1| is timing noise.
    same_as_mb = [abs(x["ebplus_over_mb"] - 1) for x in cells if x["ebplus_eb_step_share"] == 0.0]
    floor = float(np.median(same_as_mb)) if same_as_mb else float("nan")
    decisive = [x for x in cells if not abs(x["eb_over_mb"] - 1) <= floor]
    return {"cells": cells, "cells_total": n, "matches": matches, "accuracy": matches / n,
            "noise_floor": floor, "decisive_cells": len(decisive),
            "decisive_accuracy": (sum(x["match"] for x in decisive) / len(decisive)) if decisive else float("nan"),
            "always_mb_accuracy": sum(not x["measured_eb_faster"] for x in cells) / n,
            "median_eb_over_mb": float(np.median([x["eb_over_mb"] for x in cells])),
            "median_ebplus_over_mb": float(np.median([x["ebplus_over_mb"] for x in cells])),
            "median_ebplus_over_best": float(np.median([x["ebplus_over_best"] for x in cells])),
            "repeats": ecfg.repeats, "calibration": calib}

  per_seed = [grid(w) for w in workload_seeds]
  for summary, w in zip(per_seed, workload_seeds, strict=True):
    summary["workload_seed"] = w
  return {**per_seed[0], "per_seed": per_seed,
          "repeats": ecfg.repeats, "calibration": calib, "compiles_warmup": compiles_warm,
          "compiles_after_warmup": eng.compiles - compiles_warm, "compile_seconds": t_compile,
          "seconds": time.time() - t0}
