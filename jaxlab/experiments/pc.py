"""VT-PC reproduction: do Voronoi-gated circuits beat their base EinsumNet, and at what certainty?

For each data set (2-D / 3-D toys, sklearn tabular sets; `jaxlab.pc.datasets`) and seed,
the base EinsumNet, the HFV-PC and the VT-PC share one circuit shape and are trained and
scored by `jaxlab.pc.evaluation.run_dataset` (seeds paired across models: same split, same
initialisation key; vmapped). A full-covariance Gaussian fit to each training split is the
floor the base circuit must beat, and on the 2-D sets a strip quadrature of the VT
normaliser (`bounds.strip_log_z_2d`) checks the certified bracket. Each data set is one arm
of a `jaxlab.study.Study`, so a killed run resumes.
"""

import json

import numpy as np

from jaxlab.pc import datasets
from jaxlab.pc.evaluation import (
    MODELS,
    bracket_violation,
    draw_anytime,
    draw_densities,
    draw_gate_gap,
    make_model,
    run_dataset,
    summary_table,
)
from jaxlab.presets import split_names
from jaxlab.report import Fact
from jaxlab.study import Study, mean_std

__all__ = ["MODELS", "make_model", "run", "run_dataset"]

PAPER_CLAIM = ("A VT sum node (Voronoi-gated mixture) makes circuits geometry-aware: HFV-PCs stay "
               "exactly tractable and match the base circuit, VT-PCs get certified likelihood "
               "bounds whose lower bound beats the base in low dimension while the bound gap "
               "widens with dimension (Table 1)")
# Paper Table 1 (test LL, nats; EinsumNet rows) for the report's side-by-side.
PAPER_ANCHORS = {"power (6D)": (0.56, 0.56, 1.73, 3.46), "gas (8D)": (5.85, 5.86, 7.13, 9.76),
                 "hepmass (21D)": (-22.35, -22.32, -22.98, -4.82),
                 "miniboone (43D)": (-32.24, -32.18, -32.82, -14.07)}


def _ll(per_ds: dict, name: str, kind: str, which: str = "ll") -> np.ndarray | None:
  m = per_ds[name]["models"].get(kind)
  if m is None:
    return None
  return np.asarray(m["ll_lower" if kind == "vt" and which == "ll" else
                      (which if kind == "vt" else "ll")], np.float64)


def _measure(per_ds: dict) -> dict:
  """Per-seed values of the declared criteria (absent when a model or data set is missing)."""
  two_d = [d for d in per_ds if d in datasets.TOYS_2D]
  measured = {}

  def mean_over(names, kind, which="ll"):
    vals = [_ll(per_ds, d, kind, which) for d in names]
    return None if not names or any(v is None for v in vals) else np.mean(vals, axis=0)

  base2 = mean_over(two_d, "base")
  # The floor: a Gaussian fit to each training split (.get: an arm cached before the
  # reference was recorded leaves the LL criteria not measured, never unfloored).
  gauss2 = (np.mean([per_ds[d]["gaussian_ll"] for d in two_d], axis=0)
            if two_d and all("gaussian_ll" in per_ds[d] for d in two_d) else None)
  if base2 is not None and gauss2 is not None:
    if (vt_lo := mean_over(two_d, "vt", "ll_lower")) is not None:
      measured["vt_lower_bound_beats_base_2d"] = (vt_lo, base2, gauss2)
    if (hfv := mean_over(two_d, "hfv")) is not None:
      measured["hfv_matches_base_2d"] = (hfv, base2, gauss2)
  vts = [per_ds[d]["models"].get("vt") for d in two_d]
  if two_d and all(v is not None for v in vts):
    if all("log_z_quad" in v for v in vts):
      measured["bounds_bracket_quadrature_2d"] = np.min(
          [bracket_violation(v) for v in vts], axis=0)
    gap = lambda v, i: np.asarray(v["ll_upper_curve"])[:, i] - np.asarray(v["ll_lower_curve"])[:, i]
    measured["anytime_bounds_tighten_2d"] = (np.mean([gap(v, -1) for v in vts], axis=0),
                                             np.mean([gap(v, 0) for v in vts], axis=0))
  return measured


