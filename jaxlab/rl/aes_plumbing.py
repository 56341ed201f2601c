"""The AES plumbing SAC and PPO share: knobs, entropy-weight modes, drifting env, evaluation.

Both trainers run one jitted program per (seed, mode) and pick the entropy
weight (SAC's temperature, PPO's entropy coefficient) from a traced mode index,
so `jax.vmap` trains every arm at once. What they share lives here:

  * `AESKnobs`: the AES tracker's settings (`aes_*` fields), a dataclass both
    configs extend; `NetworkDtypes`: their networks' `dtype` / `param_dtype`.
  * `AESWeights`: one tracker fed with TD errors, giving lambda_t under both
    square-root rules ("offset" and "sqrt", `aes_scheduler.RULES`) from the same
    drift proxy, so arms "aes" and "aes_sqrt" differ only in the rule.
  * `mode_index` / `select`: mode names <-> traced int32 indices.
  * `DriftingEnv`: the env params and drift level at step t, and the
    per-evaluation summary (deterministic-policy return under the current
    params plus window means of the training info).
  * `drift_summary`: one arm's evaluation curves over seeds scored by
    `jaxlab.rl.metrics.drift_metrics` (degradation, recovery, nAUC);
    `draw_run`: a run's return or entropy-weight curves per arm.

Example:
  >>> import jax.numpy as jnp
  >>> from jaxlab.rl import aes_plumbing
  >>> w = aes_plumbing.AESWeights(0.1, aes_plumbing.AESKnobs())
  >>> lams, state = w.update(w.init(), jnp.ones(8))
  >>> sorted(lams), round(float(lams["offset"]), 3), round(float(lams["sqrt"]), 3)
  (['offset', 'sqrt'], 0.1, 0.01)
"""

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaxlab.rl import aes_scheduler as aes_lib
from jaxlab.rl import envs as envs_lib
from jaxlab.rl import metrics
from jaxlab.rl.drift import Drift

# Mode name -> the rule its lambda_t follows.
AES_MODE_RULES = {"aes": "offset", "aes_sqrt": "sqrt"}


@dataclasses.dataclass(frozen=True)
class AESKnobs:
  """AES tracker settings (see `jaxlab.rl.aes_scheduler.aes_scheduler`).

  `aes_d_ref` is the "sqrt" rule's reference drift (None: `1 / aes_kappa`);
  None clips take the rule's defaults.
  """
  aes_kappa: float = 4.0
  aes_d_ref: float | None = None
  aes_quantile: float = 0.9
  aes_fast_decay: float = 0.99
  aes_slow_decay: float = 0.999
  aes_lambda_min: float | None = None
  aes_lambda_max: float | None = None

  def scheduler(self, lambda_0: float, rule: str = "offset") -> aes_lib.AESScheduler:
    """The AES tracker with reference weight `lambda_0` under `rule`."""
    return aes_lib.scheduler_from(lambda_0, self, rule)

  def _check_counts(self, positive: Sequence[str], total: str, every: str) -> None:
    """ValueError unless each of `positive` is an int >= 1 and `every` divides `total`."""
    cls = type(self).__name__
    for name in positive:
      v = getattr(self, name)
      if not (isinstance(v, int) and v >= 1):
        raise ValueError(f"{cls}.{name} must be a positive int, got {v!r}")
    if getattr(self, total) % getattr(self, every):
      raise ValueError(f"{cls}.{total} ({getattr(self, total)}) must be a multiple of "
                       f"{every} ({getattr(self, every)})")

  def _check_float(self, name: str, low: float, high: float = math.inf, *,
                   open_low: bool = False) -> None:
    """ValueError unless field `name` is a finite number in [low, high] ((low, high] if
    `open_low`)."""
    v = getattr(self, name)
    if not (math.isfinite(v) and (v > low if open_low else v >= low) and v <= high):
      want = f"{'>' if open_low else '>='} {low:g}" + (f" and <= {high:g}" if high < math.inf
                                                       else "")
      raise ValueError(f"{type(self).__name__}.{name} must be a finite number {want}, got {v!r}")


