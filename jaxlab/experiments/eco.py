"""Experiment `eco`: training without master weights (the ECO paper; notes: quantization.md §2).

(a) Convex toy (least squares, uniform grid, SGDM): distance of the deployed
on-grid weights to the optimum, per arm, learning rate and problem, averaged
over the last 10% of the steps; the master arm (FP32 master weights,
gradients through the RTN-quantized forward, ECO's reference) deploys
Q_RTN(W_master), so every arm is measured on grid weights and shares the floor
|Q(w*) - w*| (jaxlab interpretation of the toy's metric). Gradients are exact
(full batch), H = curvature * A^T A / rows.
(b) Tiny byte LM with FP8 E4M3 / INT4 weights and AdamW, one run per arm and
seed (`config.seeds`, paired across arms), through the whole warmup-cosine
schedule: val bits/byte at mid-run and at the end, static bytes per parameter
(params + optimizer state, counted from the actual pytrees), and a
memory-vs-loss Pareto plot. Arms: master (FP32 master + quantized forward),
naive-RTN, naive-SR, ECO-RTN, ECO-SR, exact-EF (SR). The master arm evaluates
Q_RTN(W_master) (the weights its quantized forward uses); 1-D leaves stay FP32
in every arm (`lm.min_ndim`).

Both studies are `jaxlab.optim.master_free`'s; each toy arm and LM (format, arm, seed)
is a cached arm of a `jaxlab.study.Study`. The criteria (configs/eco.py) are judged on
`_measure`'s per-seed values; static bytes are facts.
"""

import functools
import math
from typing import Any

import ml_collections
import numpy as np

from jaxlab import report, train
from jaxlab.optim.master_free import (
  ARMS,
  check_arms,
  convex_toy,
  lm_arms,
  lm_quantizer,
)
from jaxlab.study import Study

__all__ = ["ARMS", "convex_toy", "run"]


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Runs the convex toy and the tiny-LM study, judges the config's criteria; writes results.json."""
  L = config.lm
  check_arms(L.arms, "lm.arms")  # before the toy: a typo in lm.* must not wait for it
  for fmt in L.formats:
    lm_quantizer(fmt)
  n_lm = len(L.formats) * len(L.arms) * len(config.seeds)
  study = Study(config, workdir, key=config.experiment, total=len(config.toy.arms) + n_lm)
  toy_key = ({k: v for k, v in config.toy.items() if k != "arms"}, config.seed)
  lm_key = (config.data, config.model, config.train, config.optimizer, config.eval,
            {k: v for k, v in L.items() if k not in ("formats", "arms")})
  # The LM's programs compile on a worker thread while the toy and the earlier arms run.
  with train.CompileAhead() as ahead:
    arms = lm_arms(config, ahead) if L.formats else {}
    toy = convex_toy(config.toy, config.seed, lambda name, fn: study.arm(name, fn, *toy_key))
    lm = {fmt: {arm: [study.arm(f"lm_{fmt}_{arm}_seed{s}", functools.partial(arms[fmt, arm],
                                                                             seed=s), *lm_key)
                      for s in study.seeds] for arm in L.arms} for fmt in L.formats}
  study.judge(_measure(toy, lm))
  _plots(study, toy, lm)

  def fmt_toy(arm):
    return ", ".join(f"{s}: {toy['table'][arm][s]['dist']:.3f}" for s in toy["settings"])

  def fmt_cos(arm):
    return ", ".join(f"{s}: {toy['table'][arm][s]['residual_cos']:.2f}" for s in toy["settings"])

  def fmt_lm(fmt, arm):
    rs = lm[fmt][arm]
    bpb = [r["val_bits_per_byte"] for r in rs]
    return (f"LM {fmt} {arm}: {np.nanmean(bpb):.4f} ± {_se(bpb):.4f} bpb (n={len(rs)}) @ "
            f"{rs[0]['bytes_per_param']:.3f} B/param")

  ours = [f"toy {a} |W-w*| {fmt_toy(a)}" for a in ("eco_rtn", "eco_sr") if a in toy["table"]]
  base = [f"toy {a} {fmt_toy(a)}" for a in ("master", "naive_rtn", "naive_sr", "exact_ef")
          if a in toy["table"]]
  for fmt, arms in lm.items():
    for arm in arms:
      (base if arm in ("master", "naive_rtn", "naive_sr") else ours).append(fmt_lm(fmt, arm))
  skipped = sum(r["skipped_updates"] for arms in lm.values() for rs in arms.values() for r in rs)
  details = (
      f"preset={config.preset}; toy: d={config.toy.dim}, grid step {config.toy.grid_step:g} "
      f"(grid floor {toy['grid_floor']:.3f}, start {toy['init_dist']:.2f}), SGDM "
      f"beta={config.toy.momentum}, {config.toy.num_steps} steps, |W-w*| averaged over the last "
      f"{config.toy.tail_fraction:.0%} of steps, {len(toy['seeds'])} problems (the toy "
      f"criteria's paired seeds), master gradients through the {config.toy.master_forward} "
      f"forward; cosine of consecutive residuals e_t, e_t+1 (ECO's premise E_t ~ E_t+1) per "
      "lr: " + "; ".join(f"{a} {fmt_cos(a)}" for a in ("eco_rtn", "eco_sr") if a in toy["table"])
      + f". LM: {config.train.num_steps} steps of batch {config.train.batch_size} x "
      f"{config.train.seq_len} bytes, {config.optimizer.schedule} (peak "
      f"{config.optimizer.learning_rate:g}, warmup {config.optimizer.warmup_steps}, end "
      f"{config.optimizer.end_frac:g} x peak) run to its end; seeds {tuple(config.seeds)} paired "
      f"across arms (init, data order, SR stream); updates ECO skipped as non-finite: {skipped}. "
      "Criteria are judged on paired seeds (effect ± SE, 2 SE rule); static bytes are facts. "
      "The paper's own loss numbers were not retrieved.")
  return study.finish(
      method="ECO: quantized training without FP32 master weights (arXiv 2601.22101)",
      paper_claim=("\"ECO matches baselines with master weights up to near-lossless accuracy, "
                   "significantly shifting the static memory vs validation loss Pareto "
                   "frontier\"; \"converges to a constant-radius neighborhood of the optimum, "
                   "while naive master-weight removal can incur an error that is inversely "
                   "proportional to the learning rate\""),
      baseline="; ".join(base), ours="; ".join(ours), details=details, facts=_facts(lm),
      results={"toy": toy, "lm": lm})


