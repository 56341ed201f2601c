"""The `eco` experiment: a smoke run, and its declared criteria fed failing and noisy numbers."""

import json
import os

import numpy as np
import pytest

from configs import bench_eco as bench_config
from configs import eco as eco_config
from jaxlab import report
from jaxlab.experiments import bench_eco, eco


def test_eco_smoke(tmp_path):
  config = eco_config.get_config("smoke")
  res = eco.run(config, str(tmp_path))
  with open(os.path.join(tmp_path, "results.json")) as f:
    saved = json.load(f)
  assert saved["report"]["verdict"] == res["report"]["verdict"]
  # Every declared criterion is reported; the smoke preset has no naive LM arm and no INT4.
  got = {c["name"]: c for c in saved["criteria"]}
  assert set(got) == set(config.criteria)
  assert got["lm_fp8_near_lossless"]["n"] == len(config.seeds) == 2
  assert got["lm_fp8_pareto_vs_naive"]["verdict"] == "not measured"
  assert got["lm_int4_near_lossless"]["verdict"] == "not measured"
  assert got["toy_eco_rtn_within_2x"]["n"] == len(config.toy.seeds)
  fp8 = res["lm"]["fp8_e4m3"]
  assert [len(fp8[a]) for a in ("master", "eco_sr")] == [2, 2]
  # Seeds differ (init, data, SR stream), so the paired values are not copies of one run.
  assert fp8["master"][0]["val_bits_per_byte"] != fp8["master"][1]["val_bits_per_byte"]
  # Static memory from the pytrees (a fact, never judged): FP8 codes + row scales + two FP32
  # moments < 12 B/param of master AdamW.
  facts = {f["name"]: f["value"] for f in saved["facts"]}
  assert facts["fp8_e4m3_master_bytes"] > 11.9
  assert facts["fp8_e4m3_eco_sr_bytes"] < 9.5
  for p in res["report"]["plots"]:
    assert os.path.exists(os.path.join(tmp_path, p))
  # Toy: ECO-RTN carries sub-step updates that naive RTN loses at lr 1e-3.
  t = res["toy"]["table"]
  assert t["eco_rtn"]["0.001"]["dist"] < t["naive_rtn"]["0.001"]["dist"]
  # ...and its consecutive RTN residuals are nearly parallel (ECO's E_t ~ E_{t+1} premise).
  assert t["eco_rtn"]["0.001"]["residual_cos"] > 0.9
  assert t["master"]["0.001"]["residual_cos"] is None


def _judge(**measured):
  return report.judge_all(eco_config.get_config("quick").criteria, measured)


def _primary(**overrides):
  """Per-seed values for the three primary criteria where ECO clearly holds; then overrides."""
  master = np.array([3.15, 3.17, 3.16])
  m = {"lm_fp8_near_lossless": (master - 0.01, master),
       "lm_fp8_pareto_vs_naive": (master - 0.01, master + 0.6),
       "toy_eco_sr_within_2x": np.array([1.10, 1.20, 1.15])}
  m.update(overrides)
  return m


def test_criteria_held_baseline_of_the_failing_cases():
  # The reference point the two tests below perturb: clear wins on every primary criterion.
  verdict, _ = _judge(**_primary())
  assert verdict == "held"


@pytest.mark.parametrize("case", ["lm_much_worse", "no_better_than_naive", "toy_3x_master"])
def test_criteria_clear_failure_does_not_hold(case):
  master = np.array([3.15, 3.17, 3.16])
  bad = {
      # Issue 14: ECO 30% worse than master on the LM.
      "lm_much_worse": dict(lm_fp8_near_lossless=(1.3 * master, master)),
      # ECO clearly worse than naive removal at the same static bytes.
      "no_better_than_naive": dict(lm_fp8_pareto_vs_naive=(master + 0.2, master)),
      # Issue 14: ECO 3x worse than master on the toy.
      "toy_3x_master": dict(toy_eco_sr_within_2x=np.array([2.9, 3.1, 3.0])),
  }[case]
  verdict, results = _judge(**_primary(**bad))
  assert verdict == "did not hold"
  failed = [r.name for r in results if r.verdict == "did not hold"]
  assert failed == list(bad)


