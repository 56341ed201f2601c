"""Regular-grid helpers: adjacency and Laplacian, patches, neighbour means, Moran's I, splines.

Sites of an `height x width` grid are numbered row-major (`s = row * width + col`).
Structure that depends only on the grid's shape (adjacency, Laplacian, spline basis)
is built with numpy once, outside `jit`; everything that touches data is `jnp` and
works under `jit`/`vmap`.
"""

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

CONNECTIVITIES = (4, 8)
MORAN_WEIGHTS = ("row", "binary")


def _check_shape(height: int, width: int) -> None:
  if int(height) < 1 or int(width) < 1:
    raise ValueError(f"grid height and width must be >= 1, got {height} x {width}")


def _offsets(connectivity: int) -> list[tuple[int, int]]:
  """Neighbour offsets (drow, dcol): rook (4) or queen (8) contiguity."""
  if connectivity not in CONNECTIVITIES:
    raise ValueError(f"connectivity must be one of {CONNECTIVITIES}, got {connectivity!r}")
  rook = [(-1, 0), (1, 0), (0, -1), (0, 1)]
  return rook if connectivity == 4 else rook + [(-1, -1), (-1, 1), (1, -1), (1, 1)]


def grid_adjacency(height: int, width: int, *, connectivity: int = 4) -> np.ndarray:
  """Dense 0/1 adjacency matrix of a grid graph.

  Args:
    height: grid rows.
    width: grid columns.
    connectivity: 4 (rook: edges to up/down/left/right) or 8 (queen: also diagonals).

  Returns:
    float64 array [height * width, height * width], symmetric, zero diagonal.

  Example:
    >>> grid_adjacency(2, 2, connectivity=8).sum(1).tolist()
    [3.0, 3.0, 3.0, 3.0]
  """
  _check_shape(height, width)
  n = height * width
  w = np.zeros((n, n))
  rows, cols = np.divmod(np.arange(n), width)
  for dr, dc in _offsets(connectivity):
    r2, c2 = rows + dr, cols + dc
    ok = (r2 >= 0) & (r2 < height) & (c2 >= 0) & (c2 < width)
    w[np.arange(n)[ok], (r2 * width + c2)[ok]] = 1.0
  return w


def grid_laplacian(height: int, width: int, *, connectivity: int = 4) -> np.ndarray:
  """Graph Laplacian L = degree - adjacency of a grid (float64 [n, n]).

  Example:
    >>> grid_laplacian(1, 3).tolist()
    [[1.0, -1.0, 0.0], [-1.0, 2.0, -1.0], [0.0, -1.0, 1.0]]
  """
  w = grid_adjacency(height, width, connectivity=connectivity)
  return np.diag(w.sum(1)) - w


def extract_patches(field: Float[Array, "h w *c"], radius: int) -> Float[Array, "h w p p *c"]:
  """The (2r+1) x (2r+1) patch centred on every site, zero outside the grid.

  Args:
    field: values per site, optionally with trailing channels.
    radius: the Chebyshev radius r >= 0.

  Returns:
    patches[i, j] = field[i - r : i + r + 1, j - r : j + r + 1] (zero-padded).

  Example:
    >>> extract_patches(jnp.arange(9.0).reshape(3, 3), 1)[1, 1].tolist()
    [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]
  """
  if int(radius) < 0:
    raise ValueError(f"radius must be >= 0, got {radius}")
  h, w = field.shape[:2]
  pad = [(radius, radius), (radius, radius)] + [(0, 0)] * (field.ndim - 2)
  padded = jnp.pad(field, pad)
  size = 2 * radius + 1
  # (2r+1)^2 static slices: a fixed handful of shifted views, not a per-site loop.
  rows = [jnp.stack([padded[dr:dr + h, dc:dc + w] for dc in range(size)], axis=2)
          for dr in range(size)]
  return jnp.stack(rows, axis=2)


def interior_mask(height: int, width: int, radius: int) -> np.ndarray:
  """Bool [height, width]: True where the site's whole (2r+1)^2 patch lies inside the grid.

  Example:
    >>> interior_mask(4, 4, 1).sum()
    np.int64(4)
  """
  _check_shape(height, width)
  if int(radius) < 0:
    raise ValueError(f"radius must be >= 0, got {radius}")
  rows = (np.arange(height) >= radius) & (np.arange(height) < height - radius)
  cols = (np.arange(width) >= radius) & (np.arange(width) < width - radius)
  return rows[:, None] & cols[None, :]


