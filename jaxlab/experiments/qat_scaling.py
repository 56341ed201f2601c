"""QAT scaling law (W4A4) at CPU scale: delta(N, D, G), its fit, kurtosis, FC2 fix.

Every cell trains the tiny decoder from the same initial parameters on the same
batch sequence (paired runs) in full precision and with fake quantization
(`jaxlab.quant.QDense`, INT4 AbsMax + STE; the LM head and embedding stay full
precision), and measures

  delta = smoothed final train loss (quantized) - smoothed final train loss (FP32)

in nats/byte, "smoothed" = mean train loss over the last `train.smooth_frac`
of the steps (the paper's definition; val-loss deltas are stored as well).
N = non-embedding parameters (blocks + final norm; embedding and LM head
excluded: a jaxlab interpretation for an untied head), D = steps x batch x
sequence length tokens.

The grid's training is library code (`jaxlab.quant.qat_grid`: one compiled program
per model size, bits, G and steps traced, seeds vmapped; the optimizer from
`config.optimizer`); each cell is one cached arm of a `jaxlab.study.Study`, so a
killed run resumes at cell granularity.

Verdict: the criteria declared in `configs/qat_scaling.py` (delta falls with
N, rises with D, rises with G; FC2's input kurtosis is the largest; FC2-INT8
lowers delta), judged on the per-seed contrasts of `measure`. A diverged seed
is NaN (counted as missing). The signed-exponent law fit (Huber + L-BFGS, on
the seed-mean deltas) is reported beside them, not judged: with a handful of
cells its exponents are fragile.
"""

import functools
from typing import Any

import ml_collections
import numpy as np

from jaxlab import data, report
from jaxlab.quant.qat_grid import (
  LINEARS,
  check_grid,
  deltas,
  draw_deltas,
  fc2_reduction,
  fit_law,
  kurtosis_by_precision,
  make_policy,
  make_trainer,
  non_embedding_params,
  train_cells,
)
from jaxlab.study import Study

__all__ = ["LINEARS", "data", "deltas", "fit_law", "kurtosis_by_precision", "make_policy",
           "make_trainer", "measure", "non_embedding_params", "run", "train_cells"]


def _axis_contrast(rows: list[dict], precision: str, axis: str) -> tuple | None:
  """Per seed: mean delta at the largest `axis` value vs at the smallest (others averaged)."""
  sel = [r for r in rows if r["precision"] == precision]
  values = sorted({r[axis] for r in sel})
  if len(values) < 2:
    return None

  def at(v):
    return np.mean([r["delta"] for r in sel if r[axis] == v], axis=0)
  return at(values[-1]), at(values[0])



def measure(config: ml_collections.ConfigDict, rows: list[dict],
            kurt: dict[str, dict[str, Any]]) -> dict[str, Any]:
  """Per-seed (method, baseline) values of every criterion in `configs/qat_scaling.py`.

  Args:
    config: the experiment config (its grid says which axes were swept).
    rows: `deltas(...)`, per-seed deltas of every cell.
    kurt: `kurtosis_by_precision(...)`.

  Returns:
    criterion name -> (method [seeds], baseline [seeds]) in seed order, or None when the
    grid does not measure it (one model size: no N contrast; one FC2 group size: no
    coarse-vs-fine comparison; no W4A16 / W16A4 runs).
  """
  gr = config.grid

  def fc2_pair(g):
    base = np.mean([r["delta"] for r in rows if r["precision"] == "W4A4" and r["g"] == g], 0)
    fixed = np.mean([r["delta"] for r in rows if r["precision"] == "W4A4+FC2int8"
                     and r["g"] == g], 0)
    return fixed, base

  fc2_groups = sorted(int(g) for g in gr.fc2_group_sizes)
  missing = [g for g in fc2_groups if g not in set(int(x) for x in gr.group_sizes)]
  if missing:
    raise ValueError(f"grid.fc2_group_sizes {missing} need W4A4 cells at the same G; add them "
                     "to grid.group_sizes")

  def top_vs_others(table):
    others = np.max([table[k] for k in LINEARS if k != "FC2"], axis=0)
    return np.asarray(table["FC2"], np.float64), others

  out = {"delta_falls_with_n": _axis_contrast(rows, "W4A4", "n"),
         "delta_rises_with_d": _axis_contrast(rows, "W4A4", "d"),
         "delta_rises_with_g": _axis_contrast(rows, "W4A4", "g"),
         "fc2_kurtosis_top_fp32": top_vs_others(kurt["FP32"]),
         "fc2_kurtosis_top_w4a4": top_vs_others(kurt["W4A4"]),
         "fc2_int8_lowers_delta": fc2_pair(fc2_groups[-1]) if fc2_groups else None,
         "fc2_gain_larger_at_coarse_g": None, "w16a4_above_w4a16": None}
  if len(fc2_groups) >= 2:
    (cf, cb), (ff, fb) = fc2_pair(fc2_groups[-1]), fc2_pair(fc2_groups[0])
    out["fc2_gain_larger_at_coarse_g"] = (cb - cf, fb - ff)
  if {"W4A16", "W16A4"} <= set(gr.precisions):
    # "At small D/N": the smallest budget, averaged over sizes and G.
    d0 = min(r["d"] for r in rows)

    def at(p):
      return np.mean([r["delta"] for r in rows if r["precision"] == p and r["d"] == d0], 0)
    out["w16a4_above_w4a16"] = (at("W16A4"), at("W4A16"))
  return out


