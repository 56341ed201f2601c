"""MoDEX reproduction on sklearn digits: MoDEX vs F-EDL vs EDL vs softmax.

In-distribution: digits 0-5. Near-OOD: digits 6-9. Far-OOD: uniform noise
(within each pixel's training range) and pixel-permuted ID test digits.
Variants of the training set: `standard`, `long_tail` (class sizes
`n_max * rho^(rank/(K-1))`, rho = 0.1, random class order per seed) and
`ambiguous` (adds 50/50 blends of two ID digits with soft labels, a
DirtyMNIST analogue; a held-out set of blends is evaluated too).

All four models share the MLP backbone and the optimizer; each (variant,
model) pair is trained for all seeds at once (`jax.vmap` over seeds inside one
jitted `lax.scan`). Reported per model as mean +- std over seeds: accuracy,
ECE, Brier, misclassification AUROC (max probability), OOD AUROC with EU
(sum of variances) and MI (mutual information) scores for near and far OOD.
The criteria are declared in `configs/modex.py` (the spec's ordering
MoDEX >= F-EDL > EDL, and MoDEX vs softmax) and judged once by
`jaxlab.report.judge_all` on paired seeds: every model trains on the same
seeds' data splits, and a seed's value is its OOD AUROC averaged over the
training variants and OOD sets (`measure`).

Data, models and metrics are library code (`jaxlab.uq.digits_ood`,
`jaxlab.uq.classifiers`, `jaxlab.uq.evaluation`). Each (variant, model) cell
is one arm of a `jaxlab.study.Study`, cached in `workdir`, so an interrupted run
resumes where it stopped.
"""

import functools
from collections.abc import Sequence
from typing import Any

import ml_collections
import numpy as np

from jaxlab.study import Study, mean_std
from jaxlab.uq.classifiers import DIRICHLET_MODELS, MODELS, make_model, predict
from jaxlab.uq.classifiers import train as train_classifier
from jaxlab.uq.digits_ood import OOD_SETS, VARIANTS, build_datasets, toy_2d
from jaxlab.uq.evaluation import train_and_evaluate

__all__ = ["DIRICHLET_MODELS", "MODELS", "OOD_SETS", "VARIANTS", "build_datasets", "make_model",
           "measure", "predict", "run", "toy_2d", "train_classifier"]


def measure(summary: dict[str, dict[str, dict[str, Any]]],
            variants: Sequence[str]) -> dict[str, tuple[np.ndarray, np.ndarray] | None]:
  """Per-seed (method, baseline) values of every criterion in `configs/modex.py`.

  Args:
    summary: variant -> model -> metric -> {"values": per-seed list, ...} (`summarise`).
    variants: the training variants run.

  Returns:
    criterion name -> (method [seeds], baseline [seeds]), seed order kept; None where
    the run does not measure it (the hard-variant gap needs `standard` and another
    variant). A seed whose metric is NaN stays NaN and counts as missing.
  """

  def per_seed(model: str, score: str) -> np.ndarray:
    # Mean over variants x OOD sets; NaN in any cell makes the seed missing.
    cells = [summary[v][model][f"{o}_auroc_{score}"]["values"] for v in variants
             for o in OOD_SETS]
    return np.mean(np.asarray(cells, np.float64), axis=0)

  def acc(model: str) -> np.ndarray:
    return np.mean([summary[v][model]["accuracy"]["values"] for v in variants], axis=0)

  out = {
      "modex_vs_fedl": (per_seed("modex", "eu"), per_seed("fedl", "eu")),
      "fedl_vs_edl": (per_seed("fedl", "eu"), per_seed("edl", "eu")),
      "modex_vs_softmax": (per_seed("modex", "eu"), per_seed("softmax", "msp")),
      "modex_vs_fedl_mi": (per_seed("modex", "mi"), per_seed("fedl", "mi")),
      "fedl_vs_edl_mi": (per_seed("fedl", "mi"), per_seed("edl", "mi")),
      "accuracy_vs_fedl": (acc("modex"), acc("fedl")),
      "gap_hard_variants": None,
  }
  hard = [v for v in ("long_tail", "ambiguous") if v in variants]
  if "standard" in variants and hard:
    def gap(vs):
      return np.mean([np.mean([np.asarray(summary[v]["modex"][f"{o}_auroc_eu"]["values"])
                               - np.asarray(summary[v]["fedl"][f"{o}_auroc_eu"]["values"])
                               for o in OOD_SETS], axis=0) for v in vs], axis=0)
    out["gap_hard_variants"] = (gap(hard), gap(["standard"]))
  return out


# ------------------------------------------------------------------------------- run


