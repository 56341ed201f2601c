"""The `opl` experiment: smoke run, per-arm resume, arms, the learning rate, failing criteria."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from configs import opl as opl_config
from jaxlab.experiments import opl
from jaxlab.privacy import evaluation
from jaxlab.report import VERDICTS, judge_all, read_results
from jaxlab.train import optimizer


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
  config = opl_config.get_config("smoke")
  workdir = str(tmp_path_factory.mktemp("opl"))
  return config, workdir, opl.run(config, workdir)


def test_smoke_run_writes_table_and_resumes(smoke):
  config, workdir, results = smoke
  assert config.experiment == "opl" and len(config.seeds) >= 3
  on_disk = read_results(workdir)
  report = on_disk["report"]
  assert report["verdict"] in VERDICTS and report["verdict"] == results["report"]["verdict"]
  names = {c["name"] for c in report["criteria"]}
  assert {"probe_near_chance", "auc_kept", "opl_probe_weaker"} <= names <= set(config.criteria)
  assert set(on_disk["table"]) == {"none", "opl_k4", "gopl_k4_l1"}
  for arm, cell in on_disk["table"].items():
    assert set(cell) == set(opl.METRICS)
    assert len(cell["auc"]["per_seed"]) == len(config.seeds)
    assert 0.0 <= cell["auc"]["mean"] <= 1.0 and 0.0 <= cell["probe"]["mean"] <= 1.0
    assert cell["ssc"]["mean"] is None if arm == "none" else 0.0 <= cell["ssc"]["mean"] <= 1.0
  # No projection: the scores with and without projections are the same, ARD = 0.
  assert on_disk["table"]["none"]["ard"]["mean"] == pytest.approx(0.0, abs=1e-9)
  # The row at each reading of the face-anomaly coupling, the default's being the row's; the
  # other reading reran only the primary criteria's arms.
  readings = report["interpretations"]
  assert [(i["knob"], i["reading"], i["default"]) for i in readings] == [
      ("world.face_coupling", "risk_difference", True), ("world.face_coupling", "phi", False)]
  assert readings[0]["verdict"] == report["verdict"]
  assert all(i["verdict"] in VERDICTS and "opl_probe_weaker" in i["mechanism_effect"]
             for i in readings)
  assert set(on_disk["face_coupling_tables"]["phi"]) == set(opl.primary_arms(config))
  assert "At world.face_coupling=phi (P(face | anomalous) 0.99 vs 0.45" in report["details"]
  # A second run loads every arm from the arm cache and reports the same table.
  again = opl.run(config, workdir)
  assert again["table"] == read_results(workdir)["table"] == on_disk["table"]
  assert read_results(workdir)["report"]["interpretations"] == report["interpretations"]


def test_arm_table_expands_families_over_k_and_lambda():
  config = opl_config.get_config("quick")
  arms = opl.arm_table(config)
  assert len(arms) == 1 + 6 + 6 * 2
  assert arms["none"] == (0, 0, 0.0) and arms["opl_k16"] == (0, 16, 0.0)
  assert arms["gopl_k4_l0.1"] == (4, 4, 0.1)
  assert opl.train_config(config).max_rank == 64
  config.opl.arms = "none,inlp"
  with pytest.raises(ValueError, match="families"):
    opl.arm_table(config)


def test_criteria_settings_outside_the_sweep_are_value_errors():
  # small_k / criteria_lambda name the arms the criteria judge: outside the sweep every
  # criterion would be "not measured" after the whole run.
  config = opl_config.get_config("quick")
  config.opl.small_k = 3
  with pytest.raises(ValueError, match="opl.small_k"):
    opl.arm_table(config)
  config = opl_config.get_config("quick")
  config.opl.criteria_lambda = 0.5
  with pytest.raises(ValueError, match="opl.criteria_lambda"):
    opl.arm_table(config)
  config.opl.arms = "none,opl"  # no G-OPL arm: its lambda is not needed
  assert len(opl.arm_table(config)) == 1 + 6


class _Stop(Exception):
  pass


def test_opl_uses_optimizer_learning_rate(monkeypatch, tmp_path):
  # Every arm trains with `jaxlab.train.optimizer(config.optimizer, train.num_steps)` (its
  # keys are tested in tests/jaxlab/train/test_optimizers.py).
  config = opl_config.get_config("smoke")
  config.optimizer.learning_rate = 0.0125
  seen = []

  def spy(opt, num_steps, **kw):
    seen.append((opt["learning_rate"], num_steps))
    raise _Stop

  monkeypatch.setattr(evaluation, "optimizer", spy)
  with pytest.raises(_Stop):
    opl.run(config, str(tmp_path))
  assert seen == [(pytest.approx(0.0125), config.train.num_steps)]


def test_the_config_builds_the_adam_it_always_did():
  # RTFM's head trains with Adam at the config's constant rate: optax.adam(3e-3).
  config = opl_config.get_config("quick")
  params = {"w": jnp.asarray([0.5, -1.0, 2.0])}

  def trajectory(tx):
    p, state, out = params, tx.init(params), []
    for i in range(8):
      grads = jax.tree.map(lambda v, i=i: jnp.sin(v + 0.3 * i) * 3.0, p)
      updates, state = tx.update(grads, state, p)
      p = optax.apply_updates(p, updates)
      out.append(np.asarray(p["w"]))
    return np.stack(out)

  np.testing.assert_array_equal(
      trajectory(optimizer(config.optimizer, config.train.num_steps)),
      trajectory(optax.adam(3e-3)))


def _measured(gopl_vs_rest: float, noise: float, seeds: int = 3) -> dict:
  """Per-seed numbers with G-OPL better (positive) or worse than claimed."""
  rng = np.random.default_rng(0)
  j = lambda: noise * rng.standard_normal(seeds)
  chance = np.full(seeds, 0.5)
  return {
      # claim: probe within 10 points of chance; gopl_vs_rest > 0 gets it closer.
      "probe_near_chance": (chance + 0.10 - gopl_vs_rest + j(), chance + j()),
      "auc_kept": (0.9 - 0.01 + gopl_vs_rest + j(), np.full(seeds, 0.9) + j()),
      "opl_probe_weaker": (np.full(seeds, 0.75) - gopl_vs_rest + j(), np.full(seeds, 0.95) + j()),
  }


def test_face_coupling_default_and_bad_readings():
  config = opl_config.get_config("quick")
  assert opl.world_config(config).face_coupling == "risk_difference"
  assert opl.coupling_readings(config) == ["risk_difference", "phi"]
  config.opl.face_coupling_readings = ("phi", "odds_ratio")
  with pytest.raises(ValueError, match="face_coupling"):
    opl.coupling_readings(config)


def test_auc_kept_has_no_signal_when_the_detector_is_at_chance():
  config = opl_config.get_config("quick")
  measured = _measured(0.2, noise=0.005)
  # Neither detector ranks anomalies: "keeping" the AUC of a detector at chance shows nothing.
  measured["auc_kept"] = (np.array([0.52, 0.49, 0.50]), np.array([0.51, 0.50, 0.52]))
  row, results = judge_all(config.criteria, measured)
  by_name = {r.name: r for r in results}
  assert by_name["auc_kept"].verdict == "no signal" and by_name["auc_kept"].signal is False
  assert row == "partly held"  # the probe criteria (one of them the mechanism) held


def test_criteria_fail_when_gopl_clearly_loses_and_are_inconclusive_in_noise():
  config = opl_config.get_config("quick")
  row, results = judge_all(config.criteria, _measured(-0.2, noise=0.005))
  assert row == "did not hold"
  assert all(r.verdict == "did not hold" for r in results if r.n), [
      (r.name, r.verdict) for r in results]
  # At the thresholds, inside the noise (5 seeds): nothing is decided.
  row, results = judge_all(config.criteria, _measured(0.0, noise=0.2, seeds=5))
  assert row == "inconclusive"
  row, _ = judge_all(config.criteria, _measured(0.2, noise=0.005))
  assert row == "held"
