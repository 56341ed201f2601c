"""The `pose_icl` experiment: smoke run + resume, criteria fed failing numbers, learning rate."""

import glob
import os

import numpy as np
import pytest

from configs import pose_icl as pose_icl_config
from jaxlab.diffusion import icl_task
from jaxlab.experiments import pose_icl
from jaxlab.presets import split_names
from jaxlab.report import VERDICTS, judge_all, read_results
from launch.configs import load_config


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("pose_icl"))
  config = pose_icl_config.get_config("smoke")
  return config, workdir, pose_icl.run(config, workdir)


def test_smoke_run_writes_table_and_resumes(smoke):
  config, workdir, results = smoke
  assert config.experiment == "pose_icl" and len(config.seeds) >= 3
  on_disk = read_results(workdir)
  report = on_disk["report"]
  assert report["verdict"] in VERDICTS and report["verdict"] == results["report"]["verdict"]
  assert {c["name"] for c in report["criteria"]} == set(config.criteria)
  assert all(c["n"] == len(config.seeds) for c in report["criteria"])
  arms = split_names(config.arms)
  assert set(on_disk["table"]) == set(arms) and results["computed"] == arms
  for arm in arms:
    for split in icl_task.SPLITS:
      cells = on_disk["table"][arm][split]
      # Every arm at K = 1..max_refs; the no-reference arm is scored against the same K
      # references as the others (it sees none of them).
      assert sorted(cells) == ["1", "2", "3"]
      for cell in cells.values():
        assert set(cell) == set(icl_task.EVAL_METRICS)
        errs = np.asarray(cell["pose_error"]["per_seed"])
        assert errs.shape == (len(config.seeds),) and ((errs >= 0) & (errs <= 180)).all()
        within = np.asarray(cell["pose_within_15"]["per_seed"])
        assert ((within >= 0) & (within <= 1)).all()
  # The generated views for the notebook: [num_show, H, W, 3] per arm and split.
  size = config.task.image_size
  view = np.asarray(results["samples"]["sape"]["extrap"])
  assert view.shape == (config.eval.num_show, size, size, 3)
  # A second run loads every arm from the arm cache and reports the same table.
  again = pose_icl.run(config, workdir)
  assert again["computed"] == []
  assert again["table"] == on_disk["table"]
  # A run killed between two arm-cache writes: the missing arm is recomputed (with the others,
  # in the same vmapped program) and the table is the uninterrupted run's, bit for bit.
  arm_files = sorted(glob.glob(os.path.join(workdir, "arms", "*.json")))
  assert len(arm_files) == len(arms)
  os.remove(next(f for f in arm_files if os.path.basename(f).startswith("rope2d.")))
  resumed = pose_icl.run(config, workdir)
  assert resumed["computed"] == ["rope2d"]
  assert resumed["table"] == on_disk["table"]


def _measured(sape_vs_rest: float, noise: float) -> dict:
  """Per-seed (method, baseline) numbers with SAPE better (> 0) or worse (< 0) by the effect,
  in each criterion's own direction (pose error in degrees x 10, PSNR in dB). The paired
  noise is fixed, [+1, -1, +0.1] x noise, so a zero effect sits well inside 2 SE."""
  base = np.full(3, 50.0)
  jitter = noise * np.array([1.0, -1.0, 0.1])
  return {
      "pose_extrap": (base - 10 * sape_vs_rest + jitter, base),
      "pose_interp": (base - 10 * sape_vs_rest + jitter, base),
      "psnr_extrap": (base + sape_vs_rest + jitter, base),
      "sape_vs_plucker_extrap": (base - 10 * sape_vs_rest + jitter, base),
      "refs_give_identity": (base - sape_vs_rest + jitter, base),
  }


def test_criteria_fail_when_sape_clearly_loses_and_are_inconclusive_in_noise():
  config = pose_icl_config.get_config("quick")
  row, results = judge_all(config.criteria, _measured(-1.0, noise=0.05))
  assert row == "did not hold"
  assert all(r.verdict == "did not hold" for r in results), [(r.name, r.verdict) for r in results]
  row, results = judge_all(config.criteria, _measured(0.0, noise=5.0))
  assert row == "inconclusive"
  assert all(r.verdict == "inconclusive" for r in results), [(r.name, r.verdict) for r in results]
  row, _ = judge_all(config.criteria, _measured(1.0, noise=0.05))
  assert row == "held"


def test_pose_icl_uses_optimizer_learning_rate():
  config = load_config("pose_icl", "smoke")
  config.optimizer.learning_rate = 0.25
  warm = config.optimizer.warmup_steps
  schedule = pose_icl.train_config(config).learning_rate
  assert float(schedule(warm)) == pytest.approx(0.25)   # the warmup-cosine peak
  config.optimizer.update(learning_rate=0.125, schedule="constant")
  assert pose_icl.train_config(config).learning_rate == pytest.approx(0.125)


def test_unknown_arm_is_refused(tmp_path):
  config = load_config("pose_icl", "smoke")
  config.arms = "sape,sape3d"
  with pytest.raises(ValueError, match="Unknown arm"):
    pose_icl.run(config, str(tmp_path))
