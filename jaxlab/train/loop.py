"""The shared training loop: resume, step, log, evaluate, checkpoint."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxlab.optim import check_eco_state
from jaxlab.train.checkpoint import Checkpointer
from jaxlab.train.metrics import MetricWriter
from jaxlab.train.progress_display import Progress
from jaxlab.train.state import TrainState


class NonFiniteLossError(FloatingPointError):
  """The training loss became NaN or infinite; `step` is the first such step (1-based)."""

  def __init__(self, step: int, workdir: str):
    self.step = step
    super().__init__(
        f"training loss became non-finite at step {step} (workdir {workdir}); the run stops "
        "without saving that state. The last checkpoint holds the last finite state; lower "
        "the learning rate or check the data before resuming.")


@jax.jit
def _first_nonfinite(first: jax.Array, loss: jax.Array, step: jax.Array) -> jax.Array:
  # Kept on device so detecting divergence costs no host sync per step.
  return jnp.where((first < 0) & ~jnp.all(jnp.isfinite(loss)), step, first)


def train_loop(state: TrainState, train_step: Callable, batch_fn: Callable[[int], Any], *,
               num_steps: int, workdir: str, checkpoint_every: int, log_every: int = 50,
               eval_fn: Callable[[Any], dict] | None = None, eval_every: int = 0,
               desc: str = "train") -> TrainState:
  """Trains from `workdir`'s newest intact checkpoint (else `state`) up to `num_steps`.

  Progress (`jaxlab.train.progress_display.Progress`, titled `desc`): a bar with the loss of
  the last logged step on a terminal or in a notebook, a log line every 30 s elsewhere.

  Args:
    state: the freshly initialised state (its structure is the restore target).
    train_step: `train_step(state, batch) -> (state, metrics)`; when metrics
      hold a scalar `"loss"`, the loop stops on the first non-finite one.
    batch_fn: `batch_fn(step) -> batch`; a pure function of the step, so a
      resumed run sees the same batches as an uninterrupted one.
    num_steps: total steps of the run (not of this call).
    workdir: holds `checkpoints/` and `metrics.jsonl`.
    checkpoint_every: save interval; the last step is always saved.
    log_every: write train metrics every this many steps (and at the end).
    eval_fn: optional `eval_fn(params) -> metrics`, logged with prefix ``"eval_"``.
    eval_every: evaluation interval (0: only at the end).

  Returns:
    The state after `num_steps` steps. A run that finds its final checkpoint
    trains no step again.

  Raises:
    NonFiniteLossError: the loss became NaN/Inf. The check runs on device every
      step and is read at each log, eval and checkpoint step, so no diverged
      state is ever evaluated or saved; the error names the first bad step.
    ValueError: an ECO optimizer in the state did not apply an update because it
      was not the last transform of the chain (`jaxlab.optim.check_eco_state`,
      read at the same steps).
    CheckpointSaveError: a checkpoint could not be written.

  Example:
    >>> state = train_loop(state, step, batch_fn, num_steps=100,  # doctest: +SKIP
    ...                    workdir="runs/x", checkpoint_every=50)
  """
  if num_steps < 0 or log_every < 1:
    raise ValueError(f"num_steps must be >= 0 and log_every >= 1, got {num_steps}, {log_every}")
  with Checkpointer(workdir, every=checkpoint_every) as ckpt:
    state = ckpt.restore_or(state)
    start = int(jax.device_get(state.step))
    if start > num_steps:
      raise ValueError(f"the checkpoint in {workdir!r} is at step {start}, past num_steps="
                       f"{num_steps}: use a new workdir (or num_steps >= {start})")
    writer = MetricWriter(workdir, resume_step=start)
    first_bad = jnp.asarray(-1, jnp.int32)

    def check_finite():
      bad = int(first_bad)
      if bad >= 0:
        raise NonFiniteLossError(bad, workdir)
      check_eco_state(state.opt_state)  # ECO composed as the last transform

    with Progress(num_steps, desc=desc, initial=start) as bar:
      for step in range(start, num_steps):
        state, metrics = train_step(state, batch_fn(step))
        done = step + 1
        if "loss" in metrics:
          first_bad = _first_nonfinite(first_bad, metrics["loss"], jnp.asarray(done, jnp.int32))
        log_now = done % log_every == 0 or done == num_steps
        eval_now = (eval_fn is not None and eval_every and done % eval_every == 0
                    and done != num_steps)
        if log_now:  # the row with the bad loss, then stop
          row = writer.write(done, jax.device_get(metrics))
          # The loss as logged (a host copy exists only here: no sync on other steps).
          if "loss" in row:
            bar.set_postfix(loss=row["loss"])
        if log_now or eval_now or done % checkpoint_every == 0 or done == num_steps:
          check_finite()  # where the host looks anyway: never evaluate or save a diverged state
        if eval_now:
          eval_row = writer.write(done, eval_fn(state.params), prefix="eval_")
          if "eval_loss" in eval_row:
            bar.set_postfix(eval_loss=eval_row["eval_loss"])
        ckpt.save(state, force=done == num_steps)
        bar.update()
    if start < num_steps and eval_fn is not None:
      writer.write(num_steps, eval_fn(state.params), prefix="eval_")
    ckpt.wait()
  return state
