"""The study harness: a reproduction's arms, cached and resumed, judged, and written once.

Every reproduction (`jaxlab.experiments.<name>.run`) has the same skeleton: check
the seeds, make the workdir, run its arms (each cached in `workdir/arms/` so a
killed run resumes where it stopped, with progress i/N and an ETA), turn their
results into per-seed measurements, judge the config's declared criteria, draw
plots, and write `results.json` with a `report` row. `Study` is that skeleton;
a method's `run()` declares its arms and measurements and composes library
pieces around it::

  def run(config, workdir):
    study = Study(config, workdir)                         # seeds checked, workdir made
    cells = study.arms({a: functools.partial(train_arm, config, a) for a in ARMS})
    study.judge(measure(cells))                            # config.criteria, paired seeds
    study.plot("curves.png", lambda ax: ...)
    return study.finish(method=..., paper_claim=..., baseline=..., ours=...,
                        details=..., results={"cells": cells})

An arm is any unit of work whose result is JSON-serialisable: one method on all
seeds (vectorised), one seed of a sweep, one reading of an interpretation knob.
Its cache key fingerprints `key` (by default the whole config but `criteria`,
which never changes what an arm computes), so a changed config never reuses a
stale result. `results.json` holds the method's own `results` plus the standard
keys `criteria`, `facts`, `report` and, when arms ran, each arm's compute time
(`arm_seconds`, `arm_cpu_seconds`, stored with the arm). A resumed run writes the
same file as the run it resumes: nothing in it is the wall time of this process.
"""

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ml_collections
import numpy as np

from jaxlab import report
from jaxlab.presets import config_seeds
from jaxlab.train.arm_cache import ArmCache, config_hash

# Keys `Study.finish` writes; a method's own results may not reuse them.
STANDARD_KEYS = ("criteria", "facts", "report", "arm_seconds", "arm_cpu_seconds")


def mean_std(values: Any, *, digits: int = 3, scale: float | int = 1.0, sep: str = " ± ") -> str:
  """"mean ± std" of per-seed values, or of a `jaxlab.report.seed_summary` dict.

  Args:
    values: a sequence of per-seed numbers (std with ddof 0, as `seed_summary`), or a
      mapping with "mean" and "std".
    digits: decimals shown.
    scale: a factor applied to both (100 shows fractions in %).
    sep: the text between the two.

  Returns:
    e.g. "0.950 ± 0.010"; "n/a" when the mean is None or not finite.

  Example:
    >>> mean_std([0.94, 0.96])
    '0.950 ± 0.010'
    >>> mean_std({"mean": 0.5, "std": 0.02}, digits=1, scale=100)
    '50.0 ± 2.0'
    >>> mean_std({"mean": None, "std": None})
    'n/a'
  """
  if isinstance(values, Mapping):
    mean, std = values["mean"], values["std"]
  else:
    v = np.asarray(values, np.float64)
    mean, std = (float(v.mean()), float(v.std())) if v.size else (None, None)
  if mean is None or not np.isfinite(mean):
    return "n/a"
  return f"{scale * mean:.{digits}f}{sep}{scale * std:.{digits}f}"


def _plain(x: Any) -> Any:
  """ConfigDicts as dicts, at any depth (so a key hashes their values, not their repr)."""
  if isinstance(x, ml_collections.ConfigDict):
    x = x.to_dict()
  if isinstance(x, Mapping):
    return {str(k): _plain(v) for k, v in x.items()}
  if isinstance(x, (tuple, list)):
    return [_plain(v) for v in x]
  return x


