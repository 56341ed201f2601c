"""The RTFM-style MIL scorer, the world, and one training arm."""

import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import optax
import pytest

from jaxlab.privacy import mil, training, world


def test_topk_mil_loss_matches_hand_computed_bce():
  logits = jnp.array([[0.0, 2.0, -1.0, 1.0], [-3.0, -3.0, -3.0, -3.0]])
  s = jax.nn.sigmoid(logits)
  top2 = np.array([(s[0, 1] + s[0, 3]) / 2, s[1, 0]])
  expect = np.array([-np.log(top2[0]), -np.log(1 - top2[1])])
  np.testing.assert_allclose(mil.topk_mil_loss(logits, jnp.array([1, 0]), k=2), expect,
                             rtol=1e-6)
  # Saturated scores give a large finite loss, never inf.
  assert np.all(np.isfinite(mil.topk_mil_loss(jnp.full((1, 4), 50.0), jnp.array([0]), k=2)))
  with pytest.raises(ValueError, match="k must"):
    mil.topk_mean(s, 5)
  # One label per video (the jaxtyping hook of the tests may catch it before the ValueError).
  with pytest.raises((ValueError, jaxtyping.TypeCheckError)):
    mil.topk_mil_loss(logits, jnp.array([1, 0, 1]), k=2)


def test_model_ranks_zero_is_the_plain_scorer_and_placements():
  f = jax.random.normal(jax.random.key(0), (2, 5, 12))
  model = mil.PrivacyVAD(hidden=8, max_rank=3)
  params = model.init(jax.random.key(1), f, 3, 3)
  out = model.apply(params, f, 0, 0)
  np.testing.assert_allclose(out.private, f, atol=1e-6)
  proj = model.apply(params, f, 2, 3)
  # G-OPL then OPL: the output holds nothing of the last subspace removed, and the G-OPL
  # layer alone removes its own subspace.
  np.testing.assert_allclose(proj.private @ proj.q_opl, 0.0, atol=1e-5)
  after_gopl = model.apply(params, f, 2, 0)
  np.testing.assert_allclose(after_gopl.private @ after_gopl.q_gopl, 0.0, atol=1e-5)
  hidden = mil.PrivacyVAD(hidden=8, max_rank=3, opl_placement="hidden")
  hp = hidden.init(jax.random.key(1), f, 3, 3)
  assert hidden.apply(hp, f, 0, 3).q_opl.shape == (8, 3)
  with pytest.raises(ValueError, match="opl_placement"):
    mil.PrivacyVAD(opl_placement="deep").init(jax.random.key(0), f, 1, 1)


def test_world_has_requested_rates_and_correlation():
  cfg = world.WorldConfig(num_train=300, num_test=10, face_coupling="phi")
  w = world.make_world(cfg, seed=0)
  tr = w.train
  a, f = tr.snippet_labels.ravel(), tr.faces.ravel()
  assert abs(f.mean() - cfg.face_rate) < 0.03
  phi = np.corrcoef(a.astype(float), f.astype(float))[0, 1]
  assert abs(phi - cfg.face_anomaly_corr) < 0.05
  # Anomalous snippets only in abnormal videos, in one run of the allowed length.
  runs = tr.snippet_labels.sum(1)
  assert np.all(runs[tr.video_labels == 0] == 0)
  assert np.all((runs[tr.video_labels == 1] >= 3) & (runs[tr.video_labels == 1] <= 8))
  # Face crops live in the face subspace (up to crop noise) and are zero without a face.
  crops = tr.face_crops[tr.faces]
  resid = crops - crops @ w.face_basis @ w.face_basis.T
  rms = np.sqrt(np.mean(np.sum(resid**2, -1)) / (cfg.feat_dim - cfg.face_dim))
  np.testing.assert_allclose(rms, cfg.crop_noise, rtol=0.05)
  assert np.all(tr.face_crops[~tr.faces] == 0.0)
  again = world.make_world(cfg, seed=0)
  np.testing.assert_array_equal(again.test.features, w.test.features)
  with pytest.raises(ValueError, match="face_anomaly_corr"):
    world.make_world(world.WorldConfig(face_anomaly_corr=0.9), seed=0)


def test_face_coupling_readings_keep_the_face_rate_and_differ_in_strength():
  # The spec's "correlated 0.3": as a phi correlation a face comes with nearly every anomaly
  # (P(face | anomalous) = 0.99); as a risk difference, 0.77 vs 0.47 (phi 0.17).
  q = {c: world.face_probabilities(world.WorldConfig(face_coupling=c))
       for c in world.FACE_COUPLINGS}
  np.testing.assert_allclose(q["phi"], (0.9892, 0.4540), atol=1e-4)
  np.testing.assert_allclose(q["risk_difference"], (0.7742, 0.4742), atol=1e-4)
  cfg = world.WorldConfig(num_train=400, num_test=10, face_coupling="risk_difference")
  assert world.WorldConfig().face_coupling == "risk_difference"  # the config's default
  tr = world.make_world(cfg, seed=1).train
  a, f = tr.snippet_labels.ravel(), tr.faces.ravel()
  assert abs(f.mean() - cfg.face_rate) < 0.03
  assert abs(f[a].mean() - f[~a].mean() - 0.3) < 0.05
  assert abs(np.corrcoef(a.astype(float), f.astype(float))[0, 1] - 0.168) < 0.05
  with pytest.raises(ValueError, match="face_coupling"):
    world.face_probabilities(world.WorldConfig(face_coupling="odds_ratio"))
  with pytest.raises(ValueError, match="risk_difference"):  # q0 + 0.6 > 1
    world.face_probabilities(world.WorldConfig(face_anomaly_corr=0.6))


def test_gopl_training_aligns_the_subspace_with_faces():
  cfg = world.WorldConfig(num_train=32, num_test=8, feat_dim=32, nuisance_dim=4)
  w = world.make_world(cfg, seed=0)
  tcfg = training.TrainConfig(num_steps=60, batch_size=8, max_rank=4, hidden=8)
  data = training.as_arrays(w.train)
  arm = training.make_arm(4, 4, 1.0)
  tx = optax.adam(1e-2)
  params, curve = jax.jit(lambda d, a, k: training.train(d, a, k, tcfg, tx))(
      data, arm, jax.random.key(0))
  assert curve.shape == (60, len(training.LOSS_TERMS)) and np.all(np.isfinite(curve))
  face = curve[:, training.LOSS_TERMS.index("face")]
  assert float(face[-5:].mean()) < 0.5 * float(face[:5].mean())
  out = training.evaluate(params, jnp.asarray(w.test.features), arm, tcfg)
  q = training.first_basis(out, arm, tcfg)
  # The learned G-OPL basis overlaps the true face subspace far more than a random one would.
  overlap = np.linalg.norm(w.face_basis.T @ np.asarray(q)) ** 2 / cfg.face_dim
  assert overlap > 0.5, overlap  # a random 4-d subspace of 32-d: ~4/32
  with pytest.raises(ValueError, match="batch_size"):
    training.train(data, arm, jax.random.key(0), training.TrainConfig(batch_size=64), tx)
