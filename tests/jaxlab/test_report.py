"""ReportRow validation, JSON conversion and the rendered table."""

import math

import numpy as np
import pytest

from jaxlab import report


def test_verdict_is_validated():
  with pytest.raises(ValueError, match="verdict"):
    report.ReportRow("m", "c", "b", "o", verdict="great")


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
