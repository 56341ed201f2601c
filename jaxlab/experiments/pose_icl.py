"""Pose-ICL reproduction: does SAPE (surface-anchored RoPE) give better pose control than 2-D RoPE?

The toy task of `jaxlab.diffusion.icl_task`: an in-context DiT sees K posed reference views
of an unseen procedural object and generates the view at a requested pose, trained with
rectified flow. Arms differ only in how pose reaches the model (SAPE / 2-D RoPE + adaLN /
+ Plücker rays / SAPE without references). Every arm and seed trains in one vmapped program
(one compilation); seeds are paired across arms (same identities, data stream, init key,
evaluation views and sampler noise). Finished arms resume through `jaxlab.train.ArmCache`;
a partial resume retrains every arm (see `run`).
"""

import dataclasses
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxlab.report
import jaxlab.train
from jaxlab.diffusion import icl_task as task
from jaxlab.diffusion import metrics as M
from jaxlab.presets import config_names, config_seeds
from jaxlab.report import seed_summary

PAPER_CLAIM = ("SAPE, anchoring each image token to surface coordinates of the subject's "
               "bounding box in a 3-axis RoPE, gives an in-context DiT better pose accuracy "
               "(and identity consistency) on new subjects than 2-D position encodings")
METHOD, BASELINE, PLUCKER, NOREF = "sape", "rope2d", "plucker", "sape_noref"


def task_config(config) -> task.TaskConfig:
  """The task of `config.task`."""
  return task.TaskConfig(**config.task.to_dict())


def train_config(config) -> task.TrainConfig:
  """The training settings; the learning rate is `config.optimizer`'s (schedule included)."""
  t = config.train
  lr = jaxlab.train.make_schedule(config.optimizer, t.num_steps)
  return task.TrainConfig(num_steps=t.num_steps, batch_size=t.batch_size, learning_rate=lr,
                          weight_decay=t.weight_decay, grad_clip=t.grad_clip,
                          sample_steps=config.eval.sample_steps)


def ref_counts(cfg: task.TaskConfig) -> list[int]:
  """K values every arm is evaluated at: 1..max_refs. The no-reference arm sees none of them
  (its generation is the same at every K) but is scored against the same K references as the
  others, so its identity distance pairs with theirs K by K."""
  return list(range(1, cfg.max_refs + 1))


def _pm(s: dict, digits: int = 1) -> str:
  return f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f}"


def _pct(s: dict) -> str:
  return f"{100 * s['mean']:.0f} ± {100 * s['std']:.0f}"


def sample_step_readings(config) -> list[int]:
  """The sampler's Euler step counts the trained models are scored at: `eval.sample_steps`
  (the default reading) first, then `eval.other_sample_steps` (re-scored, not retrained)."""
  readings = [int(config.eval.sample_steps)]
  readings += [int(n) for n in config.eval.get("other_sample_steps", ()) if n not in readings]
  if min(readings) < 1:
    raise ValueError(f"eval.sample_steps and eval.other_sample_steps must be >= 1, "
                     f"got {readings}")
  return readings


