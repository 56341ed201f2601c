"""The shared verdict rule, fed hand-picked numbers whose verdict is obvious.

No test recomputes a verdict with the module's formula: each input is chosen so that
the answer can be read off (a gap many SEs wide, or an effect well inside its noise),
and the one SE example is computed by hand in its comment.
"""

import json
import math

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from jaxlab.report import verdict as V


def _crit(direction="higher", threshold=None, kind="difference", primary=True, name="c",
          mechanism=True, **floor):
  return V.Criterion(name=name, claim="the method is better", metric="score",
                     direction=direction, threshold=threshold, primary=primary, kind=kind,
                     mechanism=mechanism, **floor)


# ----------------------------------------------------------------------------- one criterion


def test_clearly_failing_numbers_did_not_hold():
  # The method is about 1.0 worse on every seed; the claim says it is better.
  r = V.judge(_crit(), [1.0, 1.2, 0.9], [2.0, 2.1, 2.0])
  assert r.verdict == "did not hold"
  assert r.effect == pytest.approx(-1.0)
  assert (r.n, r.n_missing) == (3, 0)


def test_numbers_inside_the_noise_are_inconclusive():
  # Per-seed differences +0.5, -0.4, +0.2, -0.3: mean 0, SE ~0.21 -> neither side by 2 SE.
  r = V.judge(_crit(), [1.5, 0.6, 1.2, 0.7], [1.0, 1.0, 1.0, 1.0])
  assert r.verdict == "inconclusive"
  assert r.effect == pytest.approx(0.0, abs=1e-12)


def test_clearly_passing_numbers_held():
  # Differences 1.0, 0.9, 1.1 against a claimed gain of at least 0.5.
  r = V.judge(_crit(threshold=0.5), [2.0, 1.9, 2.1], [1.0, 1.0, 1.0])
  assert r.verdict == "held"
  assert r.method_mean == pytest.approx(2.0) and r.baseline_mean == pytest.approx(1.0)


def test_the_threshold_decides_not_just_the_sign():
  # The method is better by ~1.0 on every seed, but the claim is a gain of 2.0.
  assert V.judge(_crit(threshold=2.0), [2.0, 1.9, 2.1], [1.0, 1.0, 1.0]).verdict == "did not hold"


def test_hand_computed_standard_error():
  # Differences 2, 3, 4: mean 3, std(ddof=1) = 1, SE = 1 / sqrt(3) = 0.57735; 2 SE = 1.1547.
  method, baseline = [3.0, 5.0, 7.0], [1.0, 2.0, 3.0]
  r = V.judge(_crit(threshold=0.0), method, baseline)
  assert r.effect == pytest.approx(3.0)
  assert r.se == pytest.approx(0.5773503, rel=1e-6)
  assert r.verdict == "held"                                                  # margin 3 > 1.15
  assert V.judge(_crit(threshold=2.0), method, baseline).verdict == "inconclusive"  # margin 1
  assert V.judge(_crit(threshold=4.0), method, baseline).verdict == "inconclusive"  # margin -1
  assert V.judge(_crit(threshold=5.0), method, baseline).verdict == "did not hold"  # margin -2


def test_direction_lower():
  # A loss: the method is ~1.0 lower on every seed.
  method, baseline = [2.0, 2.1, 1.9], [3.0, 3.0, 3.0]
  lower = V.judge(_crit(direction="lower"), method, baseline)
  assert lower.verdict == "held"
  assert lower.effect == pytest.approx(1.0)  # signed: positive = the claimed direction
  assert V.judge(_crit(direction="higher"), method, baseline).verdict == "did not hold"


def test_non_inferiority_margin():
  # "No worse than 0.1": the method is 0.02 worse on each seed (lower is better).
  c = _crit(direction="lower", threshold=-0.1)
  assert V.judge(c, [1.02, 1.12, 0.92], [1.0, 1.1, 0.9]).verdict == "held"
  # 0.5 worse on each seed misses the margin by 0.4.
  assert V.judge(c, [1.5, 1.6, 1.4], [1.0, 1.1, 0.9]).verdict == "did not hold"


def test_per_seed_effects_given_directly():
  # Same as test_clearly_failing_numbers: per-seed method - baseline, unsigned.
  r = V.judge(_crit(), [-1.0, -0.9, -1.1])
  assert r.verdict == "did not hold"
  assert r.method_mean is None and r.baseline_mean is None
  assert V.judge(_crit(direction="lower"), [-1.0, -0.9, -1.1]).verdict == "held"


