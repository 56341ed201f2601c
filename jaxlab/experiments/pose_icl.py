"""Pose-ICL reproduction: does SAPE (surface-anchored RoPE) give better pose control than 2-D RoPE?

The toy task of `jaxlab.diffusion.icl_task`: an in-context DiT sees K posed reference views
of an unseen procedural object and generates the view at a requested pose, trained with
rectified flow. Arms differ only in how pose reaches the model (SAPE / 2-D RoPE + adaLN /
+ Plücker rays / SAPE without references). Every arm and seed trains in one vmapped program
(`jaxlab.diffusion.icl_runs.run_arms`, one compilation); seeds are paired across arms (same
identities, data stream, init key, evaluation views and sampler noise). The program is one
`jaxlab.study.Study` arm: an arm's float32 numbers depend on the program it trains in, so
the arms are cached, and resumed, together.
"""

import json

import numpy as np

from jaxlab import report
from jaxlab.diffusion import icl_task as task
from jaxlab.diffusion import metrics as M
from jaxlab.diffusion.icl_runs import draw_pose_error, draw_views, over_k, run_arms, table
from jaxlab.presets import config_names
from jaxlab.report import seed_summary
from jaxlab.study import Study, mean_std
from jaxlab.train import optimizer

PAPER_CLAIM = ("SAPE, anchoring each image token to surface coordinates of the subject's "
               "bounding box in a 3-axis RoPE, gives an in-context DiT better pose accuracy "
               "(and identity consistency) on new subjects than 2-D position encodings")
METHOD, BASELINE, PLUCKER, NOREF = "sape", "rope2d", "plucker", "sape_noref"


def sample_step_readings(config) -> list[int]:
  """The sampler's Euler step counts the trained models are scored at: `eval.sample_steps`
  (the default reading) first, then `eval.other_sample_steps` (re-scored, not retrained)."""
  readings = [int(config.eval.sample_steps)]
  readings += [int(n) for n in config.eval.get("other_sample_steps", ()) if n not in readings]
  if min(readings) < 1:
    raise ValueError(f"eval.sample_steps and eval.other_sample_steps must be >= 1, "
                     f"got {readings}")
  return readings


def _measure(per_arm: dict, reading: int | None = None) -> dict:
  """Per-seed (method, baseline[, reference]) values of each declared criterion (arms that
  ran), at the default sampler reading or at `reading` Euler steps (`metrics_at`). The pose
  floors' reference is the constant chance level declared in the config; the PSNR floor's is
  the blank view's PSNR on the same targets, per seed."""
  measured = {}
  if METHOD not in per_arm:
    return measured
  if reading is not None:
    per_arm = {a: dict(r, metrics=r["metrics_at"][str(reading)]) for a, r in per_arm.items()}
  v = lambda arm, split, metric: over_k(per_arm, arm, split, metric)
  if BASELINE in per_arm:
    measured["pose_extrap"] = (v(METHOD, "extrap", "pose_error"),
                               v(BASELINE, "extrap", "pose_error"))
    measured["pose_interp"] = (v(METHOD, "interp", "pose_error"),
                               v(BASELINE, "interp", "pose_error"))
    psnr_col = task.EVAL_METRICS.index("psnr")
    blank = np.asarray(per_arm[BASELINE]["blank"]["extrap"])[:, psnr_col]
    measured["psnr_extrap"] = (v(METHOD, "extrap", "psnr"), v(BASELINE, "extrap", "psnr"),
                               blank)
  if PLUCKER in per_arm:
    measured["sape_vs_plucker_extrap"] = (v(METHOD, "extrap", "pose_error"),
                                          v(PLUCKER, "extrap", "pose_error"))
  if NOREF in per_arm:
    both = lambda arm: np.mean([v(arm, s, "identity_distance") for s in task.SPLITS], axis=0)
    measured["refs_give_identity"] = (both(METHOD), both(NOREF))
  return measured


def measure_all(config, per_arm: dict, reading: int | None = None) -> dict:
  """`_measure` for every criterion of `config.criteria`: one whose arms did not run gets an
  empty (method, baseline) pair, judged `not measured` (a floored criterion cannot be judged
  from a missing value)."""
  measured = _measure(per_arm, reading)
  return {name: measured.get(name, (np.zeros(0), np.zeros(0))) for name in config.criteria}


def interpretations(config, per_arm: dict) -> list:
  """The row's verdict at each sampler reading of `sample_step_readings` (re-scored).

  How many Euler steps turn the flow into an image is a jaxlab interpretation (the paper's
  sampler is not public): the default reading draws a sample, as a generator's output is;
  one step from pure noise returns the model's posterior mean of the view instead.
  """
  readings = sample_step_readings(config)
  source = lambda n: ("jaxlab interpretation (a sample of the flow, as the paper's outputs are)"
                      if n > 1 else "jaxlab interpretation (one step: the posterior mean view)")
  return [report.interpretation(
      "eval.sample_steps", n, config.criteria, measure_all(config, per_arm, n), default=(i == 0),
      source=source(n)) for i, n in enumerate(readings)]


