"""The `zeroshot` experiment: smoke run, per-arm resume, and its criteria fed failing numbers."""

import numpy as np
import pytest

from configs import zeroshot as zeroshot_config
from jaxlab.experiments import zeroshot
from jaxlab.presets import split_names
from jaxlab.report import VERDICTS, judge_all, read_results


def test_smoke_run_writes_table_and_resumes(tmp_path):
  config = zeroshot_config.get_config("smoke")
  assert config.experiment == "zeroshot" and len(config.seeds) >= 3
  results = zeroshot.run(config, str(tmp_path))
  on_disk = read_results(str(tmp_path))
  report = on_disk["report"]
  assert report["verdict"] in VERDICTS and report["verdict"] == results["report"]["verdict"]
  assert {c["name"] for c in report["criteria"]} == set(config.criteria)
  by_name = {c["name"]: c for c in report["criteria"]}
  assert by_name["within_group_synthetic"]["n"] == len(config.seeds)
  assert by_name["within_group_semireal"]["verdict"] == "not measured"  # smoke: synthetic only
  for arm in split_names(config.arms):
    cell = on_disk["table"]["synthetic"][arm]
    assert len(cell["within"]["per_seed"]) == len(config.seeds)
    _check_h(cell)
  again = zeroshot.run(config, str(tmp_path))
  assert again["table"] == read_results(str(tmp_path))["table"] == on_disk["table"]


def _check_h(cell):
  """H is the mean over sources of 2us/(u+s): in [0, 2us/(u+s) of the means] (concavity)."""
  s, u, h = (np.array(cell[m]["per_seed"]) for m in ("s", "u", "H"))
  bound = np.where(s + u > 0, 2 * s * u / np.maximum(s + u, 1e-12), 0.0)
  assert np.all((h >= 0) & (h <= bound + 1e-6)), (s, u, h)


def test_h_check_rejects_a_wrong_harmonic_mean():
  # The previous assertion (`... or 2 s u >= 0`) accepted any H; this one fails on an H
  # that is not a mean of per-source harmonic means of these s and u.
  cell = {"s": {"per_seed": [0.8, 0.6]}, "u": {"per_seed": [0.2, 0.4]}}
  _check_h(dict(cell, H={"per_seed": [0.3, 0.45]}))
  with pytest.raises(AssertionError):
    _check_h(dict(cell, H={"per_seed": [0.5, 0.45]}))  # above 2us/(u+s) = 0.32


def test_train_batch_size_is_full_batch_only(tmp_path):
  # The mapping trains full-batch; a batch size it would silently ignore is an error.
  config = zeroshot_config.get_config("smoke")
  assert "batch_size" not in config.train
  config.train.batch_size = 32
  with pytest.raises(ValueError, match="config.train.batch_size"):
    zeroshot.run(config, str(tmp_path))


def _measured(full_vs_shared: float, noise: float, seeds: int = 3) -> dict:
  # A fixed, mean-near-zero paired jitter: the effect is `full_vs_shared` up to 0.07 noise.
  jitter = noise * np.resize([1.0, -1.0, 0.2], seeds)
  base = np.full(seeds, 0.5)
  out = {}
  for w in ("synthetic", "semireal"):
    for crit in ("within_group", "H", "u"):
      out[f"{crit}_{w}"] = (base + full_vs_shared + jitter, base)
    out[f"template_{w}"] = (base - full_vs_shared - jitter, base)
  return out


def test_criteria_fail_when_full_method_loses_and_are_inconclusive_in_noise():
  config = zeroshot_config.get_config("quick")
  row, results = judge_all(config.criteria, _measured(-0.2, noise=0.005))
  assert row == "did not hold"
  assert all(r.verdict == "did not hold" for r in results), [(r.name, r.verdict) for r in results]
  row, results = judge_all(config.criteria, _measured(0.0, noise=0.2))
  assert row == "inconclusive"
  assert {r.name: r.verdict for r in results}["within_group_synthetic"] == "inconclusive"
  row, _ = judge_all(config.criteria, _measured(0.2, noise=0.005))
  assert row == "held"
