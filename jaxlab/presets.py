"""Preset parsing shared by every `configs/*.py` file.

Configs are selected as `--config=configs/lm.py:quick`; the part after the
colon reaches `get_config(arg)` and is parsed here so that every experiment
accepts the same names and fails the same clear way on a typo.
"""

PRESETS = ("smoke", "quick", "full")


def parse_preset(arg: str | None, *, default: str = "quick",
                 valid: tuple[str, ...] = PRESETS) -> str:
  """Returns the preset named by `arg` (None or "" selects `default`).

  Raises:
    ValueError: if `arg` names no known preset.

  Example:
    >>> parse_preset("smoke"), parse_preset(None)
    ('smoke', 'quick')
  """
  preset = (arg or default).strip()
  if preset not in valid:
    raise ValueError(
        f"Unknown config preset {preset!r}; expected one of {', '.join(valid)} "
        "(e.g. --config=configs/lm.py:smoke).")
  return preset


def split_names(value) -> list[str]:
  """A comma-separated config list ("a, b,c") -> ["a", "b", "c"]; blanks dropped.

  Configs keep lists of names (arms, methods, data sets) as one string so that a
  flag such as `--config.arms=frozen,cramer` can replace them.

  >>> split_names("frozen, cramer,,")
  ['frozen', 'cramer']
  """
  return [x.strip() for x in str(value).split(",") if x.strip()]


def config_names(config, key: str, choices=None) -> list[str]:
  """`config.<key>` read with `split_names`; ValueError when empty or not among `choices`.

  >>> import ml_collections
  >>> config_names(ml_collections.ConfigDict(dict(arms="a, b")), "arms", choices=("a", "b"))
  ['a', 'b']
  """
  names = split_names(config[key])
  if not names:
    raise ValueError(f"config.{key} must name at least one entry, got {config[key]!r}")
  if choices is not None and any(n not in choices for n in names):
    raise ValueError(f"config.{key} must name some of {tuple(choices)}, got {config[key]!r}")
  return names


def config_seeds(config) -> list[int]:
  """`config.seeds` as a list of ints; ValueError when it is empty or repeats a seed.

  Every experiment runs its arms on these seeds, paired: the same seed gives
  every arm the same data and initialisation. A repeated seed would repeat its
  pair of values, shrink the paired standard error and let a verdict pass on one
  measurement counted twice.

  >>> import ml_collections
  >>> config_seeds(ml_collections.ConfigDict(dict(seeds=(0, 1, 2))))
  [0, 1, 2]
  """
  seeds = [int(s) for s in config.seeds]
  if not seeds:
    raise ValueError("config.seeds must be non-empty")
  if len(set(seeds)) != len(seeds):
    raise ValueError(f"config.seeds must be distinct, got {seeds}")
  return seeds
