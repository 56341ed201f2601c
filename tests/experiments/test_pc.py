"""The `pc` experiment: smoke run + resume, the learning-rate key, criteria fed failing numbers."""

import numpy as np
import pytest

from configs import pc as pc_config
from jaxlab.experiments import pc
from jaxlab.pc import evaluation
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
    # ... and it contains the LL normalised by the independent strip quadrature.
    quad = np.array(row["vt_quad"]["per_seed"])
    assert np.all(lo <= quad + 1e-4) and np.all(quad <= hi + 1e-4), (lo, quad, hi)
    # At capacity_high_dim (fewer boxes than the table's capacity) the bracket is no tighter.
    vt = on_disk["per_dataset"][d]["models"]["vt"]
    assert np.all(np.asarray(vt["gap_at_capacity_high_dim"]) >= hi - lo - 1e-5)
  assert len(report["plots"]) == 3
  # A second run loads every data set from the arm cache and reports the same table.
  again = pc.run(config, str(tmp_path))
  assert again["table"] == on_disk["table"]


def test_pc_uses_optimizer_learning_rate(monkeypatch):
  # Every model trains with `jaxlab.train.optimizer(config.optimizer, num_steps)` (its keys
  # are checked in tests/jaxlab/train/test_optimizers.py), the HFV cell offsets frozen.
  config = pc_config.get_config("smoke")
  config.optimizer.learning_rate = 0.0123
  seen = []

  def spy(opt, num_steps, **kwargs):
    seen.append((opt["learning_rate"], num_steps))
    raise _Stop

  monkeypatch.setattr(evaluation, "optimizer", spy)
  with pytest.raises(_Stop):
    pc.run_dataset("moons", config)
  assert seen == [(pytest.approx(0.0123), config.train.num_steps)]


def _per_ds(vt_minus_base: float, hfv_minus_base: float, high_gap: float, seeds: int = 3,
            noise: float = 0.005, base_over_gaussian: float = 0.8, violation: float = 0.0,
            tightening: float = 10.0) -> dict:
  """Fabricated per-data-set results with the given effects, in `run_dataset`'s layout.

  The base circuit beats a Gaussian fit by `base_over_gaussian` nats; the VT bracket's
  gap shrinks by `tightening` over the bisection steps, and the quadrature log Z lies
  `violation` nats above log Z+ (0: inside the bracket).
  """
  rng = np.random.default_rng(0)
  out = {}
  for d, dim in [("moons", 2), ("pinwheel", 2), ("wine", 13)]:
    base = -2.0 + noise * rng.standard_normal(seeds)
    lower = base + vt_minus_base + noise * rng.standard_normal(seeds)
    gap = (high_gap if dim > 2 else 1.0) + noise * rng.standard_normal(seeds)
    log_f = lower - 0.1  # log Z+ = -0.1
    steps = np.linspace(1.0, 1.0 / tightening, 5)  # the gap's curve over 4 bisection steps
    lz_hi = np.full((seeds, 5), -0.1)
    lz_lo = lz_hi - gap[:, None] * steps[None]
    vt = dict(ll_lower=lower.tolist(), ll_upper=(lower + gap).tolist(),
              mean_log_f=log_f.tolist(), log_z_hi=lz_hi.tolist(), log_z_lo=lz_lo.tolist(),
              ll_lower_curve=(log_f[:, None] - lz_hi).tolist(),
              ll_upper_curve=(log_f[:, None] - lz_lo).tolist(),
              gap_at_capacity_high_dim=gap.tolist())
    if dim == 2:
      vt.update(log_z_quad=(-0.1 - 0.5 * gap / tightening + violation).tolist(),
                log_z_tail=np.full(seeds, -30.0).tolist())
    out[d] = dict(num_vars=dim, gaussian_ll=(base - base_over_gaussian).tolist(), models=dict(
        base=dict(ll=base.tolist()),
        hfv=dict(ll=(base + hfv_minus_base + noise * rng.standard_normal(seeds)).tolist()),
        vt=vt))
  return out


def test_criteria_fail_on_failing_numbers_and_hold_on_good_ones():
  config = pc_config.get_config("quick")
  # VT and HFV below the base, the quadrature Z above the certified Z+ (a bracket that
  # does not hold), and a gap that refinement did not tighten.
  failing = _per_ds(-0.5, -0.3, 0.2, violation=0.8, tightening=1.0)
  row, results = judge_all(config.criteria, pc._measure(failing))
  assert row == "did not hold"
  assert all(r.verdict == "did not hold" for r in results), [(r.name, r.verdict) for r in results]
  row, results = judge_all(config.criteria, pc._measure(_per_ds(0.5, 0.0, 20.0)))
  assert row == "held", [(r.name, r.verdict, r.effect) for r in results]


