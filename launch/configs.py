"""Loads `configs/<name>.py` by name: the launch side of the repository layout.

Library code (`jaxlab`) never reads the repository's files; tests, notebooks
and `launch/` scripts call `load_config(name, preset)` here, which returns
the same `ConfigDict` that `--config=configs/<name>.py:<preset>` gives.
"""

import importlib
import os
import sys

import ml_collections

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_DIR = os.path.join(ROOT, "configs")


def config_names() -> list[str]:
  """Names `x` of every `configs/x.py` (experiments and benchmarks)."""
  return sorted(f[:-3] for f in os.listdir(CONFIG_DIR)
                if f.endswith(".py") and not f.startswith("_"))


def load_config(name: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """`configs/<name>.py`'s `get_config(arg)`, the same config `--config` would load."""
  if name not in config_names():
    raise ValueError(f"No config file {os.path.join(CONFIG_DIR, name + '.py')} for {name!r}")
  # Configs import each other as `configs.<name>` (e.g. fp4 embeds the lm config).
  if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
  return importlib.import_module(f"configs.{name}").get_config(arg)
