"""Procedural skeletons and motion: structure, hidden pairs, packing, text cache, metrics."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.motion import generate, skeletons, text_cache, training


def test_skeletons_are_depth_first_with_shared_function_and_varied_names():
  rng = np.random.default_rng(0)
  names, hind = set(), []
  for species in skeletons.SPECIES:
    for style in skeletons.NAMING_STYLES:
      sk = skeletons.make_skeleton(species, rng, style=style)
      assert sk.parents[0] == -1 and all(0 <= p < j for j, p in enumerate(sk.parents) if j)
      assert len(set(sk.names)) == sk.num_joints
      assert sk.contact.sum() == {"biped": 2, "quadruped": 4, "hexapod": 6}[species]
      names.add(sk.names[sk.roles.index("hind_left/upper")])
      hind.append(sk.descriptions[sk.roles.index("hind_left/upper")])
  assert len(names) >= 4           # the naming style varies
  assert len(set(hind)) == 1       # the function (description) is shared across species
  with pytest.raises(ValueError, match="species"):
    skeletons.make_skeleton("snake", rng)


def test_hidden_pairs_share_root_motion_and_gait_phase():
  splits = generate.make_splits(0, num_train=3, num_test=4, num_frames=20, fps=20.0)
  assert len(splits["train"]) == 6 and len(splits["test_heldout"]) == 4
  for src, tgt in zip(splits["pair_source"], splits["pair_target"], strict=True):
    assert src.params == tgt.params
    assert (src.skeleton.species, tgt.skeleton.species) == ("biped", "quadruped")
    np.testing.assert_allclose(src.root_features()[:, :3], tgt.root_features()[:, :3],
                               atol=1e-4)
    # The left hind limb swings in phase in both species.
    a = src.local_rot[:, src.skeleton.roles.index("hind_left/upper")]
    b = tgt.local_rot[:, tgt.skeleton.roles.index("hind_left/upper")]
    corr = np.corrcoef(training.swing_angle(jnp.asarray(a)), training.swing_angle(jnp.asarray(b)))[0, 1]
    assert corr > 0.99
  clip = splits["pair_target"][0]
  assert not clip.contact[:, ~clip.skeleton.contact].any()
  assert 0.1 < clip.contact[:, clip.skeleton.contact].mean() < 0.9


def test_pack_pads_and_masks():
  splits = generate.make_splits(1, num_train=2, num_test=2, num_frames=6, fps=20.0)
  clips = splits["train"]
  descs = sorted({d for c in clips for d in c.skeleton.descriptions})
  data = generate.pack(clips, {d: i for i, d in enumerate(descs)}, max_joints=32)
  assert data.features.shape == (4, 6, 32, generate.NUM_FEATURES)
  for i, c in enumerate(clips):
    j = c.skeleton.num_joints
    assert data.mask[i].sum() == j and not data.features[i, :, j:].any()
    assert [descs[k] for k in data.text_id[i, :j]] == list(c.skeleton.descriptions)
  shuffled = generate.shuffle_text(data, np.random.default_rng(0))
  assert not np.array_equal(shuffled.text_id, data.text_id)
  assert sorted(shuffled.text_id[0].tolist()) == sorted(data.text_id[0].tolist())
  with pytest.raises(ValueError, match="max_joints"):
    generate.pack(clips, {d: i for i, d in enumerate(descs)}, max_joints=8)


def test_text_cache_embeds_each_description_once():
  seen = []

  def encode(texts):
    seen.extend(texts)
    return np.arange(len(texts) * 3, dtype=np.float32).reshape(-1, 3) + len(seen)

  embed = text_cache.DescriptionEmbedder(encode)
  first = embed(["knee", "hip", "knee"])
  again = embed(["hip", "toe"])
  assert seen == ["hip", "knee", "toe"] and embed.num_cached == 3
  np.testing.assert_array_equal(first[0], first[2])
  np.testing.assert_array_equal(first[1], again[0])
  with pytest.raises(ValueError):
    embed("knee")


def test_metrics_are_perfect_on_ground_truth_and_catch_a_frozen_pose():
  splits = generate.make_splits(2, num_train=1, num_test=3, num_frames=12, fps=20.0)
  clips = splits["pair_target"]
  descs = sorted({d for c in clips for d in c.skeleton.descriptions})
  data = training.as_arrays(generate.pack(clips, {d: i for i, d in enumerate(descs)}, 32))
  true = training.targets(data)
  logit = jnp.where(true["contact"] > 0.5, 5.0, -5.0)
  perfect = dict(rot=true["rot"], pos=true["pos"], root=true["root"], contact_logit=logit)
  m = training.metrics(perfect, true, data)
  np.testing.assert_allclose([float(m["jr_deg"]), float(m["jp_cm"]), float(m["root_vel"])],
                             0.0, atol=2e-2)
  np.testing.assert_allclose([float(m["gait_corr"]), float(m["contact_f1"])], 1.0, atol=1e-4)
  frozen = dict(perfect, rot=jnp.broadcast_to(true["rot"][:, :1], true["rot"].shape),
                contact_logit=-logit)
  m = training.metrics(frozen, true, data)
  assert float(m["jr_deg"]) > 1.0 and float(m["contact_f1"]) == 0.0


def test_splits_hold_speeds_and_a_morphology_out_of_the_target_species_training():
  splits = generate.make_splits(3, num_train=12, num_test=6, num_frames=4, fps=10.0,
                                split_speed=1.0, heldout_morphology=True)
  by_species = {sp: [c for c in splits["train"] if c.skeleton.species == sp]
                for sp in ("biped", "quadruped")}
  assert all(c.params.speed < 1.0 for c in by_species["biped"])
  assert all(c.params.speed >= 1.0 for c in by_species["quadruped"])
  # The hidden pairs move at the source's speeds: no training quadruped moved like them.
  assert all(c.params.speed < 1.0 for c in splits["pair_target"])
  trained = [c.skeleton for c in by_species["quadruped"]]
  assert not any("/tip" in r for sk in trained for r in sk.roles)
  assert max(sk.roles.count("tail") for sk in trained) <= 2
  for tgt, common, src in zip(splits["pair_target"], splits["pair_target_common"],
                              splits["pair_source"], strict=True):
    assert tgt.params == common.params == src.params
    assert tgt.skeleton.roles.count("tail") >= 3 and "front_right/tip" in tgt.skeleton.roles
    assert "front_right/tip" not in common.skeleton.roles
    # The tip is where a rare quadruped's foot meets the ground.
    assert tgt.skeleton.roles[int(np.flatnonzero(tgt.skeleton.contact)[0])].endswith("/tip")
  with pytest.raises(ValueError, match="split_speed"):
    generate.make_splits(0, num_train=1, num_test=1, num_frames=4, fps=10.0, split_speed=2.0)
  with pytest.raises(ValueError, match="morphology"):
    skeletons.make_skeleton("biped", np.random.default_rng(0), morphology="odd")


def test_default_splits_draw_the_same_clips_with_the_new_knobs_off():
  # `morphology="any"` and the full speed range consume the generator as before, so
  # splits without the knobs keep their clips, and only the last split is new.
  a = generate.make_splits(4, num_train=3, num_test=2, num_frames=4, fps=10.0)
  b = generate.make_splits(4, num_train=3, num_test=2, num_frames=4, fps=10.0,
                           split_speed=None, heldout_morphology=False)
  for k in a:
    for x, y in zip(a[k], b[k], strict=True):
      assert x.params == y.params and x.skeleton.names == y.skeleton.names
  rng = np.random.default_rng(5)
  p = generate.sample_params(rng, (0.4, 0.5))
  assert 0.4 <= p.speed < 0.5
  with pytest.raises(ValueError, match="speed_range"):
    generate.sample_params(rng, (0.1, 0.5))
