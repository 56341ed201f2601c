"""The study harness: arms x seeds cached and resumed, progress i/N, judging, results.json."""

import json
import logging
import os

import ml_collections
import numpy as np
import pytest

from jaxlab import report
from jaxlab.study import STANDARD_KEYS, Study, mean_std

SEEDS = (0, 1, 2)


def _config(**overrides) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(dict(
      experiment="toy", seeds=SEEDS, width=4,
      criteria=dict(gain=dict(claim="a beats b by 0.1", metric="score", direction="higher",
                              threshold=0.1, mechanism=True),
                    aside=dict(claim="a is cheaper", metric="cost", direction="lower",
                               primary=False))), **overrides))


class Calls:
  """Arm functions that count their calls: arm x seed scores, offset per arm."""

  def __init__(self):
    self.calls = []

  def __call__(self, arm: str, offset: float):
    def fn():
      self.calls.append(arm)
      return {"score": [offset + 0.01 * s for s in SEEDS], "cost": np.float32(offset)}
    return fn


def _arms(calls: Calls, a: float = 1.0, b: float = 0.5) -> dict:
  return {"a": calls("a", a), "b": calls("b", b)}


def _finish(study: Study, cells: dict) -> dict:
  study.judge({"gain": (cells["a"]["score"], cells["b"]["score"])})
  return study.finish(method="a", paper_claim="a beats b", baseline="b", ours="a",
                      results={"cells": cells})


def test_arms_run_once_and_a_second_run_recomputes_nothing(tmp_path):
  calls = Calls()
  study = Study(_config(), str(tmp_path), progress_mode="off")
  first = study.arms(_arms(calls))
  assert calls.calls == ["a", "b"] and study.computed == ["a", "b"]
  assert first["a"]["cost"] == 1.0  # the JSON round trip: numpy became plain numbers
  again = Study(_config(), str(tmp_path), progress_mode="off")
  assert again.arms(_arms(calls)) == first
  assert calls.calls == ["a", "b"] and again.computed == []
  # The compute times were stored with the results, so the resumed run reports them.
  assert again.arm_seconds == study.arm_seconds and set(again.arm_cpu_seconds) == {"a", "b"}


def test_the_key_decides_what_is_reused(tmp_path):
  calls = Calls()
  Study(_config(), str(tmp_path), progress_mode="off").arms(_arms(calls))
  # The criteria never change what an arm computes: no rerun when only they change.
  config = _config()
  config.criteria.gain.threshold = 0.5
  Study(config, str(tmp_path), progress_mode="off").arms(_arms(calls))
  assert calls.calls == ["a", "b"]
  # Any other config value does (by default the key is the whole config but criteria).
  Study(_config(width=8), str(tmp_path), progress_mode="off").arms(_arms(calls))
  assert calls.calls == ["a", "b", "a", "b"]
  # An explicit key names what matters; an arm's own key parts add to it.
  keyed = Study(_config(width=16), str(tmp_path), key=("shared",), progress_mode="off")
  keyed.arms({"a": calls("a", 1.0)})
  Study(_config(width=32), str(tmp_path), key=("shared",), progress_mode="off").arms(
      {"a": calls("a", 1.0)})
  assert calls.calls[-2:] == ["b", "a"]  # width=16 ran a once; width=32 reused it
  Study(_config(), str(tmp_path), key=("shared",), progress_mode="off").arm(
      "a", calls("a", 1.0), "arm-only")
  assert calls.calls[-1] == "a" and len(calls.calls) == 6


def test_a_key_of_config_sections_hashes_their_values(tmp_path):
  calls = Calls()
  for width, lr in ((4, 0.1), (8, 0.1), (8, 0.2)):
    config = _config(width=width, optimizer=dict(learning_rate=lr, sft=dict(learning_rate=lr)))
    Study(config, str(tmp_path), key=(config.optimizer,), progress_mode="off").arms(
        {"a": calls("a", 1.0)})
  assert calls.calls == ["a", "a"]  # width is not in the key; the nested rate is


def test_progress_counts_every_declared_arm(tmp_path, caplog):
  calls = Calls()
  with caplog.at_level(logging.INFO, logger="jaxlab.progress"):
    Study(_config(), str(tmp_path), progress_mode="log").arms(
        {f"{arm}/seed_{s}": calls(arm, s) for arm in ("a", "b") for s in SEEDS})
  lines = [r.getMessage() for r in caplog.records if r.name == "jaxlab.progress"]
  assert any("6/6 arms" in line for line in lines), lines
  # Arms run one by one (dependent arms) count against a total given up front.
  caplog.clear()
  with caplog.at_level(logging.INFO, logger="jaxlab.progress"):
    study = Study(_config(), str(tmp_path / "two"), total=2, progress_mode="log")
    study.arm("first", calls("first", 0.0))
    study.arm("second", calls("second", 1.0))
  lines = [r.getMessage() for r in caplog.records if r.name == "jaxlab.progress"]
  assert any("2/2 arms" in line for line in lines), lines


