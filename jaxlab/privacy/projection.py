"""OPL: a learnable orthogonal projection that removes a k-dimensional subspace from features.

OPL (Wang et al., ICML 2026) learns W in R^{k x d}; every forward pass takes the reduced QR
W^T = Q R (Q in R^{d x k}, orthonormal columns) and outputs f - Q Q^T f, i.e. it applies the
projector P = I - Q Q^T. Nothing but the host loss defines the removed subspace; G-OPL adds
`face_alignment_loss`, which pulls Q Q^T f toward the face-crop embedding on frames with a
face, so the subspace removed is the face subspace.

Two modes (jaxlab interpretation: with an exact QR at every step the paper's L_orth is ~0):

* "qr": Q from `jnp.linalg.qr` (exact, differentiable for tall d x k); the orthogonality
  penalty ||Q^T Q - I||_F^2 is then ~0 by construction.
* "direct": Q = W^T with unit-norm columns; columns are not orthogonal, so Q Q^T is only an
  approximate projector and the penalty λ_orth ||Q^T Q - I||_F^2 does the work.

A rank mask lets one parameter shape serve every k (`max_rank` rows, the first `rank` used):
Gram-Schmidt order makes the first k columns of QR(W^T) depend only on the first k rows of W,
so masking the later columns gives exactly the rank-k OPL, and a sweep over k compiles once.

Example:
  >>> import jax, jax.numpy as jnp
  >>> w = jax.random.normal(jax.random.key(0), (4, 16))
  >>> q = orthonormal_basis(w)
  >>> p = projector(q)
  >>> bool(jnp.allclose(p @ p, p, atol=1e-5)), q.shape
  (True, (16, 4))
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from jax.typing import DTypeLike
from jaxtyping import Array, Bool, Float, Int

from jaxlab import validation

MODES = ("qr", "direct")
_EPS = 1e-8


def _check_mode(mode: str) -> None:
  if mode not in MODES:
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


@jax.custom_vjp
def reduced_qr_q(a: Float[Array, "d k"]) -> Float[Array, "d k"]:
  """Q of the reduced QR a = Q R (d >= k), with a closed-form reverse-mode gradient.

  The VJP is the standard one for a tall reduced QR (Walter & Lehmann 2018; Liao et al.
  2019): with M = -Qbar^T Q (R Rbar^T = 0 since only Q is used),
  abar = (Qbar + Q copyltu(M)) R^{-T}, copyltu(M) = tril(M) + tril(M, -1)^T. It equals
  autodiff through `jnp.linalg.qr` (tested) but avoids its JVP-then-transpose path, which
  was ~8x slower on a 2-core CPU for 128 x 64 matrices.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> a = jax.random.normal(jax.random.key(0), (6, 3))
    >>> bool(jnp.allclose(reduced_qr_q(a), jnp.linalg.qr(a)[0]))
    True
  """
  return jnp.linalg.qr(a, mode="reduced")[0]


def _qr_fwd(a):
  q, r = jnp.linalg.qr(a, mode="reduced")
  return q, (q, r)


def _qr_bwd(res, q_bar):
  q, r = res
  m = -(q_bar.T @ q)
  copyltu = jnp.tril(m) + jnp.tril(m, -1).T
  b = q_bar + q @ copyltu
  # b R^{-T}: solve R x^T = b^T (R upper triangular).
  return (jax.scipy.linalg.solve_triangular(r, b.T, lower=False).T,)


reduced_qr_q.defvjp(_qr_fwd, _qr_bwd)


def rank_mask(max_rank: int, rank: int | Int[Array, ""] | None) -> Float[Array, " k"]:
  """1.0 for the first `rank` of `max_rank` columns, 0.0 after (all ones when rank is None).

  A rank outside [0, max_rank] is never clamped: a concrete one (a Python or
  numpy int, a jax array outside `jit`) raises a ValueError; a traced one
  (under `jit` / `vmap`) gives an all-NaN mask, so the projection it masks is
  NaN, not the full-rank (or rank-0) one.

  Args:
    max_rank: the number of columns, >= 1.
    rank: an integer scalar in [0, max_rank], or None (every column).

  Returns:
    float32 [max_rank].

  Raises:
    ValueError: `rank` is not an integer scalar, or a concrete `rank` lies
      outside [0, max_rank].

  Example:
    >>> rank_mask(4, 2).tolist()
    [1.0, 1.0, 0.0, 0.0]
    >>> import jax
    >>> jax.jit(lambda r: rank_mask(4, r))(9).tolist()
    [nan, nan, nan, nan]
  """
  if rank is None:
    return jnp.ones((max_rank,), jnp.float32)
  if np.ndim(rank) != 0 or isinstance(rank, bool) or not jnp.issubdtype(
      jnp.result_type(rank), jnp.integer):
    raise ValueError(f"rank must be an integer scalar, got {rank!r}")
  r = validation.concrete(rank)
  if r is not None and not 0 <= r <= max_rank:
    raise ValueError(f"rank must lie in [0, max_rank={max_rank}], got {r.item()}")
  rank = jnp.asarray(rank)
  mask = (jnp.arange(max_rank) < rank).astype(jnp.float32)
  return jnp.where((rank >= 0) & (rank <= max_rank), mask, jnp.nan)


def orthonormal_basis(w: Float[Array, "k d"], *, mode: str = "qr",
                      rank: int | Int[Array, ""] | None = None) -> Float[Array, "d k"]:
  """The basis Q of the removed subspace from the OPL parameter W (rows = directions).

  Args:
    w: the learnable W, [k, d] with k < d (k = max rank when `rank` masks it).
    mode: "qr" (reduced QR of W^T, orthonormal Q) or "direct" (W^T, unit-norm columns).
    rank: use only the first `rank` directions (the others become zero columns); None = all.

  Returns:
    Q, [d, k]; columns past `rank` are zero.

  Example:
    >>> import jax, jax.numpy as jnp
    >>> q = orthonormal_basis(jax.random.normal(jax.random.key(0), (3, 8)), rank=2)
    >>> bool(jnp.allclose(q.T @ q, jnp.diag(jnp.array([1.0, 1.0, 0.0])), atol=1e-5))
    True
  """
  _check_mode(mode)
  k, d = w.shape
  if not 1 <= k < d:
    raise ValueError(f"w must be [k, d] with 1 <= k < d, got {w.shape}")
  mask = rank_mask(k, rank)
  if mode == "qr":
    q = reduced_qr_q(w.T)
  else:
    wt = w.T
    q = wt / jnp.maximum(jnp.linalg.norm(wt, axis=0, keepdims=True), _EPS)
  return q * mask[None, :].astype(q.dtype)


def projector(q: Float[Array, "d k"]) -> Float[Array, "d d"]:
  """P = I - Q Q^T (an orthogonal projector when Q has orthonormal columns).

  Example:
    >>> import jax.numpy as jnp
    >>> projector(jnp.eye(3)[:, :1]).tolist()
    [[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
  """
  return jnp.eye(q.shape[0], dtype=q.dtype) - q @ q.T


def removed_component(f: Float[Array, "*b d"], q: Float[Array, "d k"]) -> Float[Array, "*b d"]:
  """Q Q^T f, the part of f inside the removed subspace (two thin matmuls, no d x d matrix)."""
  if f.shape[-1] != q.shape[0]:
    raise ValueError(f"f's last axis ({f.shape[-1]}) must equal q's rows ({q.shape[0]})")
  return (f @ q) @ q.T


def project(f: Float[Array, "*b d"], q: Float[Array, "d k"]) -> Float[Array, "*b d"]:
  """f - Q Q^T f: the features with the subspace of Q removed.

  Example:
    >>> import jax.numpy as jnp
    >>> project(jnp.array([1.0, 2.0, 3.0]), jnp.eye(3)[:, :2]).tolist()
    [0.0, 0.0, 3.0]
  """
  return f - removed_component(f, q)


def orthogonality_penalty(q: Float[Array, "d k"],
                          mask: Float[Array, " k"] | None = None) -> Float[Array, ""]:
  """||Q^T Q - I_k||_F^2 (λ_orth's term), over the active columns when `mask` is given.

  Example:
    >>> import jax.numpy as jnp
    >>> float(orthogonality_penalty(jnp.eye(4)[:, :2]))
    0.0
  """
  eye = jnp.eye(q.shape[1], dtype=q.dtype)
  if mask is not None:
    eye = eye * mask[None, :].astype(q.dtype)
  return jnp.sum(jnp.square(q.T @ q - eye))


def _safe_norm(x: Float[Array, "*b d"]) -> Float[Array, "*b"]:
  # sqrt(max(|x|^2, eps^2)): the gradient at x = 0 is 0, where jnp.linalg.norm's is NaN
  # (which would poison even a loss multiplied by λ = 0).
  return jnp.sqrt(jnp.maximum(jnp.sum(jnp.square(x), axis=-1), _EPS**2))


def _cosine(a: Float[Array, "*b d"], b: Float[Array, "*b d"]) -> Float[Array, "*b"]:
  # A zero vector (no face direction captured yet, or rank 0) gives cos = 0, never NaN.
  return jnp.sum(a * b, axis=-1) / (_safe_norm(a) * _safe_norm(b))


def face_alignment_loss(f_face: Float[Array, "*b d"], f: Float[Array, "*b d"],
                        q: Float[Array, "d k"], where: Bool[Array, "*b"]) -> Float[Array, ""]:
  """G-OPL's L_face = 1 - cos(f_face, Q Q^T f), averaged over frames with a detected face.

  Args:
    f_face: the face-crop embedding of each frame (any value where no face was found).
    f: the frame's feature entering the projection.
    q: the basis of the removed subspace.
    where: True on frames with a face; the others do not contribute.

  Returns:
    The mean over face frames (0 when the batch has none).

  Example:
    >>> import jax.numpy as jnp
    >>> q = jnp.eye(4)[:, :1]
    >>> f = jnp.array([[2.0, 1.0, 0.0, 0.0]])
    >>> float(face_alignment_loss(jnp.array([[1.0, 0, 0, 0]]), f, q, jnp.array([True])))
    0.0
  """
  if f_face.shape != f.shape or where.shape != f.shape[:-1]:
    raise ValueError(f"f_face {f_face.shape} must equal f {f.shape}, and where "
                     f"{where.shape} must be f's leading shape {f.shape[:-1]}")
  cos = _cosine(f_face, removed_component(f, q))
  w = where.astype(cos.dtype)
  return jnp.sum(w * (1.0 - cos)) / jnp.maximum(jnp.sum(w), 1.0)


def subspace_similarity(f_attr: Float[Array, "*b d"], q: Float[Array, "d k"],
                        where: Bool[Array, "*b"] | None = None) -> Float[Array, ""]:
  """SSC = mean cos(Q Q^T f_attr, f_attr): how much of the attribute the subspace captures.

  Example:
    >>> import jax.numpy as jnp
    >>> float(subspace_similarity(jnp.array([[3.0, 0.0, 0.0]]), jnp.eye(3)[:, :1]))
    1.0
  """
  cos = _cosine(removed_component(f_attr, q), f_attr)
  if where is None:
    return jnp.mean(cos)
  w = where.astype(cos.dtype)
  return jnp.sum(w * cos) / jnp.maximum(jnp.sum(w), 1.0)


class OrthogonalProjection(nn.Module):
  """An OPL / G-OPL layer: f -> f - Q Q^T f with Q from the learnable W (see module doc).

  Attributes:
    max_rank: rows of W (the largest k this layer can use; `rank` picks k <= max_rank).
    mode: "qr" or "direct" (jaxlab interpretation; a config knob).
    dtype: computation dtype (None = the input's).
    param_dtype: dtype of W.

  Returns from `__call__(f, rank=None)`: (projected f, Q [d, max_rank] with masked columns).

  Example:
    >>> import jax, jax.numpy as jnp
    >>> layer = OrthogonalProjection(max_rank=4)
    >>> f = jnp.ones((2, 16))
    >>> params = layer.init(jax.random.key(0), f)
    >>> out, q = layer.apply(params, f, rank=2)
    >>> out.shape, q.shape
    ((2, 16), (16, 4))
  """
  max_rank: int
  mode: str = "qr"
  dtype: DTypeLike | None = None
  param_dtype: DTypeLike = jnp.float32

  @nn.compact
  def __call__(self, f: Float[Array, "*b d"], rank: int | Int[Array, ""] | None = None
               ) -> tuple[Float[Array, "*b d"], Float[Array, "d k"]]:
    _check_mode(self.mode)
    d = f.shape[-1]
    if not 1 <= self.max_rank < d:
      raise ValueError(f"max_rank must lie in [1, {d - 1}] for {d}-d features, "
                       f"got {self.max_rank}")
    # Gaussian rows: a random subspace at init (QR of a Gaussian matrix is Haar-distributed).
    w = self.param("w", nn.initializers.normal(1.0 / d**0.5), (self.max_rank, d),
                   self.param_dtype)
    dtype = self.dtype or f.dtype
    # The QR itself runs in float32 at least: low-precision QR loses orthogonality.
    q = orthonormal_basis(w.astype(jnp.promote_types(dtype, jnp.float32)), mode=self.mode,
                          rank=rank)
    return project(f.astype(dtype), q.astype(dtype)), q
