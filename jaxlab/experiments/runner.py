"""Runs many experiments (the report) or benchmarks (ratios JSON).

`launch/reproduce.py` and `launch/bench.py` are thin flag wrappers around
`reproduce` and `bench`, which tests and notebooks call directly.
"""

import glob
import importlib
import json
import os
import sys
import time
import traceback

from jaxlab import report
from jaxlab.experiments import CONFIG_DIR, REGISTRY, get, load_config


def reproduce(workdir: str, preset: str, only: list[str] | None = None) -> tuple[str, list[str]]:
  """Runs each experiment in `workdir/<name>` and writes `workdir/REPORT.md`.

  A failing experiment does not stop the others: its row says "not measured"
  with the error, and its name is returned in the failures.

  Returns:
    (path of REPORT.md, names of the experiments that failed).
  """
  names = list(only or REGISTRY)
  unknown = [n for n in names if n not in REGISTRY]
  if unknown:
    raise ValueError(f"Unknown experiments {unknown}; registered: {REGISTRY}")
  entries, failures = [], []
  for name in names:
    run_dir = os.path.join(workdir, name)
    start = time.perf_counter()
    try:
      config = load_config(name, preset)
      _share_base_lm(config, workdir, preset)
      results = get(name).run(config, run_dir)
    except Exception:  # one failed experiment must not hide the others' rows
      failures.append(name)
      err = traceback.format_exc()
      print(err, file=sys.stderr)
      results = {"report": {"method": name, "verdict": "not measured",
                            "details": "run failed: " + err.strip().splitlines()[-1]}}
    print(f"[reproduce] {name}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    entries.append((name, run_dir, results))
  path = report.render_report(
      entries, os.path.join(workdir, "REPORT.md"),
      preamble=(f"Preset `{preset}`, produced by `python -m launch.reproduce`. Every number is "
                "measured in this run; each verdict is computed from the numbers by its "
                "experiment (the criterion is in its details)."))
  return path, failures


def _share_base_lm(config, workdir: str, preset: str) -> None:
  """Points an experiment's base-LM cache (`config.lm.cache_dir`, when left empty)
  at the `lm` experiment's run in `workdir`: for the same preset it is the same
  trained model, so a report trains the tiny LM once."""
  base = config.get("lm")
  if base is not None and "cache_dir" in base and not base.cache_dir and base.get("preset") == preset:
    base.cache_dir = os.path.join(workdir, "lm")


def available_benchmarks() -> list[str]:
  """Names `x` of the `configs/bench_x.py` files."""
  files = sorted(glob.glob(os.path.join(CONFIG_DIR, "bench_*.py")))
  return [os.path.basename(f)[len("bench_"):-len(".py")] for f in files]


def bench(out: str, preset: str, only: list[str] | None = None) -> dict:
  """Runs the benchmarks and writes `{name: results}` as JSON to `out`.

  A benchmark is `configs/bench_<name>.py` (with `config.benchmark = name`)
  plus `jaxlab.experiments.bench_<name>.run_benchmark(config) -> dict`.
  """
  names = list(only or available_benchmarks())
  unknown = sorted(set(names) - set(available_benchmarks()))
  if unknown:
    raise ValueError(f"Unknown benchmarks {unknown}; available: {available_benchmarks()}")
  results = {}
  for name in names:
    config = load_config(f"bench_{name}", preset)
    module = importlib.import_module(f"jaxlab.experiments.bench_{config.benchmark}")
    results[name] = report.to_jsonable(module.run_benchmark(config))
    print(f"[bench] {name}: {json.dumps(results[name].get('ratios', {}))}", file=sys.stderr)
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  with open(out, "w") as f:
    json.dump(results, f, indent=2, sort_keys=True)
  return results
