"""SAC / PPO networks follow flax's dtype / param_dtype pair."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.rl import ppo, sac

OBS, ACT = 3, 2

_NETS = {
    "sac_actor": (lambda **kw: sac.Actor(ACT, hidden=8, **kw), 1),
    "sac_critic": (lambda **kw: sac.DoubleCritic(hidden=8, **kw), 2),
    "ppo_actor_critic": (lambda **kw: ppo.ActorCritic(4, hidden=8, **kw), 1),
}


def _dtypes(tree):
  return {x.dtype for x in jax.tree.leaves(tree)}


@pytest.mark.parametrize("name", sorted(_NETS))
def test_network_computes_in_dtype_and_keeps_float32_params(name):
  make, num_inputs = _NETS[name]
  xs = (jax.random.normal(jax.random.key(0), (5, OBS)),
        jax.random.normal(jax.random.key(1), (5, ACT)))[:num_inputs]
  params = make().init(jax.random.key(2), *xs)
  assert _dtypes(params) == {jnp.dtype(jnp.float32)}
  out32 = make().apply(params, *xs)
  out16 = make(dtype=jnp.bfloat16).apply(params, *xs)  # same float32 params, bf16 compute
  assert _dtypes(out32) == {jnp.dtype(jnp.float32)}
  assert _dtypes(out16) == {jnp.dtype(jnp.bfloat16)}
  for a, b in zip(jax.tree.leaves(out16), jax.tree.leaves(out32), strict=True):
    np.testing.assert_allclose(np.asarray(a, np.float32), b, rtol=0.1, atol=0.05)
  # Parameter dtypes only: eval_shape, no compile.
  init = lambda net: jax.eval_shape(net.init, jax.random.key(2), *xs)
  assert _dtypes(init(make(dtype=jnp.bfloat16))) == {jnp.dtype(jnp.float32)}
  assert _dtypes(init(make(param_dtype=jnp.bfloat16))) == {jnp.dtype(jnp.bfloat16)}
