"""Gaussian Markov random fields on a grid: precision matrices and exact samplers.

A GMRF with precision Q has covariance Q^{-1}. With the Cholesky factor Q = C C^T, the
draw x = C^{-T} e (e standard normal) has Cov(x) = C^{-T} C^{-1} = Q^{-1}: one triangular
solve per draw, batched over draws.
"""

import jax
import jax.numpy as jnp
import jax.scipy.linalg
import numpy as np
from jaxtyping import Array, Float

from jaxlab.causal import _grid


def gmrf_precision(height: int, width: int, *, epsilon: float, order: int = 1,
                   kappa: float = 1.0, connectivity: int = 4) -> np.ndarray:
  """The precision Q = kappa * (L + epsilon I)^order of a grid GMRF (float64 [n, n]).

  `epsilon` is the smoothness knob: the correlation range grows like 1/sqrt(epsilon)
  (epsilon = 0.01 is smooth over a 48 x 48 grid, epsilon = 1 is rough beyond a few
  sites). `order=2` is the smoother SPDE / Matern(nu=1) discretisation (Lindgren, Rue &
  Lindstrom 2011); `order=1` is an intrinsic CAR plus a ridge, kappa (L + eps I) (jaxlab
  interpretation).

  Args:
    height: grid rows.
    width: grid columns.
    epsilon: ridge added to the Laplacian, > 0 (keeps Q positive definite).
    order: 1 or 2.
    kappa: overall precision scale, > 0.
    connectivity: 4 or 8, the Laplacian's contiguity.

  Returns:
    The symmetric positive-definite precision matrix.

  Example:
    >>> gmrf_precision(1, 2, epsilon=0.5).tolist()
    [[1.5, -1.0], [-1.0, 1.5]]
  """
  if not epsilon > 0:
    raise ValueError(f"epsilon must be > 0, got {epsilon}")
  if not kappa > 0:
    raise ValueError(f"kappa must be > 0, got {kappa}")
  if order not in (1, 2):
    raise ValueError(f"order must be 1 or 2, got {order!r}")
  lap = _grid.grid_laplacian(height, width, connectivity=connectivity)
  m = lap + epsilon * np.eye(lap.shape[0])
  return kappa * (m if order == 1 else m @ m)


def precision_cholesky(precision: np.ndarray) -> Float[Array, "n n"]:
  """The lower Cholesky factor C of a precision (Q = C C^T), computed in float64 numpy.

  Raises:
    ValueError: `precision` is not square or not positive definite.

  Example:
    >>> c = precision_cholesky(np.array([[4.0, 0.0], [0.0, 9.0]]))
    >>> c.tolist()
    [[2.0, 0.0], [0.0, 3.0]]
  """
  q = np.asarray(precision, np.float64)
  if q.ndim != 2 or q.shape[0] != q.shape[1]:
    raise ValueError(f"precision must be a square matrix, got shape {q.shape}")
  try:
    c = np.linalg.cholesky(q)
  except np.linalg.LinAlgError as e:
    raise ValueError("precision must be symmetric positive definite") from e
  return jnp.asarray(c, jnp.float32)


def sample_gmrf(key: jax.Array, chol: Float[Array, "n n"],
                num_samples: int | None = None) -> Float[Array, "*s n"]:
  """Exact draws x ~ N(0, Q^{-1}) given the Cholesky factor C of Q.

  Args:
    key: PRNG key.
    chol: lower-triangular C with Q = C C^T (`precision_cholesky`).
    num_samples: None for one draw [n], else that many draws [num_samples, n].

  Returns:
    The draws.

  Example:
    >>> c = precision_cholesky(gmrf_precision(3, 3, epsilon=0.1))
    >>> sample_gmrf(jax.random.key(0), c, 5).shape
    (5, 9)
  """
  n = chol.shape[0]
  shape = (n,) if num_samples is None else (n, int(num_samples))
  e = jax.random.normal(key, shape, chol.dtype)
  x = jax.scipy.linalg.solve_triangular(chol.T, e, lower=False)
  return x if num_samples is None else x.T


def standardize(field: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
  """Zero mean, unit standard deviation over all sites of one draw.

  jaxlab interpretation: each latent draw is standardised over its own sites so that
  the confounding strength (U's coefficients in A and Y) means the same thing at every
  smoothness; a smooth field's within-grid spread is otherwise much below its marginal
  variance.

  Example:
    >>> float(standardize(jnp.array([1.0, 3.0])).std())
    1.0
  """
  centred = field - field.mean()
  return centred / jnp.maximum(centred.std(), 1e-12)
