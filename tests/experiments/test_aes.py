"""The `aes` experiment: its declared criteria can fail, and the smoke run writes results."""

import json
import os
import re

import numpy as np
import pytest

from configs import aes as aes_config
from jaxlab.experiments import aes
from jaxlab.report import judge_all, read_results
from jaxlab.rl import sac
from jaxlab.train import optimizers

NOTEBOOK = os.path.join(os.path.dirname(__file__), "..", "..", "colabs", "aes.ipynb")


def _runs(per_arm_values: dict, change_points=(200, 400)) -> dict:
  """One fake run: arm -> metric -> per-seed values (what `_run_task` stores)."""
  return {"pendulum_abrupt": dict(
      change_points=list(change_points),
      per_arm={arm: {k: dict(per_seed=list(v)) for k, v in metrics.items()}
               for arm, metrics in per_arm_values.items()})}


def _judge(per_arm_values, rule="offset"):
  config = aes_config.get_config("quick")
  names = list(config.criteria.keys())
  measured = aes.measure(_runs(per_arm_values), aes.RULE_ARMS[rule], names)
  return judge_all(config.criteria, measured)


def _arm(recovery, degradation, nauc):
  return dict(recovery_pct=recovery, degradation=degradation, nauc_drift=nauc)


def test_quick_declares_primary_recovery_and_degradation_against_every_baseline():
  config = aes_config.get_config("quick")
  primary = {k for k, v in config.criteria.items() if v.primary}
  assert primary == {"recovery_vs_fixed", "recovery_vs_auto", "degradation_vs_fixed",
                     "degradation_vs_auto"}
  assert config.criteria.recovery_vs_fixed.threshold == 2.0   # the claim's "~2x"
  assert len(config.seeds) >= 3
  assert set(aes.RULE_ARMS.values()) <= set(config.pendulum.arms.split(","))


def test_aes_clearly_slower_does_not_hold():
  # AES recovers 3x slower and degrades more than fixed alpha on every seed.
  verdict, results = _judge({
      "fixed": _arm([5.0, 6.0, 5.5], [0.2, 0.25, 0.22], [0.8, 0.8, 0.8]),
      "auto": _arm([5.0, 6.0, 5.5], [0.2, 0.25, 0.22], [0.8, 0.8, 0.8]),
      "aes": _arm([15.0, 19.0, 16.0], [0.5, 0.55, 0.6], [0.6, 0.6, 0.6]),
      "aes_sqrt": _arm([5.0, 6.0, 5.5], [0.2, 0.25, 0.22], [0.8, 0.8, 0.8])})
  by = {r.name: r.verdict for r in results}
  assert verdict == "did not hold"
  assert by["recovery_vs_fixed"] == "did not hold" and by["degradation_vs_auto"] == "did not hold"


def test_beating_one_baseline_is_not_enough():
  # 4x faster than fixed but slower than auto: the old rule said "partly held".
  verdict, results = _judge({
      "fixed": _arm([20.0, 24.0, 22.0], [0.6, 0.6, 0.6], [0.5, 0.5, 0.5]),
      "auto": _arm([3.0, 3.5, 3.2], [0.1, 0.12, 0.1], [0.9, 0.9, 0.9]),
      "aes": _arm([5.0, 6.0, 5.5], [0.2, 0.21, 0.2], [0.8, 0.8, 0.8]),
      "aes_sqrt": _arm([5.0, 6.0, 5.5], [0.2, 0.21, 0.2], [0.8, 0.8, 0.8])})
  by = {r.name: r.verdict for r in results}
  assert by["recovery_vs_fixed"] == "held"
  assert by["recovery_vs_auto"] == "did not hold"
  assert verdict == "did not hold"


def test_inside_the_noise_is_inconclusive():
  # About 2x faster on average, but the seeds scatter from 1x to 4x.
  verdict, results = _judge({
      "fixed": _arm([10.0, 10.0, 10.0], [0.4, 0.4, 0.4], [0.7, 0.7, 0.7]),
      "auto": _arm([10.0, 10.0, 10.0], [0.4, 0.4, 0.4], [0.7, 0.7, 0.7]),
      "aes": _arm([10.0, 2.5, 5.0], [0.5, 0.2, 0.45], [0.7, 0.7, 0.7]),
      "aes_sqrt": _arm([10.0, 10.0, 10.0], [0.4, 0.4, 0.4], [0.7, 0.7, 0.7])})
  assert {r.name: r.verdict for r in results if r.primary} == dict.fromkeys(
      ["recovery_vs_fixed", "degradation_vs_fixed", "recovery_vs_auto",
       "degradation_vs_auto"], "inconclusive")
  assert verdict == "inconclusive"


