"""The shared training loop: resume, step, log, evaluate, checkpoint."""

from collections.abc import Callable
from typing import Any

import jax

from jaxlab.train.checkpoint import Checkpointer
from jaxlab.train.metrics import MetricWriter, progress
from jaxlab.train.state import TrainState


def train_loop(state: TrainState, train_step: Callable, batch_fn: Callable[[int], Any], *,
               num_steps: int, workdir: str, checkpoint_every: int, log_every: int = 50,
               eval_fn: Callable[[Any], dict] | None = None, eval_every: int = 0,
               desc: str = "train") -> TrainState:
  """Trains from `workdir`'s latest checkpoint (else `state`) up to `num_steps`.

  Args:
    state: the freshly initialised state (its structure is the restore target).
    train_step: `train_step(state, batch) -> (state, metrics)`.
    batch_fn: `batch_fn(step) -> batch`; a pure function of the step, so a
      resumed run sees the same batches as an uninterrupted one.
    num_steps: total steps of the run (not of this call).
    workdir: holds `checkpoints/` and `metrics.jsonl`.
    checkpoint_every: save interval; the last step is always saved.
    log_every: write train metrics every this many steps (and at the end).
    eval_fn: optional `eval_fn(params) -> metrics`, logged with prefix "eval_".
    eval_every: evaluation interval (0: only at the end).

  Returns:
    The state after `num_steps` steps. A run that finds its final checkpoint
    trains no step again.
  """
  if num_steps < 0 or log_every < 1:
    raise ValueError(f"num_steps must be >= 0 and log_every >= 1, got {num_steps}, {log_every}")
  with Checkpointer(workdir, every=checkpoint_every) as ckpt:
    state = ckpt.restore_or(state)
    start = int(jax.device_get(state.step))
    writer = MetricWriter(workdir, resume_step=start)
    for step in progress(range(start, num_steps), total=num_steps, initial=start, desc=desc):
      state, metrics = train_step(state, batch_fn(step))
      done = step + 1
      if done % log_every == 0 or done == num_steps:
        writer.write(done, jax.device_get(metrics))
      if eval_fn is not None and eval_every and done % eval_every == 0 and done != num_steps:
        writer.write(done, eval_fn(state.params), prefix="eval_")
      ckpt.save(state, force=done == num_steps)
    if start < num_steps and eval_fn is not None:
      writer.write(num_steps, eval_fn(state.params), prefix="eval_")
    ckpt.wait()
  return state