def _measure(toy: dict, lm: dict) -> dict[str, Any]:
  """Per-seed values of every criterion whose arms ran (paired by seed, NaN = missing)."""
  m: dict[str, Any] = {}
  t = toy["table"]
  settings = toy["settings"]
  consts = settings[:-1]

  def per_seed(arm, s):
    return np.asarray(t[arm][s]["dist_per_seed"], np.float64)

  if "master" in t:
    for arm, name in (("eco_sr", "toy_eco_sr_within_2x"), ("eco_rtn", "toy_eco_rtn_within_2x")):
      if arm in t:
        m[name] = np.max([per_seed(arm, s) / per_seed("master", s) for s in settings], axis=0)
    small = [s for s in consts if float(s) <= 1e-3]
    if "naive_rtn" in t and small:
      m["toy_naive_rtn_stalls"] = np.min(
          [per_seed("naive_rtn", s) / per_seed("master", s) for s in small], axis=0)
  if "naive_sr" in t and len(consts) >= 2:
    by_lr = sorted(consts, key=float)
    m["toy_naive_sr_grows"] = per_seed("naive_sr", by_lr[0]) / per_seed("naive_sr", by_lr[-1])

  def bpb(fmt, arm, key="val_bits_per_byte"):
    return np.asarray([r[key] for r in lm[fmt][arm]], np.float64)

  for fmt, tag in (("fp8_e4m3", "fp8"), ("int4", "int4")):
    arms = lm.get(fmt, {})
    if "eco_sr" in arms and "master" in arms:
      m[f"lm_{tag}_near_lossless"] = (bpb(fmt, "eco_sr"), bpb(fmt, "master"))
    if "eco_sr" in arms and "naive_rtn" in arms:
      m[f"lm_{tag}_pareto_vs_naive"] = (bpb(fmt, "eco_sr"), bpb(fmt, "naive_rtn"))
  fp8 = lm.get("fp8_e4m3", {})
  if "naive_rtn" in fp8 and "master" in fp8:
    m["lm_fp8_naive_degrades"] = (bpb("fp8_e4m3", "naive_rtn"), bpb("fp8_e4m3", "master"))
    gain = {a: bpb("fp8_e4m3", a) - bpb("fp8_e4m3", a, "val_bits_per_byte_mid")
            for a in ("naive_rtn", "master")}
    m["lm_fp8_naive_decay_gap"] = (gain["naive_rtn"], gain["master"])
  return m


def _facts(lm: dict) -> list[report.Fact]:
  """Static bytes per parameter, counted from the pytrees: true by construction."""
  facts = []
  for fmt, arms in lm.items():
    bpp = {a: rs[0]["bytes_per_param"] for a, rs in arms.items()}
    for a, v in bpp.items():
      facts.append(report.Fact(f"{fmt}_{a}_bytes", f"{fmt} {a}: static bytes per parameter "
                               "(params + optimizer state)", round(v, 3), "B/param"))
    if "master" in bpp and "eco_sr" in bpp:
      facts.append(report.Fact(
          f"{fmt}_eco_memory_saving", f"{fmt}: ECO's static memory below master-weight AdamW "
          "(the spec: ~25%, 9 vs 12 B/param)", round(1.0 - bpp["eco_sr"] / bpp["master"], 4)))
  return facts


def _plots(study: Study, toy: dict, lm: dict) -> None:
  consts = toy["settings"][:-1]
  lrs = [float(s) for s in consts]

  def draw_toy(ax):
    for arm, row in toy["table"].items():
      ax.plot(lrs, [row[s]["dist"] for s in consts], marker="o", label=arm)
    ax.axhline(toy["grid_floor"], color="gray", ls="--", label="grid floor |Q(w*)-w*|")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("final |W - w*| (deployed, on grid)")
    ax.legend(fontsize=7)
  study.plot("eco_toy.png", draw_toy)

  if lm:
    def draw_pareto(ax):
      for k, (fmt, arms) in enumerate(lm.items()):
        for arm, rs in arms.items():
          bpb = [r["val_bits_per_byte"] for r in rs]
          ax.errorbar(rs[0]["bytes_per_param"], np.nanmean(bpb), yerr=_se(bpb),
                      marker="os"[k % 2], color=f"C{list(arms).index(arm)}",
                      label=f"{fmt} {arm}")
      ax.set_xlabel("static bytes / parameter (params + optimizer state)")
      ax.set_ylabel("val bits / byte (mean +- SE over seeds)")
      ax.legend(fontsize=6)
    study.plot("eco_pareto.png", draw_pareto)


def _se(x) -> float:  # standard error of the finite values
  x = np.asarray(x, np.float64)
  x = x[np.isfinite(x)]
  return float(x.std(ddof=1) / math.sqrt(x.size)) if x.size >= 2 else math.nan
