"""Smoke run of the `qat_scaling` experiment and its declared criteria fed failing numbers."""

import json
import os

import numpy as np
import pytest

from configs import qat_scaling as qat_config
from jaxlab import report
from jaxlab.experiments import qat_scaling

SEEDS = 3


def _rows(delta_fn, fc2_fn):
  """`deltas`-shaped rows on a 2 x 2 x 2 (N, D, G) grid, FC2-INT8 at G = 32.

  delta_fn(n, d, g, seed) and fc2_fn(n, d, seed) give each seed's delta.
  """
  rows = []
  for n in (25_000, 100_000):
    for d in (61_440, 184_320):
      for g in (8, 32):
        rows.append({"precision": "W4A4", "n": n, "d": d, "g": g,
                     "delta": [delta_fn(n, d, g, s) for s in range(SEEDS)]})
      rows.append({"precision": "W4A4+FC2int8", "n": n, "d": d, "g": 32,
                   "delta": [fc2_fn(n, d, s) for s in range(SEEDS)]})
  return rows


def _kurt(fc2, others):
  """Per-seed kurtosis tables for FP32 and W4A4: FC2 = fc2, QKV/O/FC1 = others."""
  table = {"QKV": list(others), "O": list(others), "FC1": list(others), "FC2": list(fc2)}
  return {"FP32": table, "W4A4": table}


def _judge(rows, kurt):
  config = qat_config.get_config("quick")
  return report.judge_all(config.criteria, qat_scaling.measure(config, rows, kurt))


def test_criteria_hold_for_the_papers_law():
  # delta = 0.02 (log2 G)^0.78 D^0.1 / N^0.2 scaled, FC2-INT8 cuts 20%, FC2 kurtosis 20 vs 3.
  law = lambda n, d, g, s: 0.5 * np.log2(g) ** 0.78 * (d / 1e5) ** 0.1 / (n / 1e4) ** 0.2 + 1e-4 * s
  verdict, results = _judge(
      _rows(law, lambda n, d, s: 0.8 * law(n, d, 32, s)), _kurt((20, 21, 19), (3, 3.2, 2.9)))
  assert verdict == "held"
  by = {r.name: r.verdict for r in results}
  assert by["fc2_gain_larger_at_coarse_g"] == by["w16a4_above_w4a16"] == "not measured"


def test_criteria_fail_when_the_method_clearly_loses():
  # delta shrinks with D and G, FC2-INT8 makes it worse, FC2 is not the outlier.
  bad = lambda n, d, g, s: 0.1 / np.log2(g) * (1e5 / d) + 1e-3 * s
  verdict, results = _judge(
      _rows(bad, lambda n, d, s: 1.3 * bad(n, d, 32, s)), _kurt((3, 3.1, 2.9), (20, 21, 19)))
  by = {r.name: r.verdict for r in results}
  assert verdict == "did not hold"
  for name in ("delta_rises_with_d", "delta_rises_with_g", "fc2_int8_lowers_delta",
               "fc2_kurtosis_top_fp32", "fc2_kurtosis_top_w4a4"):
    assert by[name] == "did not hold", (name, by[name])


def test_criteria_inconclusive_inside_the_noise():
  # Every contrast is +0.010 / -0.012 / +0.003 on seeds 0 / 1 / 2: mean +0.0003, SE 0.0065.
  c = (0.010, -0.012, 0.003)
  index = {25_000: 0, 100_000: 1, 61_440: 0, 184_320: 1, 8: 0, 32: 1}
  delta = lambda n, d, g, s: 0.03 + c[s] * (index[n] + index[d] + index[g])
  verdict, results = _judge(
      _rows(delta, lambda n, d, s: delta(n, d, 32, s) - c[s]),
      _kurt(np.array((4.0, 4.0, 4.0)) + 100 * np.array(c), (4.0, 4.0, 4.0)))
  measured = [r for r in results if r.verdict != "not measured"]
  assert len(measured) == 6
  assert all(r.verdict == "inconclusive" for r in measured), [(r.name, r.verdict) for r in results]
  assert verdict == "inconclusive"