def neighbour_mean(a: Float[Array, "h w"], radius: int) -> Float[Array, "h w"]:
  """Mean of `a` over each site's Chebyshev patch without the centre (in-grid sites only).

  This is the interference exposure A-bar_N: with radius 1, setting all 8 neighbours
  from 0 to 1 moves it from 0 to 1 (on interior sites).

  Args:
    a: a field, e.g. the binary treatment.
    radius: patch radius r >= 1.

  Returns:
    The mean of the (up to (2r+1)^2 - 1) in-grid neighbours of each site.

  Example:
    >>> neighbour_mean(jnp.eye(3), 1)[1, 1].item()
    0.25
  """
  if int(radius) < 1:
    raise ValueError(f"neighbour_mean needs radius >= 1, got {radius}")
  h, w = a.shape
  centre = radius * (2 * radius + 1) + radius
  flat = extract_patches(a, radius).reshape(h, w, -1)
  ones = extract_patches(jnp.ones_like(a), radius).reshape(h, w, -1)
  total = flat.sum(-1) - flat[..., centre]
  count = ones.sum(-1) - 1.0
  return total / count


def morans_i(values: Float[Array, "h w"], *, mask: Bool[Array, "h w"] | None = None,
             connectivity: int = 4, weights: str = "row") -> Float[Array, ""]:
  """Moran's I of a field on its grid graph (spatial autocorrelation of, e.g., residuals).

  I = (n / S0) * sum_ij w_ij z_i z_j / sum_i z_i^2, with z the deviations from the mean over
  the sites in `mask`, and w the grid adjacency restricted to those sites; `weights="row"`
  row-standardises w (each site's weights sum to 1, so S0 = n: esda's default), `"binary"`
  keeps 0/1 weights.

  Args:
    values: the field.
    mask: sites taking part (default: all). Pairs with a masked-out site are dropped.
    connectivity: 4 (rook) or 8 (queen) contiguity.
    weights: "row" or "binary".

  Returns:
    Moran's I (about -1/(n-1) under no autocorrelation; +1 smooth, -1 checkerboard).

  Example:
    >>> checker = (jnp.indices((4, 4)).sum(0) % 2).astype(jnp.float32)
    >>> round(float(morans_i(checker)), 4)
    -1.0
  """
  if weights not in MORAN_WEIGHTS:
    raise ValueError(f"weights must be one of {MORAN_WEIGHTS}, got {weights!r}")
  offsets = _offsets(connectivity)
  m = jnp.ones(values.shape, jnp.float32) if mask is None else mask.astype(jnp.float32)
  n = m.sum()
  z = (values - (values * m).sum() / n) * m
  h, w = values.shape
  pad_z, pad_m = jnp.pad(z, 1), jnp.pad(m, 1)

  def shifted(x, dr, dc):
    return x[1 + dr:1 + dr + h, 1 + dc:1 + dc + w]

  lag = sum(shifted(pad_z, dr, dc) for dr, dc in offsets)      # sum_j w_ij z_j
  degree = sum(shifted(pad_m, dr, dc) for dr, dc in offsets) * m
  if weights == "row":
    # Row standardisation; an isolated site (degree 0) contributes nothing (esda's rule).
    lag = lag / jnp.maximum(degree, 1.0)
    s0 = (degree > 0).sum()
  else:
    s0 = degree.sum()
  return (n / s0) * (z * lag).sum() / (z * z).sum()


def _cubic_bspline(u: np.ndarray) -> np.ndarray:
  """The cardinal cubic B-spline on [0, 4) (zero elsewhere)."""
  out = np.zeros_like(u)
  pieces = [(0, 1, lambda t: t ** 3 / 6),
            (1, 2, lambda t: (-3 * t ** 3 + 12 * t ** 2 - 12 * t + 4) / 6),
            (2, 3, lambda t: (3 * t ** 3 - 24 * t ** 2 + 60 * t - 44) / 6),
            (3, 4, lambda t: (4 - t) ** 3 / 6)]
  for lo, hi, f in pieces:
    sel = (u >= lo) & (u < hi)
    out[sel] = f(u[sel])
  return out


def spline_basis(height: int, width: int, num_basis: int) -> np.ndarray:
  """Tensor-product cubic B-spline basis on the grid's coordinates (Spatial+'s spatial term).

  Each axis gets `num_basis` uniform cubic B-splines covering [0, 1] (they sum to one
  there); the basis is their pairwise products, one column per pair.

  Args:
    height: grid rows.
    width: grid columns.
    num_basis: B-splines per axis, >= 4.

  Returns:
    float32 array [height * width, num_basis ** 2], rows in row-major site order.

  Example:
    >>> b = spline_basis(6, 5, 4)
    >>> b.shape, bool(abs(b.sum(1) - 1).max() < 1e-5)
    ((30, 16), True)
  """
  _check_shape(height, width)
  if int(num_basis) < 4:
    raise ValueError(f"num_basis must be >= 4 (cubic splines), got {num_basis}")
  step = 1.0 / (num_basis - 3)

  def axis(n):
    x = np.linspace(0.0, 1.0, n) if n > 1 else np.zeros(1)
    knots = (np.arange(num_basis) - 3) * step
    return _cubic_bspline((x[:, None] - knots[None, :]) / step + 1e-12)

  by, bx = axis(height), axis(width)
  return np.einsum("ia,jb->ijab", by, bx).reshape(height * width, -1).astype(np.float32)
