"""sklearn's bundled 8x8 digits (offline), standardized, with seeded splits."""

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Digits:
  """Standardized digits: `x_*` float32 [n, 64], `y_*` int32 [n]."""
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  mean: np.ndarray
  std: np.ndarray


def load_digits(*, seed: int = 0, test_fraction: float = 0.25,
                classes: tuple[int, ...] | None = None) -> Digits:
  """Loads sklearn digits, split with `seed`, standardized by train statistics.

  Args:
    seed: seed of the (stratified) train/test split.
    test_fraction: share of examples in the test split, in (0, 1).
    classes: keep only these labels (labels are kept as the digit values).

  Example:
    >>> digits = load_digits(classes=(0, 1))
    >>> digits.x_train.shape[1], sorted(set(digits.y_test.tolist()))
    (64, [0, 1])
  """
  if not 0.0 < test_fraction < 1.0:
    raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
  from sklearn.datasets import load_digits as _sk_load_digits
  from sklearn.model_selection import train_test_split
  x, y = _sk_load_digits(return_X_y=True)
  if classes is not None:
    bad = [c for c in classes if c not in range(10)]
    if bad or not classes:
      raise ValueError(f"classes must be a non-empty subset of 0..9, got {classes}")
    keep = np.isin(y, classes)
    x, y = x[keep], y[keep]
  x_tr, x_te, y_tr, y_te = train_test_split(
      x, y, test_size=test_fraction, random_state=seed, stratify=y)
  mean, std = x_tr.mean(0), x_tr.std(0) + 1e-6  # constant border pixels have std 0
  norm = lambda a: ((a - mean) / std).astype(np.float32)
  return Digits(norm(x_tr), y_tr.astype(np.int32), norm(x_te), y_te.astype(np.int32),
                mean.astype(np.float32), std.astype(np.float32))
