"""ReportRow validation, JSON conversion and the rendered report."""

import json
import math

import numpy as np
import pytest

from jaxlab import report
from jaxlab.report import verdict as V


def test_verdict_is_validated():
  with pytest.raises(ValueError, match="verdict"):
    report.ReportRow("m", "c", "b", "o", verdict="great")


def test_inconclusive_is_a_row_verdict():
  assert report.ReportRow("m", "c", "b", "o", verdict="inconclusive").verdict == "inconclusive"


def test_to_jsonable_handles_numpy_and_nan():
  out = report.to_jsonable({"a": np.float32(1.5), "b": np.arange(2), "c": math.nan,
                            "d": (np.int64(3),)})
  assert out == {"a": 1.5, "b": [0, 1], "c": None, "d": [3]}


def test_render_escapes_and_links(tmp_path):
  row = report.ReportRow("m|x", "claim", "1.0", "2.0", "held", details="why", plots=("p.png",))
  results = {"report": report.to_jsonable(row)}
  path = report.render_report([("exp", str(tmp_path / "exp"), results)],
                              str(tmp_path / "REPORT.md"))
  text = open(path).read()
  assert "| exp | m\\|x | claim | 1.0 | 2.0 | held |" in text
  assert "](exp/p.png)" in text


def _judged_row():
  crits = [V.Criterion("bpb", "ours is 0.5 bits/byte lower", "val bits/byte", "lower",
                       threshold=0.5, unit="bits/byte", mechanism=True, floor="unigram",
                       floor_margin=0.25),
           V.Criterion("speed", "2x faster", "s/step", "lower", kind="ratio", threshold=2.0,
                       primary=False)]
  # bpb: 1.0 lower on every seed (held); speed: 1.25x, short of 2x on every seed (failed,
  # but secondary, so the row still held).
  verdict, results = V.judge_all(crits, {"bpb": ([2.0, 2.1, 1.9], [3.0, 3.1, 2.9],
                                                 [4.0, 4.0, 4.0]),
                                         "speed": ([0.8, 0.8, 0.8], [1.0, 1.0, 1.0])})
  facts = [V.Fact("bytes", "no master copy: bytes per parameter", 9, "B")]
  readings = [V.Interpretation("model.rule", "paper", verdict, "bpb +1", default=True,
                               source="the paper"),
              V.Interpretation("model.rule", "ours", "did not hold", "bpb -0.1")]
  return report.ReportRow("M", "claim", "3.0", "2.0", verdict, criteria=results, facts=facts,
                          interpretations=readings)


def test_row_verdict_must_match_its_criteria():
  row = _judged_row()
  assert row.verdict == "held"
  with pytest.raises(ValueError, match="contradicts"):
    report.ReportRow("M", "claim", "3.0", "2.0", "partly held", criteria=row.criteria)


def test_default_reading_must_be_the_rows_verdict():
  row = _judged_row()
  wrong = V.Interpretation("model.rule", "paper", "did not hold", default=True)
  with pytest.raises(ValueError, match="default reading"):
    report.ReportRow("M", "claim", "3.0", "2.0", row.verdict, criteria=row.criteria,
                     interpretations=[wrong])


def test_row_round_trips_through_results_json(tmp_path):
  row = _judged_row()
  report.write_results(str(tmp_path), {"report": row})
  back = report.ReportRow(**report.read_results(str(tmp_path))["report"])
  assert back.criteria == row.criteria and back.facts == row.facts
  assert back.interpretations == row.interpretations
  assert json.loads(json.dumps(report.to_jsonable(back))) == report.to_jsonable(row)


def test_render_shows_each_criterion_and_the_legend(tmp_path):
  results = {"report": report.to_jsonable(_judged_row())}
  text = open(report.render_report([("exp", str(tmp_path / "exp"), results)],
                                   str(tmp_path / "REPORT.md"))).read()
  assert report.LEGEND in text
  lines = text.splitlines()
  bpb = next(line for line in lines if line.startswith("| bpb (mechanism) |"))
  assert "+1 ± " in bpb and "bits/byte (n=3)" in bpb and bpb.endswith("| held |")
  assert "2 / 3" in bpb  # ours / baseline means
  assert "unigram = 4; baseline lead +1 ± " in bpb and "needs > +0.25 bits/byte: signal" in bpb
  assert ("- interpretation `model.rule`: `paper` [default, the paper] → held (bpb +1); "
          "`ours` → did not hold (bpb -0.1)") in lines
  speed = next(line for line in lines if line.startswith("| speed (secondary) |"))
  assert "1.25x" in speed and "> 2x" in speed and speed.endswith("| did not hold |")
  assert "- fact (by construction, not judged): no master copy: bytes per parameter: 9 B" in text
