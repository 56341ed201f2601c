"""The `ucpo` experiment: smoke run, per-arm resume, readings, and its criteria fed fabricated tables."""

import numpy as np

from configs import ucpo as ucpo_config
from jaxlab.experiments import ucpo
from jaxlab.presets import split_names
from jaxlab.report import VERDICTS, interpretation, judge_all, read_results
from jaxlab.rl import knowledge_task as kt


def test_smoke_run_writes_table_and_resumes(tmp_path):
  config = ucpo_config.get_config("smoke")
  assert config.experiment == "ucpo" and len(config.seeds) >= 3
  results = ucpo.run(config, str(tmp_path))
  on_disk = read_results(str(tmp_path))
  report = on_disk["report"]
  assert report["verdict"] in VERDICTS and report["verdict"] == results["report"]["verdict"]
  assert {c["name"] for c in report["criteria"]} == set(config.criteria)
  assert all(c["n"] + c["n_missing"] == len(config.seeds) for c in report["criteria"])
  arms = split_names(config.arms)
  assert set(on_disk["table"]) == set(arms)
  # One verdict per reading; each knob's default reading gives the row's verdict.
  assert set(on_disk["readings"]) == set(ucpo.reading_runs(config, arms))
  readings = report["interpretations"]
  assert {(i["knob"], i["reading"]) for i in readings} == {
      ("ucpo.uncertain_norm", "batch"), ("ucpo.uncertain_norm", "direct"),
      ("ucpo.dura_b", "2.0"), ("ucpo.dura_b", "0.0")}
  assert all(i["verdict"] == report["verdict"] for i in readings if i["default"])
  for arm in arms:
    for g in kt.GROUPS:
      cell = on_disk["table"][arm][g]
      assert set(cell) == set(kt.METRICS)
      assert len(cell["accuracy"]["per_seed"]) == len(config.seeds)
      total = sum(cell[m]["mean"] for m in ("accuracy", "abstention", "hallucination"))
      np.testing.assert_allclose(total, 1.0, atol=1e-4)
  # A second run loads every arm from the arm cache and reports the same table.
  again = ucpo.run(config, str(tmp_path))
  assert again["table"] == read_results(str(tmp_path))["table"] == on_disk["table"]


ARMS = ["grpo", "fixed_0.5", "tad", "ucpo"]
COUNTS = np.array([150, 50, 50])
K = 10


def _table(arms=ARMS, seeds: int = 3, noise: float = 0.005, **cells) -> dict:
  """A results table with every cell 0.5 (plus paired noise) except `cells`.

  `cells` maps "arm__group__metric" ("." in an arm's name as "_") to a value or per-seed values.
  """
  rng = np.random.default_rng(0)
  table = {}
  for arm in arms:
    table[arm] = {}
    for g in kt.GROUPS:
      table[arm][g] = {}
      for m in kt.METRICS:
        value = cells.get(f"{arm}__{g}__{m}".replace(".", "_"), 0.5)
        per_seed = value + noise * rng.standard_normal(seeds)
        table[arm][g][m] = {"per_seed": per_seed.tolist()}
  return table


def _judge(table, arms=ARMS):
  config = ucpo_config.get_config("quick")
  return judge_all(config.criteria, ucpo._measure(table, arms, COUNTS, K))


def test_criteria_fail_when_ucpo_clearly_loses():
  # UCPO's PAQ 0.2 below fixed r_u = 0.5 and TAD, known accuracy 0.2 below binary GRPO,
  # abstention spread evenly over the buckets.
  table = _table(ucpo__all__paq=0.6, fixed_0_5__all__paq=0.8, tad__all__paq=0.8,
                 ucpo__all__f1=0.6, fixed_0_5__all__f1=0.8,
                 ucpo__known__accuracy=0.7, grpo__known__accuracy=0.9,
                 ucpo__partial__abstention=0.7)
  row, results = _judge(table)
  verdicts = {r.name: r.verdict for r in results}
  assert row == "did not hold"
  for name in ("paq_vs_fixed", "abstention_concentrated", "known_accuracy", "dura_vs_tad",
               "f1_vs_fixed", "no_avoidance"):
    assert verdicts[name] == "did not hold", verdicts
  assert [r.name for r in results if r.mechanism] == ["paq_vs_fixed"]


