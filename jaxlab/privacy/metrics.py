"""Utility and privacy metrics of privacy-aware anomaly detection (numpy / sklearn / scipy).

* `snippet_auc`: utility, ROC AUC of snippet anomaly scores against snippet labels.
* `face_probe_accuracy`: FPD / PD, the k-fold accuracy of a linear-SVM face-presence probe
  trained on (projected) features; lower = more private, chance = the majority rate.
* `score_kl` (ARD): KL(P_raw || P_proj) between Gaussian KDEs of the anomaly scores before
  and after projection, integrated numerically on a grid; lower = utility kept.
* SSC lives beside the projection (`jaxlab.privacy.projection.subspace_similarity`).

Example:
  >>> import numpy as np
  >>> snippet_auc(np.array([0.1, 0.9, 0.2, 0.8]), np.array([0, 1, 0, 1]))
  1.0
"""

import numpy as np
from jaxtyping import Bool, Float, Int
from scipy import stats
from sklearn import model_selection, pipeline, preprocessing, svm
from sklearn.metrics import roc_auc_score


def _finite(name: str, x: np.ndarray) -> np.ndarray:
  x = np.asarray(x, np.float64)
  if not np.all(np.isfinite(x)):
    raise ValueError(f"{name} holds non-finite values (a diverged model?)")
  return x


def snippet_auc(scores: Float[np.ndarray, "..."], labels: Bool[np.ndarray, "..."]
                | Int[np.ndarray, "..."]) -> float:
  """ROC AUC of snippet scores (any shape) against binary snippet labels of the same shape.

  Example:
    >>> import numpy as np
    >>> labels = np.array([[0, 1, 0], [1, 0, 0]])
    >>> snippet_auc(np.array([[0.1, 0.9, 0.2], [0.8, 0.3, 0.4]]), labels)
    1.0
    >>> snippet_auc(np.array([[0.1, 0.3, 0.2], [0.8, 0.9, 0.4]]), labels)
    0.625
  """
  scores = _finite("scores", scores)
  labels = np.asarray(labels)
  if scores.shape != labels.shape:
    raise ValueError(f"scores {scores.shape} and labels {labels.shape} must have one shape")
  if np.unique(labels).size != 2:
    raise ValueError("labels must contain both classes for an AUC")
  return float(roc_auc_score(labels.ravel().astype(int), scores.ravel()))


def face_probe_accuracy(features: Float[np.ndarray, "n d"], faces: Bool[np.ndarray, " n"]
                        | Int[np.ndarray, " n"], *, folds: int = 5, c: float = 1.0,
                        seed: int = 0) -> float:
  """Mean k-fold accuracy of a LinearSVC predicting face presence from features.

  Features are standardised inside each fold (the probe's attacker may rescale freely).

  Args:
    features: one row per snippet (e.g. after the first privacy layer).
    faces: face presence per row.
    folds: stratified folds (jaxlab interpretation: 5).
    c: the SVM's regularisation C.
    seed: fold shuffling seed.

  Returns:
    Accuracy in [0, 1]; compare with `chance_rate(faces)`.

  Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> y = rng.random(200) < 0.5
    >>> x = rng.standard_normal((200, 4)) + 3.0 * y[:, None]
    >>> face_probe_accuracy(x, y) > 0.95
    True
  """
  x = _finite("features", features)
  y = np.asarray(faces).astype(int)
  if x.ndim != 2 or y.shape != (x.shape[0],):
    raise ValueError(f"features must be [n, d] and faces [n]; got {x.shape}, {y.shape}")
  if np.bincount(y, minlength=2).min() < folds:
    raise ValueError(f"each class needs >= {folds} rows for {folds}-fold probing")
  probe = pipeline.make_pipeline(preprocessing.StandardScaler(),
                                 svm.LinearSVC(C=c, dual="auto", max_iter=5000))
  cv = model_selection.StratifiedKFold(folds, shuffle=True, random_state=seed)
  return float(np.mean(model_selection.cross_val_score(probe, x, y, cv=cv)))


def chance_rate(faces: Bool[np.ndarray, " n"] | Int[np.ndarray, " n"]) -> float:
  """The accuracy of always guessing the majority class (a probe's chance level).

  Example:
    >>> chance_rate(np.array([True, False, False, False]))
    0.75
  """
  y = np.asarray(faces).astype(int)
  return float(max(y.mean(), 1.0 - y.mean()))


def score_kl(raw: Float[np.ndarray, " n"], projected: Float[np.ndarray, " m"], *,
             grid_size: int = 512, floor: float = 1e-10) -> float:
  """ARD: KL(P_raw || P_proj) between Gaussian KDEs (Scott's bandwidth) of two score sets.

  Both densities are evaluated on one grid spanning both samples plus three bandwidths,
  floored at `floor` (so a missing mode gives a large finite KL, never inf) and
  renormalised on the grid.

  Example:
    >>> import numpy as np
    >>> x = np.random.default_rng(0).standard_normal(500)
    >>> score_kl(x, x) == 0.0, score_kl(x, x + 2.0) > 1.0
    (True, True)
  """
  a, b = _finite("raw", raw).ravel(), _finite("projected", projected).ravel()
  if a.size < 2 or b.size < 2:
    raise ValueError("score_kl needs >= 2 scores per set")
  # A constant score set has no KDE bandwidth: jitter it by a negligible, fixed amount.
  def kde(x):
    if np.ptp(x) == 0.0:
      x = x + 1e-6 * np.linspace(-1.0, 1.0, x.size)
    return stats.gaussian_kde(x)

  ka, kb = kde(a), kde(b)
  bw = 3.0 * max(np.sqrt(ka.covariance[0, 0]), np.sqrt(kb.covariance[0, 0]))
  grid = np.linspace(min(a.min(), b.min()) - bw, max(a.max(), b.max()) + bw, grid_size)
  p, q = np.maximum(ka(grid), floor), np.maximum(kb(grid), floor)
  p, q = p / p.sum(), q / q.sum()
  return float(np.sum(p * np.log(p / q)))
