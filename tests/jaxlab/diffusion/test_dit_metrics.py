"""The in-context DiT (reference masking, shapes) and the pixel metrics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.diffusion import DiT, DiTConfig, icl_task, metrics, render

CFG = DiTConfig(d_model=32, num_layers=1, num_heads=2, d_ff=32, patch_dim=12)


def _inputs(key, b=2, m=3, n=4):
  ks = jax.random.split(jax.random.key(key), 3)
  return (jax.random.normal(ks[0], (b, m, n, 12)), jax.random.uniform(ks[1], (b, m, n, 3)) * 4,
          jnp.array([[True, False, True], [True, True, True]]), jax.random.uniform(ks[2], (b,)))


def test_masked_reference_has_no_effect_and_present_one_does():
  model = DiT(CFG)
  patches, pos, mask, t = _inputs(0)
  params = jax.jit(model.init)(jax.random.key(1), patches, pos, mask, t)["params"]
  # The output layer starts at zero (adaLN-Zero); perturb every parameter so outputs move.
  params = jax.tree.map(lambda x: x + 0.1 * jax.random.normal(jax.random.key(2), x.shape), params)
  apply = jax.jit(lambda x: model.apply({"params": params}, x, pos, mask, t))
  out = apply(patches)
  assert out.shape == (2, 4, 12) and bool(jnp.isfinite(out).all())
  # Example 0's reference 1 is masked: changing it changes nothing.
  edited = patches.at[0, 1].add(5.0)
  np.testing.assert_allclose(apply(edited)[0], out[0], atol=1e-5)
  # Example 0's reference 0 is present: it matters.
  edited = patches.at[0, 0].add(5.0)
  moved = apply(edited)[0]
  assert float(jnp.abs(moved - out[0]).max()) > 1e-3


def test_dit_rejects_bad_shapes():
  with pytest.raises(ValueError, match="divisible"):
    DiTConfig(d_model=30, num_heads=4)
  model = DiT(CFG)
  patches, pos, mask, t = _inputs(0)
  with pytest.raises(ValueError, match="patch_dim"):
    model.init(jax.random.key(0), patches[..., :6], pos, mask, t)


def test_pose_search_recovers_grid_poses_and_metric_ends():
  objects = render.sample_objects(jax.random.key(0), 3)
  gy, gp = metrics.pose_grid(30.0, 30.0)
  g = gy.shape[0]
  tiled = jax.tree.map(lambda x: jnp.repeat(x[:, None], g, axis=1), objects)
  grid = jax.jit(lambda o: render.render_views(o, jnp.broadcast_to(gy, (3, g)),
                                                jnp.broadcast_to(gp, (3, g)), size=8))(tiled)
  pick = jnp.array([5, 17, 30])
  images = grid[jnp.arange(3), pick]
  yaw, pitch, idx = metrics.estimate_pose(images, grid, gy, gp)
  np.testing.assert_array_equal(idx, pick)
  err = metrics.angular_error(yaw, pitch, gy[pick], gp[pick])
  np.testing.assert_allclose(err, 0.0, atol=1e-2)
  np.testing.assert_allclose(metrics.psnr(images, images), 100.0)
  h = metrics.colour_histogram(images)
  np.testing.assert_allclose(metrics.histogram_distance(h, h), 0.0)
  red = jnp.zeros((1, 4, 4, 3)).at[..., 0].set(0.9)
  blue = jnp.zeros((1, 4, 4, 3)).at[..., 2].set(0.9)
  np.testing.assert_allclose(metrics.histogram_distance(metrics.colour_histogram(red),
                                                        metrics.colour_histogram(blue)), 1.0)


def test_pose_search_oracle_true_views_score_near_zero_and_wrong_yaws_near_their_offset():
  # The metric itself, before any model: ground-truth renders at off-grid poses must come out
  # near 0 degrees, and a view rendered at a known wrong yaw must be read as that yaw.
  n, step, pitch_max = 32, 10.0, 30.0
  objects = render.sample_objects(jax.random.key(0), n)
  k1, k2 = jax.random.split(jax.random.key(1))
  yaw = jax.random.uniform(k1, (n,), maxval=360.0)
  pitch = jax.random.uniform(k2, (n,), minval=-pitch_max, maxval=pitch_max)
  gy, gp = metrics.pose_grid(step, pitch_max)
  g = gy.shape[0]
  tiled = jax.tree.map(lambda x: jnp.repeat(x[:, None], g, axis=1), objects)

  @jax.jit
  def score(offset):
    grid = render.render_views(tiled, jnp.broadcast_to(gy, (n, g)), jnp.broadcast_to(gp, (n, g)),
                               size=16)
    shown = render.render_views(objects, yaw + offset, pitch, size=16)
    yaw_hat, pitch_hat, _ = metrics.estimate_pose(shown, grid, gy, gp)
    return (metrics.angular_error(yaw_hat, pitch_hat, yaw, pitch),           # vs the request
            metrics.angular_error(yaw_hat, pitch_hat, yaw + offset, pitch),  # vs the view shown
            metrics.angular_error(yaw + offset, pitch, yaw, pitch))          # the true offset

  for offset in (0.0, 90.0, 180.0):
    err, err_shown, true_offset = map(np.asarray, score(offset))
    # A grid of 10 degrees in yaw and pitch: the nearest node is <= 7.1 degrees away.
    assert err_shown.mean() < 8.0 and (err_shown <= 10.0).mean() >= 0.9, (offset, err_shown)
    assert abs(err.mean() - true_offset.mean()) < 8.0, (offset, err.mean(), true_offset.mean())
  assert float(np.asarray(score(0.0)[0]).mean()) < 8.0


def test_chance_pose_error_is_what_a_uniform_guess_scores_on_every_split():
  # CHANCE_POSE_ERROR (90 degrees) by Monte Carlo: a pose guessed uniformly over the search
  # grid against the requested poses of each split (not uniform round the circle), with pitch.
  cfg = icl_task.TaskConfig(image_size=8, patch=4, pitch_max=30.0)
  gy, gp = metrics.pose_grid(10.0, cfg.pitch_max)
  n = 40000
  for i, split in enumerate(("interp", "extrap", "train")):
    ks = jax.random.split(jax.random.key(i), 3)
    yaw = icl_task.sample_yaw(ks[0], (n,), split, cfg)
    pitch = jax.random.uniform(ks[1], (n,), minval=-cfg.pitch_max, maxval=cfg.pitch_max)
    guess = jax.random.randint(ks[2], (n,), 0, gy.shape[0])
    err = np.asarray(metrics.angular_error(gy[guess], gp[guess], yaw, pitch))
    se = err.std() / np.sqrt(n)
    assert abs(err.mean() - metrics.CHANCE_POSE_ERROR) < 4 * se + 0.1, (split, err.mean())


def test_identity_distance_scores_only_the_references_shown():
  # Reference 0 is red, references 1 and 2 blue; a red output shown one reference has the
  # identity of what it saw (distance 0), shown all three it is two thirds off.
  cfg = icl_task.TaskConfig(image_size=8, patch=4, max_refs=3, num_test_objects=2)
  red = jnp.zeros((8, 8, 3)).at[2:6, 2:6, 0].set(0.9)
  blue = jnp.zeros((8, 8, 3)).at[2:6, 2:6, 2].set(0.9)
  views = jnp.broadcast_to(jnp.stack([red, blue, blue, red]), (2, 4, 8, 8, 3))
  batch = icl_task.Batch(views, jnp.zeros((2, 4)), jnp.zeros((2, 4)), jnp.ones((2, 4), bool))
  gy, gp = metrics.pose_grid(90.0, 0.0)
  grid = jnp.broadcast_to(red, (2, gy.shape[0], 8, 8, 3))
  eval_set = icl_task.EvalSet(batch, None, grid)
  out = views[:, -1]
  ident = lambda k: float(icl_task.image_metrics(out, eval_set, k, cfg, 90.0)[3])
  assert ident(1) == pytest.approx(0.0, abs=1e-6)
  assert ident(3) == pytest.approx(2 / 3, abs=1e-6)
  # The count may be traced (it is vmapped over K in the experiment).
  traced = jax.jit(lambda k: icl_task.image_metrics(out, eval_set, k, cfg, 90.0)[3])
  assert float(traced(jnp.asarray(2))) == pytest.approx(0.5, abs=1e-6)


def test_yaw_splits_are_disjoint():
  cfg = icl_task.TaskConfig(image_size=8, patch=4)
  key = jax.random.key(0)
  def draw(split):
    return np.asarray(jax.jit(lambda k: icl_task.sample_yaw(k, (4000,), split, cfg))(key))

  train, interp, extrap = draw("train"), draw("interp"), draw("extrap")
  in_band = lambda y: np.abs(np.mod(y, 30.0) - 15.0) < 5.0
  assert train.min() >= 0 and train.max() < 270 and not in_band(train).any()
  assert interp.max() < 270 and in_band(interp).all()
  assert extrap.min() >= 270 and extrap.max() < 360
  with pytest.raises(ValueError, match="split"):
    icl_task.sample_yaw(key, (2,), "test", cfg)


def test_arm_inputs_carry_pose_only_where_the_arm_says():
  cfg = icl_task.TaskConfig(image_size=8, patch=4, max_refs=2)
  yaw = jnp.array([[10.0, 100.0, 200.0]])
  pitch = jnp.array([[0.0, 20.0, -10.0]])
  mask = jnp.array([[True, True, True]])
  inputs = jax.jit(lambda f: icl_task.arm_inputs(f, yaw, pitch, mask, cfg))
  sape, grid, noref = (inputs(icl_task.get_arm(a).flags())
                       for a in ("sape", "rope2d", "sape_noref"))
  assert float(jnp.abs(sape["token_features"]).max()) == 0
  assert float(jnp.abs(sape["cond"]).max()) == 0
  assert float(jnp.abs(sape["positions"][0, 0] - sape["positions"][0, 2]).max()) > 0.1
  np.testing.assert_array_equal(grid["positions"][0, 0, :, 1:], grid["positions"][0, 2, :, 1:])
  np.testing.assert_array_equal(grid["positions"][0, :, 0, 0], [1.0, 2.0, 0.0])
  assert float(jnp.abs(grid["cond"]).max()) > 0
  np.testing.assert_array_equal(noref["image_mask"], [[False, False, True]])
  with pytest.raises(ValueError, match="Unknown arm"):
    icl_task.get_arm("sape3d")
