"""The density-estimation data of the VT-PC reproduction: 2-D / 3-D toys and small tabular sets.

All offline and seeded: sklearn's generators (moons, circles, swiss roll, S-curve) and
bundled tables (wine 13-D, diabetes 10-D, breast cancer 30-D, features only), plus the
usual 2-D flow benchmarks written in numpy (pinwheel, checkerboard, two spirals, as in
the FFJORD toy-data code). `load` splits at random 70/15/15 and standardises every
split with the training split's mean and standard deviation.
"""

from typing import NamedTuple

import numpy as np
import sklearn.datasets

TOYS_2D = ("moons", "circles", "pinwheel", "checkerboard", "spirals")
TOYS_3D = ("swiss_roll", "s_curve")
TABULAR = ("wine", "diabetes", "breast_cancer")
DATASETS = TOYS_2D + TOYS_3D + TABULAR


class Splits(NamedTuple):
  """Standardised float32 splits [N, D] of one data set."""
  train: np.ndarray
  val: np.ndarray
  test: np.ndarray


def _pinwheel(n: int, rng: np.random.Generator) -> np.ndarray:
  radial_std, tangential_std, num_classes, rate = 0.3, 0.1, 5, 0.25
  rads = np.linspace(0, 2 * np.pi, num_classes, endpoint=False)
  feats = rng.normal(size=(n, 2)) * np.array([radial_std, tangential_std])
  feats[:, 0] += 1.0
  labels = rng.integers(0, num_classes, n)
  angles = rads[labels] + rate * np.exp(feats[:, 0])
  rot = np.stack([np.cos(angles), -np.sin(angles), np.sin(angles), np.cos(angles)], axis=1)
  return 2.0 * np.einsum("ni,nij->nj", feats, rot.reshape(n, 2, 2))


def _checkerboard(n: int, rng: np.random.Generator) -> np.ndarray:
  x1 = rng.uniform(size=n) * 4 - 2
  x2 = rng.uniform(size=n) - rng.integers(0, 2, n) * 2.0
  x2 = x2 + np.floor(x1) % 2
  return np.stack([x1, x2], axis=1) * 2


def _spirals(n: int, rng: np.random.Generator) -> np.ndarray:
  t = np.sqrt(rng.uniform(size=n // 2)) * 540 * (2 * np.pi) / 360
  a = np.stack([-np.cos(t) * t, np.sin(t) * t], axis=1) + rng.uniform(size=(n // 2, 2))
  x = np.concatenate([a, -a], axis=0)
  x = np.concatenate([x, x[: n - x.shape[0]]], axis=0)  # odd n: repeat one point
  return x / 3 + rng.normal(size=x.shape) * 0.1


def raw(name: str, num_points: int, seed: int) -> np.ndarray:
  """The unstandardised points [N, D] of data set `name` (tabular sets ignore num_points).

  Example::

    raw("moons", 1000, seed=0).shape  # (1000, 2)
  """
  if name not in DATASETS:
    raise ValueError(f"Unknown data set {name!r}; expected one of {DATASETS}")
  if name not in TABULAR and num_points < 20:
    raise ValueError(f"num_points must be >= 20, got {num_points}")
  rng = np.random.default_rng(seed)
  rs = int(rng.integers(0, 2**31 - 1))
  if name == "moons":
    return sklearn.datasets.make_moons(num_points, noise=0.05, random_state=rs)[0]
  if name == "circles":
    return sklearn.datasets.make_circles(num_points, noise=0.05, factor=0.5, random_state=rs)[0]
  if name == "pinwheel":
    return _pinwheel(num_points, rng)
  if name == "checkerboard":
    return _checkerboard(num_points, rng)
  if name == "spirals":
    return _spirals(num_points, rng)
  if name == "swiss_roll":
    return sklearn.datasets.make_swiss_roll(num_points, noise=0.05, random_state=rs)[0]
  if name == "s_curve":
    return sklearn.datasets.make_s_curve(num_points, noise=0.05, random_state=rs)[0]
  loader = {"wine": sklearn.datasets.load_wine, "diabetes": sklearn.datasets.load_diabetes,
            "breast_cancer": sklearn.datasets.load_breast_cancer}[name]
  return np.asarray(loader().data, np.float64)


def load(name: str, num_points: int, seed: int, fractions=(0.7, 0.15, 0.15)) -> Splits:
  """Data set `name`, split at random (seeded) and standardised with the train statistics.

  Args:
    name: one of `DATASETS`.
    num_points: points drawn for generated sets (tabular sets keep their size).
    seed: seeds the draw and the split.
    fractions: train / val / test fractions (sum 1).

  Returns:
    `Splits` of float32 arrays.

  Example::

    s = load("pinwheel", 2000, seed=0)
    s.train.shape, s.test.shape  # ((1400, 2), (300, 2))
  """
  if len(fractions) != 3 or min(fractions) <= 0 or abs(sum(fractions) - 1) > 1e-6:
    raise ValueError(f"fractions must be 3 positive numbers summing to 1, got {fractions}")
  x = raw(name, num_points, seed)
  perm = np.random.default_rng(seed + 1).permutation(x.shape[0])
  n_train = int(round(fractions[0] * x.shape[0]))
  n_val = int(round(fractions[1] * x.shape[0]))
  train, val, test = np.split(x[perm], [n_train, n_train + n_val])
  mean, std = train.mean(0), train.std(0)
  std = np.where(std > 0, std, 1.0)
  f = lambda a: ((a - mean) / std).astype(np.float32)
  return Splits(f(train), f(val), f(test))


def gaussian_fit_ll(train: np.ndarray, test: np.ndarray) -> float:
  """Mean test log-likelihood (nats) of the maximum-likelihood Gaussian of `train`.

  The trivial density model (full covariance, fit in closed form): a circuit whose test
  log-likelihood does not beat it has learned no shape, so comparisons between such
  circuits carry no signal. A 1e-6 ridge keeps the covariance of collinear columns
  invertible.

  Args:
    train: points [N, D] (N >= 2) the Gaussian is fit to.
    test: points [M, D] it is evaluated on.

  Returns:
    mean_m log N(test_m; mean(train), cov(train)).

  Example::

    s = load("moons", 1000, seed=0)
    gaussian_fit_ll(s.train, s.test)  # about -2.8: close to a standard normal's -2.84
  """
  train, test = np.asarray(train, np.float64), np.asarray(test, np.float64)
  if train.ndim != 2 or test.ndim != 2 or train.shape[1] != test.shape[1] or len(train) < 2:
    raise ValueError(f"train [N >= 2, D] and test [M, D] must share D, got {train.shape} and "
                     f"{test.shape}")
  d = train.shape[1]
  mean = train.mean(0)
  cov = np.atleast_2d(np.cov(train, rowvar=False, bias=True)) + 1e-6 * np.eye(d)
  chol = np.linalg.cholesky(cov)
  z = np.linalg.solve(chol, (test - mean).T)  # [D, M]
  log_det = 2.0 * np.sum(np.log(np.diag(chol)))
  return float(np.mean(-0.5 * (d * np.log(2 * np.pi) + log_det + np.sum(z ** 2, axis=0))))
