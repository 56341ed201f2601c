"""Small seeded synthetic data sets with known ground truth."""

import numpy as np


def gaussian_blobs(n: int, *, num_classes: int = 3, dim: int = 2, spread: float = 3.0,
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """`n` points from `num_classes` isotropic unit Gaussians.

  Returns:
    (x float32 [n, dim], y int32 [n], centers float32 [num_classes, dim]).

  Example:
    >>> x, y, centers = gaussian_blobs(10, num_classes=2, dim=3)
    >>> x.shape, y.shape, centers.shape
    ((10, 3), (10,), (2, 3))
  """
  if n < 1 or num_classes < 1 or dim < 1:
    raise ValueError(f"n, num_classes and dim must be >= 1, got {n}, {num_classes}, {dim}")
  rng = np.random.default_rng(seed)
  centers = rng.normal(scale=spread, size=(num_classes, dim))
  y = rng.integers(0, num_classes, size=n)
  x = centers[y] + rng.normal(size=(n, dim))
  return x.astype(np.float32), y.astype(np.int32), centers.astype(np.float32)


def linear_regression(n: int, dim: int, *, noise: float = 0.0,
                      seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """`y = x @ w + noise`: returns (x [n, dim], y [n], w [dim]), float32.

  Example:
    >>> x, y, w = linear_regression(5, 3)
    >>> bool(np.allclose(x @ w, y, atol=1e-5))  # noise=0: exact
    True
  """
  if n < 1 or dim < 1 or noise < 0:
    raise ValueError(f"need n, dim >= 1 and noise >= 0, got {n}, {dim}, {noise}")
  rng = np.random.default_rng(seed)
  w = rng.normal(size=dim)
  x = rng.normal(size=(n, dim))
  y = x @ w + noise * rng.normal(size=n)
  return x.astype(np.float32), y.astype(np.float32), w.astype(np.float32)
