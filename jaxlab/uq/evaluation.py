"""UQ metrics of one classifier from its predictions on every eval set, and seed summaries;
`train_and_evaluate` trains a classifier on every seed at once and scores it."""

from collections.abc import Sequence
from typing import Any

import ml_collections
import numpy as np

from jaxlab.uq._metrics import (
    accuracy,
    brier_score,
    expected_calibration_error,
    misclassification_auroc,
    ood_aupr,
    ood_auroc,
    top1_correct,
)
from jaxlab.uq.classifiers import DIRICHLET_MODELS, Prediction, predict, train
from jaxlab.uq.digits_ood import OOD_SETS


def evaluate(kind: str, preds: dict[str, Prediction], id_labels: np.ndarray,
             num_bins: int = 15) -> dict[str, float]:
  """All metrics of one model and seed from its predictions on every eval set."""
  pid = preds["id"]
  correct = top1_correct(pid.probs, id_labels)
  m = {"accuracy": accuracy(pid.probs, id_labels),
       "ece": expected_calibration_error(pid.probs, id_labels, num_bins=num_bins),
       "brier": brier_score(pid.probs, id_labels),
       "mis_auroc": misclassification_auroc(pid.scores["max_prob"], correct)}
  # OOD scores: confidence = -uncertainty (ID is the positive class).
  score_names = {"msp": "max_prob", "entropy": "entropy"}
  if kind in DIRICHLET_MODELS:
    score_names.update(eu="epistemic", mi="mutual_information")
    m["mis_auroc_au"] = misclassification_auroc(-pid.scores["aleatoric"], correct)
    m["mis_auroc_eu"] = misclassification_auroc(-pid.scores["epistemic"], correct)
  for ood in OOD_SETS:
    for short, field in score_names.items():
      sign = 1.0 if field == "max_prob" else -1.0
      m[f"{ood}_auroc_{short}"] = ood_auroc(sign * pid.scores[field],
                                               sign * preds[ood].scores[field])
      if short == "eu":
        m[f"{ood}_aupr_eu"] = ood_aupr(sign * pid.scores[field], sign * preds[ood].scores[field])
  if kind in DIRICHLET_MODELS:
    for name in ("id", "ambiguous", "noise", "near_ood"):
      for field in ("aleatoric", "epistemic", "epistemic_within", "epistemic_disagreement",
                    "mi_within", "mi_disagreement"):
        m[f"mean_{field}_{name}"] = float(np.mean(preds[name].scores[field]))
  return m


def summarise(per_seed: list[dict[str, float]]) -> dict[str, dict[str, Any]]:
  """Per metric: mean and std over seeds (NaN-aware) and the per-seed values."""
  out = {}
  for key in per_seed[0]:
    vals = np.array([r[key] for r in per_seed], np.float64)
    out[key] = {"mean": float(np.nanmean(vals)) if np.isfinite(vals).any() else float("nan"),
                "std": float(np.nanstd(vals)) if np.isfinite(vals).any() else float("nan"),
                "values": vals.tolist()}
  return out


def _stack_padded(arrays: list[np.ndarray], n_pad: int) -> np.ndarray:
  out = np.zeros((len(arrays), n_pad) + arrays[0].shape[1:], np.float32)
  for i, a in enumerate(arrays):
    out[i, :len(a)] = a
  return out


def train_and_evaluate(kind: str, config: ml_collections.ConfigDict, datasets: Sequence[dict],
                       seeds: Sequence[int], variant: str) -> dict[str, Any]:
  """Trains classifier `kind` on training variant `variant` of every seed and scores it.

  The seeds train at once (`classifiers.train`, vmapped over seeds) on training sets
  padded to the longest of `config.variants`, so every variant of a model shares one
  compiled step; one forward pass scores every eval set of every seed.

  Args:
    kind: one of `classifiers.MODELS`.
    config: the experiment config (`model`, `train`, `optimizer`, `variants`,
      `eval.num_bins`).
    datasets: `digits_ood.build_datasets(config, seed)` per seed, in `seeds` order.
    seeds: the seeds (initialisation and minibatch order).
    variant: the training variant (a key of each dataset's "train").

  Returns:
    {"summary": `summarise` of the per-seed `evaluate` metrics, "final_loss": per seed,
    the mean over the last tenth of the steps, "loss_curve": the seed-mean loss at up to
    100 steps, "n_train": training rows per seed}.

  Example:
    >>> from launch.configs import load_config                   # doctest: +SKIP
    >>> from jaxlab.uq.digits_ood import build_datasets          # doctest: +SKIP
    >>> config = load_config("modex", "smoke")                   # doctest: +SKIP
    >>> data = [build_datasets(config, s) for s in (0, 1)]        # doctest: +SKIP
    >>> cell = train_and_evaluate("modex", config, data, (0, 1), "standard")  # doctest: +SKIP
    >>> cell["summary"]["accuracy"]["values"]                     # doctest: +SKIP
  """
  n_pad = max(len(d["train"][v][0]) for d in datasets for v in config.variants)
  names = list(datasets[0]["eval"])
  sizes = [len(datasets[0]["eval"][n]) for n in names]
  starts = np.cumsum([0] + sizes)[:-1]
  eval_slices = {n: slice(a, a + z) for n, a, z in zip(names, starts, sizes, strict=True)}
  x_eval = np.stack([np.concatenate([d["eval"][n] for n in names]) for d in datasets])
  x = _stack_padded([d["train"][variant][0] for d in datasets], n_pad)
  y = _stack_padded([d["train"][variant][1] for d in datasets], n_pad)
  n_valid = np.array([len(d["train"][variant][0]) for d in datasets])
  model, params, losses = train(kind, config, x, y, n_valid, seeds)
  # One forward pass over all eval sets of all seeds (one shape: compiled once).
  pred = predict(kind, model, params, x_eval, batched=True)
  per_seed = []
  for s, d in enumerate(datasets):
    preds = {name: pred.take((s, sl)) for name, sl in eval_slices.items()}
    per_seed.append(evaluate(kind, preds, d["id_labels"], config.eval.num_bins))
  losses = np.asarray(losses)
  return {"summary": summarise(per_seed),
          "final_loss": losses[:, -max(1, len(losses[0]) // 10):].mean(1).tolist(),
          "loss_curve": losses.mean(0)[:: max(1, losses.shape[1] // 100)].tolist(),
          "n_train": n_valid.tolist()}
