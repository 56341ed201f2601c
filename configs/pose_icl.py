"""Pose-ICL / SAPE: surface-anchored 3-D positions in an in-context DiT (`jaxlab.diffusion`).

Command:
  python -m launch.main --config=configs/pose_icl.py:quick --workdir=runs/pose_icl

Presets:
  smoke  8x8 images in 4x4 patches, pitch in [-30, 30], a 1-block DiT, 8 steps, 3 seeds,
         every arm (pipeline check; its time is one XLA compilation of the vmapped train +
         evaluate program).
  quick  the two arms of the primary criteria (SAPE and 2-D RoPE), sized so that the
         baseline's pose error can leave chance (the floor) within the quick preset's
         3-minute budget: 8x8 images in 2x2 patches (16 tokens per view, 64 with K = 3
         references), yaw only (pitch 0: one pose angle to learn), a 2-block d = 64 DiT,
         1200 rectified-flow steps of batch 16 per arm and seed at learning rate 3e-3,
         3 seeds, 64 unseen objects per split; both arms x 3 seeds train as one vmapped
         program. The Plücker and no-reference arms (non-primary criteria) run in smoke and
         full.
  full   32x32 images in 4x4 patches, pitch in [-30, 30], d = 128, 4 blocks, 5000 steps of
         batch 16, 5 seeds, every arm (toward the ~20k steps at 32x32 a faithful toy
         would take).

Arms (`config.arms`, see `jaxlab.diffusion.icl_task`): "sape" (SAPE RoPE only), "rope2d"
(2-D grid RoPE, pose codes per image + target pose via adaLN), "plucker" (rope2d + Plücker
rays per token), "sape_noref" (SAPE, references masked). K = 1..max_refs references at test.

Every task choice is a jaxlab interpretation (the paper's method section is not
public): the renderer, SAPE's box anchors and miss rule, the yaw splits, training over random
K, the metrics' pixel stand-ins (pose by render search, colour-histogram identity).

Expected result: per arm x split x K, PSNR, pose error (degrees), % within 15 degrees and
identity distance, mean +- std over seeds; the criteria below are judged on paired seeds.
"""

import ml_collections

import jaxlab.presets


