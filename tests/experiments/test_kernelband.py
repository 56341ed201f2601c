"""The `kernelband` experiment: smoke run, per-method resume, tuning.json, failing criteria."""

import numpy as np
import pytest

from configs import kernelband as kb_config
from jaxlab.experiments import kernelband
from jaxlab.presets import split_names
from jaxlab.report import VERDICTS, judge_all, read_results
from pallas_kernels import tuning


def test_smoke_run_writes_table_tuning_file_and_resumes(tmp_path):
  config = kb_config.get_config("smoke")
  assert config.experiment == "kernelband" and len(config.seeds) >= 3
  results = kernelband.run(config, str(tmp_path))
  on_disk = read_results(str(tmp_path))
  report = on_disk["report"]
  assert report["verdict"] in VERDICTS
  assert {c["name"] for c in report["criteria"]} == set(config.criteria)
  assert all(c["n"] == len(config.seeds) for c in report["criteria"])
  for m in split_names(config.methods):
    regret = np.asarray(on_disk["summary"][m]["regret"])
    assert regret.shape == (len(config.seeds), len(config.budgets))
    assert np.all(regret >= -1e-9) and np.all(np.diff(regret, axis=1) <= 1e-9)  # oracle bound
  table = tuning.TuningTable.load(results["tuning_file"])
  assert len(table) == results["tuning_entries"] > 0
  again = kernelband.run(config, str(tmp_path))
  assert again["summary"] == results["summary"]


def _measured(kb_vs_rest: float, noise: float, seeds: int = 3) -> dict:
  rng = np.random.default_rng(0)
  base = np.full(seeds, 1.5)
  jit = lambda: noise * rng.standard_normal(seeds)
  out = {n: (base * np.exp(kb_vs_rest + jit()), base) for n in (
      "speedup_vs_bon", "speedup_vs_greedy", "speedup_vs_egreedy", "mask_helps",
      "clustering_helps", "bandit_beats_heuristic_strategy")}
  out["regret_vs_best_baseline"] = (0.5 - kb_vs_rest + jit(), np.full(seeds, 0.5))
  return out


def test_criteria_fail_when_kernelband_clearly_loses():
  config = kb_config.get_config("quick")
  row, results = judge_all(config.criteria, _measured(-0.2, noise=0.005))
  assert row == "did not hold" and all(r.verdict == "did not hold" for r in results)
  row, _ = judge_all(config.criteria, _measured(0.0, noise=0.3))
  assert row == "inconclusive"
  row, _ = judge_all(config.criteria, _measured(0.2, noise=0.005))
  assert row == "held"


def test_repeated_seeds_are_a_value_error_before_any_work(tmp_path):
  # Deterministic arms on a repeated seed give identical pairs: SE 0, any edge "held".
  config = kb_config.get_config("smoke")
  config.seeds = (0, 0, 1)
  with pytest.raises(ValueError, match="config.seeds must be distinct"):
    kernelband.run(config, str(tmp_path))
