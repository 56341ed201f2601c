"""Evaluation metrics for uncertainty-aware classifiers (numpy / sklearn, not jitted).

Conventions (as in the F-EDL evaluation code): scores are *confidences*
(higher = more certain; pass `-uncertainty`). OOD detection treats
in-distribution as the positive class; misclassification detection treats
correct predictions as the positive class.

NaN rule: non-finite scores or probabilities raise ValueError (these functions
run eagerly, on numpy). Ties: a top-1 prediction is correct only when the true
class's probability is strictly the largest (`accuracy`, the ECE), so a
collapsed model with uniform probabilities gets accuracy 0, never the credit of
an argmax's first-index tie-break. AUROC / AUPR keep the usual convention for
tied scores (a tied positive-negative pair counts one half): constant scores
give exactly the chance value (AUROC 1/2, AUPR the positive rate), never more.
"""

from collections.abc import Sequence

import numpy as np
from jax import Array
from jaxtyping import Bool, Float, Int, Shaped

from jaxlab import validation


def _np1(name: str, x) -> np.ndarray:
  a = np.asarray(x, dtype=np.float64).reshape(-1)
  if not np.all(np.isfinite(a)):
    raise ValueError(f"{name} must be finite; got {int(np.sum(~np.isfinite(a)))} non-finite values")
  return a


def _bool_labels(name: str, labels) -> np.ndarray:
  """`labels` as a flat bool array; only bool or {0, 1} values are accepted."""
  y = np.asarray(labels).reshape(-1)
  if y.dtype == bool:
    return y
  if y.dtype.kind not in "biuf":
    raise ValueError(f"{name} must be bool or 0/1, got dtype {y.dtype}")
  values = np.unique(y)
  if not np.all((values == 0) | (values == 1)):
    raise ValueError(f"{name} must be bool or 0/1, got values {values[:10].tolist()}"
                     + (f" (and {values.size - 10} more)" if values.size > 10 else ""))
  return y == 1


def _binary(labels, scores) -> tuple[np.ndarray, np.ndarray]:
  y = _bool_labels("labels", labels)
  s = _np1("scores", scores)
  if y.shape != s.shape:
    raise ValueError(f"labels and scores must have the same length, got {y.shape} and {s.shape}")
  if y.all() or not y.any():
    raise ValueError("labels must contain both positives and negatives")
  return y, s


def auroc(labels: Shaped[Array | np.ndarray, "n"] | Sequence[int],
          scores: Float[Array | np.ndarray, "n"] | Sequence[float]) -> float:
  """Area under the ROC curve of `scores` for binary `labels` (sklearn).

  `labels` must be bool or 0/1 (1 = positive); other values raise ValueError.

  Example:
    >>> auroc([0, 0, 1, 1], [0.1, 0.2, 0.8, 0.9])
    1.0
  """
  from sklearn.metrics import roc_auc_score
  y, s = _binary(labels, scores)
  return float(roc_auc_score(y, s))


def aupr(labels: Shaped[Array | np.ndarray, "n"] | Sequence[int],
         scores: Float[Array | np.ndarray, "n"] | Sequence[float]) -> float:
  """Area under the precision-recall curve (average precision, sklearn).

  `labels` must be bool or 0/1 (1 = positive); other values raise ValueError.

  Example:
    >>> aupr([0, 1], [0.1, 0.9])
    1.0
  """
  from sklearn.metrics import average_precision_score
  y, s = _binary(labels, scores)
  return float(average_precision_score(y, s))


def ood_auroc(id_confidence: Float[Array | np.ndarray, "n"],
              ood_confidence: Float[Array | np.ndarray, "m"]) -> float:
  """OOD-detection AUROC with in-distribution as the positive class."""
  a, b = _np1("id_confidence", id_confidence), _np1("ood_confidence", ood_confidence)
  return auroc(np.r_[np.ones(a.shape, bool), np.zeros(b.shape, bool)], np.r_[a, b])


def ood_aupr(id_confidence: Float[Array | np.ndarray, "n"],
             ood_confidence: Float[Array | np.ndarray, "m"]) -> float:
  """OOD-detection AUPR with in-distribution as the positive class."""
  a, b = _np1("id_confidence", id_confidence), _np1("ood_confidence", ood_confidence)
  return aupr(np.r_[np.ones(a.shape, bool), np.zeros(b.shape, bool)], np.r_[a, b])