def _gap_by_dimension(per_ds: dict) -> Fact | None:
  """The bound gap at one box budget in 2-D vs D >= 10: a fact of the budget, not a claim.

  A fixed number of bisection steps halves each side of a box ever fewer times as D grows:
  in D >= 10 the boxes stay too wide to be certified outside a cell, log Z+ keeps its value
  before refinement (log 1 = 0) and the lower bound is log f itself, so the widening
  follows from the budget. The value shows each such set's largest log Z+ to check it.
  """
  two_d = [d for d in per_ds if d in datasets.TOYS_2D]
  high = [d for d in per_ds if per_ds[d]["num_vars"] >= 10]
  vt = lambda d: per_ds[d]["models"].get("vt", {})
  if not two_d or not high or not all("gap_at_capacity_high_dim" in vt(d) for d in two_d + high):
    return None
  gap = lambda names: np.mean([np.mean(vt(d)["gap_at_capacity_high_dim"]) for d in names])
  def upper(d):
    lower_minus_log_f = np.mean(np.asarray(vt(d)["ll_lower"]) - np.asarray(vt(d)["mean_log_f"]))
    largest = float(np.max(vt(d)["log_z_hi"]))
    trivial = " (0 up to rounding: nothing certified outside a cell)" if abs(largest) < 1e-5 else ""
    return (f"{d} ({per_ds[d]['num_vars']}D): largest log Z+ {largest:.2g}{trivial}, "
            f"lower bound minus log f {lower_minus_log_f:+.2g} nats")

  return Fact(
      name="bound_gap_by_dimension",
      statement="the VT bound gap at one box budget (vt.capacity_high_dim boxes per cell), "
                "D >= 10 sets vs the 2-D toys (Table 1: ~2 nats at 6-8D, ~18 at 21-43D); "
                "where no box is certified outside a cell, log Z+ = 0 and the lower bound "
                "is log f itself",
      value=f"gap {gap(high):.2f} nats (D >= 10) vs {gap(two_d):.2f} nats (2-D); "
            + "; ".join(upper(d) for d in high))


def _facts(per_ds: dict) -> list[Fact]:
  """What holds by construction: monotone anytime bounds, Thm 3.16's gate bound, the gap by D."""
  vt_ds = [d for d in per_ds if "vt" in per_ds[d]["models"]]
  if not vt_ds:
    return []
  worst = 0.0
  for d in vt_ds:
    m = per_ds[d]["models"]["vt"]
    lo, hi = np.asarray(m["log_z_lo"]), np.asarray(m["log_z_hi"])
    worst = max(worst, float(np.max(-np.diff(lo, axis=1))), float(np.max(np.diff(hi, axis=1))))
  held = min(float(np.min(per_ds[d]["models"]["vt"]["gate_bound_holds"])) for d in vt_ds)
  facts = [Fact(name="bounds_monotone",
                statement="the anytime bounds never loosen over bisection steps",
                value=f"largest loosening {worst:.2e} nats (float32 rounding)"),
           Fact(name="gate_bound", statement="1 - w_nearest <= (K-1) exp(-alpha gamma) (Thm 3.16)",
                value=f"held on a fraction {held:.4f} of test points (worst data set and alpha)")]
  fact = _gap_by_dimension(per_ds)
  return facts + ([fact] if fact is not None else [])


