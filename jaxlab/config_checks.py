"""Config values checked before any compute: every number finite and in its declared range.

A config value reaches jitted code as a constant, and a NaN there does not fail:
it flows through every arm alike and comes out as plausible-looking results (every
method "1.00x", every criterion inconclusive). A negative learning rate runs too,
and diverges without an error. `check_config` refuses both before any work, with
one line that names the field as `--config.<path>` spells it.

Two rules:

* every float of the config (in tuples too) is finite: NaN and +-Inf are refused
  everywhere;
* a field whose dotted path matches a pattern of `RANGES` lies in that range.
  Patterns are `fnmatch` patterns over "." + the path (so ``"*.learning_rate"`` also
  matches a top-level `learning_rate`); "name:pattern" applies only to the config
  whose `experiment` (or `bench_<benchmark>`) is `name`. A tuple's elements are
  checked one by one; `None` and strings are left alone (they are options, not
  numbers).

Where a row's own code checks a field more tightly, that check still runs; this
table is the floor every config shares (learning rates > 0, counts >= 1,
probabilities in [0, 1], ...).
"""

import dataclasses
import fnmatch
import math
from collections.abc import Iterator, Mapping
from typing import Any

import ml_collections


@dataclasses.dataclass(frozen=True)
class Range:
  """A closed, open or half-open interval of numbers, or of integers.

  Attributes:
    low: the lower bound (None: unbounded).
    high: the upper bound (None: unbounded).
    low_open: True excludes `low` itself.
    high_open: True excludes `high` itself.
    integer: the value must be an `int` (a bool or a float is refused).
  """
  low: int | float | None = None
  high: int | float | None = None
  low_open: bool = False
  high_open: bool = False
  integer: bool = False

  def contains(self, value: Any) -> bool:
    """Whether `value` is a number (an int when `integer`) inside the range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      return False
    if self.integer and not isinstance(value, int):
      return False
    if self.low is not None and (value <= self.low if self.low_open else value < self.low):
      return False
    if self.high is not None and (value >= self.high if self.high_open else value > self.high):
      return False
    return True

  def __str__(self) -> str:
    kind = "an integer " if self.integer else ""
    if self.low is not None and self.high is not None:
      return (f"{kind}in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
              f"{')' if self.high_open else ']'}")
    if self.low is not None:
      return f"{kind}{'>' if self.low_open else '>='} {self.low:g}"
    if self.high is not None:
      return f"{kind}{'<' if self.high_open else '<='} {self.high:g}"
    return kind.strip() or "a number"


COUNT = Range(1, integer=True)           # steps, sizes, widths, repeats
NON_NEGATIVE_INT = Range(0, integer=True)
POSITIVE = Range(0, low_open=True)
NON_NEGATIVE = Range(0)
PROBABILITY = Range(0, 1)
DECAY = Range(0, 1, high_open=True)      # an EMA / momentum coefficient: 1 would never move

# (pattern, range), in no particular order: every matching pattern applies.
RANGES: tuple[tuple[str, Range], ...] = (
    # The shared vocabulary (DESIGN.md, "Config vocabulary").
    ("*.num_steps", COUNT), ("*batch_size", COUNT), ("*.total_steps", COUNT),
    ("*.total_updates", COUNT), ("*.checkpoint_every", COUNT), ("*.log_every", COUNT),
    ("*.eval_every", NON_NEGATIVE_INT), ("*.warmup_steps", NON_NEGATIVE_INT),
    ("*seed", NON_NEGATIVE_INT), ("*seeds", NON_NEGATIVE_INT),
    ("*learning_rate", POSITIVE), ("*.lrs", POSITIVE),
    ("*weight_decay", NON_NEGATIVE), ("*.grad_clip", POSITIVE),
    ("*.optimizer.b1", DECAY), ("*.optimizer.b2", DECAY), ("*.optimizer.eps", POSITIVE),
    # Model and batch shapes.
    ("*.d_model", COUNT), ("*.d_ff", COUNT), ("*.num_layers", COUNT), ("*.num_heads", COUNT),
    ("*.num_kv_heads", COUNT), ("*.max_len", COUNT), ("*.seq_len", COUNT),
    ("*.group_size", COUNT), ("*.num_envs", COUNT), ("*.eval_envs", COUNT),
    ("*.num_experts", COUNT), ("*.top_k", COUNT), ("*.repeats", COUNT), ("*.num_evals", COUNT),
    ("*.num_clusters", COUNT),
    # Probabilities and fractions.
    ("*_prob", PROBABILITY), ("*_probs", PROBABILITY), ("*fraction", PROBABILITY),
    ("*fractions", PROBABILITY), ("*_frac", PROBABILITY), ("*.dropout", PROBABILITY),
    ("*.label_smoothing", PROBABILITY), ("*.memory_utilization", PROBABILITY),
    ("*.gamma", PROBABILITY), ("*.gae_lambda", PROBABILITY), ("*_quantile", PROBABILITY),
    ("*.idk_label_rate", PROBABILITY), ("*.partial_label_accuracy", PROBABILITY),
    # Noise scales and temperatures.
    ("*noise", NON_NEGATIVE), ("*.sigma", NON_NEGATIVE), ("*temperature", POSITIVE),
    # Per experiment, where the meaning is the row's own.
    ("aes:*.sac.tau", Range(0, 1, low_open=True)), ("aes:*_decay", DECAY),
    ("eco:*.toy.decay", POSITIVE),       # the start and end learning rates of the toy's decay
    ("eco:*.toy.grid_step", POSITIVE), ("eco:*.toy.curvature", POSITIVE),
    ("eco:*.toy.momentum", DECAY),
    ("kernelband:*.kernelband.theta_sat", Range(0, 100, low_open=True)),  # in % of a resource
    ("kernelband:*.kernelband.epsilon", PROBABILITY), ("kernelband:*.kernelband.c", NON_NEGATIVE),
    ("kernelband:*budget*", COUNT),
    ("ucpo:*.ema_decay", DECAY), ("ucpo:*.dura_scale", NON_NEGATIVE),
    ("ucpo:*.adv_eps", POSITIVE), ("ucpo:*.eps_low", Range(0, 1, high_open=True)),
    ("ucpo:*.eps_high", NON_NEGATIVE),
    ("apc:*.eps_low", Range(0, 1, high_open=True)), ("apc:*.eps_high", NON_NEGATIVE),
)


def _name(config: ml_collections.ConfigDict | Mapping) -> str:
  """The row a config belongs to: its `experiment`, or `bench_<benchmark>`."""
  if "experiment" in config:
    return str(config["experiment"])
  return f"bench_{config['benchmark']}" if "benchmark" in config else ""


def _leaves(tree: Any, path: str) -> Iterator[tuple[str, Any]]:
  """(dotted path, value) of every leaf; a tuple's elements as path[i]."""
  if isinstance(tree, (ml_collections.ConfigDict, Mapping)):
    try:
      items = list(tree.items())  # evaluates a ConfigDict's computed fields
    except ArithmeticError as e:  # e.g. 1 / (1 - x) at x = 1
      raise ValueError(f"a config field computed from other fields cannot be evaluated ({e}); "
                       "check the values it is computed from") from e
    for key, value in items:
      yield from _leaves(value, f"{path}.{key}" if path else str(key))
  elif isinstance(tree, (tuple, list)):
    for i, value in enumerate(tree):
      yield from _leaves(value, f"{path}[{i}]")
  else:
    yield path, tree


