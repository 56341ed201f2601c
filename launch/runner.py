"""Runs many experiments (the report) or benchmarks (ratios JSON).

`launch/reproduce.py` and `launch/bench.py` are thin flag wrappers around
`reproduce` and `bench`, which tests and notebooks call directly. Resuming is
each experiment's own business (orbax for training, `jaxlab.train.ArmCache`
for sweeps), so a killed `reproduce` rerun redoes no finished work.
"""

import importlib
import json
import os
import sys
import time
import traceback

from jaxlab import config_checks, report, train
from jaxlab.experiments import REGISTRY, get
from jaxlab.train.lm import base_lm_config
from launch.configs import config_names, load_config


def reproduce(workdir: str, preset: str, only: list[str] | None = None) -> tuple[str, list[str]]:
  """Runs each experiment in `workdir/<name>` and writes `workdir/REPORT.md`.

  A failing experiment does not stop the others: its row says "not measured"
  with the error, and its name is returned in the failures. Every config is
  checked first (`check_reproduce`), so a bad value stops the report before any run.

  Raises:
    ValueError: from `check_reproduce`.

  Returns:
    (path of REPORT.md, names of the experiments that failed).
  """
  names = check_reproduce(workdir, preset, only)
  entries, failures = [], []
  # Experiment i/N, the last one's time, elapsed and ETA (a bar, or log lines off a terminal).
  with train.Progress(len(names), desc="reproduce", unit="experiment") as progress:
    for name in names:
      run_dir = os.path.join(workdir, name)
      start = time.perf_counter()
      try:
        config = load_config(name, preset)
        share_base_lm(config, workdir, preset)
        # A workdir of another config is refused, never reported as this one's.
        train.check_or_write_fingerprint(run_dir, config)
        results = get(name).run(config, run_dir)
      except Exception:  # one failed experiment must not hide the others' rows
        failures.append(name)
        err = traceback.format_exc()
        print(err, file=sys.stderr)
        results = {"report": {"method": name, "verdict": "not measured",
                              "details": "run failed: " + err.strip().splitlines()[-1]}}
      seconds = time.perf_counter() - start
      print(f"[reproduce] {name}: {seconds:.1f} s", file=sys.stderr)
      entries.append((name, run_dir, results))
      progress.set_postfix(last=f"{name} ({seconds:.0f} s)")
      progress.update()
  path = report.render_report(
      entries, os.path.join(workdir, "REPORT.md"),
      preamble=f"Preset `{preset}`, produced by `python -m launch.reproduce --preset={preset}`.")
  return path, failures


def check_reproduce(workdir: str, preset: str, only: list[str] | None = None) -> list[str]:
  """Checks what `reproduce` would run, before it runs anything; returns the names.

  Raises:
    ValueError: an unknown experiment, a bad value in any of their configs
      (`check_config`), or a `workdir` that cannot be a directory; one line.
  """
  names = list(only or REGISTRY)
  unknown = [n for n in names if n not in REGISTRY]
  if unknown:
    raise ValueError(f"Unknown experiments {unknown}; registered: {REGISTRY}")
  train.check_workdir_path(workdir)
  for name in names:
    check_config(name, load_config(name, preset))
  return names


def check_bench(preset: str, only: list[str] | None = None) -> dict:
  """Checks the benchmarks `bench` would run; returns {name: config}.

  Raises:
    ValueError: an unknown benchmark or a bad value in its config; one line.
  """
  names = list(only or available_benchmarks())
  unknown = sorted(set(names) - set(available_benchmarks()))
  if unknown:
    raise ValueError(f"Unknown benchmarks {unknown}; available: {available_benchmarks()}")
  configs = {name: load_config(f"bench_{name}", preset) for name in names}
  for name, config in configs.items():
    check_config(f"bench_{name}", config)
  return configs


def check_config(name: str, config) -> None:
  """`jaxlab.config_checks.check_config`, its one-line error prefixed with the config's name.

  Raises:
    ValueError: "configs/<name>.py: config.<field> must be ..., got ...".
  """
  try:
    config_checks.check_config(config)
  except ValueError as e:
    raise ValueError(f"configs/{name}.py: {e}") from e


def share_base_lm(config, workdir: str, preset: str) -> None:
  """Points an experiment's base-LM cache (`config.base_lm_dir`, when left empty) at
  the `lm` experiment's run in `workdir` when both train the same base model (equal
  `jaxlab.train.lm.LM_SECTIONS`), so a report trains the tiny LM once."""
  if config.get("experiment") == "lm" or "base_lm_dir" not in config or config.base_lm_dir:
    return
  if base_lm_config(config) == base_lm_config(load_config("lm", preset)):
    config.base_lm_dir = os.path.join(workdir, "lm")


def available_benchmarks() -> list[str]:
  """Names `x` of the `configs/bench_x.py` files."""
  return [n[len("bench_"):] for n in config_names() if n.startswith("bench_")]


def bench(out: str, preset: str, only: list[str] | None = None,
          cpu_devices: int | None = None) -> dict:
  """Runs the benchmarks and writes `{name: results}` as JSON to `out`.

  A benchmark is `configs/bench_<name>.py` (with `config.benchmark = name`)
  plus `jaxlab.experiments.bench_<name>.run_benchmark(config) -> dict`.
  The host CPU is first split into `cpu_devices` JAX devices (default: the most
  any selected config asks for, `config.cpu_devices`); a process that already ran
  JAX keeps its devices, and a benchmark that needs more says it skipped that part.
  Each result records `malloc_reuses_freed_memory` (`jaxlab.train.malloc.applied`).
  """
  configs = check_bench(preset, only)
  if cpu_devices is None:
    cpu_devices = max([c.get("cpu_devices", 1) for c in configs.values()], default=1)
  if cpu_devices > 1:
    try:
      train.use_cpu_devices(cpu_devices)
    except RuntimeError as e:
      print(f"[bench] keeping this process's devices: {e}", file=sys.stderr)
  results = {}
  for name, config in configs.items():
    module = importlib.import_module(f"jaxlab.experiments.bench_{config.benchmark}")
    results[name] = report.to_jsonable(module.run_benchmark(config))
    # Timings depend on it (XLA:CPU's temporaries are page-faulted in on every call without).
    results[name]["malloc_reuses_freed_memory"] = train.malloc.applied
    print(f"[bench] {name}: {json.dumps(results[name].get('ratios', {}))}", file=sys.stderr)
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  with open(out, "w") as f:
    json.dump(results, f, indent=2, sort_keys=True)
  return results
