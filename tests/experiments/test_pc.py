"""The `pc` experiment: smoke run + resume, the learning-rate key, criteria fed failing numbers."""

import numpy as np
import pytest

from configs import pc as pc_config
from jaxlab.experiments import pc
from jaxlab.pc import training
from jaxlab.presets import split_names
from jaxlab.report import VERDICTS, judge_all, read_results


class _Stop(Exception):
  """Raised by a spy once it has seen what it needed."""


# Slow: ~6 CPU-s of tracing and plotting. The default selection still runs the smoke preset
# end to end through colabs/pc.ipynb (tests/colabs), where a non-finite result raises.
@pytest.mark.slow
def test_smoke_run_writes_table_and_resumes(tmp_path):
  config = pc_config.get_config("smoke")
  assert config.experiment == "pc" and len(config.seeds) >= 3
  results = pc.run(config, str(tmp_path))
  on_disk = read_results(str(tmp_path))
  report = on_disk["report"]
  assert report["verdict"] in VERDICTS and report["verdict"] == results["report"]["verdict"]
  assert {c["name"] for c in report["criteria"]} == set(config.criteria)
  names = split_names(config.datasets)
  assert set(on_disk["table"]) == set(names)
  for d in names:
    row = on_disk["table"][d]
    assert {"base", "hfv", "vt_lower", "vt_upper"} <= set(row)
    for col in ("base", "hfv", "vt_lower", "vt_upper"):
      assert len(row[col]["per_seed"]) == len(config.seeds)
      assert np.all(np.isfinite(row[col]["per_seed"])), (d, col)
    # The certified bracket is ordered and contains the trivial bound log f (Z <= 1).
    lo, hi = np.array(row["vt_lower"]["per_seed"]), np.array(row["vt_upper"]["per_seed"])
    assert np.all(lo <= hi) and np.all(lo >= np.array(row["vt_log_f"]["per_seed"]) - 1e-5)
    # At capacity_high_dim (fewer boxes than the table's capacity) the bracket is no tighter.
    vt = on_disk["per_dataset"][d]["models"]["vt"]
    assert np.all(np.asarray(vt["gap_at_capacity_high_dim"]) >= hi - lo - 1e-5)
  assert len(report["plots"]) == 3
  # A second run loads every data set from the arm cache and reports the same table.
  again = pc.run(config, str(tmp_path))
  assert again["table"] == on_disk["table"]


def test_pc_uses_optimizer_learning_rate(monkeypatch):
  config = pc_config.get_config("smoke")
  config.optimizer.learning_rate = 0.0123
  seen = []

  def spy(learning_rate, params, **kwargs):
    seen.append(learning_rate)
    raise _Stop

  monkeypatch.setattr(training, "make_optimizer", spy)
  with pytest.raises(_Stop):
    pc.run_dataset("moons", config)
  assert seen == [pytest.approx(0.0123)]


def _per_ds(vt_minus_base: float, hfv_minus_base: float, high_gap: float, seeds: int = 3,
            noise: float = 0.005) -> dict:
  """Fabricated per-data-set results with the given effects, in `run_dataset`'s layout."""
  rng = np.random.default_rng(0)
  out = {}
  for d, dim in [("moons", 2), ("pinwheel", 2), ("wine", 13)]:
    base = -2.0 + noise * rng.standard_normal(seeds)
    lower = base + vt_minus_base + noise * rng.standard_normal(seeds)
    gap = (high_gap if dim > 2 else 1.0) + noise * rng.standard_normal(seeds)
    out[d] = dict(num_vars=dim, models=dict(
        base=dict(ll=base.tolist()),
        hfv=dict(ll=(base + hfv_minus_base + noise * rng.standard_normal(seeds)).tolist()),
        vt=dict(ll_lower=lower.tolist(), ll_upper=(lower + gap).tolist(),
                gap_at_capacity_high_dim=gap.tolist())))
  return out


