"""OPL projection: projector algebra, sign invariance, QR gradients, losses, the linen layer."""

import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest

from jaxlab.privacy import projection as pj

D, K = 16, 4


def _w(seed=0, k=K, d=D):
  return jax.random.normal(jax.random.key(seed), (k, d))


@pytest.fixture
def x64():
  """float64 for finite differences (conftest turns it off for every other test)."""
  jax.config.update("jax_enable_x64", True)
  try:
    yield
  finally:
    jax.config.update("jax_enable_x64", False)


def test_projector_is_symmetric_idempotent_and_contracting():
  q = pj.orthonormal_basis(_w())
  p = pj.projector(q)
  np.testing.assert_allclose(p @ p, p, atol=1e-5)
  np.testing.assert_allclose(p, p.T, atol=1e-6)
  np.testing.assert_allclose(q.T @ q, np.eye(K), atol=1e-5)
  assert np.trace(p) == pytest.approx(D - K, abs=1e-4)  # rank d - k
  f = jax.random.normal(jax.random.key(1), (100, D))
  out = pj.project(f, q)
  np.testing.assert_allclose(out, f @ p.T, atol=1e-5)
  assert np.all(np.linalg.norm(out, axis=-1) <= np.linalg.norm(f, axis=-1) + 1e-5)
  # The removed part lies in span(Q), the kept part is orthogonal to it.
  np.testing.assert_allclose(out @ q, 0.0, atol=1e-5)


def test_projector_is_invariant_to_qr_sign_flips():
  w = _w()
  q = pj.orthonormal_basis(w)
  signs = jnp.array([1.0, -1.0, -1.0, 1.0])
  np.testing.assert_allclose(pj.projector(q * signs), pj.projector(q), atol=1e-6)
  # Flipping rows of W (columns of W^T) leaves the span, hence the projector, unchanged.
  q_flip = pj.orthonormal_basis(w * signs[:, None])
  np.testing.assert_allclose(jnp.abs(q_flip), jnp.abs(q), atol=1e-5)
  np.testing.assert_allclose(pj.projector(q_flip), pj.projector(q), atol=1e-5)
  # Another QR convention (R with a positive diagonal, numpy float64) gives a Q that differs
  # from ours by column signs, and the same projector.
  q_np, r_np = np.linalg.qr(np.asarray(w, np.float64).T)
  q_pos = q_np * np.sign(np.diag(r_np))
  np.testing.assert_allclose(np.abs(q_pos), np.abs(q), atol=1e-5)
  np.testing.assert_allclose(q_pos @ q_pos.T, pj.projector(q) * -1 + np.eye(D), atol=1e-5)


def test_rank_mask_gives_the_rank_k_projector():
  w = _w(k=6)
  masked = pj.orthonormal_basis(w, rank=3)
  direct = pj.orthonormal_basis(w[:3])
  np.testing.assert_allclose(pj.projector(masked), pj.projector(direct), atol=1e-5)
  np.testing.assert_allclose(pj.orthonormal_basis(w, rank=0), 0.0)
  # Traced ranks (a vmapped sweep) give the same.
  traced = jax.jit(lambda r: pj.orthonormal_basis(w, rank=r))(jnp.int32(3))
  np.testing.assert_allclose(traced, masked, atol=1e-6)
  with pytest.raises(ValueError, match="rank"):
    pj.orthonormal_basis(w, rank=7)


def test_reduced_qr_gradient_matches_finite_differences_and_autodiff(x64):
  w = jax.random.normal(jax.random.key(0), (K, D), jnp.float64)
  f = jax.random.normal(jax.random.key(1), (5, D), jnp.float64)
  g = jax.random.normal(jax.random.key(2), (5, D), jnp.float64)

  def loss(w):
    return jnp.sum(g * pj.project(f, pj.orthonormal_basis(w))) + jnp.sum(
        pj.orthonormal_basis(w) ** 3)

  grad = jax.grad(loss)(w)
  assert grad.dtype == jnp.float64
  eps = 1e-6
  # Central differences along every coordinate, all in one jitted, vmapped call.
  basis = eps * jnp.eye(K * D, dtype=jnp.float64).reshape(K * D, K, D)
  fd = jax.jit(jax.vmap(lambda e: (loss(w + e) - loss(w - e)) / (2 * eps)))(basis)
  fd = np.asarray(fd).reshape(K, D)
  np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)
  # The closed-form VJP equals JAX's own derivative of jnp.linalg.qr.
  auto = jax.grad(lambda a: jnp.sum(jnp.linalg.qr(a)[0] ** 3 * g[:, :K].sum(0)))(w.T)
  ours = jax.grad(lambda a: jnp.sum(pj.reduced_qr_q(a) ** 3 * g[:, :K].sum(0)))(w.T)
  np.testing.assert_allclose(ours, auto, rtol=1e-9, atol=1e-12)


