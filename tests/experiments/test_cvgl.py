"""The `cvgl` experiment: smoke run, per-arm resume, learning rate, criteria fed failing numbers."""

import numpy as np
import pytest

from configs import cvgl as cvgl_config
from jaxlab.experiments import cvgl
from jaxlab.presets import split_names
from jaxlab.report import VERDICTS, judge_all, read_results
from jaxlab.retrieval import metrics, training


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
  config = cvgl_config.get_config("smoke")
  workdir = str(tmp_path_factory.mktemp("cvgl"))
  return config, workdir, cvgl.run(config, workdir)


def test_smoke_run_writes_table_and_resumes(smoke):
  config, workdir, results = smoke
  assert config.experiment == "cvgl" and len(config.seeds) >= 3
  on_disk = read_results(workdir)
  report = on_disk["report"]
  assert report["verdict"] in VERDICTS and report["verdict"] == results["report"]["verdict"]
  assert {c["name"] for c in report["criteria"]} == set(config.criteria)
  assert all(c["n"] == len(config.seeds) for c in report["criteria"]), report["criteria"]
  arms = split_names(config.arms)
  assert set(on_disk["table"]) == set(arms)
  for arm in arms:
    for where in ("same_area", "city2", "city3", "cross_city"):
      cell = on_disk["table"][arm][where]
      assert set(cell) == set(cvgl.RECALLS)
      r1, r5, r1pct = (np.asarray(cell[m]["per_seed"]) for m in ("R@1", "R@5", "R@1%"))
      assert len(r1) == len(config.seeds)
      assert np.all((0 <= r1) & (r1 <= r5) & (r5 <= 1)) and np.all(r1 <= r1pct)
  # The soft arms spread label mass; InfoNCE and DER-only do not (their eps is 0). Only
  # soft_u varies eps within a batch; soft_mean gives every row the batch mean.
  logs = on_disk["logs"]
  assert np.all(np.asarray(logs["soft_u"]["eps"]) > 0)
  assert np.all(np.asarray(logs["soft_u"]["eps_spread"]) > 1e-4)
  assert np.all(np.asarray(logs["soft_mean"]["eps"]) > 0)
  assert np.all(np.asarray(logs["soft_mean"]["eps_spread"]) < 1e-6)
  np.testing.assert_allclose(logs["fixed_soft"]["eps"], config.cvgl.eps_fixed, rtol=1e-6)
  assert np.all(np.asarray(logs["infonce"]["eps"]) == 0)
  # The row is judged again at each reading of cvgl.uncertainty; the default's is the row's.
  readings = [i["reading"] for i in report["interpretations"]]
  assert readings == split_names(config.cvgl.uncertainty_readings)
  default = [i for i in report["interpretations"] if i["default"]]
  assert [i["reading"] for i in default] == [config.cvgl.uncertainty]
  assert default[0]["verdict"] == report["verdict"]
  assert set(on_disk["readings"]) == set(readings) - {config.cvgl.uncertainty}
  assert {f["name"] for f in report["facts"]} == {"pooled_softening"}
  assert set(on_disk["sweep"]) == {"1", *(f"{f:g}" for f in config.sweep.length_scale_factors)}
  # A second run loads every arm from the arm cache and reports the same table.
  again = cvgl.run(config, workdir)
  assert again["table"] == read_results(workdir)["table"] == on_disk["table"]


def test_cvgl_uses_optimizer_learning_rate(monkeypatch, tmp_path):
  config = cvgl_config.get_config("smoke")
  config.optimizer.learning_rate = 0.125
  config.optimizer.warmup_frac = 0.0
  seen = []

  class Stop(Exception):
    pass

  def spy(opt, num_steps, **kwargs):  # the one builder, `jaxlab.train.optimizer`
    seen.append((opt.learning_rate, opt.weight_decay, opt.grad_clip, num_steps))
    raise Stop

  monkeypatch.setattr(cvgl, "optimizer", spy)
  with pytest.raises(Stop):
    cvgl.run(config, str(tmp_path))
  assert seen == [(pytest.approx(0.125), 1e-4, 1.0, config.train.num_steps)]