def test_criteria_fail_on_failing_numbers_and_hold_on_good_ones():
  config = pc_config.get_config("quick")
  row, results = judge_all(config.criteria, pc._measure(_per_ds(-0.5, -0.3, 0.2)))
  assert row == "did not hold"
  assert all(r.verdict == "did not hold" for r in results), [(r.name, r.verdict) for r in results]
  row, results = judge_all(config.criteria, pc._measure(_per_ds(0.5, 0.0, 20.0)))
  assert row == "held", [(r.name, r.verdict, r.effect) for r in results]


def test_bound_gaps_compare_at_one_box_budget(monkeypatch):
  # bound_gap_widens_with_dim compares 2-D toys' brackets with D >= 10 sets': with more boxes
  # per cell in 2-D (`capacity`) than above `low_dim_max` (`capacity_high_dim`), the contrast
  # would grow with the budget alone. 2-D sets also get their bounds at capacity_high_dim.
  seen = {}

  def spy(model, num_steps, batch_size, alpha, frozen, bound_cfg, *args):
    seen[model.circuit.num_vars] = bound_cfg[2]
    raise _Stop

  monkeypatch.setattr(pc, "_programs", spy)
  config = pc_config.get_config("smoke")
  config.models = "vt"
  config.vt.update(capacity=16, capacity_high_dim=4)
  for name in ("moons", "wine"):
    with pytest.raises(_Stop):
      pc.run_dataset(name, config)
  assert seen == {2: (16, 4), 13: (4,)}
  # The criterion reads that gap, not the table's bracket (here 1.0 on every set).
  per_ds = _per_ds(0.0, 0.0, high_gap=1.0)
  per_ds["moons"]["models"]["vt"]["gap_at_capacity_high_dim"] = [1.5, 1.5, 1.5]
  per_ds["pinwheel"]["models"]["vt"]["gap_at_capacity_high_dim"] = [2.5, 2.5, 2.5]
  high, low = pc._measure(per_ds)["bound_gap_widens_with_dim"]
  np.testing.assert_allclose(low, 2.0)
  # A data set cached before the gap was recorded: not measured (never the table's gap).
  del per_ds["wine"]["models"]["vt"]["gap_at_capacity_high_dim"]
  assert "bound_gap_widens_with_dim" not in pc._measure(per_ds)


def test_bad_config_names_raise(tmp_path):
  config = pc_config.get_config("smoke")
  config.models = "base,flow"
  with pytest.raises(ValueError, match="flow"):
    pc.run(config, str(tmp_path))
  config = pc_config.get_config("smoke")
  config.datasets = "mnist"
  with pytest.raises(ValueError, match="mnist"):
    pc.run(config, str(tmp_path))


def test_repeated_seed_raises_before_training(tmp_path, monkeypatch):
  # A repeated seed repeats its (method, baseline) pair: the paired SE shrinks and a verdict
  # can pass on one measurement counted twice (pc read config.seeds itself, unchecked).
  def stop(name, config):
    raise AssertionError("trained before validating config.seeds")
  monkeypatch.setattr(pc, "run_dataset", stop)
  config = pc_config.get_config("smoke")
  config.seeds = (0, 1, 1)
  with pytest.raises(ValueError, match="distinct"):
    pc.run(config, str(tmp_path))


def test_non_finite_training_raises_instead_of_reporting_nan(monkeypatch):
  def programs(model, *args, **kwargs):
    def train(x_train, keys):
      losses = np.zeros((len(keys), 4))
      losses[1, 2:] = np.nan  # the second seed diverged
      return None, losses, np.array([0, 10, 0])

    def evaluate(params, x_test):
      return dict(mean_log_f=np.zeros(x_test.shape[0]))
    return train, evaluate

  monkeypatch.setattr(pc, "_programs", programs)
  config = pc_config.get_config("smoke")
  config.models = "base"
  with pytest.raises(FloatingPointError, match=r"base on moons .* seeds \[1\]"):
    pc.run_dataset("moons", config)
