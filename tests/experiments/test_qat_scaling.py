"""Smoke run of the `qat_scaling` experiment."""

import json
import os

from configs import qat_scaling as qat_config
from jaxlab.experiments import qat_scaling


def test_qat_scaling_smoke(tmp_path):
  cfg = qat_config.get_config("smoke")
  assert cfg.experiment == "qat_scaling" and cfg.preset == "smoke"
  res = qat_scaling.run(cfg, str(tmp_path))
  with open(os.path.join(tmp_path, "results.json")) as f:
    saved = json.load(f)
  assert saved["report"]["verdict"] == res["report"]["verdict"]
  n_cells = len(cfg.grid.sizes) * len(cfg.grid.steps)
  per_cell = len(cfg.grid.precisions) * len(cfg.grid.group_sizes) + len(cfg.grid.fc2_group_sizes)
  assert len(res["rows"]) == n_cells * per_cell
  assert all(abs(r["delta"]) < 1.0 for r in res["rows"])
  assert set(res["kurtosis"]) == {"FP32", "W4A4"}
  assert set(res["kurtosis"]["FP32"]) == {"QKV", "O", "FC1", "FC2"}
  fit = res["fits"]["W4A4"]
  assert fit["gamma_n"] is None  # one model size: N's exponent is not fitted
  assert fit["gamma_d"] is not None and fit["gamma_g"] is not None
  assert res["findings"]["delta falls with N"] == "not measured"
  assert set(res["fc2_reduction"]) == {int(g) for g in cfg.grid.fc2_group_sizes}
  # The verdict is recomputed from the stored findings.
  measured = [v for v in res["findings"].values() if v != "not measured"]
  if all(v == "held" for v in measured):
    assert res["report"]["verdict"] == "held"
  for p in res["report"]["plots"]:
    assert os.path.exists(os.path.join(tmp_path, p))
  # A second run resumes from the cached cells without retraining.
  again = qat_scaling.run(cfg, str(tmp_path))
  assert again["rows"] == res["rows"]
