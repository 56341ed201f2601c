"""SAC / PPO networks follow flax's dtype / param_dtype pair."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.rl import envs, ppo, sac

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


_TRAINERS = {
    "sac": (sac, lambda **kw: sac.SACConfig(total_steps=40, num_evals=2, learning_starts=10,
                                           batch_size=8, buffer_size=64, **kw),
            envs.Pendulum, sac.alpha_mode_index("auto")),
    "ppo": (ppo, lambda **kw: ppo.PPOConfig(total_updates=2, num_evals=2, num_steps=8, **kw),
            envs.CartPole, ppo.ent_mode_index("aes")),
}


@pytest.mark.parametrize("name", sorted(_TRAINERS))
def test_trainer_config_sets_the_network_dtypes(name):
  module, make_config, make_env, mode = _TRAINERS[name]

  def output_dtypes(cfg):  # traced, never compiled; the flat outputs' dtypes
    jaxpr = jax.make_jaxpr(module.make_train(make_env(), cfg))(jax.random.key(0), mode)
    return {a.dtype for a in jaxpr.out_avals}

  # The weights (and their optimizer moments) come out in param_dtype ...
  assert jnp.dtype(jnp.bfloat16) in output_dtypes(make_config(param_dtype="bfloat16"))
  # ... and bf16 computation with float32 weights leaves no bf16 in the state or the metrics.
  assert jnp.dtype(jnp.bfloat16) not in output_dtypes(make_config(dtype="bfloat16"))


@pytest.mark.parametrize("name", sorted(_TRAINERS))
@pytest.mark.parametrize("field,value", [("dtype", "int8"), ("param_dtype", "nope")])
def test_trainer_config_rejects_a_bad_dtype(name, field, value):
  module, make_config, make_env, _ = _TRAINERS[name]
  with pytest.raises(ValueError, match=field):
    module.make_train(make_env(), make_config(**{field: value}))