def test_criteria_inside_the_noise_are_inconclusive():
  master = np.array([3.15, 3.17, 3.16])
  # ECO-SR 2% worse than master on average, paired noise as large as the gap: it neither clears
  # nor misses the 2% margin by 2 SE. Against naive RTN, +-1-2% noise around no difference.
  noisy = master * np.array([1.04, 1.00, 1.02])
  naive = noisy * np.array([1.01, 0.98, 1.00])
  verdict, results = _judge(**_primary(lm_fp8_near_lossless=(noisy, master),
                                       lm_fp8_pareto_vs_naive=(noisy, naive)))
  got = {r.name: r.verdict for r in results}
  assert got["lm_fp8_near_lossless"] == got["lm_fp8_pareto_vs_naive"] == "inconclusive"
  assert verdict == "inconclusive"  # 1 of 3 primary criteria held: not a majority


def test_criteria_diverged_seed_is_missing_not_dropped():
  master = np.array([3.15, 3.17, 3.16])
  eco_sr = np.array([3.14, np.nan, 3.15])  # seed 1 diverged
  verdict, results = _judge(**_primary(lm_fp8_near_lossless=(eco_sr, master)))
  r = {r.name: r for r in results}["lm_fp8_near_lossless"]
  assert (r.n, r.n_missing, r.verdict) == (2, 1, "inconclusive")
  assert verdict == "partly held"  # 2 of 3 primary held, none failed


def test_secondary_criteria_do_not_decide_the_row():
  # Naive SR's error shrinking as lr falls (the last report's toy) fails a secondary criterion
  # only; INT4 clearly losing is secondary too.
  master = np.array([3.4, 3.42, 3.41])
  verdict, results = _judge(**_primary(
      toy_naive_sr_grows=np.array([0.5, 0.55, 0.52]),
      lm_int4_near_lossless=(1.2 * master, master)))
  assert verdict == "held"
  r = {r.name: r.verdict for r in results}
  assert r["toy_naive_sr_grows"] == r["lm_int4_near_lossless"] == "did not hold"


def test_toy_master_forward():
  cfg = eco_config.get_config("smoke").toy
  cfg.update(num_steps=400, seeds=(0,), arms=("master",))
  cfg_fp32 = cfg.copy_and_resolve_references()
  cfg_fp32.master_forward = "fp32"
  got_fp32 = eco.convex_toy(cfg_fp32, 0)
  got_q = eco.convex_toy(cfg, 0)
  m32, mq = got_fp32["table"]["master"]["0.1"], got_q["table"]["master"]["0.1"]
  # Exact gradients at the master weights: it converges, and Q_RTN(w*) is the deployed point.
  assert m32["dist"] == pytest.approx(got_fp32["grid_floor"], rel=1e-4)
  assert m32["last_move"] < cfg.num_steps // 2
  # Gradients through the quantized forward keep moving the master off the nearest point.
  assert mq["dist"] > 1.2 * got_q["grid_floor"]
  assert mq["last_move"] > cfg.num_steps // 2
  cfg.master_forward = "bf16"
  with pytest.raises(ValueError, match="master_forward"):
    eco.convex_toy(cfg, 0)


@pytest.mark.slow
def test_bench_eco_smoke():
  out = bench_eco.run_benchmark(bench_config.get_config("smoke"))
  assert out["ratios"]["eco_over_master_step_time"] > 0
  assert out["ratios"]["eco_over_master_static_bytes"] < 0.85


@pytest.mark.parametrize("section,key,value", [
    ("toy", "arms", ("master", "eco-sr")), ("toy", "tail_fraction", 3.0),
    ("toy", "tail_fraction", 0.0), ("lm", "arms", ("master", "ecosr"))])
def test_bad_arms_and_tail_fraction_name_the_key(tmp_path, section, key, value):
  # Refused before any training, with the key named (not a KeyError from deep inside, nor a
  # "tail mean" divided by more steps than were run).
  cfg = eco_config.get_config("smoke")
  cfg[section][key] = value
  with pytest.raises(ValueError, match=f"{section}.{key}"):
    eco.run(cfg, str(tmp_path))


@pytest.mark.parametrize("field", ["seeds", "toy.seeds"])
def test_repeated_seeds_are_refused_before_any_training(tmp_path, field):
  # A seed (or toy problem) counted twice would shrink the paired SE of every criterion.
  cfg = eco_config.get_config("smoke")
  (cfg.toy if field == "toy.seeds" else cfg).seeds = (0, 0, 1)
  with pytest.raises(ValueError, match=f"{field} must be .*distinct"):
    eco.run(cfg, str(tmp_path))
