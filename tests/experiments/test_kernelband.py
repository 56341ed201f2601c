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
  readings = [i["reading"] for i in report["interpretations"]]
  assert readings == ["code", *split_names(config.parent_rule_readings)]
  default = [i for i in report["interpretations"] if i["default"]]
  assert len(default) == 1 and default[0]["verdict"] == report["verdict"]
  assert "authors' code" in default[0]["source"]
  for m in split_names(config.methods):
    regret = np.asarray(on_disk["summary"][m]["regret"])
    assert regret.shape == (len(config.seeds), len(config.budgets))
    assert np.all(regret >= -1e-9) and np.all(np.diff(regret, axis=1) <= 1e-9)  # oracle bound
  table = tuning.TuningTable.load(results["tuning_file"])
  assert len(table) == results["tuning_entries"] > 0
  again = kernelband.run(config, str(tmp_path))
  assert again["summary"] == results["summary"]


_SPEEDUP_CRITERIA = ("speedup_vs_bon", "speedup_vs_greedy", "speedup_vs_egreedy", "mask_helps",
                     "clustering_helps", "bandit_beats_heuristic_strategy")


def _measured(kb_vs_rest: float, noise: float, seeds: int = 3, base: float = 1.5,
              base_regret: float = 0.5, default_regret: float = 3.0) -> dict:
  # Seed-to-seed jitter with mean 0: the effect is exactly kb_vs_rest, its SE set by noise.
  jit = lambda: noise * np.resize([1.0, -1.0, 0.0], seeds)
  b = np.full(seeds, base)
  out = {n: (b * np.exp(kb_vs_rest + jit()), b) for n in _SPEEDUP_CRITERIA}
  out["regret_vs_best_baseline"] = (base_regret - kb_vs_rest + jit(), np.full(seeds, base_regret),
                                    np.full(seeds, default_regret))
  return out


def test_criteria_fail_when_kernelband_clearly_loses():
  config = kb_config.get_config("quick")
  row, results = judge_all(config.criteria, _measured(-0.2, noise=0.005))
  assert row == "did not hold" and all(r.verdict == "did not hold" for r in results)
  row, _ = judge_all(config.criteria, _measured(0.0, noise=0.3))
  assert row == "inconclusive"
  row, _ = judge_all(config.criteria, _measured(0.2, noise=0.005))
  assert row == "held"


def test_baselines_at_the_default_config_give_no_signal():
  # Baselines that found no speedup over the default (1.0x; regret as high as the default's):
  # KernelBand's lead over them says nothing about the bandit.
  config = kb_config.get_config("quick")
  crits = {c["name"]: c for c in (dict(v, name=k) for k, v in config.criteria.items())}
  assert all(crits[n]["floor_value"] == 1.0 and crits[n]["floor_margin"] > 1.0
             for n in _SPEEDUP_CRITERIA)
  row, results = judge_all(config.criteria, _measured(0.2, noise=0.005, base=1.0,
                                                      base_regret=3.0, default_regret=3.0))
  assert row == "no signal" and all(r.verdict == "no signal" for r in results)
  # Just above the floor's margin (1.05x) the same lead holds.
  row, _ = judge_all(config.criteria, _measured(0.2, noise=0.005, base=1.1, base_regret=2.5))
  assert row == "held"


def test_the_bon_comparison_is_the_primary_mechanism_criterion():
  config = kb_config.get_config("quick")
  c = config.criteria
  assert c.speedup_vs_bon.mechanism and c.speedup_vs_bon.get("primary", True)
  assert all(c[n].mechanism for n in ("mask_helps", "clustering_helps",
                                      "bandit_beats_heuristic_strategy"))
  # A lead over every baseline but not over BoN cannot hold the row.
  m = _measured(0.2, noise=0.005)
  m["speedup_vs_bon"] = (m["speedup_vs_bon"][1], m["speedup_vs_bon"][1])
  row, _ = judge_all(config.criteria, m)
  assert row != "held"


def test_repeated_seeds_are_a_value_error_before_any_work(tmp_path):
  # Deterministic arms on a repeated seed give identical pairs: SE 0, any edge "held".
  config = kb_config.get_config("smoke")
  config.seeds = (0, 0, 1)
  with pytest.raises(ValueError, match="config.seeds must be distinct"):
    kernelband.run(config, str(tmp_path))