def test_ratio_kind():
  # Recovery times halve on every seed: a 2x speed-up in the "lower" direction.
  method, baseline = [50.0, 40.0, 60.0], [100.0, 80.0, 120.0]
  r = V.judge(_crit(direction="lower", kind="ratio", threshold=1.5), method, baseline)
  assert r.verdict == "held"
  assert math.exp(r.effect) == pytest.approx(2.0)
  assert "2x" in r.effect_text()
  assert V.judge(_crit(direction="lower", kind="ratio", threshold=3.0),
                 method, baseline).verdict == "did not hold"
  # Per-seed ratios 0.5, 1.125, 0.25: geometric mean ~0.52 but spread over a factor of 4.
  noisy = V.judge(_crit(direction="lower", kind="ratio", threshold=2.0),
                  [50.0, 90.0, 30.0], [100.0, 80.0, 120.0])
  assert noisy.verdict == "inconclusive"
  # Ratios given directly, method / baseline per seed.
  assert V.judge(_crit(direction="lower", kind="ratio", threshold=1.5),
                 [0.5, 0.5, 0.5]).verdict == "held"


def test_ratio_needs_positive_values():
  with pytest.raises(ValueError, match="positive"):
    V.judge(_crit(kind="ratio"), [1.0, 0.0, 2.0], [1.0, 1.0, 1.0])


def test_nan_and_none_are_not_measured():
  assert V.judge(_crit(), [None, math.nan], [1.0, 2.0]).verdict == "not measured"
  assert V.judge(_crit(), None).verdict == "not measured"
  # The measured seeds pass by a mile, but the missing one may be the failure: not `held`.
  r = V.judge(_crit(), [2.0, math.nan, 2.1], [1.0, 1.0, 1.1])
  assert (r.n, r.n_missing, r.verdict) == (2, 1, "inconclusive")
  assert "1 missing" in r.effect_text()
  # A failure on the measured seeds is still a failure.
  assert V.judge(_crit(), [0.0, None, 0.1], [1.0, 1.0, 1.1]).verdict == "did not hold"
  # An infinite baseline is as unmeasured as a NaN one.
  assert V.judge(_crit(), [1.0, 2.0], [math.inf, 1.0]).n == 1


def test_one_seed_is_inconclusive():
  r = V.judge(_crit(), [10.0], [0.0])  # a huge gain, but no noise estimate
  assert r.verdict == "inconclusive"
  assert math.isnan(r.se)
  assert "SE undefined" in r.effect_text()


def test_accepts_jax_and_numpy_arrays():
  method, baseline = jnp.array([2.0, 1.9, 2.1]), np.float32([1.0, 1.0, 1.0])
  assert V.judge_all([_crit()], {"c": (method, baseline)})[0] == "held"


def test_bad_shapes_raise():
  with pytest.raises(ValueError, match="pair"):
    V.judge(_crit(), [1.0, 2.0, 3.0], [1.0, 2.0])
  with pytest.raises(ValueError, match="1-D"):
    V.judge(_crit(), [[1.0, 2.0], [3.0, 4.0]])
  with pytest.raises(ValueError, match="numbers"):
    V.judge(_crit(), ["a", "b"])


# ----------------------------------------------------------------------------- criteria


@pytest.mark.parametrize("fields, match", [
    (dict(direction="up"), "direction"),
    (dict(direction="higher", kind="log"), "kind"),
    (dict(direction="higher", kind="ratio", threshold=0.0), "factor > 0"),
    (dict(direction="higher", threshold=math.inf), "finite"),
])
def test_criterion_validation(fields, match):
  with pytest.raises(ValueError, match=match):
    V.Criterion(name="c", claim="x", metric="m", **fields)


def test_primary_must_be_a_bool():
  # A ValueError from the class; a TypeError first where runtime type checking is on (tests).
  with pytest.raises((ValueError, TypeError), match="primary"):
    V.Criterion(name="c", claim="x", metric="m", direction="higher", primary="yes")


