"""`MoE` as a Flax NNX module through `nnx.bridge.ToNNX`, the two ways its docstring gives."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab import train
from jaxlab.moe import MoE

X = jax.random.normal(jax.random.key(1), (4, 3, 8))


def _same_as_linen(moe: MoE, layer) -> None:
  # The NNX module holds the linen params (same tree, annotations stripped) and computes the same.
  params = nnx.to_pure_dict(nnx.state(layer, nnx.Param))
  assert set(params) == {"w_gate", "w_up", "w_down", "router"}
  np.testing.assert_allclose(layer(X), moe.apply({"params": params}, X), rtol=1e-6, atol=1e-6)


def test_tonnx_without_eager_sharding_or_inside_a_mesh():
  # One test for both ways: the second initialisation reuses the first one's compiled ops.
  moe = MoE(num_experts=8, k=2, d_ff=16, impl="dense")
  with nnx.use_eager_sharding(False):
    layer = nnx.bridge.lazy_init(nnx.bridge.ToNNX(moe, rngs=nnx.Rngs(0)), X)
  _same_as_linen(moe, layer)
  with jax.set_mesh(train.make_mesh()):  # the experts go on the mesh's 'expert' axis
    layer = nnx.bridge.lazy_init(nnx.bridge.ToNNX(moe, rngs=nnx.Rngs(0)), X)
    _same_as_linen(moe, layer)
  assert tuple(layer.w_gate.get_value().sharding.spec)[:1] == ("expert",)
  assert jnp.asarray(layer.w_gate.get_value()).shape == (8, 8, 16)


def test_tonnx_with_eager_sharding_and_no_mesh_is_flaxs_error():
  # What the docstring tells users to avoid: the error they would see.
  with pytest.raises(ValueError, match="auto mesh context"):
    nnx.bridge.lazy_init(nnx.bridge.ToNNX(MoE(num_experts=8, k=2, d_ff=16), rngs=nnx.Rngs(0)), X)