def run_arms(arms: list[str], seeds: list[int], config, cfg: task.TaskConfig,
             train_cfg: task.TrainConfig, model) -> dict[str, dict]:
  """Trains and evaluates `arms` x `seeds` in one vmapped program; per-arm JSON results.

  Each arm's `metrics` are at the default sampler reading, `metrics_at` at every reading of
  `sample_step_readings` (the same trained models and sampler noise); `oracle` and `blank`
  score the ground-truth views and an all-background view (the PSNR floor's reference).
  """
  grid_step = float(config.eval.pose_grid_step)
  readings = sample_step_readings(config)
  seed_keys = jax.vmap(lambda s: jax.random.split(jax.random.key(s), 3))(np.asarray(seeds))
  flags = jnp.stack([task.get_arm(a).flags() for a in arms])        # [A, 5]

  def per_seed(keys, arm_flags):
    train_pool, test_pool = task.sample_identities(keys[0], cfg)
    params, losses = task.train(keys[1], arm_flags, train_pool, cfg, train_cfg, model)
    eval_set = task.make_eval_set(keys[2], test_pool, cfg, grid_step)

    def evaluate(p, f, k, batch, noise, steps):
      one = task.EvalSet(batch, noise, eval_set.grid_images)
      return task.evaluate(p, f, one, k, cfg, model, steps, grid_step)

    def reference(batch, blank):
      one = task.EvalSet(batch, None, eval_set.grid_images)
      view = jnp.zeros_like(batch.images[:, -1]) if blank else batch.images[:, -1]
      return task.image_metrics(view, one, cfg.max_refs, cfg, grid_step)

    ks = jnp.asarray(ref_counts(cfg))                                   # K = 1..max_refs
    metrics, images = [], None
    for steps in readings:
      # [A, K, splits, 4] metrics and [A, K, splits, n, H, W, 3] images.
      per_split = jax.vmap(lambda *a, n=steps: evaluate(*a, n), in_axes=(None, None, None, 0, 0))
      m, im = jax.vmap(lambda p, f, ps=per_split: jax.vmap(lambda k: ps(
          p, f, k, eval_set.batch, eval_set.noise))(ks))(params, arm_flags)
      metrics.append(m)
      images = im if images is None else images     # the views of the default reading
    return losses, dict(metrics=jnp.stack(metrics, 1),                 # [A, R, K, splits, 4]
                        oracle=jax.vmap(lambda b: reference(b, False))(eval_set.batch),
                        blank=jax.vmap(lambda b: reference(b, True))(eval_set.batch),
                        images=images[:, -1, :, :config.eval.num_show],
                        truth=eval_set.batch.images[:, :config.eval.num_show])

  start = time.time()
  losses, out = jax.block_until_ready(jax.jit(jax.vmap(per_seed, in_axes=(0, None)))(
      seed_keys, flags))
  seconds = time.time() - start
  losses = np.asarray(losses)                                         # [S, A, steps]
  metrics = np.asarray(out["metrics"])                                # [S, A, R, K, splits, 4]

  def cells(a, r):
    return {split: {str(k): {name: metrics[:, a, r, ik, i, j].tolist()
                             for j, name in enumerate(task.EVAL_METRICS)}
                    for ik, k in enumerate(ref_counts(cfg))}
            for i, split in enumerate(task.SPLITS)}

  per_seed_split = lambda name: {s: np.asarray(out[name])[:, i].tolist()
                                 for i, s in enumerate(task.SPLITS)}
  results = {}
  for a, arm in enumerate(arms):
    results[arm] = dict(
        metrics=cells(a, 0),
        metrics_at={str(n): cells(a, r) for r, n in enumerate(readings)},
        oracle=per_seed_split("oracle"), blank=per_seed_split("blank"),
        final_loss=losses[:, a, -max(1, losses.shape[-1] // 10):].mean(-1).tolist(),
        loss_curve=losses[:, a].mean(0)[:: max(1, losses.shape[-1] // 50)].tolist(),
        samples={s: np.asarray(out["images"])[0, a, i].tolist()
                 for i, s in enumerate(task.SPLITS)},
        truth={s: np.asarray(out["truth"])[0, i].tolist() for i, s in enumerate(task.SPLITS)},
        seconds=seconds / len(arms))
  return results


def _table(per_arm: dict) -> dict:
  """{arm: {split: {K: {metric: summary}}}}."""
  return {arm: {split: {k: {m: seed_summary(v) for m, v in cell.items()}
                        for k, cell in r["metrics"][split].items()}
                for split in task.SPLITS} for arm, r in per_arm.items()}


def _over_k(per_arm: dict, arm: str, split: str, metric: str) -> np.ndarray:
  """Per-seed values averaged over the arm's K values."""
  cells = per_arm[arm]["metrics"][split]
  return np.mean([cells[k][metric] for k in cells], axis=0)


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
  v = lambda arm, split, metric: _over_k(per_arm, arm, split, metric)
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
  return [jaxlab.report.interpretation(
      "eval.sample_steps", n, config.criteria, measure_all(config, per_arm, n), default=(i == 0),
      source=source(n)) for i, n in enumerate(readings)]


def _plots(workdir: str, table: dict, per_arm: dict, arms: list[str]) -> list[str]:
  def draw_pose(ax):
    width = 0.8 / len(arms)
    x = np.arange(len(task.SPLITS))
    for i, arm in enumerate(arms):
      k = str(max(int(k) for k in table[arm]["extrap"]))
      means = [table[arm][s][k]["pose_error"]["mean"] for s in task.SPLITS]
      stds = [table[arm][s][k]["pose_error"]["std"] for s in task.SPLITS]
      ax.bar(x + i * width, means, width, yerr=stds, label=f"{arm} (K={k})")
    ax.set_xticks(x + 0.4 - width / 2, task.SPLITS)
    ax.set_ylabel("pose error (degrees, lower is better)")
    ax.set_title("Pose error of generated views")
    ax.legend(fontsize=7)

  def draw_views(ax):
    rows = []
    for split in task.SPLITS:
      truth = np.asarray(per_arm[arms[0]]["truth"][split])      # [n, M, H, W, 3]
      rows.append(np.concatenate(list(truth[:, -1]), 1))
      rows += [np.concatenate(list(np.asarray(per_arm[a]["samples"][split])), 1) for a in arms]
    ax.imshow(np.clip(np.concatenate(rows, 0), 0, 1), interpolation="nearest")
    labels = [f"{s}: {r}" for s in task.SPLITS for r in ["truth", *arms]]
    size = np.asarray(per_arm[arms[0]]["truth"][task.SPLITS[0]]).shape[2]
    ax.set_yticks(size * (np.arange(len(labels)) + 0.5), labels, fontsize=6)
    ax.set_xticks([])
    ax.set_title("Ground truth vs generated target views (seed 0, max K)")

  return [jaxlab.report.save_plot(workdir, "pose_icl_pose_error.png", draw_pose),
          jaxlab.report.save_plot(workdir, "pose_icl_views.png", draw_views)]


def run(config, workdir: str) -> dict:
  """Runs every arm (resuming finished ones), writes results.json, returns the results."""
  os.makedirs(workdir, exist_ok=True)
  t0 = time.time()
  arms = config_names(config, "arms")
  for a in arms:
    task.get_arm(a)
  seeds = config_seeds(config)
  cfg, train_cfg = task_config(config), train_config(config)
  model = task.make_model(cfg, config.model.to_dict())

  cache = jaxlab.train.ArmCache(workdir)
  key = jaxlab.train.config_hash(config.seeds, config.task, config.model, config.train,
                                 config.optimizer, config.eval)
  per_arm = {a: cache.load(a, jaxlab.train.config_hash(key, a)) for a in arms}
  missing = [a for a in arms if per_arm[a] is None]
  if missing:
    # All arms, not only the missing ones: an arm's float32 numbers depend on the vmapped
    # program it trains in (a 1-arm program rounds differently and training amplifies it:
    # 0.008 dB of PSNR on the smoke run), so a run killed between two cache writes resumes
    # to the numbers of an uninterrupted one.
    for a, result in run_arms(arms, seeds, config, cfg, train_cfg, model).items():
      if a in missing:
        per_arm[a] = cache.get_or_run(a, jaxlab.train.config_hash(key, a), lambda r=result: r)

  table = _table(per_arm)
  row_verdict, criteria = jaxlab.report.judge_all(config.criteria,
                                                  measure_all(config, per_arm))
  readings = interpretations(config, per_arm)
  plots = _plots(workdir, table, per_arm, arms)
  oracle = {s: np.asarray(per_arm[arms[0]]["oracle"][s]) for s in task.SPLITS}  # [S, 4]
  blank = {s: np.asarray(per_arm[arms[0]]["blank"][s]) for s in task.SPLITS}     # [S, 4]

  def describe(arm):
    t = table[arm]
    cells = []
    for split in task.SPLITS:
      for k, c in t[split].items():
        cells.append(f"{split} K={k}: pose err {_pm(c['pose_error'])}°, "
                     f"≤15° {_pct(c['pose_within_15'])} %, "
                     f"PSNR {_pm(c['psnr'])} dB, id dist {_pm(c['identity_distance'], 3)}")
    return f"{arm}: " + "; ".join(cells)

  lines = [f"Arm x split x K, mean ± std over {len(seeds)} paired seeds, "
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
  report = jaxlab.report.ReportRow(
      method="Pose-ICL / SAPE (surface-anchored 3-D RoPE, in-context DiT)",
      paper_claim=PAPER_CLAIM,
      baseline="; ".join(describe(a) for a in (BASELINE, PLUCKER) if a in arms)
      or "no baseline arm run",
      ours=describe(METHOD) if METHOD in arms else "sape arm not run",
      verdict=row_verdict, details=" ".join(lines), plots=tuple(plots), criteria=criteria,
      interpretations=readings)
  results = dict(
      experiment="pose_icl", preset=config.preset, seeds=seeds, arms=arms, table=table,
      oracle={s: dict(zip(task.EVAL_METRICS, oracle[s].mean(0).tolist(), strict=True))
              for s in task.SPLITS},
      blank={s: dict(zip(task.EVAL_METRICS, blank[s].mean(0).tolist(), strict=True))
             for s in task.SPLITS},
      final_loss={a: seed_summary(r["final_loss"]) for a, r in per_arm.items()},
      loss_curves={a: r["loss_curve"] for a, r in per_arm.items()},
      samples={a: r["samples"] for a, r in per_arm.items()},
      truth=per_arm[arms[0]]["truth"],
      arm_seconds={a: r["seconds"] for a, r in per_arm.items()},
      computed=list(cache.computed), seconds=time.time() - t0,
      config=json.loads(config.to_json_best_effort()),
      report=dataclasses.asdict(report))
  jaxlab.report.write_results(workdir, results)
  return results