def test_from_config_rejects_unknown_and_missing_fields():
  with pytest.raises(ValueError, match="unknown fields.*treshold"):
    V.Criterion.from_config(dict(name="c", claim="x", metric="m", direction="higher",
                                 treshold=0.5))
  with pytest.raises(ValueError, match="missing fields.*direction"):
    V.Criterion.from_config(dict(name="c", claim="x", metric="m"))
  with pytest.raises(ValueError, match="Duplicate"):
    V.criteria_from_config([dict(name="c", claim="x", metric="m", direction="higher")] * 2)


def test_criteria_declared_in_a_config_and_overridden():
  config = ml_collections.ConfigDict()
  config.criteria = dict(
      gain=dict(claim="better by 0.5", metric="score", direction="higher", threshold=0.5,
                mechanism=True),
      aux=dict(claim="not slower", metric="s/step", direction="lower", primary=False))
  config.lock()
  measured = {"gain": ([2.0, 1.9, 2.1], [1.0, 1.0, 1.0]), "aux": [0.5, 0.6, 0.4]}
  row, results = V.judge_all(config.criteria, measured)
  assert row == "held"
  # ConfigDict iterates its keys sorted by name.
  assert [(r.name, r.verdict) for r in results] == [("aux", "did not hold"), ("gain", "held")]
  config.criteria.gain.threshold = 2.0  # what `--config.criteria.gain.threshold=2` does
  assert V.judge_all(config.criteria, measured)[0] == "did not hold"
  # The list form, as in `config.criteria = [dict(name=..., ...)]`.
  listed = [dict(name="gain", claim="c", metric="m", direction="higher", threshold=0.5,
                 mechanism=True)]
  assert V.judge_all(listed, {"gain": {"method": [2.0, 1.9, 2.1],
                                       "baseline": [1.0, 1.0, 1.0]}})[0] == "held"


def test_judge_all_guards():
  crits = [_crit(name="a"), _crit(name="b", primary=False)]
  with pytest.raises(ValueError, match="undeclared.*typo"):
    V.judge_all(crits, {"a": [1.0, 1.1, 0.9], "typo": [1.0]})
  with pytest.raises(ValueError, match="primary"):
    V.judge_all([_crit(primary=False)], {})
  row, results = V.judge_all(crits, {})
  assert row == "not measured"
  assert [r.verdict for r in results] == ["not measured", "not measured"]


# ----------------------------------------------------------------------------- rows


def _r(verdict, primary=True, mechanism=False):
  return V.CriterionResult(
      name="c", claim="", metric="", direction="higher", kind="difference", threshold=0.0,
      primary=primary, effect=None, se=None, n=3, n_missing=0, verdict=verdict,
      mechanism=mechanism)


H, F, U, N, S = "held", "did not hold", "inconclusive", "not measured", "no signal"
# U: undecided; S: no signal. The first primary criterion of each case is the mechanism one.


@pytest.mark.parametrize("primary, secondary, expected", [
    ([H, H, H], [], "held"),
    ([H, H, U], [], "partly held"),               # 2 of 3 held, none failed
    ([H, U], [], "inconclusive"),                 # half is not a majority
    ([H, H, F], [], "did not hold"),              # one failed primary decides
    ([H, H, N], [], "partly held"),
    ([H, N], [], "inconclusive"),
    ([U, U], [], "inconclusive"),
    ([H], [F, F], "held"),                        # secondary failures do not decide
    ([U], [H, H], "inconclusive"),                # ... nor do secondary successes
    ([N, N], [H], "not measured"),
    ([], [], "not measured"),
    ([S, S], [H], "no signal"),                   # every primary has no signal
    ([S, N], [], "no signal"),
    ([H, S], [], "inconclusive"),                 # no signal is never held ...
    ([H, H, S], [], "partly held"),
    ([S, F], [], "did not hold"),                 # ... and a failure still decides
])
def test_row_rules(primary, secondary, expected):
  results = ([_r(v, mechanism=i == 0) for i, v in enumerate(primary)]
             + [_r(v, primary=False) for v in secondary])
  assert V.row_verdict(results) == expected


