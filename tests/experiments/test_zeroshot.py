"""The `zeroshot` experiment: smoke run, per-arm resume, the group count it estimates, and
its criteria fed failing numbers through its own measuring path."""

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
  # The full arm found the world's 8 groups itself, on every seed, under both rules.
  full = on_disk["table"]["synthetic"]["full"]
  assert full["num_groups_found"]["per_seed"] == [8] * len(config.seeds)
  assert full["num_groups_true"]["per_seed"] == [8] * len(config.seeds)
  readings = {i["reading"]: i for i in report["interpretations"]}
  assert set(readings) == {"silhouette", "eigengap"} and readings["silhouette"]["default"]
  assert readings["silhouette"]["verdict"] == report["verdict"]
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


class _Stop(Exception):
  pass


def test_full_arm_is_not_handed_the_true_group_count(monkeypatch, tmp_path):
  # Worlds with 4 and with 8 true groups: the full arm the experiment builds is the same
  # (a rule over [2, max_groups] that reads the semantics), so no true count reaches it.
  seen = []

  def spy(world, arm, train, key):
    seen.append(arm)
    raise _Stop

  monkeypatch.setattr(zeroshot.expansion, "fit_and_evaluate", spy)
  for true_count in (4, 8):
    config = zeroshot_config.get_config("smoke")
    config.arms, config.synthetic.num_groups = "full", true_count
    with pytest.raises(_Stop):
      zeroshot.run(config, str(tmp_path / str(true_count)))
  assert len(seen) == 2 and seen[0] == seen[1]
  assert seen[0].group_rule == "silhouette" and seen[0].num_groups == config.method.max_groups


def test_group_rule_readings_are_checked():
  config = zeroshot_config.get_config("smoke")
  config.method.group_rule = "oracle"
  with pytest.raises(ValueError, match="config.method.group_rule"):
    zeroshot.run(config, "/nonexistent")
  config = zeroshot_config.get_config("smoke")
  config.interpretations.group_rule = "silhouette,bic"
  with pytest.raises(ValueError, match="group_rule"):
    zeroshot.run(config, "/nonexistent")


CHANCE = 0.1


def _table(effects: dict, noise: float = 0.005, baseline: float = 0.5, seeds: int = 3) -> dict:
  """A fabricated results table: per world, every arm's metrics per seed.

  `effects` maps a criterion prefix ("within_group", "H", "mechanism", ...) to the full
  arm's lead over that criterion's baseline arm in the claimed direction: the shared arm
  sits at `baseline`, the full arm at `baseline` + its lead over shared (+ a fixed,
  mean-near-zero paired jitter of size `noise`), the separation arm at the full arm's
  mean minus the full arm's lead over it.
  """
  jitter = noise * np.resize([1.0, -1.0, 0.2], seeds)
  cell = lambda v: {"per_seed": list(np.broadcast_to(v, (seeds,)).astype(float))}  # noqa: E731
  lead = {}
  for crit, (metric, base, _) in zeroshot._CRITERIA.items():
    if crit in effects:
      sign = -1.0 if crit == "template" else 1.0  # lower spread is the claimed direction
      lead.setdefault(metric, {})[base] = sign * effects[crit]
  table = {}
  for w in zeroshot.WORLDS:
    arms = {a: {f"chance_{m}": cell(CHANCE) for m in ("within", "H", "u", "T")}
            for a in ("shared", "separation", "full")}
    for metric in ("within", "H", "u", "T", "weight_spread"):
      over_shared = lead.get(metric, {}).get("shared", 0.0)
      over_separation = lead.get(metric, {}).get("separation", 0.0)
      arms["shared"][metric] = cell(baseline)
      arms["full"][metric] = cell(baseline + over_shared + jitter)
      arms["separation"][metric] = cell(baseline + over_shared - over_separation)
    table[w] = arms
  return table


def _judge(table: dict):
  config = zeroshot_config.get_config("quick")
  row, results = judge_all(config.criteria, zeroshot._measure(table))
  return row, {r.name: r.verdict for r in results}


def test_h_is_primary_within_up_but_h_down_does_not_hold():
  # Fabricated: within-group accuracy +10 points (and the mechanism +10), H -30 points.
  row, verdicts = _judge(_table({"within_group": 0.10, "mechanism": 0.10, "H": -0.30}))
  assert verdicts["within_group_synthetic"] == verdicts["mechanism_synthetic"] == "held"
  assert verdicts["H_synthetic"] == verdicts["H_semireal"] == "did not hold"
  assert row == "did not hold"


def test_mechanism_decides_the_row():
  up = {"within_group": 0.10, "H": 0.10}
  row, verdicts = _judge(_table(dict(up, mechanism=-0.10)))
  assert verdicts["mechanism_semireal"] == "did not hold" and row == "did not hold"
  # Everything but the mechanism held; the ablation ties the full method: not held.
  row, verdicts = _judge(_table(dict(up, mechanism=0.0), noise=0.05))
  assert verdicts["mechanism_synthetic"] == "inconclusive" and row == "inconclusive"
  row, _ = _judge(_table(dict(up, mechanism=0.10)))
  assert row == "held"


def test_criteria_fail_when_full_method_loses_and_are_inconclusive_in_noise():
  prefixes = list(zeroshot._CRITERIA)
  row, verdicts = _judge(_table(dict.fromkeys(prefixes, -0.2)))
  assert row == "did not hold"
  assert all(v == "did not hold" for v in verdicts.values()), verdicts
  row, verdicts = _judge(_table(dict.fromkeys(prefixes, 0.0), noise=0.2))
  assert row == "inconclusive" and verdicts["within_group_synthetic"] == "inconclusive"


def test_arms_at_chance_are_no_signal():
  # Both arms within 1 point of chance (the floor needs the baseline 5 points above it).
  table = _table(dict.fromkeys(zeroshot._CRITERIA, 0.10), baseline=CHANCE + 0.01)
  row, verdicts = _judge(table)
  assert row == "no signal"
  assert all(v == "no signal" for k, v in verdicts.items() if not k.startswith("template"))
