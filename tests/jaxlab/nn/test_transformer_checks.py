"""Input checks of the decoder, its sampler and the training schedules / loop (found by audit)."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from jaxlab.nn.sampling import generate
from jaxlab.nn.transformer import Transformer, TransformerConfig
from jaxlab.train import schedules

CFG = TransformerConfig(vocab_size=16, d_model=16, num_layers=1, num_heads=2, num_kv_heads=1,
                        d_ff=32)


def test_tokens_outside_the_vocabulary_raise():
  """A token >= vocab_size embedded as a NaN row that attention spread to every position; a
  negative one wrapped to another token."""
  model = Transformer(CFG)
  params = model.init(jax.random.key(0), jnp.zeros((1, 4), jnp.int32))["params"]
  for bad in (16, -1):
    with pytest.raises(ValueError, match=r"tokens must lie in \[0, 16\)"):
      model.apply({"params": params}, jnp.array([[1, bad, 2]], jnp.int32))
  with pytest.raises(ValueError, match="at least one position"):
    model.apply({"params": params}, jnp.zeros((1, 0), jnp.int32))
  # Traced tokens are not checked (jit), valid ones still run.
  out = jax.jit(lambda t: model.apply({"params": params}, t))(jnp.array([[1, 15, 2]], jnp.int32))
  assert out.shape == (1, 3, 16) and bool(jnp.all(jnp.isfinite(out)))


def test_generate_rejects_a_non_finite_temperature():
  model = Transformer(CFG)
  prompt = jnp.array([[1, 2]], jnp.int32)
  params = model.init(jax.random.key(0), prompt)["params"]
  with pytest.raises(ValueError, match="temperature"):
    generate(model, params, prompt, jax.random.key(1), num_tokens=2, temperature=float("nan"))


@pytest.mark.parametrize("field,value", [("warmup_frac", -0.5), ("warmup_frac", 1.5),
                                         ("learning_rate", float("nan")),
                                         ("learning_rate", -1.0)])
def test_make_schedule_checks_its_settings(field, value):
  """warmup_frac = -0.5 shifted the whole cosine (step 0 at 7.75e-4); a NaN or negative
  learning rate gave NaN or negative rates."""
  cfg = ml_collections.ConfigDict({"learning_rate": 1e-3, "warmup_frac": 0.1})
  cfg[field] = value
  with pytest.raises(ValueError, match=field):
    schedules.make_schedule(cfg, 100)


def test_a_numpy_integer_num_steps_is_checked():
  with pytest.raises(ValueError, match="num_steps"):
    schedules.warmup_cosine(1e-3, num_steps=np.int64(0))  # silently ran as 2 steps before