def test_diverged_seed_counts_as_missing():
  law = lambda n, d, g, s: (np.nan if (s == 2 and d > 1e5 and g == 32) else
                            0.05 * np.log2(g) * (d / 1e5) ** 0.1 / (n / 1e4) ** 0.2)
  verdict, results = _judge(
      _rows(law, lambda n, d, s: 0.8 * law(n, d, 32, s)), _kurt((20, 21, 19), (3, 3.2, 2.9)))
  r = {r.name: r for r in results}["delta_rises_with_g"]
  assert (r.n, r.n_missing, r.verdict) == (2, 1, "inconclusive")
  assert verdict != "held"


def test_config_presets():
  for preset in ("smoke", "quick", "full"):
    c = qat_config.get_config(preset)
    assert c.experiment == "qat_scaling" and c.preset == preset
    crits = report.criteria_from_config(c.criteria)
    assert any(x.primary for x in crits)
  assert len(qat_config.get_config("quick").seeds) >= 3
  assert len(qat_config.get_config("full").seeds) >= 3
  with pytest.raises(ValueError):
    qat_config.get_config("tiny")


def test_qat_scaling_smoke(tmp_path):
  cfg = qat_config.get_config("smoke")
  res = qat_scaling.run(cfg, str(tmp_path))
  with open(os.path.join(tmp_path, "results.json")) as f:
    saved = json.load(f)
  assert saved["report"]["verdict"] == res["report"]["verdict"] == res["verdict"]
  n_cells = len(cfg.grid.sizes) * len(cfg.grid.steps)
  per_cell = len(cfg.grid.precisions) * len(cfg.grid.group_sizes) + len(cfg.grid.fc2_group_sizes)
  assert len(res["rows"]) == n_cells * per_cell
  for r in res["rows"]:
    assert len(r["delta"]) == len(cfg.seeds)
    assert all(abs(x) < 1.0 for x in r["delta"])
  assert set(res["kurtosis"]) == {"FP32", "W4A4"}
  assert set(res["kurtosis"]["FP32"]) == {"QKV", "O", "FC1", "FC2"}
  fit = res["fits"]["W4A4"]
  assert fit["gamma_n"] is None  # one model size: N's exponent is not fitted
  assert fit["gamma_d"] is not None and fit["gamma_g"] is not None
  by = {c["name"]: c for c in saved["criteria"]}
  assert set(by) == set(cfg.criteria)
  assert by["delta_falls_with_n"]["verdict"] == "not measured"  # one model size
  assert by["delta_rises_with_g"]["n"] == len(cfg.seeds)
  assert set(res["fc2_reduction"]) == {int(g) for g in cfg.grid.fc2_group_sizes}
  for p in res["report"]["plots"]:
    assert os.path.exists(os.path.join(tmp_path, p))
  # A second run resumes from the cached cells without retraining.
  again = qat_scaling.run(cfg, str(tmp_path))
  assert again["rows"] == res["rows"]


@pytest.mark.parametrize("section,key,value", [
    ("train", "smooth_frac", 2.0), ("train", "smooth_frac", 0.0),
    ("grid", "fc2_group_sizes", (8, 64))])
def test_bad_values_are_refused_before_training(tmp_path, monkeypatch, section, key, value):
  def no_training(*args, **kwargs):
    raise AssertionError("the grid started before the config was validated")
  monkeypatch.setattr(qat_scaling.data, "load_corpus", no_training)
  cfg = qat_config.get_config("smoke")
  cfg[section][key] = value
  with pytest.raises(ValueError, match=f"{section}.{key}"):
    qat_scaling.run(cfg, str(tmp_path))


def test_repeated_seeds_are_refused_before_training(tmp_path, monkeypatch):
  def no_training(*args, **kwargs):
    raise AssertionError("the grid started before the seeds were validated")
  monkeypatch.setattr(qat_scaling.data, "load_corpus", no_training)
  cfg = qat_config.get_config("smoke")
  cfg.seeds = (0, 0)
  with pytest.raises(ValueError, match="config.seeds must be distinct"):
    qat_scaling.run(cfg, str(tmp_path))