def test_direct_mode_and_orthogonality_penalty():
  w = _w()
  q = pj.orthonormal_basis(w, mode="direct")
  np.testing.assert_allclose(np.linalg.norm(q, axis=0), 1.0, atol=1e-6)
  np.testing.assert_allclose(q, w.T / np.linalg.norm(w, axis=1), atol=1e-6)
  assert float(pj.orthogonality_penalty(q)) > 1e-3  # random unit columns are not orthogonal
  assert float(pj.orthogonality_penalty(pj.orthonormal_basis(w))) < 1e-10
  # The penalty pulls direct-mode columns toward orthonormality.
  pen = lambda w: pj.orthogonality_penalty(pj.orthonormal_basis(w, mode="direct"))
  w2 = jax.jit(lambda w: jax.lax.fori_loop(0, 200, lambda _, v: v - 0.05 * jax.grad(pen)(v),
                                           w))(w)
  assert float(pen(w2)) < 1e-3 * float(pen(w))
  with pytest.raises(ValueError, match="mode"):
    pj.orthonormal_basis(w, mode="svd")
  with pytest.raises(ValueError, match="1 <= k < d"):
    pj.orthonormal_basis(jnp.ones((D, D)))


def test_face_alignment_loss_is_zero_on_the_face_subspace_and_ignores_other_frames():
  basis = jnp.eye(D)
  q_face = basis[:, :2]
  face = jnp.zeros((3, D)).at[:, :2].set(jnp.array([[1.0, 2.0], [0.5, -1.0], [3.0, 0.0]]))
  f = face + basis[2] * 5.0  # a task component orthogonal to the face subspace
  where = jnp.array([True, True, False])
  assert float(pj.face_alignment_loss(face, f, q_face, where)) == pytest.approx(0.0, abs=1e-6)
  # An orthogonal subspace captures nothing: cos = 0, loss = 1 (never NaN).
  q_other = basis[:, 5:7]
  assert float(pj.face_alignment_loss(face, f, q_other, where)) == pytest.approx(1.0)
  # A non-face frame does not count, whatever its crop holds.
  junk = face.at[2].set(jnp.ones(D) * 9.0)
  assert float(pj.face_alignment_loss(junk, f, q_face, where)) == pytest.approx(0.0, abs=1e-6)
  assert float(pj.face_alignment_loss(face, f, q_face, jnp.zeros(3, bool))) == 0.0
  assert float(pj.subspace_similarity(face, q_face, where)) == pytest.approx(1.0, abs=1e-6)
  with pytest.raises((ValueError, jaxtyping.TypeCheckError)):
    pj.face_alignment_loss(face, f, q_face, where[:2])


def test_layer_projects_and_has_dtype_knobs():
  layer = pj.OrthogonalProjection(max_rank=K, dtype=jnp.bfloat16)
  f = jax.random.normal(jax.random.key(0), (2, 3, D))
  params = layer.init(jax.random.key(1), f)
  assert params["params"]["w"].shape == (K, D) and params["params"]["w"].dtype == jnp.float32
  out, q = layer.apply(params, f, rank=2)
  assert out.dtype == jnp.bfloat16 and q.shape == (D, K)
  np.testing.assert_allclose(q[:, 2:], 0.0)
  ref = pj.project(f, pj.orthonormal_basis(params["params"]["w"], rank=2))
  np.testing.assert_allclose(out.astype(jnp.float32), ref, atol=5e-2)
  with pytest.raises(ValueError, match="max_rank"):
    pj.OrthogonalProjection(max_rank=D).init(jax.random.key(0), f)


def test_rank_zero_gives_finite_gradients_even_with_zero_weight():
  # The "none" arm: rank 0, λ_face = 0. A NaN gradient times 0 is still NaN.
  w = _w()
  f = jax.random.normal(jax.random.key(1), (3, D))
  def loss(w):
    q = pj.orthonormal_basis(w, rank=0)
    return jnp.sum(pj.project(f, q)) + 0.0 * pj.face_alignment_loss(f, f, q, jnp.ones(3, bool))
  assert np.all(np.isfinite(jax.grad(loss)(w)))