def _ranges(name: str, path: str) -> list[Range]:
  """The ranges of `RANGES` whose pattern matches the field `path` of config `name`."""
  field = "." + path.split("[", 1)[0]
  found = []
  for pattern, rng in RANGES:
    scope, colon, glob = pattern.rpartition(":")
    if (not colon or scope == name) and fnmatch.fnmatchcase(field, glob):
      found.append(rng)
  return found


def check_config(config: ml_collections.ConfigDict | Mapping) -> None:
  """Refuses a config with a non-finite number or a value outside its declared range.

  Args:
    config: an `ml_collections.ConfigDict` or a nested mapping.

  Raises:
    ValueError: one line naming the first bad field, e.g.
      "config.noise must be finite, got nan".

  Example:
    >>> check_config({"experiment": "eco", "toy": {"lrs": (0.1, 0.01)}})
    >>> check_config({"experiment": "eco", "toy": {"lrs": (-0.1,)}})
    Traceback (most recent call last):
    ...
    ValueError: config.toy.lrs[0] must be > 0, got -0.1
    >>> check_config({"noise": float("nan")})
    Traceback (most recent call last):
    ...
    ValueError: config.noise must be finite, got nan
  """
  if not isinstance(config, (ml_collections.ConfigDict, Mapping)):
    raise TypeError(f"config must be a ConfigDict or a mapping, got {type(config).__name__}")
  name = _name(config)
  for path, value in _leaves(config, ""):
    if isinstance(value, float) and not math.isfinite(value):
      raise ValueError(f"config.{path} must be finite, got {value!r}")
    if value is None or isinstance(value, str):
      continue
    for rng in _ranges(name, path):
      if not rng.contains(value):
        raise ValueError(f"config.{path} must be {rng}, got {value!r}")
