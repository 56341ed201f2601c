"""Digits OOD benchmark data for classifiers with uncertainty (MoDEX, EDL, softmax).

In-distribution: a subset of sklearn's bundled digits (default 0-5). Near-OOD:
the remaining digits. Far-OOD: uniform noise (within each pixel's training
range) and pixel-permuted ID test digits. Training-set variants: `standard`,
`long_tail` (class sizes `n_max * rho^(rank/(K-1))`, random class order per
seed) and `ambiguous` (adds 50/50 blends of two ID digits with soft labels, a
DirtyMNIST analogue; held-out blends are an eval set too). `toy_2d` is a 2-D
blobs-and-ring toy for plots.
"""

from typing import Any

import ml_collections
import numpy as np
from sklearn.datasets import load_digits as sk_load_digits

from jaxlab.data import load_digits

VARIANTS = ("standard", "long_tail", "ambiguous")
OOD_SETS = ("near_ood", "noise", "permuted")


def _digits(seed: int, test_fraction: float, classes: tuple[int, ...]):
  return load_digits(seed=seed, test_fraction=test_fraction, classes=classes)


def check_data(d: ml_collections.ConfigDict) -> None:
  """ValueError naming the `config.data` key whose value would silently distort a set."""
  if not 0.0 < float(d.long_tail_rho) <= 1.0:
    # rho = 0 leaves one example per tail class, rho > 1 is no long tail (both silently).
    raise ValueError(f"config.data.long_tail_rho must lie in (0, 1], got {d.long_tail_rho}")
  if not float(d.input_clip) > 0.0:
    raise ValueError(f"config.data.input_clip must be > 0, got {d.input_clip}")
  for key in ("num_noise", "num_ambiguous_train", "num_ambiguous_test"):
    if int(d[key]) < 1:
      raise ValueError(f"config.data.{key} must be >= 1, got {d[key]}")


def build_datasets(config: ml_collections.ConfigDict, seed: int) -> dict[str, Any]:
  """The training variants and evaluation sets for one seed (numpy, float32).

  Returns:
    dict with `train`: {variant: (x [n, 64], y soft/one-hot [n, K])},
    `eval`: {"id": x, "near_ood": x, "noise": x, "permuted": x,
    "ambiguous": x}, `id_labels` [n_id] (0..K-1) and `num_classes`.

  Raises:
    ValueError: a `config.data` value that would silently distort a set (`check_data`).
  """
  dc = config.data
  check_data(dc)
  classes = tuple(int(c) for c in dc.id_classes)
  k = len(classes)
  d = _digits(seed, dc.test_fraction, classes)
  rng = np.random.default_rng(10_000 + seed)
  label_of = {c: i for i, c in enumerate(classes)}
  y_tr = np.array([label_of[int(c)] for c in d.y_train])
  y_te = np.array([label_of[int(c)] for c in d.y_test])
  clip = lambda a: np.clip(a, -dc.input_clip, dc.input_clip).astype(np.float32)
  x_tr, x_te = clip(d.x_train), clip(d.x_test)

  x_all, y_all = sk_load_digits(return_X_y=True)
  near = clip((x_all[~np.isin(y_all, classes)] - d.mean) / d.std)
  lo, hi = x_tr.min(0), x_tr.max(0)
  noise = clip(rng.uniform(lo, hi, size=(dc.num_noise, x_tr.shape[1])))
  permuted = x_te[:, rng.permutation(x_te.shape[1])]

  def blends(x, y, n):
    i = rng.integers(0, len(x), size=4 * n)
    j = rng.integers(0, len(x), size=4 * n)
    keep = np.flatnonzero(y[i] != y[j])[:n]
    i, j = i[keep], j[keep]
    soft = 0.5 * np.eye(k)[y[i]] + 0.5 * np.eye(k)[y[j]]
    return clip(0.5 * x[i] + 0.5 * x[j]), soft.astype(np.float32)

  onehot = np.eye(k, dtype=np.float32)
  train = {"standard": (x_tr, onehot[y_tr])}
  # Long tail: a random class order per seed; class at rank r keeps
  # round(n_max * rho^(r / (K - 1))) of its examples.
  order = rng.permutation(k)
  n_max = int(np.bincount(y_tr, minlength=k).min())
  keep = []
  for rank, c in enumerate(order):
    n_c = max(1, int(round(n_max * dc.long_tail_rho ** (rank / (k - 1)))))
    keep.append(np.flatnonzero(y_tr == c)[:n_c])
  keep = np.sort(np.concatenate(keep))
  train["long_tail"] = (x_tr[keep], onehot[y_tr[keep]])
  xb, yb = blends(x_tr, y_tr, dc.num_ambiguous_train)
  train["ambiguous"] = (np.concatenate([x_tr, xb]), np.concatenate([onehot[y_tr], yb]))
  amb_test, _ = blends(x_te, y_te, dc.num_ambiguous_test)
  return {"train": train, "id_labels": y_te, "num_classes": k,
          "eval": {"id": x_te, "near_ood": near, "noise": noise, "permuted": permuted,
                   "ambiguous": amb_test}}


def toy_2d(seed: int = 0, *, n_per_class: int = 100, spread: float = 0.6):
  """2-D toy: three Gaussian blobs (train) and a far ring (OOD), numpy float32.

  Returns:
    (x [3n, 2], y one-hot [3n, 3], ring [n, 2]).
  """
  rng = np.random.default_rng(seed)
  centers = np.array([[0.0, 2.0], [-1.8, -1.0], [1.8, -1.0]])
  x = np.concatenate([c + spread * rng.normal(size=(n_per_class, 2)) for c in centers])
  y = np.repeat(np.eye(3), n_per_class, axis=0)
  angle = rng.uniform(0, 2 * np.pi, size=n_per_class)
  ring = 6.0 * np.stack([np.cos(angle), np.sin(angle)], 1) + 0.2 * rng.normal(size=(n_per_class, 2))
  return x.astype(np.float32), y.astype(np.float32), ring.astype(np.float32)