N = 256  # test gallery of the quick preset: a random ranker's R@1 is 1 / 256


def _table(r1: dict, rho: dict, seeds: int = 3) -> dict:
  """A results table: per arm, per-seed R@1 (same area and cross-city) and Spearman(u, .)."""
  per = lambda v: {"per_seed": list(np.resize(np.asarray(v, float), seeds))}  # noqa: E731
  return {a: {"same_area": {"R@1": per(v[0])}, "cross_city": {"R@1": per(v[1])},
              "u_roughness_spearman_by_kind": {
                  "epistemic": {"city1": per(rho.get(a, 0.0))}}}
          for a, v in r1.items()}


ARMS = ["infonce", "soft_mean", "soft_u", "der_only", "fixed_soft"]


def _measured(soft_vs_rest: float, noise: float) -> dict:
  """`_measure` of a table where the full method is ahead of (or behind) every other arm by
  the factor 1 + soft_vs_rest in R@1, and its u has rank correlation soft_vs_rest; `noise`
  moves the method and the other arms apart by +-noise on two of the three seeds (the
  paired effect keeps its mean and gets an SE of about noise)."""
  wobble = np.array([1.0, -1.0, 0.0])
  r1 = {a: (0.3 * (1 - noise * wobble), 0.2 * (1 - noise * wobble)) for a in ARMS}
  r1["soft_u"] = tuple(v * (1 + soft_vs_rest) * (1 + noise * wobble) for v in (0.3, 0.2))
  rho = {"soft_u": soft_vs_rest + noise * wobble}
  sweep = {f: {"infonce": dict(density=[d] * 3, cross_city_r1=[0.2] * 3),
               "soft_u": dict(density=[d] * 3,
                              cross_city_r1=list(0.2 + d * soft_vs_rest + noise * wobble))}
           for f, d in ((0.5, 0.1), (2.0, 0.9))}
  return cvgl._measure(_table(r1, rho), ARMS, sweep, u_kind="epistemic", num_test=N)


def test_criteria_fail_when_the_method_clearly_loses_and_are_inconclusive_in_noise():
  config = cvgl_config.get_config("quick")
  row, results = judge_all(config.criteria, _measured(-0.3, noise=0.003))
  assert row == "did not hold"
  assert all(r.verdict == "did not hold" for r in results), [(r.name, r.verdict) for r in results]
  row, results = judge_all(config.criteria, _measured(0.0, noise=0.1))
  assert row == "inconclusive" and all(r.verdict == "inconclusive" for r in results), \
      [(r.name, r.verdict) for r in results]
  row, results = judge_all(config.criteria, _measured(0.3, noise=0.003))
  assert row == "held", [(r.name, r.verdict) for r in results]


def test_adaptive_losing_to_pooled_softening_with_u_tracking_nothing_does_not_hold():
  # The full method beats InfoNCE cross-city by 30% and keeps same-area R@1, but pooled
  # softening of the same mean strength does better still and u is unrelated to
  # roughness: the mechanism criterion fails, so the row does not hold.
  base = (0.30, 0.20)
  r1 = {"infonce": base, "der_only": base, "fixed_soft": base,
        "soft_u": ([0.31, 0.30, 0.32], [0.26, 0.255, 0.265]),
        "soft_mean": ([0.32, 0.31, 0.33], [0.30, 0.29, 0.31])}
  table = _table(r1, {"soft_u": [0.02, -0.03, 0.01]})
  m = cvgl._measure(table, ARMS, {}, u_kind="epistemic", num_test=N)
  row, results = judge_all(cvgl_config.get_config("quick").criteria, m)
  verdicts = {r.name: r.verdict for r in results}
  assert verdicts["cross_city_r1"] == "held", verdicts
  assert verdicts["adaptive_over_pooled"] == "did not hold", verdicts
  assert verdicts["u_tracks_roughness"] == "inconclusive", verdicts
  assert row == "did not hold"


