"""The SATA autoencoder: shapes, masking, joint-order invariance of the latent, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

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
  params = net.init(jax.random.key(0), x, skel, skel)
  # Non-zero FiLM projections, so the test exercises the text / geometry path.
  params = jax.tree.map(lambda p: p + 0.1 * jax.random.normal(jax.random.key(2), p.shape),
                        params)
  return net, params, skel, x


def test_shapes_and_finiteness(setup):
  net, params, skel, x = setup
  out, mu, logvar = net.apply(params, x, skel, skel, jax.random.key(3))
  assert out.shape == (1, 5, len(PARENTS), sata.NUM_OUTPUTS)
  assert mu.shape == logvar.shape == (1, 5, CFG.latent_dim)
  assert np.all(np.isfinite(np.asarray(out)))


def test_padding_joints_do_not_change_the_latent(setup):
  net, params, skel, x = setup
  mu, _ = net.apply(params, x, skel, method=net.encode)
  padded = _skel(PARENTS, j_pad=9)
  xp = jnp.pad(x, ((0, 0), (0, 0), (0, 3), (0, 0)), constant_values=7.0)  # junk in padding
  mu_p, _ = net.apply(params, xp, padded, method=net.encode)
  np.testing.assert_allclose(np.asarray(mu_p), np.asarray(mu), atol=1e-5)


def test_latent_is_invariant_to_joint_order(setup):
  # Max-pool, attention and message passing do not care how joints are numbered.
  net, params, skel, x = setup
  mu, _ = net.apply(params, x, skel, method=net.encode)
  perm = np.array([3, 0, 5, 1, 4, 2])
  inv = np.argsort(perm)
  parents = np.array([-1 if PARENTS[p] < 0 else inv[PARENTS[p]] for p in perm])
  permuted = sata.SkeletonInputs(static=skel.static[:, perm], text=skel.text[:, perm],
                                 parents=jnp.asarray(parents[None]), depth=skel.depth[:, perm],
                                 mask=skel.mask[:, perm])
  mu_p, _ = net.apply(params, x[:, :, perm], permuted, method=net.encode)
  np.testing.assert_allclose(np.asarray(mu_p), np.asarray(mu), atol=1e-5)
  # ... but a different description does change it (the text path is live).
  other = skel._replace(text=skel.text.at[:, 2].add(1.0))
  mu_t, _ = net.apply(params, x, other, method=net.encode)
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
