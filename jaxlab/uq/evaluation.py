"""UQ metrics of one classifier from its predictions on every eval set, and seed summaries."""

from typing import Any

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
from jaxlab.uq.classifiers import DIRICHLET_MODELS, Prediction
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
