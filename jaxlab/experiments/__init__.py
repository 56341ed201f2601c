"""Reproductions: one module per experiment, each with `run(config, workdir)`.

Contract (every experiment follows it, `lm` is the reference):
  * `configs/<name>.py` defines `get_config(arg)` with presets smoke/quick/full
    (`jaxlab.presets.parse_preset`) and sets `config.experiment = "<name>"`.
  * `jaxlab/experiments/<name>.py` defines `run(config, workdir) -> dict`. It
    resumes from `workdir` when it can, and returns a JSON-serialisable dict
    that it also writes with `jaxlab.report.write_results(workdir, results)`.
    `results["report"]` is a `jaxlab.report.ReportRow` as a dict: what the
    reproduction report shows for this method.
"""

import importlib
import importlib.util
import os
from types import ModuleType

# Experiments rendered by `launch/reproduce.py`, in report order.
REGISTRY: tuple[str, ...] = ("lm", "fp4", "oea", "ebplus", "modex", "aes", "qat_scaling", "eco")


def get(name: str) -> ModuleType:
  """Imports `jaxlab.experiments.<name>`, with a clear error for a bad name."""
  if not name or not name.isidentifier():
    raise ValueError(f"config.experiment must name a module, got {name!r}")
  try:
    return importlib.import_module(f"jaxlab.experiments.{name}")
  except ModuleNotFoundError as e:
    if e.name == f"jaxlab.experiments.{name}":
      raise ValueError(
          f"Unknown experiment {name!r}; registered: {', '.join(REGISTRY)}") from e
    raise


# configs/ sits beside the package in the repository (editable install).
CONFIG_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "configs"))


def load_config(name: str, arg: str | None = None):
  """`configs/<name>.py`'s `get_config(arg)`, the same config `--config` would load."""
  path = os.path.join(CONFIG_DIR, f"{name}.py")
  if not os.path.exists(path):
    raise ValueError(f"No config file {path} for {name!r}")
  spec = importlib.util.spec_from_file_location(f"jaxlab_configs_{name}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)
