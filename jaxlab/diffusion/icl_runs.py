"""Pose-ICL arms x seeds in one program: train, evaluate, tabulate and draw.

`run_arms` trains every arm of `jaxlab.diffusion.icl_task` on every seed in one vmapped,
jitted program (one compilation), then generates each split's target views at K =
1..max_refs references and at every sampler reading. Seeds are paired across arms: the
same identities, data stream, init key, evaluation views and sampler noise. Only a whole
program is reproducible bit for bit: an arm's float32 numbers depend on the vmapped
program it trains in (a one-arm program rounds differently, and training amplifies it),
so arms are run, and cached, together.

Example:
  >>> table({"sape": {"metrics": {"extrap": {"1": {"psnr": [20.0, 22.0]}}}}})
  {'sape': {'extrap': {'1': {'psnr': {'mean': 21.0, 'std': 1.0, 'per_seed': [20.0, 22.0]}}}}}
"""

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.diffusion import icl_task as task
from jaxlab.diffusion.dit import DiT
from jaxlab.report import seed_summary


def ref_counts(cfg: task.TaskConfig) -> list[int]:
  """The K values every arm is evaluated at: 1..max_refs.

  The no-reference arm sees none of them (its generation is the same at every K) but is
  scored against the same K references as the others, so its identity distance pairs
  with theirs K by K.

  Example:
    >>> ref_counts(task.TaskConfig(max_refs=3))
    [1, 2, 3]
  """
  return list(range(1, cfg.max_refs + 1))


def run_arms(arms: Sequence[str], seeds: Sequence[int], cfg: task.TaskConfig,
             train_cfg: task.TrainConfig, model: DiT, tx: optax.GradientTransformation, *,
             readings: Sequence[int], grid_step: float, num_show: int) -> dict[str, dict]:
  """Trains and evaluates `arms` x `seeds` in one vmapped program; per-arm JSON results.

  Args:
    arms: names of `icl_task.ARMS`.
    seeds: one PRNG seed per paired run.
    cfg, train_cfg, model: the task, the training run and the DiT (`icl_task`).
    tx: the optimizer (`jaxlab.train.optimizer`).
    readings: the sampler's Euler step counts to score at; the first is the default.
    grid_step: the pose search's grid step (degrees).
    num_show: generated views kept per split (seed 0, K = max_refs).

  Returns:
    arm -> {"metrics": split -> K -> metric -> per-seed values at the default reading,
    "metrics_at": reading -> the same, "oracle" and "blank": split -> per-seed
    `EVAL_METRICS` of the ground-truth view and of an all-background view (the PSNR
    floor's reference), "final_loss" (per seed, last tenth of the steps), "loss_curve"
    (mean over seeds, <= ~50 points), "samples" and "truth": split -> views}.

  Example::

    per_arm = run_arms(["sape", "rope2d"], [0, 1, 2], cfg, train_cfg, model, tx,
                       readings=[10, 1], grid_step=10.0, num_show=6)
  """
  seed_keys = jax.vmap(lambda s: jax.random.split(jax.random.key(s), 3))(np.asarray(seeds))
  flags = jnp.stack([task.get_arm(a).flags() for a in arms])        # [A, 5]

  def per_seed(keys, arm_flags):
    train_pool, test_pool = task.sample_identities(keys[0], cfg)
    params, losses = task.train(keys[1], arm_flags, train_pool, cfg, train_cfg, model, tx)
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
                        images=images[:, -1, :, :num_show],
                        truth=eval_set.batch.images[:, :num_show])

  losses, out = jax.block_until_ready(jax.jit(jax.vmap(per_seed, in_axes=(0, None)))(
      seed_keys, flags))
  losses = np.asarray(losses)                                         # [S, A, steps]
  metrics = np.asarray(out["metrics"])                                # [S, A, R, K, splits, 4]

  def cells(a, r):
    return {split: {str(k): {name: metrics[:, a, r, ik, i, j].tolist()
                             for j, name in enumerate(task.EVAL_METRICS)}
                    for ik, k in enumerate(ref_counts(cfg))}
            for i, split in enumerate(task.SPLITS)}

  per_seed_split = lambda name: {s: np.asarray(out[name])[:, i].tolist()
                                 for i, s in enumerate(task.SPLITS)}
  return {arm: dict(
      metrics=cells(a, 0),
      metrics_at={str(n): cells(a, r) for r, n in enumerate(readings)},
      oracle=per_seed_split("oracle"), blank=per_seed_split("blank"),
      final_loss=losses[:, a, -max(1, losses.shape[-1] // 10):].mean(-1).tolist(),
      loss_curve=losses[:, a].mean(0)[:: max(1, losses.shape[-1] // 50)].tolist(),
      samples={s: np.asarray(out["images"])[0, a, i].tolist() for i, s in enumerate(task.SPLITS)},
      truth={s: np.asarray(out["truth"])[0, i].tolist() for i, s in enumerate(task.SPLITS)})
      for a, arm in enumerate(arms)}


def table(per_arm: dict[str, Any]) -> dict:
  """{arm: {split: {K: {metric: `seed_summary`}}}} of `run_arms`' default-reading metrics.

  Example:
    >>> table({"a": {"metrics": {"interp": {"2": {"pose_error": [10.0]}}}}})["a"]["interp"]
    {'2': {'pose_error': {'mean': 10.0, 'std': 0.0, 'per_seed': [10.0]}}}
  """
  return {arm: {split: {k: {m: seed_summary(v) for m, v in cell.items()}
                        for k, cell in r["metrics"][split].items()}
                for split in r["metrics"]} for arm, r in per_arm.items()}


def over_k(per_arm: dict[str, Any], arm: str, split: str, metric: str) -> np.ndarray:
  """Per-seed values of `metric` averaged over the arm's K values.

  Example:
    >>> over_k({"a": {"metrics": {"extrap": {"1": {"psnr": [20.0, 21.0]},
    ...                                      "2": {"psnr": [22.0, 23.0]}}}}}, "a", "extrap", "psnr")
    array([21., 22.])
  """
  cells = per_arm[arm]["metrics"][split]
  return np.mean([cells[k][metric] for k in cells], axis=0)


def draw_pose_error(ax, table: dict, arms: Sequence[str]) -> None:
  """Bars of each arm's pose error (± std over seeds) per split, at the largest K.

  Example::

    draw_pose_error(ax, table(per_arm), ["sape", "rope2d"])
  """
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


def draw_views(ax, per_arm: dict[str, Any], arms: Sequence[str]) -> None:
  """Ground-truth target views above each arm's generated ones, per split (seed 0, max K).

  Example::

    draw_views(ax, per_arm, ["sape", "rope2d"])
  """
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