def test_finish_judges_and_writes_results_json(tmp_path):
  study = Study(_config(), str(tmp_path), progress_mode="off")
  cells = study.arms(_arms(Calls()))
  study.plot("scores.png", lambda ax: ax.plot([0, 1], [0, 1]))
  results = _finish(study, cells)
  with open(tmp_path / "results.json") as f:
    on_disk = json.load(f)
  assert set(on_disk) == {"cells", *STANDARD_KEYS}
  assert on_disk["report"]["verdict"] == results["report"]["verdict"] == "held"
  crits = {c["name"]: c for c in on_disk["criteria"]}
  assert crits["gain"]["n"] == 3 and crits["gain"]["effect"] == pytest.approx(0.5)
  assert crits["aside"]["verdict"] == "not measured"
  assert on_disk["report"]["plots"] == ["scores.png"]
  assert os.path.getsize(tmp_path / "scores.png") > 1000
  assert on_disk["cells"]["b"]["score"] == [0.5, 0.51, 0.52]


def test_a_resumed_run_writes_the_same_results_json(tmp_path):
  def run(calls):
    study = Study(_config(), str(tmp_path), progress_mode="off")
    _finish(study, study.arms(_arms(calls)))
    return (tmp_path / "results.json").read_text()

  first, calls = run(Calls()), Calls()
  assert run(calls) == first and calls.calls == []
  assert set(json.loads(first)["arm_seconds"]) == {"a", "b"}


def test_failing_numbers_do_not_hold(tmp_path):
  study = Study(_config(), str(tmp_path), progress_mode="off")
  cells = study.arms(_arms(Calls(), a=0.52, b=0.5))  # a ahead by 0.02, short of 0.1
  assert _finish(study, cells)["report"]["verdict"] == "did not hold"


def test_interpretations_are_judged_and_reported(tmp_path):
  study = Study(_config(), str(tmp_path), progress_mode="off")
  held = {"gain": ([1.0, 1.01, 1.02], [0.5, 0.51, 0.52])}
  failed = {"gain": ([0.5, 0.51, 0.52], [0.5, 0.51, 0.52])}
  study.judge(held)
  study.interpretation("toy.rule", "paper", held, default=True, source="the paper, Sec. 3")
  study.interpretation("toy.rule", "other", failed, source="jaxlab interpretation")
  results = study.finish(method="a", paper_claim="c", baseline="b", ours="a")
  readings = results["report"]["interpretations"]
  assert [(i["reading"], i["verdict"], i["default"]) for i in readings] == [
      ("paper", "held", True), ("other", "did not hold", False)]
  # A default reading whose verdict is not the row's is refused.
  bad = Study(_config(), str(tmp_path / "bad"), progress_mode="off")
  bad.judge(held)
  bad.interpretation("toy.rule", "other", failed, default=True, source="jaxlab interpretation")
  with pytest.raises(ValueError, match="default reading"):
    bad.finish(method="a", paper_claim="c", baseline="b", ours="a")


def test_misuse_is_a_clear_error(tmp_path):
  with pytest.raises(ValueError, match="config.seeds must be distinct"):
    Study(_config(seeds=(0, 0, 1)), str(tmp_path))
  study = Study(_config(), str(tmp_path), progress_mode="off")
  with pytest.raises(ValueError, match="call study.judge"):
    study.finish(method="a", paper_claim="c", baseline="b", ours="a")
  study.arm("a", lambda: 1)
  with pytest.raises(ValueError, match="used twice"):
    study.arm("a", lambda: 2)
  with pytest.raises(ValueError, match="used twice"):
    study.arms({"b": lambda: 1, "a": lambda: 2})
  study.judge({"gain": ([1.0, 1.0, 1.0], [0.0, 0.0, 0.0])})
  with pytest.raises(ValueError, match="standard keys.*'report'"):
    study.finish(method="a", paper_claim="c", baseline="b", ours="a", results={"report": 1})
  with pytest.raises(ValueError, match="undeclared criteria"):
    study.judge({"typo": ([1.0], [0.0])})


def test_mean_std_is_the_one_formatter():
  assert mean_std([0.94, 0.96]) == "0.950 ± 0.010"
  assert mean_std(report.seed_summary([1.0, 3.0]), digits=1) == "2.0 ± 1.0"
  assert mean_std({"mean": 0.123, "std": 0.01}, digits=1, scale=100) == "12.3 ± 1.0"
  assert mean_std({"mean": 0.5, "std": 0.25}, sep="+-") == "0.500+-0.250"
  assert mean_std({"mean": None, "std": None}) == "n/a"
  assert mean_std([float("nan"), 1.0]) == "n/a"
  assert mean_std([]) == "n/a"
