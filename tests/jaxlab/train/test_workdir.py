"""A workdir belongs to one config (issue 17, finding 4) and the config vocabulary is checked."""

import json
import os

import ml_collections
import pytest

from jaxlab.train import workdir as wd
from launch.configs import config_names, load_config


def _config(**train):
  c = ml_collections.ConfigDict()
  c.experiment = "lm"
  c.seed = 0
  c.train = ml_collections.ConfigDict(dict(num_steps=40, batch_size=8, log_every=10,
                                            checkpoint_every=20))
  c.train.update(train)
  return c


def _read(path):
  with open(path) as f:
    return json.load(f)


def test_first_run_records_config_and_fingerprint(tmp_path):
  fp = wd.check_or_write_fingerprint(str(tmp_path), _config())
  assert fp == wd.config_fingerprint(_config()) and len(fp) == 64
  assert _read(tmp_path / "config.json")["train"]["num_steps"] == 40
  stored = _read(tmp_path / "fingerprint.json")
  assert stored["sha256"] == fp
  assert stored["excluded_fields"] == list(wd.NON_RESULT_FIELDS)
  # The same config resumes.
  assert wd.check_or_write_fingerprint(str(tmp_path), _config()) == fp


def test_different_config_is_refused_and_config_json_kept(tmp_path):
  # Before: a finished workdir rerun with another config returned the old
  # results and overwrote config.json with the config that never ran.
  wd.check_or_write_fingerprint(str(tmp_path), _config())
  (tmp_path / "results.json").write_text('{"steps": 40}')
  with pytest.raises(wd.WorkdirConfigError, match=r"train\.num_steps: 40 -> 7"):
    wd.check_or_write_fingerprint(str(tmp_path), _config(num_steps=7))
  assert _read(tmp_path / "config.json")["train"]["num_steps"] == 40
  assert _read(tmp_path / "results.json") == {"steps": 40}


def test_added_and_removed_fields_are_listed(tmp_path):
  wd.check_or_write_fingerprint(str(tmp_path), _config())
  new = _config()
  new.train.warmup = 5
  del new["seed"]
  with pytest.raises(wd.WorkdirConfigError) as info:
    wd.check_or_write_fingerprint(str(tmp_path), new)
  assert "seed: 0 -> (absent)" in str(info.value)
  assert "train.warmup: (absent) -> 5" in str(info.value)


def test_non_result_fields_do_not_count(tmp_path):
  fp = wd.check_or_write_fingerprint(str(tmp_path), _config())
  again = wd.check_or_write_fingerprint(str(tmp_path), _config(log_every=1, checkpoint_every=5))
  assert again == fp
  # config.json shows what this invocation used.
  assert _read(tmp_path / "config.json")["train"]["log_every"] == 1


def test_overwrite_deletes_the_old_run(tmp_path):
  wd.check_or_write_fingerprint(str(tmp_path), _config())
  (tmp_path / "checkpoints" / "40").mkdir(parents=True)
  (tmp_path / "results.json").write_text("{}")
  fp = wd.check_or_write_fingerprint(str(tmp_path), _config(num_steps=7), overwrite=True)
  assert sorted(os.listdir(tmp_path)) == ["config.json", "fingerprint.json"]
  assert fp == wd.config_fingerprint(_config(num_steps=7))
  assert _read(tmp_path / "config.json")["train"]["num_steps"] == 7


def test_overwrite_keeps_a_matching_run(tmp_path):
  wd.check_or_write_fingerprint(str(tmp_path), _config())
  (tmp_path / "results.json").write_text("{}")
  wd.check_or_write_fingerprint(str(tmp_path), _config(), overwrite=True)
  assert (tmp_path / "results.json").exists()


def test_workdir_from_before_fingerprints_is_checked_by_its_config_json(tmp_path):
  (tmp_path / "config.json").write_text(_config().to_json_best_effort())
  with pytest.raises(wd.WorkdirConfigError, match="num_steps: 40 -> 8"):
    wd.check_or_write_fingerprint(str(tmp_path), _config(num_steps=8))
  wd.check_or_write_fingerprint(str(tmp_path), _config())
  assert (tmp_path / "fingerprint.json").exists()


def test_run_without_a_config_record_is_refused(tmp_path):
  (tmp_path / "checkpoints").mkdir()
  with pytest.raises(wd.WorkdirConfigError, match="no record of its config"):
    wd.check_or_write_fingerprint(str(tmp_path), _config())
  wd.check_or_write_fingerprint(str(tmp_path), _config(), overwrite=True)
  assert not (tmp_path / "checkpoints").exists()


def test_fingerprint_ignores_key_order_and_accepts_mappings():
  a = {"train": {"num_steps": 3, "batch_size": 2}, "seed": 1}
  b = {"seed": 1, "train": {"batch_size": 2, "num_steps": 3}}
  assert wd.config_fingerprint(a) == wd.config_fingerprint(b)
  assert wd.config_fingerprint(a) != wd.config_fingerprint({**a, "seed": 2})
  with pytest.raises(TypeError, match="ConfigDict or a mapping"):
    wd.config_fingerprint([1, 2])


@pytest.mark.parametrize("field,value", [
    ("num_steps", 0), ("num_steps", -3), ("num_steps", 2.5), ("num_steps", True),
    ("batch_size", 0), ("log_every", 0), ("checkpoint_every", 0), ("eval_every", -1)])
def test_check_config_names_the_field(field, value):
  # Before: train.num_steps <= 0 failed inside optax's schedule.
  config = _config().to_dict()  # a mapping: ConfigDict itself refuses 2.5 for an int field
  config["train"][field] = value
  with pytest.raises(ValueError, match=rf"train\.{field} must be an integer"):
    wd.check_config(config)


def test_check_config_accepts_every_shipped_config():
  for name in config_names():
    for preset in ("smoke", "quick", "full"):
      wd.check_config(load_config(name, preset))


def test_a_computed_field_that_cannot_be_evaluated_is_a_value_error():
  # A lazy field such as threshold = 1 / (1 - min_t_cut) raised ZeroDivisionError (a
  # traceback from the launcher) at min_t_cut = 1.
  c = ml_collections.ConfigDict(dict(min_t_cut=0.3))
  c.threshold = 1.0 / (1.0 - c.get_ref("min_t_cut"))
  wd.check_config(c)
  c.min_t_cut = 1.0
  with pytest.raises(ValueError, match="cannot be evaluated .float division by zero."):
    wd.check_config(c)