def test_criteria_hold_when_ucpo_clearly_wins_and_are_inconclusive_in_noise():
  wins = dict(ucpo__all__paq=0.9, fixed_0_5__all__paq=0.7, tad__all__paq=0.8,
              ucpo__known__abstention=0.01, ucpo__partial__abstention=0.02,
              ucpo__unlearnable__abstention=0.9, fixed_0_5__partial__abstention=0.3,
              ucpo__known__accuracy=0.95, grpo__known__accuracy=0.95)
  row, results = _judge(_table(**wins))
  assert row == "held", [(r.name, r.verdict) for r in results]
  # Inside the noise: UCPO's PAQ +-0.1 around fixed r_u's, seed by seed (effect 0 +- 0.06).
  row, results = _judge(_table(**{**wins, "ucpo__all__paq": np.array([0.8, 0.6, 0.7]),
                                  "fixed_0_5__all__paq": 0.7}))
  verdicts = {r.name: r.verdict for r in results}
  assert verdicts["paq_vs_fixed"] == "inconclusive"
  assert row == "inconclusive"


def test_paq_and_accuracy_criteria_have_no_signal_at_chance():
  # Every arm answers like a uniform guess (PAQ and accuracy 1/K): no comparison counts,
  # even with UCPO's PAQ clearly above fixed r_u's.
  at_chance = {f"{a}__{g}__{m}": 1.0 / K for a in ("grpo", "fixed_0_5", "tad")
               for g in kt.GROUPS for m in ("paq", "accuracy", "f1")}
  table = _table(**at_chance, ucpo__all__paq=0.3, ucpo__known__accuracy=0.3)
  _, results = _judge(table)
  verdicts = {r.name: r.verdict for r in results}
  for name in ("paq_vs_fixed", "known_accuracy", "tad_vs_fixed", "dura_vs_tad", "f1_vs_fixed"):
    assert verdicts[name] == "no signal", verdicts
  # Just above the floor's margin (1/K + 0.1 + noise), the same gain counts.
  table = _table(**{k: 0.3 for k in at_chance}, ucpo__all__paq=0.5)
  _, results = _judge(table)
  assert {r.name: r.verdict for r in results}["paq_vs_fixed"] == "held"


def test_interpretation_readings_rejudge_with_the_reading_arms():
  config = ucpo_config.get_config("quick")
  runs = ucpo.reading_runs(config, ARMS)
  assert set(runs) == {"tad@uncertain_norm=direct", "ucpo@uncertain_norm=direct",
                       "ucpo@dura_b=0.0"}
  wins = dict(ucpo__all__paq=0.9, fixed_0_5__all__paq=0.7, tad__all__paq=0.8,
              ucpo__known__abstention=0.01, ucpo__partial__abstention=0.02,
              ucpo__unlearnable__abstention=0.9, ucpo__known__accuracy=0.95,
              grpo__known__accuracy=0.95)
  tables = _table(**wins)
  # Under the direct reading UCPO loses to fixed r_u; with b = 0 it is unchanged.
  tables["ucpo@uncertain_norm=direct"] = _table(arms=["ucpo"], ucpo__all__paq=0.5)["ucpo"]
  tables["tad@uncertain_norm=direct"] = tables["tad"]
  tables["ucpo@dura_b=0.0"] = tables["ucpo"]
  def interpret(knob, reading, measured, **kwargs):
    return interpretation(knob, reading, config.criteria, measured, **kwargs)

  readings = {(i.knob, i.reading): i for i in
              ucpo._interpretations(interpret, config, tables, ARMS, COUNTS, K)}
  assert readings[("ucpo.uncertain_norm", "batch")].verdict == "held"
  assert readings[("ucpo.uncertain_norm", "batch")].default
  assert readings[("ucpo.uncertain_norm", "direct")].verdict == "did not hold"
  assert readings[("ucpo.dura_b", "2.0")].default
  assert readings[("ucpo.dura_b", "0.0")].verdict == "held"
  assert "paq_vs_fixed" in readings[("ucpo.uncertain_norm", "direct")].mechanism_effect


def test_presets_keep_both_dura_terms_and_the_paper_normalization():
  for preset in ("smoke", "quick", "full"):
    config = ucpo_config.get_config(preset)
    assert config.ucpo.dura_b != 0 and config.ucpo.dura_k != 0, preset
    assert config.ucpo.uncertain_norm == "batch", preset
    assert {"grpo", "fixed_0.5", "tad", "ucpo"} <= set(split_names(config.arms)), preset
    arm = ucpo.make_arm("ucpo", config)
    assert bool(arm.normalize_uncertain) and float(arm.dura_b) == config.ucpo.dura_b
  mechanism = [n for n, c in ucpo_config.get_config("quick").criteria.items()
               if c.get("mechanism") and c.get("primary", True)]
  assert mechanism == ["paq_vs_fixed"]
