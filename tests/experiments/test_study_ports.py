"""Method modules ported to the study harness run through it and stay thin.

A ported module's `run()` composes `jaxlab.study.Study` (arms, cache, judging, report row,
results.json) and library pieces; it never rebuilds that skeleton itself. Porting a row
adds it to PORTED; the list only grows, until it names every row of the registry.
"""

import ast
import pathlib
import statistics

import pytest

from jaxlab.experiments import REGISTRY

ROOT = pathlib.Path(__file__).resolve().parents[2]
PORTED = ("lm", "oea", "kernelband", "modex", "ebplus", "aes", "ucpo", "apc", "pc",
          "spatial_deconfounder", "opl", "fp4", "eco", "qat_scaling", "escot", "pose_icl",
          "zeroshot", "cramer", "cvgl", "sata")
# What `Study` does for a run(): a ported module names none of these.
SKELETON = frozenset({"ArmCache", "judge_all", "ReportRow", "write_results", "save_plot",
                      "makedirs", "config_seeds"})
MAX_LINES, MAX_MEDIAN_LINES = 250, 200


def _source(name: str) -> str:
  return (ROOT / "jaxlab" / "experiments" / f"{name}.py").read_text()


def skeleton_names(source: str) -> list[str]:
  """The names of `SKELETON` that `source` refers to (as a name or an attribute)."""
  names = set()
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Name):
      names.add(node.id)
    elif isinstance(node, ast.Attribute):
      names.add(node.attr)
    elif isinstance(node, ast.alias):
      names.add(node.name.split(".")[-1])
  return sorted(names & SKELETON)


def test_the_scan_sees_a_hand_built_skeleton():
  src = ("import os\nfrom jaxlab import report, train\n"
         "def run(config, workdir):\n  os.makedirs(workdir)\n  cache = train.ArmCache(workdir)\n"
         "  verdict, crits = report.judge_all(config.criteria, {})\n")
  assert skeleton_names(src) == ["ArmCache", "judge_all", "makedirs"]
  assert skeleton_names("from jaxlab.study import Study\nstudy = Study(c, w)\n") == []


@pytest.mark.parametrize("name", PORTED)
def test_ported_row_runs_through_the_study(name):
  source = _source(name)
  assert "Study(" in source and ".finish(" in source, f"{name}.run() does not use Study"
  assert not skeleton_names(source), (
      f"jaxlab/experiments/{name}.py rebuilds what Study does: {skeleton_names(source)}")
  lines = len(source.splitlines())
  assert lines <= MAX_LINES, f"jaxlab/experiments/{name}.py has {lines} lines (> {MAX_LINES})"


def test_ported_rows_are_thin_and_registered():
  assert set(PORTED) <= set(REGISTRY)
  median = statistics.median(len(_source(n).splitlines()) for n in PORTED)
  assert median <= MAX_MEDIAN_LINES, median