def get_config(arg=None):
  preset = jaxlab.presets.parse_preset(arg)
  config = ml_collections.ConfigDict()
  config.experiment = "pose_icl"
  config.preset = preset
  config.seeds = (0, 1, 2)
  config.arms = "sape,rope2d"

  # jaxlab interpretation of the paper's setting (renderer, splits, SAPE's rules).
  config.task = ml_collections.ConfigDict(dict(
      image_size=8, patch=2, max_refs=3, num_train_objects=256, num_test_objects=64,
      max_parts=3, min_parts=2, pitch_max=0.0,
      train_yaw_max=270.0,     # yaws in [270, 360) are the extrapolation sector
      band_period=30.0, band_width=10.0,  # interleaved held-out bands: the interpolation split
      kappa=1.0,               # SAPE: pos = kappa (p + 1) / 2 G
      sape_miss="grid"))       # tokens missing the box keep (row, col); "far": one far point
  config.model = ml_collections.ConfigDict(dict(
      d_model=64, num_layers=2, num_heads=4, d_ff=128,
      rope_base=100.0))        # jaxlab interpretation: positions span only G = 4 units
  config.train = ml_collections.ConfigDict(dict(num_steps=1200, batch_size=16))
  config.optimizer = ml_collections.ConfigDict(dict(
      name="adamw", learning_rate=3e-3, schedule="warmup_cosine", warmup_steps=20,
      weight_decay=0.0, grad_clip=1.0))
  config.eval = ml_collections.ConfigDict(dict(
      sample_steps=10,         # Euler steps of the rectified-flow sampler (default reading)
      other_sample_steps=(1,),  # readings re-scored on the same models (1: posterior mean)
      pose_grid_step=10.0,     # degrees; the pose estimate's search grid (full: 5)
      num_show=6))             # generated views kept for the notebook / plot

  # Declared before the run; judged on paired seeds by jaxlab.report.judge_all. Pose error and
  # PSNR are means over K = 1..max_refs of the per-seed means over the test objects.
  # Thresholds: the abstract claims "better pose accuracy" than prior methods and gives no
  # number (a news summary's "+15 %" names no baseline), so the pose criteria ask for any
  # improvement (0 degrees) beyond 2 paired SE.
  # Floors: a pose comparison counts only when its baseline beats chance, the pose error of an
  # output unrelated to the requested pose: 90 degrees (`jaxlab.diffusion.metrics.
  # CHANCE_POSE_ERROR`, derived there), by 10 degrees (the quick preset's pose-grid step:
  # a lead smaller than one step of the search is not a pose the metric resolves). A PSNR
  # comparison counts only when its baseline beats the blank (all-background) view by 1 dB.
  chance = dict(floor="chance", floor_value=90.0, floor_margin=10.0)
  config.criteria = ml_collections.ConfigDict(dict(
      pose_extrap=dict(
          mechanism=True,  # the same in-context DiT with 2-D RoPE in place of SAPE
          claim="SAPE gives better pose accuracy than a 2-D RoPE + adaLN pose baseline, most "
                "of all on extrapolated poses (abstract: better pose accuracy, no number)",
          metric="pose error (degrees) on the extrapolated yaw sector, SAPE minus 2-D RoPE",
          direction="lower", threshold=0.0, unit="deg", **chance),
      pose_interp=dict(
          mechanism=True,  # the same in-context DiT with 2-D RoPE in place of SAPE
          claim="SAPE gives better pose accuracy than 2-D RoPE + adaLN on held-out poses "
                "(abstract: better pose accuracy, no number)",
          metric="pose error (degrees) on interpolated held-out yaws, SAPE minus 2-D RoPE",
          direction="lower", threshold=0.0, unit="deg", **chance),
      psnr_extrap=dict(
          claim="SAPE reconstructs extrapolated views better than 2-D RoPE + adaLN",
          metric="PSNR (dB) on the extrapolated sector, SAPE minus 2-D RoPE",
          direction="higher", threshold=0.0, unit="dB", primary=False,
          floor="blank view", floor_margin=1.0),
      sape_vs_plucker_extrap=dict(
          claim="(jaxlab's hypothesis) SAPE beats the Plücker-ray baseline on extrapolation",
          metric="pose error (degrees) on the extrapolated sector, SAPE minus Plücker",
          direction="lower", threshold=0.0, unit="deg", primary=False, **chance),
      refs_give_identity=dict(
          claim="in-context references carry the subject's identity",
          metric="colour-histogram distance to the K references shown (both splits), SAPE "
                 "minus SAPE without references",
          direction="lower", threshold=0.0, unit="TV distance", primary=False)))

  every_arm = "sape,rope2d,plucker,sape_noref"
  if preset == "smoke":
    config.arms = every_arm
    config.task.update(image_size=8, patch=4, pitch_max=30.0, num_train_objects=16,
                       num_test_objects=4)
    config.model.update(d_model=32, num_layers=1, num_heads=2, d_ff=32)
    config.train.update(num_steps=8, batch_size=4)
    config.optimizer.warmup_steps = 2
    config.eval.update(sample_steps=2, pose_grid_step=30.0, num_show=2)
  elif preset == "full":
    config.seeds = (0, 1, 2, 3, 4)
    config.arms = every_arm
    config.task.update(image_size=32, patch=4, pitch_max=30.0, num_train_objects=1024,
                       num_test_objects=64)
    config.model.update(d_model=128, num_layers=4, num_heads=4, d_ff=256)
    config.train.num_steps = 5000
    config.optimizer.update(learning_rate=1e-3, warmup_steps=200)
    config.eval.update(sample_steps=25, pose_grid_step=5.0)
  return config
