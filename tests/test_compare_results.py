"""tests/compare_results.py, the equality check of a row's results.json before and after a port."""

import importlib.util
import json
import pathlib

# tests/ is no package: load the script by its path.
_spec = importlib.util.spec_from_file_location(
    "compare_results", pathlib.Path(__file__).with_name("compare_results.py"))
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
compare_files, differences, main = _module.compare_files, _module.differences, _module.main


def test_equal_apart_from_timings_and_workdirs(tmp_path):
  before, after = tmp_path / "before", tmp_path / "after"
  for d, seconds in ((before, 1.5), (after, 9.0)):
    d.mkdir()
    (d / "results.json").write_text(json.dumps({
        "wall_s": seconds, "arm_seconds": {"a": seconds}, "score": [0.5, None, 1e-9],
        "tuning_file": f"{d}/tuning.json", "nested": {"elapsed": seconds, "n": 3}}))
  assert compare_files(str(before / "results.json"), str(after / "results.json")) == []
  assert main([str(before / "results.json"), str(after / "results.json")]) == 0


def test_every_kind_of_difference_is_reported():
  before = {"a": 1.0, "b": [1, 2], "c": {"d": "x"}, "gone": 1, "n": 1, "nan": float("nan")}
  after = {"a": 1.0 + 1e-12, "b": [1, 2, 3], "c": {"d": "y"}, "new": 2, "n": 1.0,
           "nan": float("nan")}
  assert list(differences(before, after)) == [
      "a: 1.0 != 1.000000000001", "b: length 2 != 3", "c.d: 'x' != 'y'", "gone: only in before",
      "n: 1 != 1.0", "new: only in after"]
  assert list(differences({"a": 1.0}, {"a": 1.0 + 1e-12}, rtol=1e-9)) == []
  assert list(differences({"a": 1, "k": 2}, {"a": 1, "k": 3}, ignore=frozenset({"k"}))) == []