class Study:
  """One reproduction run: its arms (cached), its judged criteria, plots and results.json.

  Args:
    config: the experiment's config (`seeds`, `criteria`, `experiment`).
    workdir: the run's directory (created); arms are cached in `workdir/arms/`.
    key: the config parts that determine every arm's result (ConfigDicts, tuples,
      scalars); None: the whole config except `criteria`. An arm's cache key is
      this plus the arm's own `key` parts, and its file is named after the arm.
    total: the number of arms of the whole run, when `arms` is called more than once
      or arms depend on each other (`arm` called in turn); else counted as declared.
    progress_mode: "bar", "log" or "off"; None picks one (`jaxlab.train.Progress`).

  Raises:
    ValueError: `config.seeds` is empty or repeats a seed (`config_seeds`).

  Attributes:
    seeds: the distinct seeds of `config.seeds` (or `[config.seed]` without `seeds`).
    verdict, criteria: the row verdict and judged criteria, once `judge` ran.
    arm_seconds, arm_cpu_seconds: arm name -> wall / CPU (this process) seconds its
      computation took, stored with its result (so a resumed run reports them too).
    computed: names of the arms this run computed (not loaded from the cache).

  Example:
    >>> import tempfile, ml_collections
    >>> config = ml_collections.ConfigDict(dict(experiment="toy", seeds=(0, 1, 2),
    ...     criteria=dict(gain=dict(claim="a beats b", metric="score", direction="higher",
    ...                             mechanism=True))))
    >>> workdir = tempfile.mkdtemp()
    >>> study = Study(config, workdir, progress_mode="off")
    >>> cells = study.arms({"a": lambda: [1.0, 1.1, 1.2], "b": lambda: [0.5, 0.7, 0.6]})
    >>> study.judge({"gain": (cells["a"], cells["b"])})[0]
    'held'
    >>> results = study.finish(method="a", paper_claim="a beats b", baseline="b",
    ...                        ours="a", results={"cells": cells})
    >>> sorted(results)
    ['arm_cpu_seconds', 'arm_seconds', 'cells', 'criteria', 'facts', 'report']
    >>> Study(config, workdir, progress_mode="off").arms({"a": lambda: 0})["a"]  # cached
    [1.0, 1.1, 1.2]
  """

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, *, key: Any = None,
               total: int | None = None, progress_mode: str | None = None):
    self.config, self.workdir = config, workdir
    self.seeds = config_seeds(config) if "seeds" in config else [int(config.seed)]
    os.makedirs(workdir, exist_ok=True)
    if key is None:
      key = {k: v for k, v in config.to_dict().items() if k != "criteria"}
    self._key = config_hash(_plain(key))
    self._cache = ArmCache(workdir, total=total, desc=str(config.get("experiment", "arms")),
                           progress_mode=progress_mode)
    self._total_given, self._declared = total is not None, 0
    self.arm_seconds: dict[str, float] = {}
    self.arm_cpu_seconds: dict[str, float] = {}
    self.plots: list[str] = []
    self.interpretations: list[report.Interpretation] = []
    self.verdict: str | None = None
    self.criteria: list[report.CriterionResult] = []

  @property
  def computed(self) -> list[str]:
    """Names of the arms this run computed (not loaded from the cache), in order."""
    return list(self._cache.computed)

  def _declare(self, n: int) -> None:
    self._declared += n
    if not self._total_given:
      self._cache.total = self._declared

  def arm(self, name: str, fn: Callable[[], Any], *key: Any) -> Any:
    """The result of arm `name`: loaded from the cache, else `fn()` (stored first).

    Args:
      name: the arm's name, unique in the run (its cache file is named after it).
      fn: computes the result (JSON-serialisable: numbers, lists, dicts, arrays).
      *key: config parts beyond the study's `key` that determine this arm only.

    Returns:
      The JSON round trip of the result, the same whether computed or loaded.
    """
    if name in self.arm_seconds:
      raise ValueError(f"arm name {name!r} is used twice in one study")
    self._declare(1)
    return self._run(name, fn, key)

  def arms(self, fns: Mapping[str, Callable[[], Any]], *key: Any) -> dict[str, Any]:
    """`arm(name, fn, *key)` for each entry, in order; the progress total counts them all.

    Returns:
      {name: result}.
    """
    twice = sorted(set(fns) & set(self.arm_seconds))
    if twice:
      raise ValueError(f"arm names {twice} are used twice in one study")
    self._declare(len(fns))
    return {name: self._run(name, fn, key) for name, fn in fns.items()}

  def _run(self, name: str, fn: Callable[[], Any], key: tuple) -> Any:
    def timed():
      start = time.process_time(), time.time()
      result = fn()
      return {"result": result, "seconds": time.time() - start[1],
              "cpu_seconds": time.process_time() - start[0]}
    # The arm's compute time is cached with its result, so a resumed run still reports it.
    stored = self._cache.get_or_run(
        name, config_hash(self._key, *map(_plain, key)) if key else self._key, timed)
    self.arm_seconds[name] = stored["seconds"]
    self.arm_cpu_seconds[name] = stored["cpu_seconds"]
    return stored["result"]

  def judge(self, measured: Mapping[str, Any]) -> tuple[str, list[report.CriterionResult]]:
    """Judges `config.criteria` on `measured` (`jaxlab.report.judge_all`); kept for `finish`.

    Args:
      measured: criterion name -> per-seed values: `(method, baseline)`,
        `(method, baseline, reference)`, a dict of those, or one sequence of per-seed
        comparisons; a criterion left out is `not measured`.

    Returns:
      (row verdict, judged criteria in the config's order).
    """
    self.verdict, self.criteria = report.judge_all(self.config.criteria, measured)
    return self.verdict, self.criteria

  def interpretation(self, knob: str, reading: Any, measured: Mapping[str, Any], *,
                     default: bool = False, source: str) -> report.Interpretation:
    """The row's verdict at one reading of an interpretation knob, kept for the report.

    Args:
      knob: the config key, e.g. "kernelband.parent_rule".
      reading: its value at this reading.
      measured: the criteria's per-seed values at this reading.
      default: whether this is the config's reading (its verdict must be the row's).
      source: "the paper, Sec. X", "the authors' code" or "jaxlab interpretation".

    Returns:
      The `jaxlab.report.Interpretation` (also listed in the report row).
    """
    reading = report.interpretation(knob, reading, self.config.criteria, measured,
                                    default=default, source=source)
    self.interpretations.append(reading)
    return reading

  def plot(self, name: str, draw: Callable[[Any], None]) -> str:
    """Saves `workdir/name` drawn by `draw(ax)` (`jaxlab.report.save_plot`); listed in the row."""
    self.plots.append(report.save_plot(self.workdir, name, draw))
    return name

  def finish(self, *, method: str, paper_claim: str, baseline: str, ours: str,
             details: str = "", facts: Sequence[report.Fact] = (),
             results: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Builds the `ReportRow` from the judged criteria and writes `workdir/results.json`.

    Args:
      method, paper_claim, baseline, ours, details: the row's texts (`ReportRow`).
      facts: properties true by construction, reported and never judged.
      results: the method's own results (tables, per-seed values, summaries).

    Returns:
      `results` plus "criteria", "facts", "report" (the row as a dict) and, when arms
      ran, "arm_seconds" and "arm_cpu_seconds"; as written.

    Raises:
      ValueError: `judge` was not called, or `results` reuses a standard key.
    """
    if self.verdict is None:
      raise ValueError("Study.finish needs the judged criteria: call study.judge(measured) first")
    results = dict(results or {})
    clash = sorted(set(results) & set(STANDARD_KEYS))
    if clash:
      raise ValueError(f"results may not use the standard keys {clash} (Study.finish writes "
                       "them)")
    row = report.ReportRow(
        method=method, paper_claim=paper_claim, baseline=baseline, ours=ours,
        verdict=self.verdict, details=details, plots=tuple(self.plots), criteria=self.criteria,
        facts=tuple(facts), interpretations=tuple(self.interpretations))
    results.update(criteria=[dataclasses.asdict(c) for c in self.criteria],
                   facts=[dataclasses.asdict(f) for f in facts],
                   report=dataclasses.asdict(row))
    if self.arm_seconds:
      results.update(arm_seconds=dict(self.arm_seconds),
                     arm_cpu_seconds=dict(self.arm_cpu_seconds))
    self._cache.close()
    report.write_results(self.workdir, results)
    return results