@pytest.mark.parametrize("mechanism, others, expected", [
    (U, [H, H, H], "inconclusive"),   # the rest held, but the paper's component did not
    (S, [H, H, H], "inconclusive"),
    (H, [H, H, U], "partly held"),
    (H, [H, H, H], "held"),
    (F, [H, H, H], "did not hold"),
])
def test_no_row_holds_without_its_mechanism(mechanism, others, expected):
  results = [_r(mechanism, mechanism=True)] + [_r(v) for v in others]
  assert V.row_verdict(results) == expected
  # A held mechanism criterion that is only secondary does not count.
  secondary_only = [_r(H, primary=False, mechanism=True)] + [_r(v) for v in others]
  assert V.row_verdict(secondary_only) in ("inconclusive", "did not hold")
  # No mechanism criterion at all: never held.
  assert V.row_verdict([_r(H), _r(H)]) == "inconclusive"


def test_only_non_mechanism_criteria_improve_is_not_held():
  # The row's side criteria clear their thresholds by a mile on every seed; the
  # mechanism ablation (method vs the same pipeline without the component) moves by
  # noise only: +0.01, -0.02, +0.01 -> the row is not held.
  crits = [_crit(name="mech", mechanism=True),
           _crit(name="vs_other_a", mechanism=False),
           _crit(name="vs_other_b", mechanism=False)]
  row, results = V.judge_all(crits, {
      "mech": ([0.51, 0.48, 0.51], [0.50, 0.50, 0.50]),
      "vs_other_a": ([0.9, 0.91, 0.92], [0.5, 0.5, 0.5]),
      "vs_other_b": ([0.9, 0.91, 0.92], [0.6, 0.6, 0.6])})
  assert [r.verdict for r in results] == ["inconclusive", "held", "held"]
  assert row == "inconclusive"


# ----------------------------------------------------------------------------- floors


def test_both_arms_at_the_reference_is_no_signal():
  # Exact match 0.0 vs 0.0 under a non-inferiority margin used to pass as "held".
  nonin = _crit(threshold=-0.02)
  r = V.judge(nonin, [0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
  assert r.verdict == "no signal"
  # Both arms at a constant chance level, declared as the floor.
  chance = _crit(threshold=-0.02, floor="chance", floor_value=0.25)
  assert V.judge(chance, [0.25, 0.25, 0.25], [0.25, 0.25, 0.25]).verdict == "no signal"
  row, _ = V.judge_all([nonin], {"c": ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0])})
  assert row == "no signal"


def test_baseline_at_chance_is_no_signal_even_when_the_method_wins():
  # Pose error in degrees, chance = 90: the baseline sits at 88-91, the method at 80-84.
  c = _crit(direction="lower", floor="chance", floor_value=90.0, floor_margin=5.0)
  r = V.judge(c, [80.0, 84.0, 82.0], [88.0, 91.0, 90.0])
  assert r.verdict == "no signal" and r.signal is False
  assert r.reference_mean == pytest.approx(90.0)
  assert r.floor_effect == pytest.approx(90.0 - 89.666666, abs=1e-5)  # lead, signed: lower
  # Once the baseline leaves chance by more than the margin, the comparison is judged.
  clear = V.judge(c, [40.0, 44.0, 42.0], [60.0, 61.0, 59.0])
  assert clear.verdict == "held" and clear.signal is True
  failing = V.judge(c, [70.0, 71.0, 69.0], [60.0, 61.0, 59.0])
  assert failing.verdict == "did not hold"


def test_floor_with_a_measured_reference_per_seed():
  # bits/byte against unigram measured per seed; the baseline beats it by ~1.0 > margin 0.5.
  c = _crit(direction="lower", floor="unigram", floor_margin=0.5)
  r = V.judge_all([c], {"c": ([2.0, 2.1, 1.9], [2.5, 2.6, 2.4], [3.5, 3.6, 3.4])})[1][0]
  assert r.signal is True and r.verdict == "held"
  assert V.judge_all([c], {"c": {"method": [2.0, 2.1, 1.9], "baseline": [3.4, 3.6, 3.5],
                                 "reference": [3.5, 3.6, 3.4]}})[1][0].verdict == "no signal"
  # A margin the lead misses by less than its noise is not a signal either.
  noisy = V.judge(c, [2.0, 2.1, 1.9], [3.0, 2.6, 3.1], [3.5, 3.6, 3.4])
  assert noisy.verdict == "no signal"


