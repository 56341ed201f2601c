"""The `ebplus` experiment: its declared criteria judged on failing and noisy numbers, and a smoke run."""

import json
import math
import os

import pytest

from configs import ebplus as ebplus_config
from jaxlab import report
from jaxlab.experiments import ebplus
from jaxlab.serving import cost

CRITERIA = ebplus_config.get_config("quick").criteria
PRIMARY = sorted(k for k, v in CRITERIA.items() if v.primary)


def _clearly_held():
  """Per-seed values (3 paired seeds) that clear every criterion by a wide margin."""
  return {
      "fig4_rtx": [1.40, 1.38, 1.42], "fig4_h200": [0.005, 0.008, 0.004],
      "table4_low": [1.000, 1.001, 1.000], "table4_high": [1.000, 0.999, 1.001],
      "ebplus_vs_best": [1.000, 1.000, 0.999], "table5_rtx": [1.37, 1.35, 1.40],
      "bandwidth": [1.30, 1.28, 1.33], "engine_prop4": ([1.0, 0.875, 1.0], [0.5, 0.5, 0.625]),
      "table5_h200": [1.13, 1.12, 1.14], "table5_conc_rtx": [1.14, 1.15, 1.13],
      "engine_ebplus": [1.0, 0.999, 1.0]}


def test_criteria_declared():
  assert set(_clearly_held()) == set(CRITERIA)
  # The headline claims decide the row; the spec's ~0.5% tolerance is declared, not 2%.
  assert PRIMARY == sorted(["fig4_rtx", "fig4_h200", "table4_low", "table4_high", "ebplus_vs_best",
                            "table5_rtx", "bandwidth", "engine_prop4"])
  for name in ("table4_low", "table4_high", "ebplus_vs_best"):
    assert CRITERIA[name].threshold == pytest.approx(0.995)


def test_judge_fails_when_ebplus_loses_to_the_better_mode():
  m = _clearly_held()
  m["ebplus_vs_best"] = [0.97, 0.975, 0.968]   # EB+ ~3% below the better pure mode on every seed
  verdict, results = report.judge_all(CRITERIA, m)
  assert verdict == "did not hold"
  assert {r.name: r.verdict for r in results}["ebplus_vs_best"] == "did not hold"


def test_judge_fails_when_eb_loses_on_rtx_and_prop4_is_no_better_than_always_mb():
  m = _clearly_held()
  m["fig4_rtx"] = [0.90, 0.92, 0.91]
  m["engine_prop4"] = ([0.5, 0.375, 0.5], [0.75, 0.75, 0.875])
  verdict, results = report.judge_all(CRITERIA, m)
  by_name = {r.name: r.verdict for r in results}
  assert verdict == "did not hold"
  assert by_name["fig4_rtx"] == by_name["engine_prop4"] == "did not hold"


def test_judge_clear_success_holds():
  verdict, _ = report.judge_all(CRITERIA, _clearly_held())
  assert verdict == "held"


def test_judge_noise_is_inconclusive():
  # Effects straddling the thresholds by less than their paired SE: no finding either way.
  m = _clearly_held()
  m["table4_low"] = [0.999, 0.988, 1.004]
  m["table4_high"] = [1.004, 0.985, 0.999]
  m["ebplus_vs_best"] = [1.003, 0.984, 0.998]
  m["engine_prop4"] = ([0.75, 0.5, 0.625], [0.5, 0.75, 0.625])
  verdict, results = report.judge_all(CRITERIA, m)
  by_name = {r.name: r.verdict for r in results}
  noisy = ("table4_low", "table4_high", "ebplus_vs_best", "engine_prop4")
  assert all(by_name[k] == "inconclusive" for k in noisy)
  assert verdict == "inconclusive"   # 4 of 8 primary held, none failed: no majority


def test_missing_seed_cannot_hold():
  m = _clearly_held()
  m["fig4_rtx"] = [1.40, math.nan, 1.42]   # a seed that failed stays counted
  verdict, results = report.judge_all(CRITERIA, m)
  r = {r.name: r for r in results}["fig4_rtx"]
  assert (r.verdict, r.n, r.n_missing) == ("inconclusive", 2, 1)
  assert verdict == "partly held"


