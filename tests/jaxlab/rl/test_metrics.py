"""Drift metrics on hand-built curves; the NaN rule of the rl metrics."""

import jax
import numpy as np
import pytest

from jaxlab.rl import knowledge_task as kt
from jaxlab.rl import metrics


def test_recovery_and_degradation_on_a_synthetic_curve():
  total = 1000
  levels = np.zeros(total)
  levels[500:] = 1.0
  steps = np.arange(50, 1001, 50)            # 20 evaluations
  curve = np.full(20, 0.8)
  curve[10:] = [0.2, 0.3, 0.5, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8]
  m = metrics.drift_metrics(steps, curve, levels, smooth=1, threshold=0.9)
  (ev,) = m["events"]
  assert ev["step"] == 500 and ev["n_pre"] == pytest.approx(0.8)
  assert ev["degradation"] == pytest.approx(0.75)
  # First evaluation >= 0.72 is at step 700 (value 0.8): 200 steps = 20 %.
  assert ev["recovery_pct"] == pytest.approx(20.0) and ev["recovered"]
  assert m["nauc_drift"] == pytest.approx(np.mean([0.2, 0.3]))


def test_censored_recovery_counts_the_segment():
  levels = np.r_[np.zeros(500), np.ones(500)]
  steps = np.arange(100, 1001, 100)
  curve = np.r_[np.full(5, 1.0), np.full(5, 0.1)]
  ev = metrics.drift_metrics(steps, curve, levels, smooth=1)["events"][0]
  assert not ev["recovered"] and ev["recovery_pct"] == pytest.approx(50.0)


def test_negative_and_zero_pre_change_return():
  # Spec: degradation = (R_pre - min_post R) / |R_pre|; recovery to within
  # (1 - threshold) |R_pre| of R_pre, also when R_pre < 0.
  levels = np.r_[np.zeros(50), np.ones(50)]
  steps = np.arange(10, 101, 10)
  curve = np.array([-0.5] * 5 + [-1.0, -0.9, -0.52, -0.5, -0.5])
  m = metrics.drift_metrics(steps, curve, levels, smooth=1, threshold=0.9)
  (ev,) = m["events"]
  assert ev["n_pre"] == pytest.approx(-0.5)
  assert ev["degradation"] == pytest.approx(1.0) and m["degradation"] == pytest.approx(1.0)
  # Target -0.55 (not 0.9 * -0.5 = -0.45, above R_pre): first reached at step 80.
  assert ev["recovered"] and ev["recovery_pct"] == pytest.approx(30.0)
  # n_pre == 0: no relative degradation (NaN); recovery target 0.
  ev = metrics.drift_metrics(steps, curve + 0.5, levels, smooth=1)["events"][0]
  assert ev["n_pre"] == 0.0 and np.isnan(ev["degradation"])
  assert ev["recovered"] and ev["recovery_pct"] == pytest.approx(40.0)


def test_normalize_and_errors():
  np.testing.assert_allclose(metrics.normalize([-1600, -100], -1600, -100),
                             [0, 1])
  with pytest.raises(ValueError, match="high > low"):
    metrics.normalize([0], 1.0, 1.0)
  with pytest.raises(ValueError, match="1-D"):
    metrics.drift_metrics(np.arange(3), np.zeros(4), np.zeros(10))


def _curve_case():
  levels = np.r_[np.zeros(500), np.ones(500)]
  steps = np.arange(100, 1001, 100)
  curve = np.r_[np.full(5, 0.8), [0.2, 0.5, 0.8, 0.8, 0.8]]
  return steps, curve, levels


def test_a_nan_evaluation_makes_every_metric_nan():
  # A NaN failed every `>=` of the recovery search (a finite, censored recovery time) and
  # Python's max(0, NaN) made the degradation 0.
  steps, curve, levels = _curve_case()
  for i in (4, 6, 9):   # pre-change, post-change, last evaluation
    bad = curve.copy()
    bad[i] = np.nan
    m = metrics.drift_metrics(steps, bad, levels, smooth=1)
    (ev,) = m["events"]
    assert not ev["recovered"] and ev["step"] == 500
    for v in (m["degradation"], m["recovery_pct"], m["nauc_steady"], m["nauc_drift"],
              ev["n_pre"], ev["degradation"], ev["recovery_pct"]):
      assert np.isnan(v)


def test_non_finite_levels_and_knobs_raise():
  steps, curve, levels = _curve_case()
  bad = levels.copy()
  bad[10] = np.nan
  with pytest.raises(ValueError, match="levels must be a finite"):
    metrics.change_points(bad)
  with pytest.raises(ValueError, match="levels must be a finite"):
    metrics.drift_metrics(steps, curve, bad)
  with pytest.raises(ValueError, match="min_jump"):
    metrics.change_points(levels, min_jump=float("nan"))
  for knob in ("pre_window", "threshold", "settle", "drift_window"):
    with pytest.raises(ValueError, match=knob):
      metrics.drift_metrics(steps, curve, levels, **{knob: float("nan")})
  with pytest.raises(ValueError, match="smooth"):
    metrics.drift_metrics(steps, curve, levels, smooth=0)


def test_knowledge_task_f1_of_nan_logits_is_nan():
  # The PAQ guard of a policy that never answers (F1 = 0) also caught NaN logits.
  cfg = kt.TaskConfig(num_values=10)
  task = kt.make_task(cfg, seed=3)
  model = kt.make_policy(kt.PolicyConfig(kind="mlp", d_model=8, d_ff=16), cfg)
  params = kt.init_params(model, jax.random.key(0))
  nan_params = jax.tree.map(lambda p: p * np.nan, params)
  table = np.asarray(kt.evaluate(model, nan_params, task, cfg))
  assert np.isnan(table).all()