def _fmt(s: dict[str, float]) -> str:
  return mean_std(s, sep="+-")


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Trains the four models on every variant and seed; reports UQ metrics and the ordering."""
  for name in config.models:
    if name not in MODELS:
      raise ValueError(f"config.models: unknown model {name!r}; expected from {MODELS}")
  for name in config.variants:
    if name not in VARIANTS:
      raise ValueError(f"config.variants: unknown variant {name!r}; expected from {VARIANTS}")
  missing = [m for m in MODELS if m not in config.models]
  if missing:
    raise ValueError(f"config.models must include {MODELS}: the criteria compare them all; "
                     f"missing {missing}")
  if len(config.seeds) < 2:
    raise ValueError(f"seeds must name at least two seeds (paired SE), got {config.seeds}")
  # Everything that determines a cell besides its (variant, model) name.
  study = Study(config, workdir, key=(config.seeds, config.data, config.model, config.train,
                                      config.optimizer, config.eval.num_bins))
  seeds = study.seeds  # distinct: a repeated seed would be an identical "pair"
  datasets = [build_datasets(config, s) for s in seeds]
  cells = study.arms({f"{v}/{m}": functools.partial(train_and_evaluate, m, config, datasets,
                                                    seeds, v)
                      for v in config.variants for m in config.models})
  summary = {v: {m: cells[f"{v}/{m}"]["summary"] for m in config.models} for v in config.variants}
  row_verdict, criteria = study.judge(measure(summary, config.variants))
  head = "standard" if "standard" in config.variants else config.variants[0]
  _plot_ood(study, summary[head], config.models, head)
  if "ambiguous" in config.variants:
    _plot_ambiguity(study, summary["ambiguous"])

  s = summary[head]
  lines = [f"preset={config.preset}; {len(seeds)} paired seeds {seeds}; variants="
           f"{list(config.variants)}; {config.train.num_steps} Adam steps of batch "
           f"{config.train.batch_size}; backbone MLP 64->"
           f"{'->'.join(str(h) for h in config.model.hidden)}; MoDEX loss="
           f"{config.train.modex_loss}. Criteria: per seed, OOD AUROC averaged over variants x "
           "OOD sets; MoDEX/F-EDL/EDL with EU (MI secondary), softmax with max probability."]
  for v in config.variants:
    for m in config.models:
      r = summary[v][m]
      ood = "; ".join(
          f"{o} EU {_fmt(r[f'{o}_auroc_eu'])} MI {_fmt(r[f'{o}_auroc_mi'])}" if m != "softmax"
          else f"{o} MSP {_fmt(r[f'{o}_auroc_msp'])} H {_fmt(r[f'{o}_auroc_entropy'])}"
          for o in OOD_SETS)
      lines.append(f"[{v}] {m}: acc {_fmt(r['accuracy'])}, mis-AUROC {_fmt(r['mis_auroc'])}, "
                   f"ECE {_fmt(r['ece'])}; OOD AUROC: {ood}")
  by_name = {c.name: c for c in criteria}

  def mean_auroc(name: str, which: str) -> str:
    v = getattr(by_name[name], f"{which}_mean")
    return "n/a" if v is None else f"{v:.3f}"
  return study.finish(
      method="MoDEX (mixture of Dirichlet experts) vs F-EDL / EDL / softmax, digits 0-5",
      paper_claim="OOD detection with EU/MI: MoDEX >= F-EDL > EDL (and softmax), at similar "
                  "accuracy",
      baseline=(f"OOD AUROC (mean of variants x OOD sets): F-EDL EU "
                f"{mean_auroc('modex_vs_fedl', 'baseline')}, EDL EU "
                f"{mean_auroc('fedl_vs_edl', 'baseline')}, softmax MSP "
                f"{mean_auroc('modex_vs_softmax', 'baseline')}; [{head}] acc F-EDL "
                f"{_fmt(s['fedl']['accuracy'])}"),
      ours=(f"MoDEX EU {mean_auroc('modex_vs_fedl', 'method')}; [{head}] near-OOD AUROC(EU) "
            f"{_fmt(s['modex']['near_ood_auroc_eu'])}, noise "
            f"{_fmt(s['modex']['noise_auroc_eu'])}, permuted "
            f"{_fmt(s['modex']['permuted_auroc_eu'])}; acc {_fmt(s['modex']['accuracy'])}"),
      details="\n".join(lines),
      results={"summary": summary, "verdict": row_verdict, "seeds": seeds})


def _plot_ood(study: Study, s: dict[str, Any], models: Sequence[str], variant: str) -> str:
  def draw(ax):
    width = 0.8 / len(models)
    for i, m in enumerate(models):
      key = "auroc_msp" if m == "softmax" else "auroc_eu"
      means = [s[m][f"{o}_{key}"]["mean"] for o in OOD_SETS]
      stds = [s[m][f"{o}_{key}"]["std"] for o in OOD_SETS]
      label = f"{m} ({'MSP' if m == 'softmax' else 'EU'})"
      ax.bar(np.arange(len(OOD_SETS)) + (i - (len(models) - 1) / 2) * width, means, width,
             yerr=stds, capsize=2, label=label)
    ax.set_xticks(range(len(OOD_SETS)), ["near OOD (6-9)", "uniform noise", "permuted"])
    ax.set_ylabel("OOD AUROC (mean +- std over seeds)")
    ax.set_ylim(0.5, 1.0)
    ax.set_title(f"digits 0-5, {variant} training set")
    ax.legend(fontsize=7, loc="lower right")
  return study.plot("modex_ood_auroc.png", draw)


def _plot_ambiguity(study: Study, s: dict[str, Any]) -> str:
  sets = ("id", "ambiguous", "near_ood", "noise")
  fields = ("aleatoric", "epistemic_within", "epistemic_disagreement")

  def draw(ax):
    width = 0.8 / len(fields)
    for i, f in enumerate(fields):
      vals = [s["modex"][f"mean_{f}_{name}"]["mean"] for name in sets]
      ax.bar(np.arange(len(sets)) + (i - 1) * width, vals, width, label=f)
    ax.set_xticks(range(len(sets)), ["ID test", "blended", "digits 6-9", "noise"])
    ax.set_ylabel("mean uncertainty (MoDEX)")
    ax.set_yscale("log")
    ax.set_title("MoDEX uncertainty split, ambiguous variant")
    ax.legend(fontsize=7)
  return study.plot("modex_uncertainty_split.png", draw)
