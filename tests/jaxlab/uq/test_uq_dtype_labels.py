"""jaxlab.uq heads follow flax's dtype / param_dtype pair; losses take integer labels."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import TypeCheckError

from jaxlab import uq
from jaxlab.uq import _losses
from jaxlab.uq.classifiers import Classifier

B, D, K = 4, 6, 3


def _params(seed, shape):
  rng = np.random.default_rng(seed)
  alpha = np.exp(rng.normal(size=shape)).astype(np.float32)
  tau = (3 * rng.uniform(size=shape)).astype(np.float32)
  omega = rng.dirichlet(np.ones(shape[-1]), size=shape[:-1]).astype(np.float32)
  labels = rng.integers(0, shape[-1], size=shape[:-1])
  return alpha, tau, omega, labels


def _losses_of(targets, alpha, tau, omega):
  return {
      "brier": uq.modex_brier_loss(alpha=alpha, tau=tau, omega=omega, targets=targets,
                                   omega_weight=0.5),
      "nll": uq.modex_nll_loss(alpha=alpha, tau=tau, omega=omega, targets=targets),
      "edl": uq.edl_loss(alpha=alpha, targets=targets, kl_weight=0.3),
  }


@pytest.mark.parametrize("shape", [(B, K), (2, B, K)])
def test_integer_labels_equal_one_hot(shape):
  alpha, tau, omega, labels = _params(0, shape)
  one_hot = np.eye(shape[-1], dtype=np.float32)[labels]
  want = _losses_of(one_hot, alpha, tau, omega)
  for labels_in in (labels, jnp.asarray(labels, jnp.int32), labels.astype(np.uint8)):
    got = _losses_of(labels_in, alpha, tau, omega)
    for name in want:
      assert got[name].shape == shape[:-1]
      np.testing.assert_allclose(got[name], want[name], rtol=1e-6, err_msg=name)


def test_integer_label_errors():
  alpha, tau, omega, labels = _params(1, (B, K))
  for bad in (np.array([0, 1, 2, 3]), np.array([0, -1, 2, 1])):
    for loss in ("brier", "nll", "edl"):
      with pytest.raises(ValueError, match=r"targets as integer class indices must lie in \[0, 3\)"):
        _losses_of(bad, alpha, tau, omega)[loss]
  # Wrong shapes: the runtime type checker of the tests or the loss's own check.
  with pytest.raises((ValueError, TypeCheckError), match="targets"):
    uq.edl_loss(alpha=alpha, targets=labels[:, None])
  with pytest.raises((ValueError, TypeCheckError), match="targets"):
    uq.modex_nll_loss(alpha=alpha, tau=tau, omega=omega, targets=labels[:3])
  # The loss's own messages (what users without a type checker get).
  with pytest.raises(ValueError, match=r"integer class indices must have shape \(4,\)"):
    _losses._as_targets(labels[:, None], alpha)
  with pytest.raises(ValueError, match=r"float rows of the prediction's shape \(4, 3\)"):
    _losses._as_targets(labels.astype(np.float32), alpha)
  with pytest.raises(ValueError, match="dtype bool"):
    _losses._as_targets(labels == 0, alpha)


def test_traced_out_of_range_label_is_nan_for_that_example_only():
  alpha, tau, omega, labels = _params(2, (B, K))
  bad = labels.copy()
  bad[1] = K
  want = _losses_of(np.eye(K, dtype=np.float32)[labels], alpha, tau, omega)
  got = jax.jit(lambda y: _losses_of(y, alpha, tau, omega))(bad)
  for name in want:
    assert np.isnan(got[name][1]), name
    keep = np.arange(B) != 1
    np.testing.assert_allclose(got[name][keep], want[name][keep], rtol=1e-6, err_msg=name)


_HEADS = {
    "modex": lambda **kw: uq.MoDEXHead(num_classes=K, hidden_dim=8, **kw),
    "fedl": lambda **kw: uq.FEDLHead(num_classes=K, hidden_dim=8, **kw),
    "edl": lambda **kw: uq.EDLHead(num_classes=K, **kw),
    "classifier_softmax": lambda **kw: Classifier("softmax", K, hidden=(8,), **kw),
    "classifier_modex": lambda **kw: Classifier("modex", K, hidden=(8,), head_hidden=8, **kw),
}


def _dtypes(tree):
  return {x.dtype for x in jax.tree.leaves(tree)}


@pytest.mark.parametrize("name", sorted(_HEADS))
def test_heads_compute_in_dtype_and_keep_float32_params(name):
  x = jax.random.normal(jax.random.key(0), (B, D))
  variables = _HEADS[name]().init(jax.random.key(1), x)
  assert _dtypes(variables) == {jnp.dtype(jnp.float32)}
  out32 = _HEADS[name]().apply(variables, x)
  assert _dtypes(out32) == {jnp.dtype(jnp.float32)}
  # bfloat16 compute from the same float32 params: the layers run in bf16 (their
  # rounding shows in the outputs), the outputs stay float32 and close.
  bf16 = _HEADS[name](dtype=jnp.bfloat16)
  init = lambda head: jax.eval_shape(head.init, jax.random.key(1), x)  # dtypes only, no compile
  assert _dtypes(init(bf16)) == {jnp.dtype(jnp.float32)}
  out16 = bf16.apply(variables, x)
  assert _dtypes(out16) == {jnp.dtype(jnp.float32)}
  jaxpr = str(jax.make_jaxpr(bf16.apply)(variables, x))
  assert "dot_general" in jaxpr and "bf16[4," in jaxpr
  assert any(not np.array_equal(a, b) for a, b in
             zip(jax.tree.leaves(out16), jax.tree.leaves(out32), strict=True))
  for a, b in zip(jax.tree.leaves(out16), jax.tree.leaves(out32), strict=True):
    np.testing.assert_allclose(a, b, rtol=0.1, atol=0.05)
  assert _dtypes(init(_HEADS[name](param_dtype=jnp.bfloat16))) == {jnp.dtype(jnp.bfloat16)}


def test_bf16_head_trains_with_integer_labels():
  x = jax.random.normal(jax.random.key(0), (B, D))
  y = jnp.array([0, 1, 2, 1])
  head = uq.MoDEXHead(num_classes=K, hidden_dim=8, dtype=jnp.bfloat16)
  params = head.init(jax.random.key(1), x)

  def loss(p):
    out = head.apply(p, x)
    return jnp.mean(uq.modex_brier_loss(alpha=out.alpha, tau=out.tau, omega=out.omega, targets=y))

  value, grads = jax.jit(jax.value_and_grad(loss))(params)
  assert np.isfinite(float(value))
  assert _dtypes(grads) == {jnp.dtype(jnp.float32)}
  assert all(np.isfinite(g).all() for g in jax.tree.leaves(grads))
  assert any(np.abs(g).max() > 0 for g in jax.tree.leaves(grads))
