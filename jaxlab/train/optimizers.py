"""One optimizer from config: `optimizer(config.optimizer, num_steps, stage=...)`.

Every trainer in the library and every experiment builds its optax optimizer
here, from the config's `optimizer` section, so `--config.optimizer.learning_rate`
(or any other key below) reaches the optimizer in one stop, with one meaning::

  name           "adamw" (default), "adam" (AdamW without weight decay) or "sgd"
  learning_rate  the peak learning rate (required)
  schedule       "warmup_cosine" (default) or "constant" (`jaxlab.train.make_schedule`)
  warmup_steps   linear warmup steps, or `warmup_frac` of the steps; `end_frac`: the
                 cosine's final fraction of the peak (default 0.1)
  b1, b2, eps    Adam's moments (defaults 0.9, 0.999, 1e-8; adam / adamw only)
  weight_decay   decoupled weight decay (default 0; adamw only)
  momentum, nesterov   SGD's (defaults none, False; sgd only)
  grad_clip      clip the gradients' global norm to this first (default: no clipping)

A named sub-optimizer (a second stage, or one network of several: SAC's actor,
critic and alpha; an SFT stage before RL) is a section `optimizer.<stage>` whose
keys override the top-level ones: `stage="actor"` resolves `optimizer.actor` over
`optimizer`. A trainer whose sections must not take the top level's optimizer
settings (SAC's networks, when the top level is another trainer's clipped Adam)
passes `inherit=SCHEDULE_KEYS`: its sections then inherit the schedule alone.
A key the builder does not know, or one the named optimizer would not
read (`momentum` with adamw), is a `ValueError` naming it: no key is silently
ignored. The one exception is documented in `make_schedule`: a "constant" schedule
leaves the warmup keys unread, so `--config.optimizer.schedule=constant` alone
switches a schedule off.
"""

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import optax
from jax.typing import ArrayLike

from jaxlab.train.schedules import make_schedule

NAMES = ("adamw", "adam", "sgd")
# Keys every optimizer reads, and the keys each name adds.
# The learning-rate schedule's keys (`make_schedule`): what a stage shares at the least.
SCHEDULE_KEYS = ("learning_rate", "schedule", "warmup_steps", "warmup_frac", "end_frac")
_COMMON_KEYS = ("name", "grad_clip", *SCHEDULE_KEYS)
_NAME_KEYS = {
    "adamw": ("b1", "b2", "eps", "weight_decay"),
    "adam": ("b1", "b2", "eps"),
    "sgd": ("momentum", "nesterov"),
}
KEYS = tuple(dict.fromkeys(_COMMON_KEYS + sum(_NAME_KEYS.values(), ())))


def resolve(config: Any, stage: str | None = None, *, prefix: str = "optimizer",
            inherit: Sequence[str] | None = None) -> dict[str, Any]:
  """The flat optimizer fields of `config` (an `optimizer` section), `stage` applied.

  Args:
    config: the `optimizer` ConfigDict (or a mapping); sections inside it are
      named sub-optimizers.
    stage: the sub-optimizer to resolve over the top-level fields, or None for the
      top level alone.
    prefix: how the section is spelled on the command line, for error messages.
    inherit: the top-level keys a stage inherits; None: all of them.

  Returns:
    {key: value} with the stage's keys over the (inherited) top-level ones, sections
    dropped.

  Raises:
    ValueError: `stage` names no section of `config`, a section holds a section, or
      `inherit` names a key the builder does not know.

  Example:
    >>> import ml_collections
    >>> opt = ml_collections.ConfigDict(dict(learning_rate=1e-3, schedule="constant",
    ...                                      actor=dict(learning_rate=3e-4)))
    >>> resolve(opt, "actor")
    {'learning_rate': 0.0003, 'schedule': 'constant'}
    >>> opt.grad_clip = 0.5
    >>> resolve(opt, "actor", inherit=SCHEDULE_KEYS)   # the top level's clip stays there
    {'learning_rate': 0.0003, 'schedule': 'constant'}
  """
  fields = _plain(config)
  sections = {k: v for k, v in fields.items() if isinstance(v, Mapping)}
  out = {k: v for k, v in fields.items() if k not in sections}
  if stage is None:
    return out
  if inherit is not None:
    unknown = [k for k in inherit if k not in KEYS]
    if unknown:
      raise ValueError(f"inherit names {unknown[0]!r}, not an optimizer key; known: {KEYS}")
    out = {k: v for k, v in out.items() if k in inherit}
  if stage not in sections:
    raise ValueError(f"{prefix}.{stage} is not a section of the config (sub-optimizers: "
                     f"{sorted(sections) or 'none'})")
  nested = [k for k, v in sections[stage].items() if isinstance(v, Mapping)]
  if nested:
    raise ValueError(f"{prefix}.{stage}.{nested[0]}: a sub-optimizer cannot hold sections")
  return {**out, **sections[stage]}


