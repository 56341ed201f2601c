"""SATA training helpers: input standardisation over real joints only."""

import jax.numpy as jnp
import numpy as np

from jaxlab.motion import training


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