def run(config, workdir: str) -> dict:
  """Runs every data set (resuming finished ones), writes results.json, returns the results."""
  names, kinds = split_names(config.datasets), split_names(config.models)
  if not names or not kinds:
    raise ValueError("config.datasets and config.models must each name at least one entry")
  for n in names:
    if n not in datasets.DATASETS:
      raise ValueError(f"Unknown data set {n!r} in config.datasets; expected {datasets.DATASETS}")
  for k in kinds:
    if k not in MODELS:
      raise ValueError(f"Unknown model {k!r} in config.models; expected {MODELS}")
  # Seeds non-empty and distinct (checked here): a repeated seed would count one pair twice.
  study = Study(config, workdir, key=(config.seeds, config.data, config.models, config.circuit,
                                      config.base, config.hfv, config.vt, config.train,
                                      config.optimizer, config.plot_grid))
  per_ds = study.arms({n: lambda n=n: run_dataset(n, config) for n in names})
  table = summary_table(per_ds)
  study.judge(_measure(per_ds))
  if any(per_ds[d]["num_vars"] == 2 for d in per_ds) and config.plot_grid:
    study.plot("pc_density.png", lambda ax: draw_densities(ax, per_ds, [
        k for k in MODELS if k in kinds]))
  if any("vt" in per_ds[d]["models"] for d in per_ds):
    study.plot("pc_anytime.png", lambda ax: draw_anytime(ax, per_ds))
    study.plot("pc_gate_gap.png", lambda ax: draw_gate_gap(ax, per_ds, config.vt.gap_alphas))

  lines = [f"Test LL (nats, mean ± std over {len(config.seeds)} paired seeds), Gaussian fit "
           "(the floor) / base / HFV / VT lower bound / VT upper bound / VT normalised by "
           "strip quadrature (2-D):"]
  for d, row in table.items():
    cells = " / ".join(mean_std(row[c], digits=2) if c in row else "-" for c in
                       ("gaussian", "base", "hfv", "vt_lower", "vt_upper", "vt_quad"))
    lines.append(f"{d} ({per_ds[d]['num_vars']}D): {cells}.")
  lines.append("Paper Table 1 (EinsumNet, base / HFV / VT lower / VT upper): " + "; ".join(
      f"{k} {' / '.join(f'{v:.2f}' for v in vals)}" for k, vals in PAPER_ANCHORS.items()) + ".")
  c, v = config.circuit, config.vt
  lines.append(
      f"Circuit: {c.num_replicas} replicas, depth min({c.max_depth}, log2 D), {c.leaf_units} "
      f"leaf / {c.sum_units} sum units, K = {c.num_channels} root channels; HFV leaves "
      f"{config.hfv.leaf_components} gated 1-D components; {config.train.num_steps} Adam steps of "
      f"{config.train.batch_size}; VT alpha {v.alpha_start} -> {v.alpha_end}; bounds after "
      f"{v.bisection_steps} bisection steps in Omega = [-{v.domain_halfwidth}, "
      f"{v.domain_halfwidth}]^D, {v.capacity} (D <= {v.low_dim_max}) / {v.capacity_high_dim} "
      "mixed boxes per cell.")
  lines.append(
      "jaxlab interpretations: HFV = VT gating at 1-D leaf scopes (interval cells, exact Z); "
      "VT trained on the soft-gated unnormalised log f (a lower bound since Z <= 1); the "
      "outer box B+ replaced by bisection from Omega; no validation checkpointing.")
  skipped = {k: int(sum(sum(per_ds[d]["models"][k].get("skipped_steps", [0])) for d in per_ds
                          if k in per_ds[d]["models"])) for k in kinds}
  lines.append("Training steps skipped for a non-finite gradient (optax.apply_if_finite), "
               "summed over data sets and seeds: " + ", ".join(f"{k} {v}" for k, v in
                                                               skipped.items()) + ".")
  two_d = [d for d in table if d in datasets.TOYS_2D]

  def mean_cell(col):
    vals = [table[d][col]["mean"] for d in two_d if col in table[d]]
    return f"{np.mean(vals):.3f}" if vals and len(vals) == len(two_d) else "n/a"

  return study.finish(
      method="VT-PC (Voronoi-tessellation probabilistic circuits)", paper_claim=PAPER_CLAIM,
      baseline=f"EinsumNet base: mean 2-D test LL {mean_cell('base')} nats",
      ours=(f"HFV {mean_cell('hfv')} nats, VT lower / upper bound {mean_cell('vt_lower')} / "
            f"{mean_cell('vt_upper')} nats (mean over the 2-D sets)"),
      details=" ".join(lines), facts=_facts(per_ds),
      results=dict(
          experiment="pc", preset=config.preset, seeds=study.seeds, datasets=names, models=kinds,
          table=table,
          per_dataset={d: {**{k: v for k, v in r.items() if k != "models"},
                           "models": {k: {f: val for f, val in m.items() if f != "density_grid"}
                                      for k, m in r["models"].items()}}
                       for d, r in per_ds.items()},
          gap_alphas=list(config.vt.gap_alphas), config=json.loads(config.to_json_best_effort())))