def test_measure_marks_failed_seed_missing():
  cfg = ebplus_config.get_config("smoke")
  good = {"fig4": {f"{g}/{w.name}": {"eb_over_mb": 1.1, "ebplus_over_best": 1.0}
                   for g in ebplus.GPUS for w in ebplus.WORKLOADS},
          "table4": {f"{g}/c={c}": {"ebplus_over_mb": 1.0, "ebplus_over_eb": 1.0, "ebplus_over_best": 1.0}
                     for g in ebplus.GPUS for c in cfg.sim.table4_concurrency},
          "table5": {f"{g}/{n}": {"ebplus_over_mb": 1.2} for g in ebplus.GPUS
                     for n in ("distribution", "concurrency")},
          "bandwidth_sweep": [{"bandwidth_tbs": 8.0, "eb_over_mb": 1.0},
                              {"bandwidth_tbs": 0.8, "eb_over_mb": 1.3}],
          "engine": {"accuracy": 1.0, "always_mb_accuracy": 0.0, "median_ebplus_over_best": 1.0}}
  m = ebplus.measure([good, {"failed": "seed 1: RuntimeError"}], cfg)
  assert set(m) == set(cfg.criteria)
  assert m["bandwidth"][0] == pytest.approx(1.3) and math.isnan(m["bandwidth"][1])
  assert m["engine_prop4"][0][0] == 1.0 and math.isnan(m["engine_prop4"][1][1])


def test_schedulers_decide_with_a_fit_of_the_backend_not_the_backend():
  sim = ebplus_config.get_config("smoke").sim
  for g in ebplus.GPUS:
    model, backend = ebplus.gpu_models(g, sim)
    assert isinstance(backend, cost.RooflineModel) and backend.kappa == sim.roofline_kappa
    assert isinstance(model, cost.LinearStepModel)
    # The fit misprices some steps the backend charges: EB+ does not see the backend.
    step = backend.step_time([512], [0.0], [512.0] * 64)
    assert abs(model.mixed_time(64, 512, share=64 / 576) - step) > 1e-3 * step
  sim.backend = "linear"
  model, backend = ebplus.gpu_models("H200", sim)
  assert model is backend is ebplus.GPUS["H200"][0]


def test_bad_backend_raises(tmp_path):
  cfg = ebplus_config.get_config("smoke")
  cfg.sim.backend = "gpu"
  with pytest.raises(ValueError, match="sim.backend"):
    ebplus.run(cfg, str(tmp_path))


@pytest.mark.parametrize("section,key,value", [
    ("sim", "table4_concurrency", ()),        # crashed in `measure`, after every simulation
    ("sim", "table4_concurrency", (64,)),     # "low" and "high" judged at the same point
    ("sweep", "bandwidths_tbs", (8.0,)),      # the bandwidth ratio is 1 by construction
])
def test_degenerate_sweeps_raise_before_simulating(section, key, value, tmp_path, monkeypatch):
  def stop(*args, **kwargs):
    raise AssertionError("simulated before validating the config")
  monkeypatch.setattr(ebplus, "run_seed", stop)
  cfg = ebplus_config.get_config("smoke")
  cfg[section][key] = value
  with pytest.raises(ValueError, match=f"{section}.{key}"):
    ebplus.run(cfg, str(tmp_path))


def test_ebplus_smoke(tmp_path):
  cfg = ebplus_config.get_config("smoke")
  assert cfg.experiment == "ebplus" and cfg.preset == "smoke" and len(cfg.seeds) == 2
  res = ebplus.run(cfg, str(tmp_path))
  with open(os.path.join(tmp_path, "results.json")) as f:
    saved = json.load(f)
  assert saved["report"]["verdict"] == res["report"]["verdict"]
  assert [c["name"] for c in saved["criteria"]] == list(cfg.criteria)
  # Every criterion was measured on both seeds (none failed in the smoke run).
  assert all(c["n"] == 2 and c["n_missing"] == 0 for c in saved["criteria"])
  # The refit targets are facts, not criteria; the fit EB+ sees does not reach them.
  facts = {f["name"]: f["value"] for f in saved["facts"]}
  assert facts["refit_share_h200"] == pytest.approx(0.8) and facts["refit_share_rtx"] == pytest.approx(0.2)
  assert abs(facts["seen_share_h200"] - 0.8) > 0.1
  # Prop. 4 at Table 4's workload with the paper's calibrations: the r-dagger = 0.8 refit
  # leaves MB's marginal cost below EB's weighted one on H200; the shipped b picks EB.
  cross = res["table4_crossover"]
  assert cross["H200/refit"]["left_us"] < 0 and not cross["H200/refit"]["eb_wins"]
  assert cross["H200/shipped"]["eb_wins"] and cross["RTX PRO 6000/refit"]["eb_wins"]
  for p in res["report"]["plots"]:
    assert os.path.exists(os.path.join(tmp_path, p))
  # The tiny engine ran MB / EB / EB+ with no compile inside the measured runs,
  # and the repeats replayed identical schedules.
  assert res["engine"]["compiles_after_warmup"] == 0
  assert [s["engine"]["workload_seed"] for s in res["per_seed"]] == list(cfg.seeds)
  for s in res["per_seed"]:
    eng = s["engine"]
    assert eng["cells_total"] == len(eng["cells"]) >= 1
    assert all(cell["identical_repeats"] for cell in eng["cells"])
