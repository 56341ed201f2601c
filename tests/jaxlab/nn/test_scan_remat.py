"""`scan_layers` and `remat`: same outputs and gradients as the plain layer loop."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.moe import MoEFFN, load_balance_loss
from jaxlab.nn import (
    Transformer,
    TransformerConfig,
    init_cache,
    stack_block_params,
    unstack_block_params,
)

CFG = TransformerConfig(d_model=32, num_layers=3, num_heads=4, num_kv_heads=2, d_ff=48,
                        max_len=32, attn_block_size=4)
# scan / remat run the same float32 ops per block; XLA may fuse them
# differently, so results agree to float32 rounding, not bit for bit.
ATOL = 2e-5


@pytest.fixture(scope="module")
def setup():
  tokens = jax.random.randint(jax.random.key(1), (2, 10), 0, 256)
  params = Transformer(CFG).init(jax.random.key(0), tokens)["params"]
  return params, tokens


def _loss_and_grads(cfg, params, tokens):
  def loss(p):
    logits = Transformer(cfg).apply({"params": p}, tokens)
    return jnp.mean(jax.nn.log_softmax(logits)[..., 0] * jnp.arange(tokens.shape[1]))
  return jax.jit(jax.value_and_grad(loss))(params)


def _assert_trees_close(a, b, atol):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_allclose(x, y, atol=atol, rtol=1e-5)


def test_stack_unstack_round_trip(setup):
  params, _ = setup
  scanned = stack_block_params(params, CFG.num_layers)
  assert "block_0" not in scanned
  assert scanned["blocks"]["mlp"]["down"]["kernel"].shape == (3, 48, 32)
  back = unstack_block_params(scanned)
  jax.tree.map(np.testing.assert_array_equal, back, params)
  with pytest.raises(ValueError, match="block_3"):
    stack_block_params(params, 4)
  with pytest.raises(ValueError, match="'blocks'"):
    unstack_block_params(params)


def test_scan_init_has_stacked_names(setup):
  _, tokens = setup
  cfg = dataclasses.replace(CFG, scan_layers=True)
  params = Transformer(cfg).init(jax.random.key(0), tokens)["params"]
  loop_shapes = jax.tree.map(jnp.shape, stack_block_params(
      Transformer(CFG).init(jax.random.key(0), tokens)["params"], CFG.num_layers))
  assert jax.tree.map(jnp.shape, params) == loop_shapes
  # Each layer gets its own init (split params rngs), not one copy.
  q = params["blocks"]["attn"]["q"]["kernel"]
  assert not np.allclose(q[0], q[1])


@pytest.mark.parametrize("scan,remat", [
    (True, False), (False, True), (True, True), (False, "dots_with_no_batch_dims_saveable"),
])
def test_same_loss_and_grads_as_loop(setup, scan, remat):
  params, tokens = setup
  loss0, grads0 = _loss_and_grads(CFG, params, tokens)
  cfg = dataclasses.replace(CFG, scan_layers=scan, remat=remat)
  p = stack_block_params(params, CFG.num_layers) if scan else params
  loss1, grads1 = _loss_and_grads(cfg, p, tokens)
  if scan:
    grads1 = unstack_block_params(grads1)
  np.testing.assert_allclose(loss1, loss0, atol=ATOL, rtol=0)
  _assert_trees_close(grads1, grads0, ATOL)


def test_scan_with_kv_cache_matches_loop(setup):
  params, tokens = setup
  cfg = dataclasses.replace(CFG, scan_layers=True)
  loop, scan = Transformer(CFG), Transformer(cfg)
  sp = stack_block_params(params, CFG.num_layers)
  c_loop, c_scan = init_cache(CFG, 2, 16), init_cache(cfg, 2, 16)
  for sl in (slice(0, 6), slice(6, 7), slice(7, 8)):  # prefill, then two decode steps
    a, c_loop = loop.apply({"params": params}, tokens[:, sl], cache=c_loop)
    b, c_scan = scan.apply({"params": sp}, tokens[:, sl], cache=c_scan)
    np.testing.assert_allclose(b, a, atol=ATOL, rtol=0)
  np.testing.assert_allclose(c_scan.k, c_loop.k, atol=ATOL, rtol=0)
  np.testing.assert_array_equal(c_scan.lengths, [8, 8])


def test_scan_with_moe_ffn(setup):
  _, tokens = setup
  cfg = dataclasses.replace(CFG, ffn=MoEFFN(num_experts=4, k=2, d_ff=16, impl="dense"),
                            scan_layers=True, remat=True)
  model = Transformer(cfg)
  boxed = model.init(jax.random.key(0), tokens)["params"]
  # The experts' partitioning metadata gains an unsharded leading layer axis.
  assert boxed["blocks"]["mlp"]["w_gate"].names[0] is None
  params = nn.meta.unbox(boxed)
  assert params["blocks"]["mlp"]["w_gate"].shape == (3, 4, 32, 16)
  logits, state = model.apply({"params": params}, tokens, mutable=["intermediates"])
  assert logits.shape == (2, 10, 256) and bool(jnp.isfinite(logits).all())
  # One load-balance loss per layer, stacked by the scan; each is >= 1 (uniform = 1).
  assert float(load_balance_loss(state["intermediates"])) >= cfg.num_layers - 1e-4


@pytest.mark.parametrize("remat", ["no_such_policy", 1])
def test_bad_remat(remat):
  # Under the tests' jaxtyping hook a wrong type fails first (a TypeError
  # naming `remat`); a wrong policy name gets the config's ValueError.
  with pytest.raises((ValueError, TypeError), match="remat"):
    TransformerConfig(remat=remat)