def optimizer(config: Any, num_steps: ArrayLike, *, stage: str | None = None,
              base: Callable[..., optax.GradientTransformation] | None = None,
              inject_hyperparams: bool = False, prefix: str = "optimizer",
              inherit: Sequence[str] | None = None) -> optax.GradientTransformation:
  """The optax optimizer of `config` (the `optimizer` section) for a run of `num_steps`.

  Args:
    config: the `optimizer` ConfigDict (keys in the module docstring).
    num_steps: the run's steps, which the schedule spans (an int, or a traced int32
      scalar: `jaxlab.train.warmup_cosine` accepts one).
    stage: a named sub-optimizer, `config.<stage>`, resolved over the top level.
    base: a factory used in place of the named optimizer, called as
      `base(learning_rate, **hyperparameters)` with the keys that name reads (for
      adamw: b1, b2, eps, weight_decay), e.g. a quantized-state AdamW of
      `jaxlab.optim`. Clipping and the schedule are still the builder's.
    inject_hyperparams: wrap the named optimizer in `optax.inject_hyperparams`, so its
      state carries the current learning rate (`state.hyperparams["learning_rate"]`,
      inside the clip's chain when `grad_clip` is set) for logging or overriding.
    prefix: how the section is spelled on the command line, for error messages.
    inherit: the top-level keys `stage` inherits (`resolve`); None: all of them.

  Returns:
    `optax.chain(clip_by_global_norm(grad_clip), <named optimizer>)`, or the named
    optimizer alone when `grad_clip` is unset. Adam with `weight_decay` 0 is
    `optax.adam` (the same updates as AdamW at 0, one transform fewer).

  Raises:
    ValueError: an unknown key, a key the named optimizer does not read, an unknown
      name or stage, or a value out of range; the message names the key.

  Example:
    >>> import ml_collections
    >>> opt = ml_collections.ConfigDict(dict(
    ...     name="adamw", learning_rate=1e-3, schedule="warmup_cosine", warmup_steps=10,
    ...     weight_decay=0.1, grad_clip=1.0, sft=dict(learning_rate=1e-4)))
    >>> tx = optimizer(opt, num_steps=100)
    >>> sft = optimizer(opt, num_steps=50, stage="sft")   # 1e-4, the rest as above
  """
  where = f"{prefix}.{stage}" if stage else prefix
  fields = resolve(config, stage, prefix=prefix, inherit=inherit)
  name = fields.get("name", "adamw")
  if name not in NAMES:
    raise ValueError(f"{where}.name must be one of {NAMES}, got {name!r}")
  unknown = [k for k in fields if k not in KEYS]
  if unknown:
    raise ValueError(f"{where}.{unknown[0]} is not an optimizer key; known: {KEYS}")
  unread = [k for k in fields if k not in _COMMON_KEYS + _NAME_KEYS[name]]
  if unread:
    raise ValueError(f"{where}.{unread[0]} is not read by {name} (it reads "
                     f"{_COMMON_KEYS + _NAME_KEYS[name]})")
  if "warmup_steps" in fields and "warmup_frac" in fields:
    raise ValueError(f"{where}.warmup_steps and {where}.warmup_frac are both set; keep one")
  if "learning_rate" not in fields:
    raise ValueError(f"{where}.learning_rate is required")
  hyper = {k: fields[k] for k in _NAME_KEYS[name] if k in fields}
  _check_values(hyper, fields.get("grad_clip"), where)
  try:
    schedule = make_schedule(_Fields(fields), num_steps)
  except ValueError as e:  # make_schedule says "optimizer.<key>"; name the stage too
    raise ValueError(str(e).replace("optimizer.", f"{where}.", 1)) from e

  if base is not None:
    factory = base
  elif name == "sgd":
    factory = _sgd
  elif name == "adam" or not hyper.get("weight_decay", 0.0):
    hyper.pop("weight_decay", None)
    factory = optax.adam
  else:
    factory = optax.adamw
  if inject_hyperparams:
    factory = optax.inject_hyperparams(factory)
  tx = factory(schedule, **hyper)
  if fields.get("grad_clip") is None:
    return tx
  return optax.chain(optax.clip_by_global_norm(float(fields["grad_clip"])), tx)


def _sgd(learning_rate, momentum=None, nesterov=False):
  # momentum 0 is plain SGD (optax's momentum=None), not a trace with decay 0.
  return optax.sgd(learning_rate, momentum=momentum or None, nesterov=bool(nesterov))


def _check_values(hyper: dict[str, Any], grad_clip: Any, where: str) -> None:
  def bad(key, value, what):
    raise ValueError(f"{where}.{key} must be {what}, got {value!r}")

  for key in ("b1", "b2", "momentum"):
    if key in hyper and hyper[key] is not None and not 0.0 <= hyper[key] < 1.0:
      bad(key, hyper[key], "in [0, 1)")
  if "eps" in hyper and not hyper["eps"] > 0:
    bad("eps", hyper["eps"], "> 0")
  wd = hyper.get("weight_decay", 0.0)
  if not (isinstance(wd, (int, float)) and math.isfinite(wd) and wd >= 0):
    bad("weight_decay", wd, "a finite number >= 0")
  if grad_clip is not None and not (isinstance(grad_clip, (int, float)) and grad_clip > 0
                                    and math.isfinite(grad_clip)):
    bad("grad_clip", grad_clip, "a finite number > 0 (or None: no clipping)")


class _Fields(dict):
  """The resolved fields with attribute access, which `make_schedule` reads."""

  def __getattr__(self, key):
    try:
      return self[key]
    except KeyError as e:
      raise AttributeError(key) from e


def _plain(config: Any) -> dict[str, Any]:
  if hasattr(config, "to_dict"):
    return config.to_dict()
  if isinstance(config, Mapping):
    return {k: _plain(v) if isinstance(v, Mapping) else v for k, v in config.items()}
  raise ValueError(f"optimizer config must be a ConfigDict or a mapping, got "
                   f"{type(config).__name__}")
