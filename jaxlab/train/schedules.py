"""Learning-rate schedules shared by every experiment (one warmup-cosine, not five copies)."""

import math

import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike

SCHEDULES = ("warmup_cosine", "constant")


def warmup_cosine(learning_rate: float, *, num_steps: ArrayLike, warmup_steps: ArrayLike = 0,
                  end_frac: float = 0.1) -> optax.Schedule:
  """Linear warmup from 0 to `learning_rate`, then cosine decay to `end_frac * learning_rate`.

  Step-for-step the same values as `optax.warmup_cosine_decay_schedule(0, lr,
  warmup_steps, num_steps, end_value=end_frac * lr)` (and, at
  `warmup_steps=0`, as `optax.cosine_decay_schedule(lr, num_steps,
  alpha=end_frac)`), written in `jnp` so that `num_steps` and `warmup_steps`
  may also be traced values: a program compiled once serves every step budget
  (the QAT grid does this). The warmup is clipped to `num_steps - 1` so a
  short run still ends with a decay step, and `num_steps` counts at least 2.

  Args:
    learning_rate: the peak learning rate.
    num_steps: total steps of the run (Python int or traced int32 scalar).
    warmup_steps: steps of the linear ramp (0: start at the peak).
    end_frac: final learning rate as a fraction of the peak, in [0, 1].

  Returns:
    `schedule(count) -> learning rate`.

  Example:
    >>> sched = warmup_cosine(1e-3, num_steps=100, warmup_steps=10)
    >>> float(sched(0)), round(float(sched(10)), 7), round(float(sched(100)), 7)
    (0.0, 0.001, 0.0001)
  """
  if not 0.0 <= end_frac <= 1.0:
    raise ValueError(f"end_frac must lie in [0, 1], got {end_frac}")
  if isinstance(num_steps, (int, np.integer)) and num_steps < 1:
    raise ValueError(f"num_steps must be >= 1, got {num_steps}")
  if isinstance(warmup_steps, (int, np.integer)) and warmup_steps < 0:
    raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")

  def schedule(count):
    total = jnp.maximum(num_steps, 2)
    warm = jnp.minimum(warmup_steps, total - 1)
    # Same operations, in the same order, as optax's linear + cosine join,
    # so float32 values match optax bit for bit.
    ramp = jnp.clip(count, 0, warm)
    up = (0.0 - learning_rate) * (1 - ramp / jnp.maximum(warm, 1)) + learning_rate
    decay_steps = (total - warm).astype(jnp.float32)
    c = jnp.minimum(count - warm, decay_steps)
    cosine = 0.5 * (1 + jnp.cos(jnp.pi * c / decay_steps))
    down = learning_rate * ((1 - end_frac) * cosine + end_frac)
    return jnp.where(count < warm, up, down)

  return schedule


def make_schedule(optimizer_config, num_steps: ArrayLike) -> optax.Schedule | float:
  """The schedule named by `optimizer_config.schedule` ("warmup_cosine" or "constant").

  Reads `learning_rate`, and for "warmup_cosine" `warmup_steps` (or
  `warmup_frac` of `num_steps`) and `end_frac` (default 0.1); "constant" leaves
  those in place unread, so `--config.optimizer.schedule=constant` alone switches
  a warmup-cosine config to a constant rate.
  """
  name = optimizer_config.get("schedule", "warmup_cosine")
  lr = float(optimizer_config.learning_rate)
  if not (lr >= 0 and math.isfinite(lr)):
    raise ValueError(f"optimizer.learning_rate must be a finite number >= 0, got {lr}")
  if name == "constant":
    return lr
  if name != "warmup_cosine":
    raise ValueError(f"optimizer.schedule must be one of {SCHEDULES}, got {name!r}")
  if "warmup_frac" in optimizer_config:
    if not 0.0 <= optimizer_config.warmup_frac <= 1.0:
      raise ValueError(f"optimizer.warmup_frac must lie in [0, 1], got "
                       f"{optimizer_config.warmup_frac}")
    warmup = jnp.floor(optimizer_config.warmup_frac * jnp.asarray(num_steps, jnp.float32))
    warmup = warmup.astype(jnp.int32)
  else:
    warmup = int(optimizer_config.get("warmup_steps", 0))
  return warmup_cosine(lr, num_steps=num_steps, warmup_steps=warmup,
                       end_frac=float(optimizer_config.get("end_frac", 0.1)))