def _plots(study: Study, rows: list[dict], fit: dict | None) -> None:
  """delta vs N, D and G (W4A4 cells) with the fitted law."""
  for axis, fname in (("n", "delta_vs_N.png"), ("d", "delta_vs_D.png"), ("g", "delta_vs_G.png")):
    study.plot(fname, functools.partial(draw_deltas, rows=rows, axis=axis, fit=fit))


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Runs the grid for every seed, judges the declared criteria, writes `results.json`."""
  check_grid(config)  # before any training
  gr = config.grid
  n_cells = len(gr.sizes) * len(gr.steps) * (
      1 + len(gr.precisions) * len(gr.group_sizes) + len(gr.fc2_group_sizes))
  # What determines a cell besides its own (size, steps, precision, G, FC2) name.
  study = Study(config, workdir, total=n_cells, key=(
      config.seeds, config.data, config.model, config.quant, config.train, config.optimizer,
      config.eval))
  seeds = study.seeds
  records = train_cells(config, seeds, study.arm)
  rows = deltas(config, records)
  kurt = kurtosis_by_precision(records)
  row_verdict, _ = study.judge(measure(config, rows, kurt))
  fits = {p: fit_law(rows, p, config) for p in gr.precisions}
  fit = fits.get("W4A4")
  _plots(study, rows, fit)

  fc2 = fc2_reduction(rows, gr.fc2_group_sizes)
  w4a4 = [r["delta_mean"] for r in rows if r["precision"] == "W4A4"]
  fp_loss = [np.mean(r["fp32_train_loss"]) for r in rows if r["precision"] == "W4A4"]
  kmean = {p: {k: float(np.nanmean(v)) for k, v in t.items()} for p, t in kurt.items()}

  def fmt(v):
    return "n/a" if v is None else f"{v:+.3f}"
  fit_text = ("no fit" if fit is None else
              f"gN={fmt(fit['gamma_n'])} gD={fmt(fit['gamma_d'])} gG={fmt(fit['gamma_g'])} "
              f"k={fit['k']:.3g} R^2={fit['r2']:.2f} ({fit['num_cells']} cells, seed means)")
  tokens = config.train.batch_size * config.train.seq_len
  sizes = sorted({(r["d_model"], r["n"]) for r in rows})
  facts = [
      report.Fact("n_params", "non-embedding parameters N per size (d_model: N)",
                  ", ".join(f"{dm}: {n}" for dm, n in sizes)),
      report.Fact("d_tokens", "training tokens D per budget (steps x batch x seq_len)",
                  ", ".join(str(int(st) * tokens) for st in gr.steps), "tokens"),
      report.Fact("paired", "seed s of every precision uses the init and batches of FP32 seed s",
                  f"{len(seeds)} seeds {seeds}")]
  return study.finish(
      method="W4A4 QAT scaling law (INT4 AbsMax + STE, tiny decoder)",
      paper_claim=("delta = k D^gD (log2 G)^gG / N^gN with gN, gD, gG > 0 (0.219, 0.075, 0.778); "
                   "FC2 input is the kurtosis outlier; FC2 input INT8 cuts delta 20.5% at G=32, "
                   "42.9% at G=256"),
      baseline=f"FP32 paired runs, smoothed train loss {np.mean(fp_loss):.3f} nats/byte (mean)",
      ours=(f"W4A4 delta mean {np.mean(w4a4):+.4f} nats/byte; fit {fit_text}; kurtosis FC2 "
            f"{kmean['FP32']['FC2']:.1f} (FP32) / {kmean['W4A4']['FC2']:.1f} (W4A4) vs max other "
            f"{max(v for k, v in kmean['FP32'].items() if k != 'FC2'):.1f}; FC2-INT8 delta "
            "reduction " + ", ".join(f"G={g}: {100 * v:.0f}%" for g, v in fc2.items())),
      details=(f"preset={config.preset}; {len(seeds)} paired seeds; "
               f"sizes={list(map(tuple, gr.sizes))} (d_model, d_ff), steps={list(gr.steps)} x "
               f"{config.train.batch_size}x{config.train.seq_len} tokens, "
               f"G={list(gr.group_sizes)}, precisions FP32 + {list(gr.precisions)}, FC2-INT8 at "
               f"G={list(gr.fc2_group_sizes)}; delta = smoothed final train loss difference vs "
               "the paired FP32 run. The criteria judge per-seed contrasts (largest vs smallest "
               "N / D / G, FC2 vs the other inputs, FC2-INT8 vs W4A4); the signed-exponent "
               "Huber+L-BFGS fit on seed means is reported, not judged. Tiny models: magnitudes "
               "do not transfer."),
      facts=facts,
      results={"rows": rows, "fits": fits, "kurtosis": kurt, "fc2_reduction": fc2,
               "seeds": seeds, "verdict": row_verdict})