@dataclasses.dataclass(frozen=True)
class NetworkDtypes:
  """The networks' computation and weight dtypes, as in `flax.linen.Dense`.

  `dtype=None` computes in the inputs' / weights' dtype; e.g. `dtype="bfloat16"`
  with `param_dtype="float32"` is mixed precision. The trainers cast the networks'
  outputs to float32, so losses and log-probabilities stay in float32.
  """
  dtype: str | None = None
  param_dtype: str = "float32"

  def network_dtypes(self) -> dict[str, Any]:
    """`dict(dtype=..., param_dtype=...)` for the networks; ValueError unless floating."""
    cls = type(self).__name__
    out = {}
    for name in ("dtype", "param_dtype"):
      v = getattr(self, name)
      if v is None and name == "dtype":
        out[name] = None
        continue
      try:
        dt = jnp.dtype(v)
      except TypeError as e:
        raise ValueError(f"{cls}.{name} must name a dtype, got {v!r}") from e
      if not jnp.issubdtype(dt, jnp.floating):
        raise ValueError(f"{cls}.{name} must be a floating dtype, got {v!r}")
      out[name] = dt
    return out


class AESWeights:
  """One AES tracker; lambda_t under every rule from its drift proxy.

  `init() -> AESState`; `update(state, td_errors) -> ({rule: lambda_t}, state)`
  (jit/vmap-safe). The tracker (quantile, EMAs, proxy) is the "offset"
  scheduler's; the "sqrt" weight maps the same proxy through its own rule.
  """

  def __init__(self, lambda_0: float, knobs: AESKnobs):
    self._sched = knobs.scheduler(lambda_0, "offset")
    # Builds (and validates) the "sqrt" rule's settings once, at trace time.
    knobs.scheduler(lambda_0, "sqrt")
    self._sqrt = lambda d: aes_lib.lambda_from_proxy(
        d, lambda_0, kappa=knobs.aes_kappa, lambda_min=knobs.aes_lambda_min,
        lambda_max=knobs.aes_lambda_max, rule="sqrt", d_ref=knobs.aes_d_ref)
    self.init = self._sched.init

  def update(self, state: aes_lib.AESState, td_errors: Array
             ) -> tuple[dict[str, Array], aes_lib.AESState]:
    lam, state = self._sched.update(state, td_errors)
    return dict(offset=lam, sqrt=self._sqrt(state.proxy)), state


def mode_index(modes: Sequence[str], name: str, what: str = "mode") -> Array:
  """The int32 index of `name` in `modes` (for `train(key, mode)`)."""
  if name not in modes:
    raise ValueError(f"{what} must be one of {tuple(modes)}, got {name!r}")
  return jnp.int32(list(modes).index(name))


def select(mode: Array, modes: Sequence[str], values: Mapping[str, Any]) -> Array:
  """`values[modes[mode]]` for a traced mode index (every value is computed)."""
  return jnp.stack([jnp.asarray(values[m], jnp.float32) for m in modes])[mode]


def aes_values(lams: Mapping[str, Array]) -> dict[str, Array]:
  """Mode name -> lambda_t for the AES modes of `AES_MODE_RULES`."""
  return {mode: lams[rule] for mode, rule in AES_MODE_RULES.items()}


class DriftingEnv:
  """An env whose params follow a drift schedule of `num_steps` levels (or stay fixed).

  Args:
    env: a `jaxlab.rl.envs` environment.
    drift: a `Drift` with exactly `num_steps` levels, or None (default params).
    num_steps: the trainer's vectorised env steps.
    what: the trainer's name of `num_steps`, for the error message.
  """

  def __init__(self, env: Any, drift: Drift | None, num_steps: int, what: str):
    if drift is not None and drift.levels.shape[0] != num_steps:
      raise ValueError(f"drift schedule has {drift.levels.shape[0]} steps, expected "
                       f"{what}={num_steps}")
    self.env, self.drift = env, drift
    self.max_episode = int(env.default_params.max_steps_in_episode)

  def params_at(self, t: Array | int) -> Any:
    return self.env.default_params if self.drift is None else self.drift.params_at(t)

  def level_at(self, t: Array | int) -> Array:
    return jnp.float32(0.0) if self.drift is None else self.drift.levels[t]

  def evaluate(self, key: Array, policy: Callable[[Array], Array], t_end: Array,
               infos: dict[str, Array], eval_envs: int) -> tuple[Array, dict[str, Array]]:
    """Evaluates `policy` under the params at `t_end`; returns (next key, metrics)."""
    key, k_eval = jax.random.split(key)
    ev = envs_lib.evaluate(self.env, self.params_at(t_end), policy, k_eval, eval_envs,
                           self.max_episode)
    return key, envs_lib.summarize_chunk(infos, ev, t_end, self.level_at(t_end))