def test_ratio_floor():
  # Speed-up over the default: the baseline must be >= 1.1x the default's (lower time).
  c = _crit(direction="lower", kind="ratio", floor="default config", floor_value=1.0,
            floor_margin=1.1)
  assert V.judge(c, [0.5, 0.5, 0.5], [0.99, 1.0, 1.01]).verdict == "no signal"
  assert V.judge(c, [0.5, 0.5, 0.5], [0.7, 0.71, 0.69]).verdict == "held"


def test_an_unmeasured_floor_criterion_is_not_measured():
  c = _crit(floor="unigram")
  assert V.judge(c, None).verdict == "not measured"
  assert V.judge(c, [None, None], [1.0, 2.0]).verdict == "not measured"
  assert V.judge_all([c], {})[0] == "not measured"


def test_floor_direction_of_its_own():
  # "ULD falls below SFT" (higher bits/byte is the claim), yet SFT must still beat unigram
  # (lower bits/byte) for the comparison to mean anything.
  c = _crit(direction="higher", floor="unigram", floor_value=4.0, floor_margin=0.1,
            floor_direction="lower")
  r = V.judge(c, [3.9, 3.95, 3.92], [3.7, 3.72, 3.71])
  assert r.signal is True and r.verdict == "held"
  assert r.floor_effect == pytest.approx(4.0 - 3.71, abs=1e-9)
  assert V.judge(c, [4.2, 4.25, 4.22], [4.0, 4.01, 3.99]).verdict == "no signal"
  # Without it, the floor would ask SFT to sit *above* unigram.
  same = _crit(direction="higher", floor="unigram", floor_value=4.0, floor_margin=0.1)
  assert V.judge(same, [3.9, 3.95, 3.92], [3.7, 3.72, 3.71]).verdict == "no signal"
  with pytest.raises(ValueError, match="floor_direction"):
    _crit(floor="unigram", floor_direction="down")


def test_one_seed_leaves_the_floor_undecided():
  c = _crit(floor="chance", floor_value=0.0)
  r = V.judge(c, [1.0], [0.5])
  assert r.signal is None and r.verdict == "inconclusive"


def test_floor_declaration_errors():
  with pytest.raises(ValueError, match="named floor"):
    _crit(floor_value=0.5)
  with pytest.raises(ValueError, match="floor_margin.*finite"):
    _crit(floor="chance", floor_margin=math.nan)
  with pytest.raises(ValueError, match="measured per seed"):
    V.judge(_crit(floor="unigram"), [1.0, 2.0], [1.0, 2.0])
  with pytest.raises(ValueError, match="no floor declared"):
    V.judge(_crit(), [1.0, 2.0], [1.0, 2.0], [0.0, 0.0])
  with pytest.raises(ValueError, match="separately"):
    V.judge(_crit(floor="chance", floor_value=0.0), [1.0, 2.0])
  with pytest.raises(ValueError, match="pair seed by seed"):
    V.judge(_crit(floor="chance"), [1.0, 2.0], [1.0, 2.0], [0.0])


def test_floor_declared_in_a_config():
  config = ml_collections.ConfigDict()
  config.criteria = dict(acc=dict(claim="beats the ablation", metric="accuracy",
                                  direction="higher", mechanism=True, floor="chance",
                                  floor_value=0.1, floor_margin=0.05))
  (c,) = V.criteria_from_config(config.criteria)
  assert (c.floor, c.floor_value, c.floor_margin, c.mechanism) == ("chance", 0.1, 0.05, True)


# ----------------------------------------------------------------------------- readings


def test_interpretation_reports_each_reading():
  crits = [_crit(name="mech")]
  paper = V.interpretation("rule", "paper", crits, {"mech": ([2.0, 2.1, 1.9], [1.0] * 3)},
                           default=True, source="the paper")
  other = V.interpretation("rule", "ours", crits, {"mech": ([0.5, 0.6, 0.4], [1.0] * 3)})
  assert (paper.verdict, other.verdict) == ("held", "did not hold")
  assert paper.mechanism_effect.startswith("mech +1 ± ")
  with pytest.raises(ValueError, match="verdict"):
    V.Interpretation("k", "r", verdict="great")


def test_result_round_trips_through_json():
  r = V.judge(_crit(), [10.0], [0.0])  # NaN SE
  from jaxlab.report import to_jsonable
  back = V.CriterionResult.from_dict(json.loads(json.dumps(to_jsonable(r))))
  assert back.se is None and back.effect == 10.0 and back.verdict == r.verdict
