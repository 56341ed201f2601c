"""Smoke run of the `modex` experiment and unit checks of its data and verdict logic."""

import json
import os
import time

import numpy as np
import pytest

from configs.modex import get_config
from jaxlab.experiments import modex
from jaxlab.report import VERDICTS


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("modex_smoke"))
  config = get_config("smoke")
  t0 = time.time()
  results = modex.run(config, workdir)
  return config, workdir, results, time.time() - t0


def test_smoke_run_reports_all_models(smoke):
  config, workdir, results, _ = smoke
  with open(os.path.join(workdir, "results.json")) as f:
    stored = json.load(f)
  assert stored["verdict"] == results["verdict"] in VERDICTS
  row = results["report"]
  assert row["verdict"] == results["verdict"]
  for plot in row["plots"]:
    assert os.path.getsize(os.path.join(workdir, plot)) > 1000
  s = results["summary"]["standard"]
  assert set(s) == set(config.models)
  for m in config.models:
    # 6-class digits: even 200 smoke steps give a usable classifier.
    assert s[m]["accuracy"]["mean"] > 0.8, (m, s[m]["accuracy"])
    assert len(s[m]["accuracy"]["values"]) == len(config.seeds)
    assert 0.0 <= s[m]["mis_auroc"]["mean"] <= 1.0
    for ood in modex.OOD_SETS:
      key = f"{ood}_auroc_msp" if m == "softmax" else f"{ood}_auroc_eu"
      assert 0.5 < s[m][key]["mean"] <= 1.0, (m, key, s[m][key])


def test_verdict_is_recomputed_from_numbers(smoke):
  config, _, results, _ = smoke
  cells = modex.ordering_cells(results["summary"], config.variants, tie_tol=config.eval.tie_tol)
  assert cells == results["ordering"]
  verdict, frac = modex.verdict_from_cells(cells)
  assert verdict == results["verdict"] and frac == results["ordering_fraction"]
  for c in cells:
    assert c["modex_ge_fedl"] == (c["modex"] >= c["fedl"] - config.eval.tie_tol)
    assert c["fedl_gt_edl"] == (c["fedl"] > c["edl"])


def test_rerun_resumes_from_cached_cells(smoke):
  config, workdir, results, first_s = smoke
  t0 = time.time()
  again = modex.run(config, workdir)
  assert again["summary"] == json.loads(json.dumps(results["summary"]))
  assert time.time() - t0 < max(5.0, 0.5 * first_s)


def test_verdict_thresholds():
  cell = lambda ge, gt: {"modex_ge_fedl": ge, "fedl_gt_edl": gt}
  assert modex.verdict_from_cells([cell(True, True)] * 4) == ("held", 1.0)
  assert modex.verdict_from_cells([cell(True, True)] * 2 + [cell(False, True)] * 2)[0] == "partly held"
  assert modex.verdict_from_cells([cell(True, False)] * 3 + [cell(True, True)])[0] == "did not hold"
  assert modex.verdict_from_cells([])[0] == "not measured"


def test_datasets():
  config = get_config("smoke")
  d = modex.build_datasets(config, seed=3)
  k = d["num_classes"]
  assert k == 6
  x_std, y_std = d["train"]["standard"]
  # Long tail: class sizes follow n_max * rho^(r / (K - 1)).
  counts = np.sort(d["train"]["long_tail"][1].sum(0))[::-1]
  n_max = counts[0]
  want = np.round(n_max * config.data.long_tail_rho ** (np.arange(k) / (k - 1)))
  np.testing.assert_allclose(counts, want, atol=1)
  assert counts[-1] / counts[0] == pytest.approx(config.data.long_tail_rho, rel=0.15)
  # Ambiguous: the added rows are 50/50 soft labels of two different classes.
  xa, ya = d["train"]["ambiguous"]
  extra = ya[len(y_std):]
  assert len(extra) == config.data.num_ambiguous_train
  np.testing.assert_allclose(np.sort(extra, -1)[:, -2:], 0.5)
  np.testing.assert_allclose(ya.sum(-1), 1.0)
  # Eval sets: near OOD = all sklearn digits 6-9 (714 images); far OOD within the clip.
  assert d["eval"]["near_ood"].shape == (714, 64)
  assert d["eval"]["noise"].shape == (config.data.num_noise, 64)
  assert d["eval"]["permuted"].shape == d["eval"]["id"].shape
  for x in d["eval"].values():
    assert np.abs(x).max() <= config.data.input_clip
  with pytest.raises(ValueError, match="Unknown model kind"):
    modex.make_model("bnn", config, 6)


def test_config_presets():
  for preset in ("smoke", "quick", "full"):
    c = get_config(preset)
    assert c.experiment == "modex" and c.preset == preset
    assert set(modex.DIRICHLET_MODELS) <= set(c.models)
  assert len(get_config("quick").seeds) >= 3
  with pytest.raises(ValueError):
    get_config("tiny")
