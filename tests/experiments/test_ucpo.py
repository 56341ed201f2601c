"""The `ucpo` experiment: smoke run, per-arm resume, and its criteria fed failing numbers."""

import numpy as np

from configs import ucpo as ucpo_config
from jaxlab.experiments import ucpo
from jaxlab.presets import split_names
from jaxlab.report import VERDICTS, judge_all, read_results
from jaxlab.rl import knowledge_task as kt


def test_smoke_run_writes_table_and_resumes(tmp_path):
  config = ucpo_config.get_config("smoke")
  assert config.experiment == "ucpo" and len(config.seeds) >= 3
  results = ucpo.run(config, str(tmp_path))
  on_disk = read_results(str(tmp_path))
  report = on_disk["report"]
  assert report["verdict"] in VERDICTS and report["verdict"] == results["report"]["verdict"]
  assert {c["name"] for c in report["criteria"]} == set(config.criteria)
  assert all(c["n"] == len(config.seeds) for c in report["criteria"])
  arms = split_names(config.arms)
  assert set(on_disk["table"]) == set(arms)
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


def _measured(ucpo_vs_rest: float, noise: float, seeds: int = 3) -> dict:
  """Per-seed numbers with UCPO ahead of (or behind) the others by `ucpo_vs_rest`."""
  rng = np.random.default_rng(0)
  base = np.full(seeds, 0.5)
  jitter = lambda: noise * rng.standard_normal(seeds)
  return {
      "abstention_concentrated": (base + 0.5 * ucpo_vs_rest + 0.5 + jitter(), base + jitter()),
      "known_accuracy": (base + ucpo_vs_rest + jitter(), base + jitter()),
      "paq_over_every_arm": (base + ucpo_vs_rest + jitter(), base + jitter()),
      "no_avoidance": (base - ucpo_vs_rest + jitter(), base + jitter()),
  }


def test_criteria_fail_when_ucpo_clearly_loses_and_are_inconclusive_in_noise():
  config = ucpo_config.get_config("quick")
  row, results = judge_all(config.criteria, _measured(-0.2, noise=0.005))
  assert row == "did not hold"
  assert all(r.verdict == "did not hold" for r in results), [(r.name, r.verdict) for r in results]
  # Inside the noise: effects of +-0.01 with paired noise of 0.2.
  row, results = judge_all(config.criteria, _measured(0.0, noise=0.2))
  verdicts = {r.name: r.verdict for r in results}
  assert verdicts["paq_over_every_arm"] == "inconclusive"
  assert verdicts["known_accuracy"] == "inconclusive"
  assert row == "inconclusive"
  row, _ = judge_all(config.criteria, _measured(0.2, noise=0.005))
  assert row == "held"