def test_no_primary_criterion_is_the_gap_by_dimension():
  # The gap's widening with D follows from the budget (nothing certified in D >= 10, log Z+
  # = 0): reported as a fact, however the numbers come out, never judged.
  config = pc_config.get_config("quick")
  assert "bound_gap_widens_with_dim" not in config.criteria
  per_ds = _per_ds(0.5, 0.0, 20.0)
  assert set(pc._measure(per_ds)) == set(config.criteria)
  fact = pc._gap_by_dimension(per_ds)
  assert fact.name == "bound_gap_by_dimension" and "20.00 nats (D >= 10)" in fact.value
  assert "nothing certified" not in fact.value  # here log Z+ = -0.1: not the trivial value
  per_ds["wine"]["models"]["vt"]["log_z_hi"] = np.full((3, 5), 1e-7).tolist()
  assert "largest log Z+ 1e-07 (0 up to rounding" in pc._gap_by_dimension(per_ds).value
  del per_ds["wine"]
  assert pc._gap_by_dimension(per_ds) is None


def test_ll_criteria_have_no_signal_when_the_base_is_at_the_gaussian_floor():
  config = pc_config.get_config("quick")
  # The base circuit no better than a Gaussian fit: VT's and HFV's leads mean nothing.
  row, results = judge_all(config.criteria, pc._measure(_per_ds(0.5, 0.0, 20.0,
                                                               base_over_gaussian=0.0)))
  by_name = {r.name: r for r in results}
  for name in ("vt_lower_bound_beats_base_2d", "hfv_matches_base_2d"):
    assert by_name[name].verdict == "no signal" and by_name[name].signal is False
  # The bound criteria still held, but no mechanism criterion did: never held.
  assert row == "inconclusive"
  # A data set cached before the Gaussian reference was recorded: not measured, not unfloored.
  per_ds = _per_ds(0.5, 0.0, 20.0)
  del per_ds["moons"]["gaussian_ll"]
  assert "vt_lower_bound_beats_base_2d" not in pc._measure(per_ds)


def test_bracket_violation_reads_both_sides_and_the_tail():
  vt = dict(log_z_lo=[[-1.0, -0.5]], log_z_hi=[[0.0, -0.2]], log_z_quad=[-0.3],
            log_z_tail=[-40.0])
  np.testing.assert_allclose(evaluation.bracket_violation(vt), [0.0])
  # Z above the final Z+: the violation is the excess, from the worst step.
  np.testing.assert_allclose(evaluation.bracket_violation({**vt, "log_z_quad": [-0.1]}), [-0.1],
                             atol=1e-12)
  # Z below Z-: not rescued by a negligible tail, rescued by a tail that could hold the mass.
  low = {**vt, "log_z_quad": [-0.7]}
  np.testing.assert_allclose(evaluation.bracket_violation(low), [-0.2], atol=1e-9)
  assert evaluation.bracket_violation({**low, "log_z_tail": [np.log(0.2)]})[0] == 0.0


def test_bound_gaps_compare_at_one_box_budget(monkeypatch):
  # The gap-by-dimension fact compares 2-D toys' brackets with D >= 10 sets': with more boxes
  # per cell in 2-D (`capacity`) than above `low_dim_max` (`capacity_high_dim`), the contrast
  # would grow with the budget alone. 2-D sets also get their bounds at capacity_high_dim.
  seen = {}

  def spy(model, num_steps, batch_size, alpha, frozen, bound_cfg, *args):
    seen[model.circuit.num_vars] = bound_cfg[2]
    raise _Stop

  monkeypatch.setattr(evaluation, "_programs", spy)
  config = pc_config.get_config("smoke")
  config.models = "vt"
  config.vt.update(capacity=16, capacity_high_dim=4)
  for name in ("moons", "wine"):
    with pytest.raises(_Stop):
      pc.run_dataset(name, config)
  assert seen == {2: (16, 4), 13: (4,)}
  # The fact reads that gap, not the table's bracket (here 1.0 on every 2-D set).
  per_ds = _per_ds(0.0, 0.0, high_gap=1.0)
  per_ds["moons"]["models"]["vt"]["gap_at_capacity_high_dim"] = [1.5, 1.5, 1.5]
  per_ds["pinwheel"]["models"]["vt"]["gap_at_capacity_high_dim"] = [2.5, 2.5, 2.5]
  assert "vs 2.00 nats (2-D)" in pc._gap_by_dimension(per_ds).value
  # A data set cached before the gap was recorded: no fact (never the table's gap).
  del per_ds["wine"]["models"]["vt"]["gap_at_capacity_high_dim"]
  assert pc._gap_by_dimension(per_ds) is None


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

  monkeypatch.setattr(evaluation, "_programs", programs)
  config = pc_config.get_config("smoke")
  config.models = "base"
  with pytest.raises(FloatingPointError, match=r"base on moons .* seeds \[1\]"):
    pc.run_dataset("moons", config)
