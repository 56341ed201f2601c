"""Damaged workdir files are named or set aside; a workdir path that cannot be one is refused.

Before: a truncated `fingerprint.json` gave `FATAL Unterminated string ...` with no
file name, and `--overwrite` failed the same way; a truncated `arms/<arm>.json`
raised a JSONDecodeError traceback instead of recomputing the arm; an empty
workdir or one that is a file crashed in `os.makedirs`.
"""

import json
import os

import pytest

from jaxlab.train import ArmCache
from jaxlab.train import workdir as wd

CONFIG = {"experiment": "lm", "train": {"num_steps": 4}}


def _truncate(path, keep=30):
  text = open(path).read()
  with open(path, "w") as f:
    f.write(text[:keep])


@pytest.mark.parametrize("damage", ["truncated", "not_an_object", "no_config", "a_directory"])
def test_a_damaged_fingerprint_is_named_and_overwrite_clears_it(tmp_path, damage):
  wd.check_or_write_fingerprint(str(tmp_path), CONFIG)
  (tmp_path / "results.json").write_text("{}")  # a run whose config is now unknown
  path = tmp_path / "fingerprint.json"
  if damage == "truncated":
    _truncate(path)
  elif damage == "not_an_object":
    path.write_text("[1, 2]")
  elif damage == "no_config":
    path.write_text('{"sha256": "x"}')
  else:
    path.unlink()
    path.mkdir()
  with pytest.raises(wd.WorkdirConfigError) as info:
    wd.check_or_write_fingerprint(str(tmp_path), CONFIG)
  first = str(info.value).splitlines()[0]
  assert first.startswith(f"{path} is damaged (") and "no readable record" in first, first
  assert "--overwrite" in str(info.value)
  assert (tmp_path / "results.json").exists()  # refused: nothing deleted
  fp = wd.check_or_write_fingerprint(str(tmp_path), CONFIG, overwrite=True)
  assert sorted(os.listdir(tmp_path)) == ["config.json", "fingerprint.json"]
  assert json.loads(path.read_text())["sha256"] == fp


def test_a_damaged_legacy_config_json_is_named(tmp_path):
  (tmp_path / "config.json").write_text('{"train": {"num_')
  (tmp_path / "checkpoints").mkdir()
  with pytest.raises(wd.WorkdirConfigError, match=f"{tmp_path / 'config.json'} is damaged"):
    wd.check_or_write_fingerprint(str(tmp_path), CONFIG)
  wd.check_or_write_fingerprint(str(tmp_path), CONFIG, overwrite=True)
  assert not (tmp_path / "checkpoints").exists()


def test_a_damaged_record_of_a_workdir_without_a_run_is_written_anew(tmp_path):
  wd.check_or_write_fingerprint(str(tmp_path), CONFIG)
  _truncate(tmp_path / "fingerprint.json")
  with pytest.warns(RuntimeWarning, match="fingerprint.json is damaged"):
    fp = wd.check_or_write_fingerprint(str(tmp_path), CONFIG)
  assert json.loads((tmp_path / "fingerprint.json").read_text())["sha256"] == fp


def test_a_workdir_path_that_cannot_be_a_directory_is_one_line(tmp_path):
  a_file = tmp_path / "a_file"
  a_file.write_text("x")
  for workdir, message in [("", "workdir must name a directory, got ''"),
                           ("  ", "workdir must name a directory, got '  '"),
                           (str(a_file), f"workdir {a_file} exists and is not a directory"),
                           (str(a_file / "sub"),
                            f"workdir {a_file / 'sub'} cannot be created: {a_file} is not a "
                            "directory")]:
    with pytest.raises(ValueError) as info:
      wd.check_or_write_fingerprint(workdir, CONFIG)
    assert str(info.value) == message
  assert a_file.read_text() == "x"


@pytest.mark.parametrize("damage", ['{"arm": "a", "res', '{"arm": "a"}', "\xff\xfe", "[]"])
def test_a_damaged_arm_file_is_set_aside_and_the_arm_recomputed(tmp_path, damage):
  cache = ArmCache(str(tmp_path), progress_mode="off")
  assert cache.get_or_run("arm/a", "k1", lambda: {"x": 1.0}) == {"x": 1.0}
  path = cache.path("arm/a", "k1")
  with open(path, "w", encoding="latin-1") as f:
    f.write(damage)
  calls = []
  resumed = ArmCache(str(tmp_path), progress_mode="off")
  with pytest.warns(RuntimeWarning, match=f"arm result {path} is damaged"):
    result = resumed.get_or_run("arm/a", "k1", lambda: calls.append(1) or {"x": 2.0})
  assert result == {"x": 2.0} and calls == [1] and resumed.computed == ["arm/a"]
  with open(path + ".damaged", encoding="latin-1") as f:
    assert f.read() == damage  # kept for inspection
  assert ArmCache(str(tmp_path)).load("arm/a", "k1") == {"x": 2.0}
