"""Smoke run of the `aes` experiment: results.json, report row and plots."""

import os

from configs import aes as aes_config
from jaxlab.experiments import aes
from jaxlab.report import VERDICTS, read_results


def test_smoke_run_writes_results(tmp_path):
  config = aes_config.get_config("smoke")
  assert config.experiment == "aes" and config.preset == "smoke"
  results = aes.run(config, str(tmp_path))
  on_disk = read_results(str(tmp_path))
  report = on_disk["report"]
  assert report["verdict"] in VERDICTS
  assert report["verdict"] == results["report"]["verdict"]
  for plot in report["plots"]:
    assert os.path.getsize(tmp_path / plot) > 1000
  run = on_disk["runs"]["pendulum_abrupt"]
  assert run["change_points"] == [200, 400]
  assert set(run["per_arm"]) == {"fixed", "auto", "aes"}
  for arm, summary in run["per_arm"].items():
    assert len(summary["recovery_pct"]["per_seed"]) == config.num_seeds
    assert summary["events"] == 2 * config.num_seeds, arm
    assert 0.0 <= summary["recovery_pct"]["mean"] <= 100.0
  assert "recovery" in report["ours"] and "fixed" in report["baseline"]
