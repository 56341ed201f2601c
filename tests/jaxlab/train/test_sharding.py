"""Data-parallel and FSDP steps on 8 CPU devices equal the 1-device step; `use_cpu_devices`."""

import os
import subprocess
import sys
import textwrap

import jax
import pytest

from jaxlab import train

SCRIPT = textwrap.dedent("""
    import jax, numpy as np, optax
    from jaxlab import data, train
    train.use_cpu_devices(8)
    assert len(jax.devices()) == 8, jax.devices()
    from jaxlab.train.lm import next_byte_loss
    from jaxlab.nn import Transformer, TransformerConfig

    model = Transformer(TransformerConfig(d_model=32, num_layers=2, num_heads=4,
                                          num_kv_heads=2, d_ff=64))
    # SGD with momentum: its update is linear in the gradient, so the check is
    # not blurred by Adam's g / sqrt(v) on near-zero gradients.
    tx = optax.sgd(0.1, momentum=0.9)
    corpus = data.load_corpus(max_bytes=100_000)
    batch = data.lm_batch(corpus.train, 0, batch_size=16, seq_len=32, seed=0)
    params = model.init(jax.random.key(0), batch[:, :-1])["params"]
    state0 = train.create_train_state(params, tx, seed=0)
    loss = next_byte_loss(model)

    single = train.make_train_step(loss, tx, donate=False)
    ref_state, ref_metrics = single(jax.device_put(state0, jax.devices()[0]), batch)
    ref_state, ref_metrics = single(ref_state, batch)  # two steps: momentum is used too

    for name, axes, fsdp in [("dp", {"data": -1}, False),
                             ("fsdp", {"data": 2, "fsdp": 4}, True)]:
      mesh = train.make_mesh(axes)
      ss = train.state_sharding(state0, mesh, fsdp=fsdp)
      bs = train.batch_sharding(mesh)
      state, b = jax.device_put(state0, ss), jax.device_put(batch, bs)
      assert len(b.sharding.device_set) == 8
      assert b.addressable_shards[0].data.shape == (2, 33)
      emb = state.params["embed"]["embedding"]
      if fsdp:
        assert "fsdp" in emb.sharding.spec, emb.sharding
        assert emb.addressable_shards[0].data.size == emb.size // 4
      step = train.make_train_step(loss, tx, state_sharding=ss, batch_sharding=bs, donate=False)
      state, metrics = step(state, b)
      state, metrics = step(state, b)
      np.testing.assert_allclose(metrics["loss"], ref_metrics["loss"], rtol=1e-5)
      for x, y in zip(jax.tree.leaves(state.params), jax.tree.leaves(ref_state.params)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-6)
      print(name, "OK", len(state.params["embed"]["embedding"].sharding.device_set))
""")


def test_eight_device_steps_equal_single_device():
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)
  out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                       timeout=600)
  assert out.returncode == 0, out.stderr[-4000:]
  assert "dp OK 8" in out.stdout and "fsdp OK 8" in out.stdout, out.stdout


def test_make_mesh_validation():
  mesh = train.make_mesh()
  assert mesh.axis_names == train.AXES
  with pytest.raises(ValueError, match="Unknown mesh axes"):
    train.make_mesh({"model": 1})
  with pytest.raises(ValueError, match="At most one"):
    train.make_mesh({"data": -1, "fsdp": -1})
  with pytest.raises(ValueError, match="do not fit"):
    train.make_mesh({"data": 3})


def test_use_cpu_devices_validation():
  for bad in (0, -2, True):
    with pytest.raises(ValueError, match="positive int"):
      train.use_cpu_devices(bad)
  jax.devices()  # this process's backends are up: its devices are fixed
  with pytest.raises(RuntimeError, match="before the first JAX computation"):
    train.use_cpu_devices(2)
