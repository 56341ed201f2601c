"""The SATA autoencoder: shapes, masking, joint-order invariance of the latent, ablation
switches, bad input."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from jaxlab.motion import model as sata

CFG = sata.SataConfig(width=16, num_blocks=1, num_heads=2, latent_dim=4, num_freqs=2)
PARENTS = np.array([-1, 0, 1, 0, 3, 1])


def _skel(parents, j_pad=None, seed=0):
  j = len(parents)
  j_pad = j_pad or j
  rng = np.random.default_rng(seed)
  depth = np.zeros(j, np.int32)
  for k in range(1, j):
    depth[k] = depth[parents[k]] + 1
  pad = j_pad - j
  static = np.pad(rng.normal(size=(1, j, 6)), ((0, 0), (0, pad), (0, 0)))
  text = np.pad(rng.normal(size=(1, j, 8)), ((0, 0), (0, pad), (0, 0)))
  return sata.SkeletonInputs(
      static=jnp.asarray(static, jnp.float32), text=jnp.asarray(text, jnp.float32),
      parents=jnp.asarray(np.pad(parents, (0, pad))[None]),
      depth=jnp.asarray(np.pad(depth, (0, pad))[None]),
      mask=jnp.asarray(np.arange(j_pad)[None] < j))


@pytest.fixture(scope="module")
def setup():
  net = sata.SataAutoencoder(CFG)
  skel = _skel(PARENTS)
  x = jax.random.normal(jax.random.key(1), (1, 5, len(PARENTS), 17))
  params = jax.jit(net.init)(jax.random.key(0), x, skel, skel)  # jitted: no eager op compiles
  # Non-zero FiLM projections, so the test exercises the text / geometry path.
  params = jax.jit(lambda ps: jax.tree.map(
      lambda p: p + 0.1 * jax.random.normal(jax.random.key(2), p.shape), ps))(params)
  return net, params, skel, x


@jax.jit
def _encode(params, x, skel):
  return sata.SataAutoencoder(CFG).apply(params, x, skel, method=lambda m, x, s: m.encode(x, s))


def test_shapes_and_finiteness(setup):
  net, params, skel, x = setup
  out, mu, logvar = jax.jit(net.apply)(params, x, skel, skel, jax.random.key(3))
  assert out.shape == (1, 5, len(PARENTS), sata.NUM_OUTPUTS)
  assert mu.shape == logvar.shape == (1, 5, CFG.latent_dim)
  assert np.all(np.isfinite(np.asarray(out)))


def test_padding_joints_do_not_change_the_latent(setup):
  net, params, skel, x = setup
  mu, _ = _encode(params, x, skel)
  padded = _skel(PARENTS, j_pad=9)
  xp = jnp.pad(x, ((0, 0), (0, 0), (0, 3), (0, 0)), constant_values=7.0)  # junk in padding
  mu_p, _ = _encode(params, xp, padded)
  np.testing.assert_allclose(np.asarray(mu_p), np.asarray(mu), atol=1e-5)


def test_latent_is_invariant_to_joint_order(setup):
  # Max-pool, attention and message passing do not care how joints are numbered.
  net, params, skel, x = setup
  mu, _ = _encode(params, x, skel)
  perm = np.array([3, 0, 5, 1, 4, 2])
  inv = np.argsort(perm)
  parents = np.array([-1 if PARENTS[p] < 0 else inv[PARENTS[p]] for p in perm])
  permuted = sata.SkeletonInputs(static=skel.static[:, perm], text=skel.text[:, perm],
                                 parents=jnp.asarray(parents[None]), depth=skel.depth[:, perm],
                                 mask=skel.mask[:, perm])
  mu_p, _ = _encode(params, x[:, :, perm], permuted)
  np.testing.assert_allclose(np.asarray(mu_p), np.asarray(mu), atol=1e-5)
  # ... but a different description does change it (the text path is live).
  other = skel._replace(text=skel.text.at[:, 2].add(1.0))
  mu_t, _ = _encode(params, x, other)
  assert not np.allclose(np.asarray(mu_t), np.asarray(mu), atol=1e-4)


def test_gine_sums_messages_from_both_bone_directions():
  parents = jnp.array([[-1, 0, 0, 1]])
  depth = jnp.array([[0, 1, 1, 2]])
  mask = jnp.array([[True, True, True, True]])
  src, dst, feats, valid = sata.bone_edges(parents, depth, mask)
  pairs = {(int(s), int(d)) for s, d, v in zip(src[0], dst[0], valid[0], strict=True) if v}
  assert pairs == {(0, 1), (1, 0), (0, 2), (2, 0), (1, 3), (3, 1)}
  np.testing.assert_allclose(np.asarray(feats[0, 3]), [2 / 8, 1 / 3, 1.0])


def test_bad_inputs_raise():
  with pytest.raises(ValueError, match="modulation"):
    sata.SataConfig(modulation="add")
  with pytest.raises(ValueError, match="gnn and spatial_attention"):
    sata.SataConfig(gnn=False, spatial_attention=False)
  net = sata.SataAutoencoder(CFG)
  skel = _skel(PARENTS)
  with pytest.raises(ValueError, match="mask"):
    net.init(jax.random.key(0), jnp.zeros((1, 3, 4, 17)), skel, skel)


@pytest.mark.parametrize("switches,static,check_grad", [
    # gnn_only switches all three parts off (the default selection: forward only); the
    # single ablations and the gradient check cost a compilation each (~5-10 CPU-s).
    ((0.0, 0.0, 0.0), dict(spatial_attention=False, use_text=False, modulation="concat"), False),
    pytest.param((0.0, 0.0, 0.0), dict(spatial_attention=False, use_text=False,
                                       modulation="concat"), True, marks=pytest.mark.slow),
    pytest.param((1.0, 0.0, 1.0), dict(modulation="concat"), True, marks=pytest.mark.slow),
    pytest.param((0.0, 1.0, 1.0), dict(use_text=False), True, marks=pytest.mark.slow),
])
def test_switched_shared_model_is_the_static_ablation(switches, static, check_grad):
  # Every arm runs the "both" model under its switches: the same function as the static
  # ablation with the shared weights (so it cannot depend on the parts switched off),
  # and zero gradient into those parts.
  both = sata.SataAutoencoder(dataclasses.replace(CFG, modulation="both"))
  skel = _skel(PARENTS)
  x = jax.random.normal(jax.random.key(1), (1, 5, len(PARENTS), 17))
  params = jax.jit(lambda k: jax.tree.map(  # jitted: no eager op compiles
      lambda p: p + 0.1 * jax.random.normal(jax.random.key(2), p.shape),
      both.init(k, x, skel, skel)))(jax.random.key(0))
  sw = sata.Switches(*(jnp.float32(v) for v in switches))
  net = sata.SataAutoencoder(dataclasses.replace(CFG, **static))
  shapes = traverse_util.flatten_dict(jax.eval_shape(net.init, jax.random.key(0), x, skel,
                                                     skel)["params"])
  flat = traverse_util.flatten_dict(params["params"])
  # Without text the condition MLP reads [z_s] instead of [z_s; z_t]: its first rows.
  own = {k: flat[k][tuple(slice(n) for n in v.shape)] for k, v in shapes.items()}
  unused = [k for k in flat if k not in own]
  assert unused  # the FiLM branch, the text projection or the spatial attention
  shared_and_static = jax.jit(lambda p, q: (both.apply(p, x, skel, skel, None, sw)[0],
                                            net.apply(q, x, skel, skel)[0]))
  got, expected = shared_and_static(params, {"params": traverse_util.unflatten_dict(own)})
  np.testing.assert_allclose(np.asarray(got), np.asarray(expected), atol=1e-5)
  if check_grad:
    grads = jax.jit(jax.grad(lambda p: jnp.sum(both.apply(p, x, skel, skel, None, sw)[0] ** 2)))(
        params)
    flat_g = traverse_util.flatten_dict(grads["params"])
    for k in unused:
      assert not np.any(np.asarray(flat_g[k])), k
    assert all(np.any(np.asarray(flat_g[k])) for k in own if k[-1] == "kernel")
