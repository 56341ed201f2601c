r"""Runs one experiment: `python -m launch.main --config=configs/lm.py:smoke --workdir=W`.

`--config` names a config file and preset (`file.py:preset`); any field can be
overridden with `--config.a.b=value` (unknown keys are refused). The run
resumes from `--workdir` if it holds a checkpoint. `--jax_distributed`
initialises JAX's multi-host runtime first (one process per host).
"""

import json
import os

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config file and preset, e.g. configs/lm.py:quick.",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics, results.")
_DISTRIBUTED = flags.DEFINE_bool(
    "jax_distributed", False, "Call jax.distributed.initialize() (multi-host runs).")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Too many command-line arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
  import jax
  if _DISTRIBUTED.value:
    jax.distributed.initialize()
  from jaxlab import experiments, report
  config = _CONFIG.value
  logging.info("config:\n%s", config)
  if jax.process_index() == 0:  # the exact config of the run, beside its results
    os.makedirs(_WORKDIR.value, exist_ok=True)
    with open(os.path.join(_WORKDIR.value, "config.json"), "w") as f:
      f.write(config.to_json_best_effort(indent=2, sort_keys=True))
  module = experiments.get(config.experiment)
  results = module.run(config, _WORKDIR.value)
  summary = {k: v for k, v in results.items() if k != "report"}
  print(json.dumps(report.to_jsonable(summary), indent=1, sort_keys=True))


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])
  app.run(main)
