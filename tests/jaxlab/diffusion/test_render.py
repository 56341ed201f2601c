"""The ray caster: first hits lie on the analytic surfaces, nothing is crossed before them."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.diffusion import positions, render

SIZE = 16


def _one(objects, i):
  return jax.tree.map(lambda x: x[i], objects)


@pytest.fixture(scope="module")
def views():
  objects = render.sample_objects(jax.random.key(3), 6, max_parts=3, min_parts=1)
  yaw = jnp.array([0.0, 47.0, 133.0, 200.0, 290.0, 351.0])
  pitch = jnp.array([0.0, 25.0, -30.0, 12.0, -7.0, 30.0])
  out = jax.jit(jax.vmap(lambda o, y, p: render.render(o, y, p, size=SIZE)))(objects, yaw, pitch)
  rays = jax.vmap(lambda y, p: render.pixel_rays(y, p, SIZE))(yaw, pitch)
  return objects, out, rays


def test_hit_points_lie_on_the_hit_part_surface(views):
  objects, out, _ = views
  assert out.hit.any(axis=(1, 2)).all()
  for i in range(objects.kind.shape[0]):
    obj = _one(objects, i)
    hit = np.asarray(out.hit[i])
    part = np.asarray(out.part[i])[hit]
    gauge = render.part_gauge(out.points[i][hit], obj.kind[part], obj.center[part],
                              obj.half[part])
    np.testing.assert_allclose(gauge, 1.0, atol=1e-4)
    assert np.asarray(obj.active)[part].all()


def test_no_part_is_entered_before_the_first_hit_or_by_a_missed_ray(views):
  objects, out, (origins, dirs) = views
  fracs = jnp.linspace(0.0, 0.999, 64)
  for i in range(objects.kind.shape[0]):
    obj = _one(objects, i)
    # Missed rays: march far past the object (the camera is 3 units away).
    depth = jnp.where(out.hit[i], out.depth[i], 6.0)
    steps = fracs[:, None] * depth[..., None, None]                  # [h, w, 64, 1]
    pts = origins[i][..., None, :] + steps * dirs[i][..., None, :]
    gauge = render.part_gauge(pts[..., None, :], obj.kind, obj.center, obj.half)  # [h, w, 64, P]
    gauge = jnp.where(obj.active, gauge, jnp.inf)
    assert float(gauge.min()) > 1.0 - 1e-3


def test_sphere_depth_matches_closed_form():
  sphere = render.Objects(jnp.array([render.ELLIPSOID]), jnp.zeros((1, 3)), jnp.full((1, 3), 0.6),
                          jnp.ones((1, 3)), jnp.array([True]))
  out = jax.jit(lambda o: render.render(o, 30.0, 10.0, size=SIZE))(sphere)
  origins, dirs = render.pixel_rays(30.0, 10.0, SIZE)
  w, _, _ = render.camera_frame(30.0, 10.0)
  # Orthographic ray at lateral offset rho from the axis hits at depth D - sqrt(r^2 - rho^2).
  lateral = origins - render.CAMERA_DISTANCE * w
  rho2 = jnp.sum(lateral ** 2, -1)
  expected_hit = rho2 < 0.36
  np.testing.assert_array_equal(out.hit, expected_hit)
  expect = render.CAMERA_DISTANCE - jnp.sqrt(jnp.maximum(0.36 - rho2, 0))
  np.testing.assert_allclose(out.depth[expected_hit], expect[expected_hit], atol=1e-5)
  assert float(jnp.abs(jnp.linalg.norm(dirs, axis=-1) - 1).max()) < 1e-6


def test_box_anchors_lie_on_the_bounding_box():
  origins, dirs = render.pixel_rays(77.0, -20.0, SIZE)
  points, hit = positions.box_anchors(origins, dirs)
  assert hit.any() and not hit.all()  # the image corners miss the unit box at this pose
  np.testing.assert_allclose(jnp.max(jnp.abs(points[hit]), -1), 1.0, atol=1e-5)


def test_sape_positions_agree_across_poses_on_a_shared_box_point():
  # The top face centre (0, 1, 0) seen from straight above: every yaw sees it at the image
  # centre, so the SAPE position there is the same whatever the yaw.
  pos = [positions.sape_positions(y, 90.0, image_size=4, patch=2) for y in (0.0, 120.0)]
  centre = lambda p: jnp.mean(p, axis=(0, 1))
  np.testing.assert_allclose(centre(pos[0]), centre(pos[1]), atol=1e-3)
  np.testing.assert_allclose(pos[0][..., 1], 2.0, atol=1e-3)  # y = 1 -> kappa (1 + 1) / 2 G


def test_bad_inputs_raise():
  objects = render.sample_objects(jax.random.key(0), 2)
  with pytest.raises(ValueError, match="batch shape"):
    render.render_views(objects, jnp.zeros(3), jnp.zeros(3))
  with pytest.raises(ValueError, match="one object"):
    render.ray_cast(objects, jnp.zeros((1, 3)), jnp.ones((1, 3)))
  with pytest.raises(ValueError, match="unit box"):
    render.sample_objects(jax.random.key(0), 2, center_range=0.6, half_range=(0.2, 0.5))
  with pytest.raises(ValueError, match="stride"):
    render.pixel_rays(0.0, 0.0, 16, stride=3)
  with pytest.raises(ValueError, match="miss"):
    positions.sape_positions(0.0, 0.0, image_size=8, patch=4, miss="nowhere")
