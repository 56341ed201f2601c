"""Reproductions: one module per experiment, each with `run(config, workdir)`.

Contract (every experiment follows it, `lm` is the reference):
  * `configs/<name>.py` defines `get_config(arg)` with presets smoke/quick/full
    (`jaxlab.presets.parse_preset`) and sets `config.experiment = "<name>"`;
    `launch.configs.load_config(name, preset)` loads it.
  * `jaxlab/experiments/<name>.py` defines `run(config, workdir) -> dict`. It
    declares its arms and measurements on a `jaxlab.study.Study` (arms cached and
    resumed in `workdir/arms/`, the config's criteria judged, `results.json`
    written with a `report` row: a `jaxlab.report.ReportRow` as a dict) and
    composes library pieces: training through `jaxlab.train` (orbax resume, the
    optimizer from `jaxlab.train.optimizer(config.optimizer, ...)`), evaluation and
    data from the areas. It returns what it wrote. (Rows not yet ported build the
    same skeleton by hand: `ArmCache`, `judge_all`, `ReportRow`, `write_results`.)
  * No experiment imports another experiment.
"""

import importlib
from types import ModuleType

# Experiments rendered by `launch/reproduce.py`, in report order.
REGISTRY: tuple[str, ...] = ("lm", "fp4", "oea", "ebplus", "modex", "aes", "qat_scaling", "eco",
                            "ucpo", "kernelband", "apc", "zeroshot", "cramer", "cvgl",
                            "spatial_deconfounder", "pose_icl", "escot", "opl", "pc", "sata")


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