def drift_summary(steps: np.ndarray, curves: np.ndarray, levels: np.ndarray,
                  **metric_kwargs: Any) -> dict[str, Any]:
  """One arm's normalised evaluation curves [seeds, evals], scored over seeds.

  Args:
    steps: [evals] the step of each evaluation.
    curves: [seeds, evals] normalised returns (`metrics.normalize`).
    levels: the drift schedule's levels (its change points mark the events).
    **metric_kwargs: `metrics.drift_metrics`'s settings (threshold, smoothing, ...).

  Returns:
    {metric: dict(mean, std, per_seed)} for degradation, recovery_pct, nauc_steady and
    nauc_drift (NaN-skipping means; NaN when no seed is finite); "recovery_by_event": the
    recovery at each change point (mean and std over the seeds with that event);
    "censored" / "events": unrecovered and all change-point events over the seeds.

  Example:
    >>> import numpy as np
    >>> levels = np.repeat([0.0, 1.0], 50)
    >>> curves = np.tile(np.r_[np.ones(5), 0.5, np.ones(4)], (2, 1))
    >>> s = drift_summary(np.arange(10) * 10 + 9, curves, levels)
    >>> s["events"], len(s["degradation"]["per_seed"])
    (2, 2)
  """
  runs = [metrics.drift_metrics(steps, c, levels, **metric_kwargs) for c in curves]
  summary = {}
  for key in ("degradation", "recovery_pct", "nauc_steady", "nauc_drift"):
    vals = np.array([r[key] for r in runs], np.float64)
    finite = np.isfinite(vals).any()
    summary[key] = dict(mean=float(np.nanmean(vals)) if finite else float("nan"),
                        std=float(np.nanstd(vals)) if finite else float("nan"),
                        per_seed=vals.tolist())
  by_event = []
  for j, c in enumerate(metrics.change_points(levels)):
    rec = [r["events"][j]["recovery_pct"] for r in runs
           if j < len(r["events"]) and r["events"][j]["step"] == c]
    by_event.append(dict(step=c, mean=float(np.mean(rec)) if rec else float("nan"),
                         std=float(np.std(rec)) if rec else float("nan")))
  summary["recovery_by_event"] = by_event
  events = [e for r in runs for e in r["events"]]
  summary["censored"] = sum(not e["recovered"] for e in events)
  summary["events"] = len(events)
  return summary


def draw_run(ax: Any, run: Mapping[str, Any], *, weights: bool = False) -> None:
  """Each arm's evaluation return (mean ± std over seeds), or its entropy weight lambda_t
  (mean, log scale), against % of training, change points dashed, on a matplotlib `ax`.

  Args:
    ax: the axes.
    run: one task x drift-mode run of `jaxlab.experiments.aes` (its "steps",
      "total_steps", "change_points", "curves" and "lam" per arm [seeds, evals],
      "env", "algo", "drift_mode").
    weights: draw lambda_t instead of the return.

  Example:
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> run = dict(steps=[10, 20], total_steps=20, change_points=[10], env="pendulum",
    ...            algo="sac", drift_mode="abrupt", curves={"aes": [[1.0, 2.0]]},
    ...            lam={"aes": [[0.1, 0.2]]})
    >>> draw_run(plt.figure().gca(), run, weights=True)
  """
  steps = 100.0 * np.asarray(run["steps"]) / run["total_steps"]
  for arm, c in (run["lam"] if weights else run["curves"]).items():
    c = np.asarray(c)
    ax.plot(steps, c.mean(0), label=arm)
    if not weights:
      ax.fill_between(steps, c.mean(0) - c.std(0), c.mean(0) + c.std(0), alpha=0.2)
  for c in run["change_points"]:
    ax.axvline(100.0 * c / run["total_steps"], color="k", ls="--", lw=0.8)
  ax.set_xlabel("% of training")
  if weights:
    ax.set_yscale("log")
    ax.set_ylabel("lambda_t (temperature / ent. coef.)")
    ax.set_title(f"{run['env']}: entropy weight over time")
  else:
    ax.set_ylabel("evaluation return")
    ax.set_title(f"{run['env']} {run['algo'].upper()} ({run['drift_mode']} drift)")
  ax.legend(fontsize=7)
