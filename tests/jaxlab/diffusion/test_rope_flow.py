"""Multi-axis RoPE (norms, relative positions) and the rectified-flow loss and sampler."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.diffusion import flow
from jaxlab.diffusion.rope import apply_rope_nd as _apply_rope_nd
from jaxlab.diffusion.rope import even_sections

SECTIONS = (6, 6, 4)
# jitted (one compilation per shape instead of one per eager op); sections stay static.
apply_rope_nd = jax.jit(_apply_rope_nd, static_argnums=2)


def _rand(key, shape):
  return jax.random.normal(jax.random.key(key), shape)


def test_rope_preserves_norms_and_is_identity_at_zero():
  x = _rand(0, (2, 7, 3, 16))
  pos = 5 * _rand(1, (2, 7, 3))
  y = apply_rope_nd(x, pos, SECTIONS)
  np.testing.assert_allclose(jnp.linalg.norm(y, axis=-1), jnp.linalg.norm(x, axis=-1), rtol=1e-5)
  np.testing.assert_allclose(apply_rope_nd(x, jnp.zeros_like(pos), SECTIONS), x, atol=1e-6)
  assert float(jnp.abs(y - x).max()) > 0.1


def test_attention_score_depends_only_on_relative_position():
  q, k = _rand(2, (1, 1, 1, 16)), _rand(3, (1, 1, 1, 16))
  p, r = _rand(4, (1, 1, 3)), _rand(5, (1, 1, 3))
  score = lambda a, b: jnp.sum(apply_rope_nd(q, a, SECTIONS) * apply_rope_nd(k, b, SECTIONS))
  base = score(p, r)
  for seed in range(3):
    shift = 3 * _rand(10 + seed, (1, 1, 3))  # a different shift per axis
    np.testing.assert_allclose(score(p + shift, r + shift), base, rtol=1e-4, atol=1e-5)
  # ... and does depend on it.
  assert abs(float(score(p + 1.0, r) - base)) > 1e-3


def test_rope_sections_are_validated():
  assert even_sections(24, 3) == (8, 8, 8)
  with pytest.raises(ValueError, match="sections"):
    apply_rope_nd(_rand(0, (1, 2, 1, 16)), jnp.zeros((1, 2, 3)), (8, 8))
  with pytest.raises(ValueError, match="sum"):
    apply_rope_nd(_rand(0, (1, 2, 1, 16)), jnp.zeros((1, 2, 3)), (6, 6, 6))


@pytest.mark.parametrize("t_value", [0.0, 1.0])
def test_rectified_flow_loss_matches_its_definition_at_the_ends(t_value):
  x0, noise = _rand(0, (3, 4, 5)), _rand(1, (3, 4, 5))
  t = jnp.full((3,), t_value)
  seen = {}

  def velocity(x_t, tt):
    seen["x_t"], seen["t"] = x_t, tt
    return jnp.tanh(x_t) * 0.5  # any fixed function of x_t

  loss = flow.rectified_flow_loss(velocity, x0, noise, t)
  expected_input = x0 if t_value == 0.0 else noise  # x_0 = data, x_1 = noise
  np.testing.assert_allclose(seen["x_t"], expected_input, atol=1e-6)
  np.testing.assert_allclose(seen["t"], t)
  manual = np.mean((np.tanh(np.asarray(expected_input)) * 0.5
                    - (np.asarray(noise) - np.asarray(x0))) ** 2)
  np.testing.assert_allclose(loss, manual, rtol=1e-5)
  # The ideal velocity of the straight path has zero loss.
  assert float(flow.rectified_flow_loss(lambda x, tt: noise - x0, x0, noise, t)) == 0.0


def test_euler_sampler_follows_a_straight_path_exactly():
  x0, noise = _rand(0, (2, 6)), _rand(1, (2, 6))
  out = flow.euler_sample(lambda x, t: noise - x0, noise, num_steps=3)
  np.testing.assert_allclose(out, x0, atol=1e-5)
  with pytest.raises(ValueError):
    flow.euler_sample(lambda x, t: x, noise, num_steps=0)


def test_patchify_round_trip():
  img = _rand(0, (2, 3, 8, 8, 3))
  tokens = flow.patchify(img, 4)
  assert tokens.shape == (2, 3, 4, 48)
  np.testing.assert_array_equal(tokens[0, 0, 1], img[0, 0, :4, 4:8].reshape(-1))
  np.testing.assert_array_equal(flow.unpatchify(tokens, 4), img)
  with pytest.raises(ValueError):
    flow.patchify(img, 3)