def test_a_collapsed_model_is_no_signal_not_a_perfect_score():
  # Every arm scores all references alike and its u is constant: ties count against the
  # query, so R@1 = 0 (below a random ranker's 1 / N) and Spearman = 0 on every seed.
  s = np.zeros((N, N))
  r1 = metrics.recall_at_k(s, (1,))["R@1"]
  assert r1 == 0.0
  rho = metrics.spearman(np.ones(N), np.arange(N))
  table = _table({a: (r1, r1) for a in ARMS}, {a: rho for a in ARMS})
  m = cvgl._measure(table, ARMS, {}, u_kind="epistemic", num_test=N)
  row, results = judge_all(cvgl_config.get_config("quick").criteria, m)
  assert {r.verdict for r in results if r.name in m} == {"no signal"}, results
  assert row == "no signal"


def test_r1_criteria_are_no_signal_when_the_baseline_arm_sits_at_chance():
  # The method is far ahead, but its baselines retrieve at chance (1 / N): no signal.
  chance = 1.0 / N
  r1 = {a: ([chance, 1.2 * chance, 0.8 * chance], [chance, 1.1 * chance, 0.9 * chance])
        for a in ARMS}
  r1["soft_u"] = (0.3, 0.2)
  m = cvgl._measure(_table(r1, {"soft_u": [0.5, 0.4, 0.6]}), ARMS, {}, u_kind="epistemic",
                    num_test=N)
  _, results = judge_all(cvgl_config.get_config("quick").criteria, m)
  verdicts = {r.name: r.verdict for r in results}
  for name, _, _ in cvgl.R1_COMPARISONS:
    assert verdicts[name] == "no signal", verdicts
  assert verdicts["u_tracks_roughness"] == "held"


def test_bad_config_is_a_clear_error(tmp_path, monkeypatch):
  config = cvgl_config.get_config("smoke")
  config.train.batch_size = 18  # not a multiple of block^2 = 4
  with pytest.raises(ValueError, match="batch_size"):
    cvgl.run(config, str(tmp_path))
  config = cvgl_config.get_config("smoke")
  config.arms = "infonce,bogus"
  with pytest.raises(ValueError, match="bogus"):
    cvgl.run(config, str(tmp_path))
  # A bad sweep factor fails before any arm trains (it used to fail in make_city, after
  # the main arms had run, with an error that named no config key).
  config = cvgl_config.get_config("smoke")
  config.sweep.length_scale_factors = (2.0, 0.0)
  monkeypatch.setattr(training, "make_train", lambda *a, **k: pytest.fail("built a trainer"))
  with pytest.raises(ValueError, match="config.sweep.length_scale_factors"):
    cvgl.run(config, str(tmp_path))


def test_measure_compares_the_densest_with_the_sparsest_sweep_cell():
  table = _table({"infonce": (0.3, 0.3), "soft_u": (0.2, 0.2)}, {"soft_u": 0.2})
  # Gain (soft_u - infonce): +0.1 at density 0.9, -0.1 at density 0.1, 0 in between.
  sweep = {f: {"infonce": dict(density=[d] * 3, cross_city_r1=[0.3] * 3),
               "soft_u": dict(density=[d] * 3, cross_city_r1=[0.3 + g] * 3)}
           for f, d, g in ((0.5, 0.1, -0.1), (1.0, 0.5, 0.0), (2.0, 0.9, 0.1))}
  m = cvgl._measure(table, ["infonce", "soft_u"], sweep, u_kind="epistemic", num_test=N)
  np.testing.assert_allclose(m["gain_grows_with_density"][0], 0.1, atol=1e-12)
  np.testing.assert_allclose(m["gain_grows_with_density"][1], -0.1, atol=1e-12)
  row, results = judge_all(cvgl_config.get_config("quick").criteria, m)
  assert {r.name: r.verdict for r in results}["cross_city_r1"] == "did not hold"
  assert row == "did not hold"