def run(config, workdir: str) -> dict:
  """Runs every arm (resuming a finished run), writes results.json, returns the results."""
  arms = config_names(config, "arms")
  for a in arms:
    task.get_arm(a)
  study = Study(config, workdir)
  cfg = task.TaskConfig(**config.task.to_dict())
  t = config.train
  train_cfg = task.TrainConfig(num_steps=t.num_steps, batch_size=t.batch_size,
                               sample_steps=config.eval.sample_steps)
  tx = optimizer(config.optimizer, t.num_steps)
  model = task.make_model(cfg, config.model.to_dict())
  per_arm = study.arm("arms", lambda: run_arms(
      arms, study.seeds, cfg, train_cfg, model, tx, readings=sample_step_readings(config),
      grid_step=float(config.eval.pose_grid_step), num_show=config.eval.num_show))

  summary = table(per_arm)
  study.judge(measure_all(config, per_arm))
  study.interpretations.extend(interpretations(config, per_arm))  # listed in the row
  study.plot("pose_icl_pose_error.png", lambda ax: draw_pose_error(ax, summary, arms))
  study.plot("pose_icl_views.png", lambda ax: draw_views(ax, per_arm, arms))
  oracle = {s: np.asarray(per_arm[arms[0]]["oracle"][s]) for s in task.SPLITS}  # [S, 4]
  blank = {s: np.asarray(per_arm[arms[0]]["blank"][s]) for s in task.SPLITS}     # [S, 4]

  def describe(arm):
    cells = []
    for split in task.SPLITS:
      for k, c in summary[arm][split].items():
        cells.append(f"{split} K={k}: pose err {mean_std(c['pose_error'], digits=1)}°, "
                     f"≤15° {mean_std(c['pose_within_15'], digits=0, scale=100)} %, "
                     f"PSNR {mean_std(c['psnr'], digits=1)} dB, "
                     f"id dist {mean_std(c['identity_distance'])}")
    return f"{arm}: " + "; ".join(cells)

  lines = [f"Arm x split x K, mean ± std over {len(study.seeds)} paired seeds, "
           f"{cfg.num_test_objects} unseen objects per split (identity distance to the K "
           f"references shown; {NOREF} sees none and is scored against the same K):"]
  lines += [describe(a) + "." for a in arms]
  lines.append("The ground-truth views themselves score (pose err / id dist): " + "; ".join(
      f"{s} {oracle[s][:, 1].mean():.1f}° / {oracle[s][:, 3].mean():.3f}" for s in task.SPLITS)
      + f" (the pose search's floor at a {config.eval.pose_grid_step:g}° grid); a blank "
      "view scores PSNR " + "; ".join(f"{s} {blank[s][:, 0].mean():.1f} dB" for s in task.SPLITS)
      + f"; chance pose error is {M.CHANCE_POSE_ERROR:g}°.")
  lines.append(
      f"Setting: {cfg.image_size}x{cfg.image_size} renders, {cfg.grid}x{cfg.grid} tokens per "
      f"view, K ≤ {cfg.max_refs}; DiT d={config.model.d_model}, {config.model.num_layers} "
      f"blocks; {train_cfg.num_steps} steps x batch {train_cfg.batch_size}; "
      f"{train_cfg.sample_steps} Euler steps. jaxlab interpretation throughout (the paper's "
      "method section is not public): SAPE anchors on the bounding box's first hit, "
      "pixel-space metrics stand in for DINO/CLIP, the renderer and splits are ours.")
  return study.finish(
      method="Pose-ICL / SAPE (surface-anchored 3-D RoPE, in-context DiT)",
      paper_claim=PAPER_CLAIM,
      baseline="; ".join(describe(a) for a in (BASELINE, PLUCKER) if a in arms)
      or "no baseline arm run",
      ours=describe(METHOD) if METHOD in arms else "sape arm not run",
      details=" ".join(lines),
      results=dict(
          experiment="pose_icl", preset=config.preset, seeds=study.seeds, arms=arms,
          table=summary,
          oracle={s: dict(zip(task.EVAL_METRICS, oracle[s].mean(0).tolist(), strict=True))
                  for s in task.SPLITS},
          blank={s: dict(zip(task.EVAL_METRICS, blank[s].mean(0).tolist(), strict=True))
                 for s in task.SPLITS},
          final_loss={a: seed_summary(r["final_loss"]) for a, r in per_arm.items()},
          loss_curves={a: r["loss_curve"] for a, r in per_arm.items()},
          samples={a: r["samples"] for a, r in per_arm.items()},
          truth=per_arm[arms[0]]["truth"], config=json.loads(config.to_json_best_effort())))
