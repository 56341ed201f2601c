"""The one warmup-cosine schedule (bit-equal to optax's) and the per-arm result cache."""

import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from jaxlab import train


@pytest.mark.parametrize("lr,num_steps,warmup", [(3e-3, 40, 5), (3e-3, 10, 3), (1e-3, 200, 0),
                                                 (3e-3, 500, 50)])
def test_warmup_cosine_matches_optax_bit_for_bit(lr, num_steps, warmup):
  steps = jnp.arange(num_steps + 3)
  if warmup:
    ref = optax.warmup_cosine_decay_schedule(0.0, lr, warmup_steps=warmup, decay_steps=num_steps,
                                             end_value=lr * 0.1)
  else:
    ref = optax.cosine_decay_schedule(lr, num_steps, alpha=0.1)
  ours = train.warmup_cosine(lr, num_steps=num_steps, warmup_steps=warmup)
  np.testing.assert_array_equal(jax.jit(jax.vmap(ours))(steps), jax.jit(jax.vmap(ref))(steps))


def test_warmup_cosine_traced_budget_is_one_program():
  def lr_at(step, num_steps):
    return train.warmup_cosine(2.0, num_steps=num_steps, warmup_steps=num_steps // 10)(step)
  f = jax.jit(lr_at)
  assert float(f(0, jnp.int32(100))) == 0.0
  np.testing.assert_allclose(float(f(10, jnp.int32(100))), 2.0, rtol=1e-6)
  np.testing.assert_allclose(float(f(100, jnp.int32(100))), 0.2, rtol=1e-6)
  np.testing.assert_allclose(float(f(20, jnp.int32(200))), 2.0, rtol=1e-6)
  assert f._cache_size() == 1


def test_make_schedule_reads_the_optimizer_config():
  opt = ml_collections.ConfigDict(dict(learning_rate=0.5, schedule="warmup_cosine",
                                       warmup_steps=4, end_frac=0.2))
  sched = train.make_schedule(opt, 20)
  assert float(sched(4)) == pytest.approx(0.5) and float(sched(20)) == pytest.approx(0.1)
  opt.schedule = "constant"
  assert train.make_schedule(opt, 20) == 0.5
  opt.schedule = "linear"
  with pytest.raises(ValueError, match="optimizer.schedule"):
    train.make_schedule(opt, 20)
  with pytest.raises(ValueError, match="end_frac"):
    train.warmup_cosine(1.0, num_steps=10, end_frac=2.0)


def test_arm_cache_runs_each_arm_once_per_config(tmp_path):
  calls = []

  def arm(x):
    calls.append(x)
    return {"value": np.float32(x) * 2, "vec": np.arange(2)}

  cache = train.ArmCache(str(tmp_path))
  key = train.config_hash({"lr": 1e-3}, (1, 2))
  first = cache.get_or_run("a/b", key, lambda: arm(1))
  assert first == {"value": 2.0, "vec": [0, 1]} and calls == [1]
  again = train.ArmCache(str(tmp_path))
  assert again.get_or_run("a/b", key, lambda: arm(1)) == first and calls == [1]
  assert again.computed == []
  other = train.config_hash({"lr": 2e-3}, (1, 2))  # a changed config never reuses the result
  assert other != key
  again.get_or_run("a/b", other, lambda: arm(3))
  assert calls == [1, 3] and again.computed == ["a/b"]
  files = sorted(os.listdir(tmp_path / "arms"))
  assert len(files) == 2 and not any(f.endswith(".tmp") for f in files)
  with open(tmp_path / "arms" / files[0]) as f:
    assert json.load(f)["arm"] == "a/b"
  with pytest.raises(TypeError, match="JSON"):
    cache.get_or_run("bad", key, lambda: {"x": object()})
