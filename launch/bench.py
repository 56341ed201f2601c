r"""Runs the benchmarks `configs/bench_*.py` and writes their ratios as JSON.

  python -m launch.bench --out=runs/bench/bench.json [--only=decode] [--preset=quick]

Each benchmark times ours against a baseline side by side in this one
process (`jaxlab.benchmarking.time_interleaved`: interleaved repeats,
medians) and reports ratios; see `launch.runner.bench`. The host CPU is split
into the JAX devices the selected benchmarks ask for (`config.cpu_devices`,
e.g. lm_train's data parallel step), or into `--cpu_devices`.
"""

import os
import sys

from absl import app, flags, logging

from jaxlab.train import malloc
from launch.cpu_devices import CPU_DEVICES
from launch.runner import bench, check_bench

_OUT = flags.DEFINE_string("out", "runs/bench/bench.json", "Where to write the JSON.")
_PRESET = flags.DEFINE_enum("preset", "quick", ["smoke", "quick", "full"], "Benchmark preset.")
_ONLY = flags.DEFINE_list("only", [], "Run only these benchmarks (names after bench_).")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Too many command-line arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  try:  # every selected config, before any compute: one line, exit 1
    check_bench(_PRESET.value, _ONLY.value)
  except ValueError as e:
    sys.stderr.write(f"FATAL {e}\n")
    sys.exit(1)
  malloc.use_for_launch("reuse")  # one large step timed over and over; before XLA starts
  bench(_OUT.value, _PRESET.value, _ONLY.value, cpu_devices=CPU_DEVICES.value)
  print(f"BENCH: {os.path.abspath(_OUT.value)}")


if __name__ == "__main__":
  app.run(main)
