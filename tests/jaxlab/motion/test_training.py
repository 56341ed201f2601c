"""SATA training helpers: input standardisation over real joints only."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.motion import generate, skeletons, training
from jaxlab.motion import model as sata


def test_feature_stats_ignore_padding_and_floor_the_std():
  rng = np.random.default_rng(0)
  features = rng.normal(3.0, 2.0, size=(4, 5, 6, 3)).astype(np.float32)
  features[..., 2] = 1.0                       # a constant channel
  mask = np.zeros((4, 6), bool)
  mask[:, :4] = True
  padded = features.copy()
  padded[:, :, 4:] = 1e3                       # junk in the padding joints
  stats = training.feature_stats(dict(features=jnp.asarray(padded), mask=jnp.asarray(mask)))
  real = features[:, :, :4].reshape(-1, 3)
  np.testing.assert_allclose(np.asarray(stats.mean), real.mean(0), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(stats.std)[:2], real.std(0)[:2], rtol=1e-4)
  assert float(stats.std[2]) == np.float32(1e-2)  # floored, not 0 (no division by zero)
  x = np.asarray(training.model_input(jnp.asarray(padded[:, :, :4]), stats)).reshape(-1, 3)
  np.testing.assert_allclose(x[:, :2].mean(0), 0.0, atol=1e-4)
  np.testing.assert_allclose(x[:, :2].std(0), 1.0, atol=1e-4)
  np.testing.assert_array_equal(np.asarray(training.model_input(jnp.asarray(features), None)),
                                features)


def _walk_data():
  rng = np.random.default_rng(0)
  clips = [generate.generate_clip(skeletons.make_skeleton("biped", rng), generate.sample_params(rng),
                                  num_frames=4, fps=20.0) for _ in range(2)]
  descs = sorted({d for c in clips for d in c.skeleton.descriptions})
  return training.as_arrays(generate.pack(clips, {d: i for i, d in enumerate(descs)},
                                          max_joints=24))


def test_too_few_fk_levels_are_rejected_where_the_depth_is_concrete():
  data = _walk_data()
  needed = int(data["depth"].max()) + 1
  f = np.asarray(data["features"])
  # The true rotations as the network's output: enough levels reproduce the true positions.
  out = np.zeros(f.shape[:-1] + (11,), np.float32)
  out[..., :6] = f[..., generate.ROT] - np.asarray(training.IDENTITY_6D)
  out = jnp.asarray(out)
  decode = jax.jit(training.decode_outputs, static_argnums=2)
  pos = np.asarray(decode(out, data, needed)["pos"])
  err = np.abs(pos - f[..., generate.POS]) * np.asarray(data["mask"])[:, None, :, None]
  assert err.max() < 1e-4
  # Fewer levels used to return wrong FK positions silently.
  with pytest.raises(ValueError, match=f"num_levels must be >= {needed}.*got {needed - 1}"):
    training.decode_outputs(out, data, num_levels=needed - 1)
  net = sata.SataAutoencoder(sata.SataConfig(width=8, num_blocks=1, num_heads=2, latent_dim=4))
  table = np.zeros((int(data["text_id"].max()) + 1, 4), np.float32)
  with pytest.raises(ValueError, match="num_levels"):
    training.train(net, optax.sgd(0.1), data, table, jax.random.key(0), num_steps=1,
                   batch_size=1, num_levels=2)
  for fn in (training.predict, training.evaluate):  # raised before the network runs
    with pytest.raises(ValueError, match="num_levels"):
      fn(net, None, data, data, table, num_levels=2)
  # Traced depths (inside jit) cannot be checked: the jitted path still runs.
  assert decode(out, data, 2)["pos"].shape == pos.shape