def top1_correct(probs: Float[Array | np.ndarray, "n k"],
                 labels: Int[Array | np.ndarray, "n"]) -> np.ndarray:
  """Whether each top-1 prediction is right, a tie for the top counting as wrong.

  Args:
    probs: [n, k] rows on the simplex.
    labels: [n] integer classes in [0, k).

  Returns:
    [n] bool: the true class's probability is strictly above every other class's.

  Example:
    >>> import numpy as np
    >>> top1_correct(np.array([[0.7, 0.3], [0.5, 0.5]]), np.array([0, 0])).tolist()
    [True, False]
  """
  p, y = _probs_labels(probs, labels)
  own = p[np.arange(p.shape[0]), y]
  others = np.where(np.arange(p.shape[1])[None, :] == y[:, None], -np.inf, p)
  return own > others.max(-1)


def accuracy(probs: Float[Array | np.ndarray, "n k"],
             labels: Int[Array | np.ndarray, "n"]) -> float:
  """Top-1 accuracy against integer `labels` (a tie for the top counts as wrong).

  Example:
    >>> import numpy as np
    >>> accuracy(np.array([[0.7, 0.3], [0.5, 0.5]]), np.array([0, 0]))
    0.5
  """
  return float(np.mean(top1_correct(probs, labels)))


def _probs_labels(probs, labels) -> tuple[np.ndarray, np.ndarray]:
  p = np.asarray(probs, dtype=np.float64)
  y = np.asarray(labels).reshape(-1)
  if p.ndim != 2 or p.shape[0] != y.shape[0]:
    raise ValueError(f"probs must have shape [n, k] and labels [n]; got {p.shape} and {y.shape}")
  if np.any((y < 0) | (y >= p.shape[1])):
    raise ValueError(f"labels must be in [0, {p.shape[1]}), got range [{y.min()}, {y.max()}]")
  validation.check_simplex("probs", p)
  return p, y.astype(np.int64)


def misclassification_auroc(confidence: Float[Array | np.ndarray, "n"],
                            correct: Bool[Array | np.ndarray, "n"]) -> float:
  """AUROC of `confidence` for separating correct (positive) from wrong predictions.

  Returns NaN when all predictions are correct (or all wrong): undefined.
  """
  c = _bool_labels("correct", correct)
  if c.all() or not c.any():
    return float("nan")
  return auroc(c, confidence)


def misclassification_aupr(confidence: Float[Array | np.ndarray, "n"],
                           correct: Bool[Array | np.ndarray, "n"]) -> float:
  """AUPR with correct predictions as positives (NaN if undefined)."""
  c = _bool_labels("correct", correct)
  if c.all() or not c.any():
    return float("nan")
  return aupr(c, confidence)


def expected_calibration_error(probs: Float[Array | np.ndarray, "n k"],
                               labels: Int[Array | np.ndarray, "n"],
                               *, num_bins: int = 15) -> float:
  """ECE of the max-probability confidence over `num_bins` equal-width bins.

  A prediction whose top probability is tied counts as wrong (`top1_correct`).

  Example:
    >>> import numpy as np
    >>> expected_calibration_error(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([0, 1]))
    0.0
  """
  if num_bins < 1:
    raise ValueError(f"num_bins must be >= 1, got {num_bins}")
  p, y = _probs_labels(probs, labels)
  conf = p.max(-1)
  correct = top1_correct(p, y).astype(np.float64)
  idx = np.clip(np.ceil(conf * num_bins).astype(int) - 1, 0, num_bins - 1)
  ece = 0.0
  for b in range(num_bins):
    sel = idx == b
    if sel.any():
      ece += sel.mean() * abs(correct[sel].mean() - conf[sel].mean())
  return float(ece)


def brier_score(probs: Float[Array | np.ndarray, "n k"],
                targets: Float[Array | np.ndarray, "n k"] | Int[Array | np.ndarray, "n"]) -> float:
  """Mean multi-class Brier score `||y - p||^2` (targets one-hot, soft, or integer).

  Example:
    >>> import numpy as np
    >>> brier_score(np.array([[0.5, 0.5]]), np.array([0]))
    0.5
  """
  p = np.asarray(probs, dtype=np.float64)
  t = np.asarray(targets)
  if t.ndim == 1:
    _, y = _probs_labels(p, t)
    t = np.eye(p.shape[1])[y]
  else:
    if t.shape != p.shape:
      raise ValueError(f"targets must have shape {p.shape} or [{p.shape[0]}], got {t.shape}")
    validation.check_simplex("probs", p)
    validation.check_simplex("targets", t)
  return float(np.mean(np.sum(np.square(t - p), axis=-1)))