def test_rule_knob_selects_the_judged_arm_and_a_failed_seed_stays_missing():
  values = {
      "fixed": _arm([10.0, 11.0, 12.0], [0.4, 0.4, 0.4], [0.7, 0.7, 0.7]),
      "auto": _arm([10.0, 11.0, 12.0], [0.4, 0.4, 0.4], [0.7, 0.7, 0.7]),
      "aes": _arm([30.0, 33.0, 36.0], [0.6, 0.6, 0.6], [0.5, 0.5, 0.5]),
      "aes_sqrt": _arm([3.0, 3.0, np.nan], [0.1, 0.1, 0.1], [0.9, 0.9, 0.9])}
  by = {r.name: r for r in _judge(values, rule="sqrt")[1]}
  assert by["recovery_vs_fixed"].n_missing == 1
  assert by["recovery_vs_fixed"].verdict == "inconclusive"  # a success needs every seed
  assert by["alt_recovery_vs_fixed"].verdict == "did not hold"  # the offset arm, reported


def test_pool_skips_runs_without_change_points():
  runs = dict(_runs({"aes": _arm([4.0, 9.0], [0.1, 0.3], [0.5, 0.7])}),
              pendulum_ramp=dict(change_points=[], per_arm={"aes": {
                  k: dict(per_seed=[np.nan, np.nan]) for k in
                  ("recovery_pct", "degradation")} | {"nauc_drift": dict(per_seed=[0.3, 0.1])}}))
  np.testing.assert_allclose(aes.pool(runs, "aes", "recovery"), [4.0, 9.0])
  np.testing.assert_allclose(aes.pool(runs, "aes", "nauc_drift"), [0.4, 0.4])
  assert aes.pool(runs, "auto", "recovery") is None


def test_smoke_run_writes_results(tmp_path):
  config = aes_config.get_config("smoke")
  assert config.experiment == "aes" and config.preset == "smoke"
  results = aes.run(config, str(tmp_path))
  on_disk = read_results(str(tmp_path))
  report = on_disk["report"]
  assert report["verdict"] == results["report"]["verdict"]
  assert {c["name"] for c in on_disk["criteria"]} == set(config.criteria.keys())
  for plot in report["plots"]:
    assert os.path.getsize(tmp_path / plot) > 1000
  run = on_disk["runs"]["pendulum_abrupt"]
  assert run["change_points"] == [200, 400]
  assert set(run["per_arm"]) == {"fixed", "auto", "aes", "aes_sqrt"}
  for arm, summary in run["per_arm"].items():
    assert len(summary["recovery_pct"]["per_seed"]) == len(config.seeds)
    assert summary["events"] == 2 * len(config.seeds), arm
  assert "recovery" in report["ours"] and "fixed" in report["baseline"]


class _Ran(Exception):
  pass


def test_a_schedule_reaches_the_sac_optimizers(monkeypatch, tmp_path):
  # SAC's networks inherit the top level's schedule (jaxlab.train.optimizer honours it),
  # never the top level's clip or eps (PPO's).
  seen = []

  def spy(opt, num_steps, **kwargs):
    seen.append(optimizers.resolve(opt, kwargs["stage"], inherit=kwargs["inherit"]))
    raise _Ran
  monkeypatch.setattr(sac, "build_optimizer", spy)
  config = aes_config.get_config("smoke")
  config.optimizer.schedule = "warmup_cosine"
  config.optimizer.warmup_frac = 0.1
  with pytest.raises(_Ran):
    aes.run(config, str(tmp_path))
  assert seen == [dict(learning_rate=1e-3, schedule="warmup_cosine", warmup_frac=0.1)]


def test_repeated_seeds_are_a_value_error_before_any_work(monkeypatch, tmp_path):
  # A seed counted twice would shrink the paired SE of every criterion.
  def ran(*args, **kwargs):
    raise _Ran
  monkeypatch.setattr(aes, "_run_task", ran)
  config = aes_config.get_config("smoke")
  config.seeds = (0, 0)
  with pytest.raises(ValueError, match="config.seeds must be distinct"):
    aes.run(config, str(tmp_path))


def test_notebook_overrides_name_existing_config_keys():
  # ConfigDicts are unlocked: an override of a key the config lacks (e.g. num_seeds for
  # seeds) would be added and silently ignored by the run.
  with open(NOTEBOOK) as f:
    source = "\n".join("".join(c["source"]) for c in json.load(f)["cells"]
                       if c["cell_type"] == "code")
  paths = re.findall(r"^\s*config\.([\w.]+)\s*=", source, re.M)
  assert paths
  for preset in ("smoke", "quick"):
    config = aes_config.get_config(preset)
    for path in paths:
      node = config
      for part in path.split("."):
        assert part in node, f"colabs/aes.ipynb sets config.{path}, which {preset} lacks"
        node = node[part]
