"""The `cvgl` experiment: smoke run, per-arm resume, learning rate, criteria fed failing numbers."""

import numpy as np
import pytest

from configs import cvgl as cvgl_config
from jaxlab.experiments import cvgl
from jaxlab.presets import split_names
from jaxlab.report import VERDICTS, judge_all, read_results
from jaxlab.retrieval import training


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
  # The soft arms spread label mass; InfoNCE and DER-only do not (their eps is 0).
  logs = on_disk["logs"]
  assert np.all(np.asarray(logs["soft_u"]["eps"]) > 0)
  np.testing.assert_allclose(logs["fixed_soft"]["eps"], config.cvgl.eps_fixed, rtol=1e-6)
  assert np.all(np.asarray(logs["infonce"]["eps"]) == 0)
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

  def spy(learning_rate, cfg):
    seen.append(float(learning_rate(0)) if callable(learning_rate) else float(learning_rate))
    raise Stop

  monkeypatch.setattr(training, "make_optimizer", spy)
  with pytest.raises(Stop):
    cvgl.run(config, str(tmp_path))
  assert seen == [pytest.approx(0.125)]


def _measured(soft_vs_rest: float, noise: float, seeds: int = 3) -> dict:
  """Per-seed numbers with the full method ahead of (or behind) the others by `soft_vs_rest`."""
  rng = np.random.default_rng(0)
  base = np.full(seeds, 0.3)
  jitter = lambda: noise * rng.standard_normal(seeds)
  return {
      "cross_city_r1": (base * (1 + soft_vs_rest) + jitter(), base + jitter()),
      "same_area_r1": (base + 0.5 * soft_vs_rest + jitter(), base + jitter()),
      "adaptive_over_fixed": (base + soft_vs_rest + jitter(), base + jitter()),
      "soft_over_der_only": (base + soft_vs_rest + jitter(), base + jitter()),
      "u_tracks_roughness": (np.full(seeds, soft_vs_rest) + jitter(), np.zeros(seeds)),
      "gain_grows_with_density": (base + soft_vs_rest + jitter(), base + jitter()),
  }


def test_criteria_fail_when_the_method_clearly_loses_and_are_inconclusive_in_noise():
  config = cvgl_config.get_config("quick")
  row, results = judge_all(config.criteria, _measured(-0.3, noise=0.003))
  assert row == "did not hold"
  assert all(r.verdict == "did not hold" for r in results), [(r.name, r.verdict) for r in results]
  row, results = judge_all(config.criteria, _measured(0.0, noise=0.1))
  verdicts = {r.name: r.verdict for r in results}
  assert verdicts["cross_city_r1"] == "inconclusive" and row == "inconclusive", verdicts
  row, _ = judge_all(config.criteria, _measured(0.3, noise=0.003))
  assert row == "held"


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
  per = lambda v: {"per_seed": list(np.resize(v, 3))}  # noqa: E731
  table = {a: {"cross_city": {"R@1": per(r)}, "same_area": {"R@1": per(r)},
               "u_roughness_spearman": per(0.2)}
           for a, r in (("infonce", 0.3), ("soft_u", 0.2))}
  # Gain (soft_u - infonce): +0.1 at density 0.9, -0.1 at density 0.1, 0 in between.
  sweep = {f: {"infonce": dict(density=[d] * 3, cross_city_r1=[0.3] * 3),
               "soft_u": dict(density=[d] * 3, cross_city_r1=[0.3 + g] * 3)}
           for f, d, g in ((0.5, 0.1, -0.1), (1.0, 0.5, 0.0), (2.0, 0.9, 0.1))}
  m = cvgl._measure(table, ["infonce", "soft_u"], sweep)
  np.testing.assert_allclose(m["gain_grows_with_density"][0], 0.1, atol=1e-12)
  np.testing.assert_allclose(m["gain_grows_with_density"][1], -0.1, atol=1e-12)
  row, results = judge_all(cvgl_config.get_config("quick").criteria, m)
  assert {r.name: r.verdict for r in results}["cross_city_r1"] == "did not hold"
  assert row == "did not hold"
