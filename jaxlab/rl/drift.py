"""Drift wrappers: time-varying environment parameters in four modes.

A drift is a scalar level `z_t` in [0, 1] per environment step and per-field
offsets `deltas`; the parameters at step `t` are
`params.replace(field=base.field + z_t * delta)` for each drifting field (then
derived fields are recomputed, e.g. CartPole's `total_mass`). It works on any
flax-struct params with `.replace`, including gymnax `EnvParams`.

Modes of `z_t` (T = `num_steps`, u = t / T; all are 0 before `start`):

  * "none":        z = 0.
  * "abrupt":      piecewise constant, jumping at `start` and `end`:
                   `levels[0]` before start, `levels[1]` on [start, end),
                   `levels[2]` after (default 0, 1, 0: change, then change back).
  * "ramp":        linear from 0 at `start` to 1 at `end`, then 1.
  * "periodic":    `(1 - cos(2 pi (u - start) / period)) / 2` after start.
  * "random_walk": after start,
                   ``z_t = clip(z_{t-1} + sigma / sqrt(1000) * N(0, 1), 0, 1)``,
                   i.e. std `sigma` per 1000 steps.

The change points T/3 and 2T/3, a period of T/4 and the random-walk scale
per 1000 steps follow the jaxlab plan (the paper's drift-mode parameters were
not available: jaxlab interpretation); each is an argument.
"""

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import Array
from jaxtyping import ArrayLike, Float

DRIFT_MODES = ("none", "abrupt", "ramp", "periodic", "random_walk")


def drift_schedule(mode: str, num_steps: int, *, start: float = 1 / 3,
                   end: float = 2 / 3, period: float = 0.25,
                   sigma: float = 0.25,
                   levels: tuple[float, float, float] = (0.0, 1.0, 0.0),
                   key: Array | None = None) -> Float[Array, "num_steps"]:
  """The drift level `z_t` for `t = 0 .. num_steps - 1` (see module doc).

  Args:
    mode: one of `DRIFT_MODES`.
    num_steps: number of environment steps T, >= 1.
    start: first change point as a fraction of T, in [0, 1).
    end: second change point ("abrupt") / end of the ramp, in (start, 1].
    period: period of "periodic" as a fraction of T, > 0.
    sigma: "random_walk" std per 1000 steps, >= 0.
    levels: the three "abrupt" levels.
    key: PRNG key, required by "random_walk".

  Returns:
    float32 array of shape (num_steps,).

  Example:
    >>> z = drift_schedule("abrupt", 9)
    >>> z.tolist()
    [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
  """
  if mode not in DRIFT_MODES:
    raise ValueError(f"mode must be one of {DRIFT_MODES}, got {mode!r}")
  if not (isinstance(num_steps, int) and num_steps >= 1):
    raise ValueError(f"num_steps must be a positive int, got {num_steps!r}")
  if not 0.0 <= start < 1.0:
    raise ValueError(f"start must be in [0, 1), got {start!r}")
  if not start < end <= 1.0:
    raise ValueError(f"end must be in (start, 1], got start={start!r}, "
                     f"end={end!r}")
  if not period > 0.0:
    raise ValueError(f"period must be > 0, got {period!r}")
  if not sigma >= 0.0:
    raise ValueError(f"sigma must be >= 0, got {sigma!r}")
  if len(levels) != 3:
    raise ValueError(f"levels must have 3 entries, got {levels!r}")
  u = jnp.arange(num_steps, dtype=jnp.float32) / num_steps
  after = u >= start
  if mode == "none":
    return jnp.zeros((num_steps,), jnp.float32)
  if mode == "abrupt":
    return jnp.where(u < start, levels[0],
                     jnp.where(u < end, levels[1], levels[2])).astype(
                         jnp.float32)
  if mode == "ramp":
    return jnp.clip((u - start) / (end - start), 0.0, 1.0)
  if mode == "periodic":
    return jnp.where(after, 0.5 * (1 - jnp.cos(2 * jnp.pi * (u - start)
                                               / period)), 0.0)
  if key is None:
    raise ValueError("mode='random_walk' needs a PRNG key")
  noise = sigma / jnp.sqrt(1000.0) * jax.random.normal(key, (num_steps,))
  noise = jnp.where(after, noise, 0.0)

  def walk(z, eps):
    z = jnp.clip(z + eps, 0.0, 1.0)
    return z, z

  _, z = jax.lax.scan(walk, jnp.float32(0.0), noise)
  return z


def _fields(params) -> set[str]:
  return {f.name for f in dataclasses.fields(params)}


def apply_drift(params: Any, deltas: Mapping[str, Any],
                z: Float[ArrayLike, ""],
                derived: Callable[[Any], Any] | None = None) -> Any:
  """`params` with `field += z * delta` for each `(field, delta)` in `deltas`.

  Args:
    params: a flax-struct params object (jaxlab or gymnax `EnvParams`).
    deltas: field name -> offset at `z = 1` (a float or an array of the field's
      shape).
    z: the drift level (scalar, may be traced).
    derived: recomputes derived fields; default `params.with_derived` when the
      params define it (CartPole), else identity.

  Returns:
    New params of the same type.
  """
  names = _fields(params)
  unknown = sorted(set(deltas) - names)
  if unknown:
    raise ValueError(f"deltas name unknown params fields {unknown}; "
                     f"{type(params).__name__} has {sorted(names)}")
  z = jnp.asarray(z, jnp.float32)
  new = params.replace(**{k: getattr(params, k) + z * jnp.asarray(v, jnp.float32)
                          for k, v in deltas.items()})
  if derived is None and hasattr(new, "with_derived"):
    derived = type(new).with_derived
  return derived(new) if derived is not None else new


class Drift(NamedTuple):
  """A drifting environment: base params, offsets and a level per step."""
  base: Any
  deltas: Mapping[str, Any]
  levels: Array  # float32 [num_steps]

  def params_at(self, t: int | Array) -> Any:
    """Env params at environment step `t` (clamped to the schedule)."""
    t = jnp.clip(t, 0, self.levels.shape[0] - 1)
    return apply_drift(self.base, self.deltas, self.levels[t])

  def change_points(self) -> tuple[int, ...]:
    """Steps where the level jumps by more than 0.5 (abrupt changes)."""
    z = jax.device_get(self.levels)
    return tuple(int(i) + 1 for i in range(len(z) - 1)
                 if abs(float(z[i + 1]) - float(z[i])) > 0.5)


def make_drift(base: Any, deltas: Mapping[str, Any], mode: str,
               num_steps: int, **schedule_kwargs) -> Drift:
  """`Drift(base, deltas, drift_schedule(mode, num_steps, **kw))`.

  Example:
    >>> from jaxlab.rl import envs
    >>> d = make_drift(envs.Pendulum.default_params, {"g": 5.0}, "abrupt", 30)
    >>> float(d.params_at(jnp.int32(15)).g)
    15.0
  """
  apply_drift(base, deltas, 0.0)  # validates field names early
  return Drift(base, dict(deltas), drift_schedule(mode, num_steps,
                                                  **schedule_kwargs))
