"""Verdicts that can fail: declared criteria judged on paired seeds.

Every reproduction declares its criteria in its config before it runs (the
paper's statement, the metric, the direction, a threshold, primary or not) and
judges them here with one rule, so no experiment writes its own verdict logic:

* A criterion compares the method with its baseline seed by seed (same seed,
  same data, same init where the arms share them). The per-seed effect is
  `method - baseline` (`kind="difference"`) or `log(method / baseline)`
  (`kind="ratio"`), signed so that a positive effect is the direction the
  paper claims (`direction="higher"` or `"lower"`).
* effect = mean of the per-seed effects; SE = std(ddof=1) / sqrt(n), the
  paired standard error.
* `held` when effect - threshold > 2 SE; `did not hold` when
  threshold - effect > 2 SE; `inconclusive` in between, and whenever fewer than
  2 seeds were measured (the SE is undefined). A comparison that decides a
  verdict should run >= 3 seeds: with 2 the SE rests on one degree of freedom.
* Floors: a criterion may name a trivial reference (`floor`: chance, a mean
  predictor, the untrained model, unigram) and a `floor_margin`. Its baseline
  must beat the reference by the margin on the paired seeds (by more than 2 SE,
  the rule above; undecided with one seed) or the criterion is `no signal`: neither arm moved off the
  trivial level, so their difference is noise. `no signal` is never held and
  never failed. A criterion whose two arms are exactly 0 on every seed is
  `no signal` too, floor or not.
* Mechanism: a criterion with `mechanism=True` compares the method with the
  same pipeline without the paper's distinctive component, at equal budget and
  on paired seeds. A row is never held or partly held unless a primary
  mechanism criterion held: the paper's own component must be what works.
* Row: `did not hold` = a primary criterion did not hold; `no signal` = every
  measured primary criterion is `no signal`; `held` = every primary criterion
  held; `partly held` = a strict majority of the primary criteria held and none
  failed; `not measured` = no primary criterion was measured; `inconclusive`
  otherwise, and in place of held / partly held when no primary mechanism
  criterion held. Non-primary criteria are reported with their own verdicts and
  never decide the row.
* Properties true by construction (storage bytes, a value a model was refit
  to hit) are facts (`Fact`): reported, never judged.

Missing values: a seed whose method or baseline value is None, NaN or +-Inf is
not measured; it is dropped from the pair and counted in `n_missing`. A
criterion with no measured seed is `not measured`, and one with a missing seed
cannot be `held` (it is `inconclusive` at best): a seed that diverged must not
disappear from a success. An experiment that wants divergence judged records
it as its own criterion (e.g. a finite "diverged" indicator per seed).

Example (configs declare, experiments measure, one call judges)::

  import ml_collections
  from jaxlab.report import verdict
  config = ml_collections.ConfigDict()
  config.criteria = dict(
      bpb=dict(claim="ECO matches master-weight training", metric="val bits/byte",
               direction="lower", threshold=-0.02, unit="bits/byte", mechanism=True))
  criteria = verdict.criteria_from_config(config.criteria)
  row, results = verdict.judge_all(
      criteria, {"bpb": ([2.31, 2.30, 2.33], [2.32, 2.31, 2.32])})  # (method, baseline)
  assert row == "held" and results[0].n == 3
"""

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

# What one criterion can say, and what a row can say (`partly held` is a row verdict only).
CRITERION_VERDICTS = ("held", "did not hold", "inconclusive", "no signal", "not measured")
VERDICTS = ("held", "partly held", "did not hold", "inconclusive", "no signal", "not measured")
DIRECTIONS = ("higher", "lower")
KINDS = ("difference", "ratio")

# How many paired standard errors separate the effect from the threshold for a decision.
NUM_SE = 2.0


@dataclasses.dataclass(frozen=True)
class Criterion:
  """One claim of a paper, declared in the config before the run.

  Attributes:
    name: a short identifier, unique within the experiment (the key of `measured`).
    claim: the paper's statement this criterion tests, quoted or closely paraphrased.
    metric: what is measured per seed, e.g. "val bits/byte at the last step".
    direction: "higher" if the claim is that the method's metric is larger than the
      baseline's, "lower" if smaller.
    threshold: the improvement the claim needs, in the claimed direction. For
      `kind="difference"`, in the metric's units (0 = "better at all", 0.5 = "better
      by at least 0.5", -0.02 = "no worse than 0.02", i.e. a non-inferiority margin).
      For `kind="ratio"`, a factor > 0 (1 = "better at all", 2 = "at least 2x better":
      method/baseline >= 2 for "higher", baseline/method >= 2 for "lower"). None means
      0 (difference) or 1 (ratio).
    primary: whether the criterion decides the row's verdict.
    kind: "difference" judges method - baseline; "ratio" judges log(method/baseline),
      for metrics that are positive and compared as factors (times, costs).
    unit: the metric's unit, only for display.
    mechanism: whether the baseline is the same pipeline without the paper's
      distinctive component (an ablation at equal budget), so that the criterion
      tests the mechanism itself. A row holds only if a primary one held.
    floor: the name of a trivial reference the baseline must beat for the
      comparison to mean anything ("chance", "mean predictor", "unigram"). Its
      value is `floor_value` when known before the run, else measured per seed and
      passed to `judge` as `reference`.
    floor_margin: how much the baseline must beat the reference by, in the
      criterion's direction and kind (metric units, or a factor for ratios).
      None means 0 (difference) or 1 (ratio).
    floor_value: the reference's value when it is a constant (chance = 1 / classes).
    floor_direction: the direction in which the baseline must beat the reference, when it
      differs from the claim's (a claim that a baseline *falls below* SFT still needs that
      baseline to beat unigram); None means `direction`.
  """
  name: str
  claim: str
  metric: str
  direction: str
  threshold: float | int | None = None
  primary: bool = True
  kind: str = "difference"
  unit: str = ""
  mechanism: bool = False
  floor: str | None = None
  floor_margin: float | int | None = None
  floor_value: float | int | None = None
  floor_direction: str | None = None

  def __post_init__(self):
    if not isinstance(self.name, str) or not self.name:
      raise ValueError(f"Criterion.name must be a non-empty string, got {self.name!r}")
    if self.direction not in DIRECTIONS:
      raise ValueError(f"Criterion {self.name!r}: direction must be one of {DIRECTIONS}, "
                       f"got {self.direction!r}")
    if self.floor_direction not in (None, *DIRECTIONS):
      raise ValueError(f"Criterion {self.name!r}: floor_direction must be None or one of "
                       f"{DIRECTIONS}, got {self.floor_direction!r}")
    if self.kind not in KINDS:
      raise ValueError(f"Criterion {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
    for flag in ("primary", "mechanism"):
      if not isinstance(getattr(self, flag), bool):
        raise ValueError(f"Criterion {self.name!r}: {flag} must be a bool, "
                         f"got {getattr(self, flag)!r}")
    for field in ("threshold", "floor_margin"):
      self._check_amount(field)
    if self.floor_value is not None:
      v = float(self.floor_value)
      if not math.isfinite(v) or (self.kind == "ratio" and v <= 0):
        raise ValueError(f"Criterion {self.name!r}: floor_value must be finite"
                         f"{' and > 0 for a ratio' if self.kind == 'ratio' else ''}, got {v}")
      object.__setattr__(self, "floor_value", v)
    if self.floor is None and (self.floor_margin is not None or self.floor_value is not None
                               or self.floor_direction is not None):
      raise ValueError(f"Criterion {self.name!r}: floor_margin / floor_value / floor_direction "
                       f"need a named floor (the trivial reference, e.g. floor='chance')")
    if self.floor is not None and (not isinstance(self.floor, str) or not self.floor):
      raise ValueError(f"Criterion {self.name!r}: floor must name the reference, "
                       f"got {self.floor!r}")

  def _check_amount(self, field: str) -> None:
    """A threshold-like field: finite, and a factor > 0 for ratios; stored as float."""
    if getattr(self, field) is None:
      return
    t = float(getattr(self, field))
    if not math.isfinite(t):
      raise ValueError(f"Criterion {self.name!r}: {field} must be finite, got {t}")
    if self.kind == "ratio" and t <= 0:
      raise ValueError(f"Criterion {self.name!r}: a ratio {field} is a factor > 0 "
                       f"(1 = no change), got {t}")
    object.__setattr__(self, field, t)

  @property
  def sign(self) -> float:
    """+1 when higher is better for the claim, -1 when lower is."""
    return 1.0 if self.direction == "higher" else -1.0

  @property
  def judged_threshold(self) -> float:
    """The threshold on the scale the effect is judged on (log for ratios)."""
    return self._judged(self.threshold)

  @property
  def judged_floor_margin(self) -> float:
    """The floor margin on the scale the effect is judged on (log for ratios)."""
    return self._judged(self.floor_margin)

  def _judged(self, amount: float | None) -> float:
    if self.kind == "ratio":
      return math.log(1.0 if amount is None else amount)
    return 0.0 if amount is None else amount

  @classmethod
  def from_config(cls, cfg: Any, name: str | None = None) -> "Criterion":
    """A `Criterion` from a config entry (a dict, a `ConfigDict`, or a `Criterion`).

    Args:
      cfg: the fields of `Criterion`; unknown keys raise a ValueError naming them.
      name: the criterion's name when `cfg` is keyed by it (`config.criteria.<name>`);
        must agree with `cfg["name"]` if both are given.

    Returns:
      The validated criterion.

    Example::

      c = Criterion.from_config(dict(claim="2x faster recovery", metric="recovery steps",
                                     direction="lower", kind="ratio", threshold=2.0), name="rec")
    """
    if isinstance(cfg, Criterion):
      fields = dataclasses.asdict(cfg)
    elif hasattr(cfg, "to_dict"):  # ml_collections.ConfigDict, without importing it here
      fields = dict(cfg.to_dict())
    elif isinstance(cfg, Mapping):
      fields = dict(cfg)
    else:
      raise ValueError(f"A criterion must be a dict or ConfigDict, got {type(cfg).__name__}")
    if name is not None:
      if fields.get("name", name) != name:
        raise ValueError(f"Criterion keyed {name!r} has name {fields['name']!r}")
      fields["name"] = name
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - known)
    if unknown:
      raise ValueError(f"Criterion {fields.get('name')!r}: unknown fields {unknown}; "
                       f"expected a subset of {sorted(known)}")
    missing = sorted(k for k in ("name", "claim", "metric", "direction") if k not in fields)
    if missing:
      raise ValueError(f"Criterion {fields.get('name')!r}: missing fields {missing}")
    return cls(**fields)


def criteria_from_config(cfg: Any) -> tuple[Criterion, ...]:
  """The criteria of `config.criteria`, in its iteration order (a `ConfigDict` sorts by name).

  Args:
    cfg: either a mapping name -> fields (`config.criteria.<name> = dict(...)`; each
      field can then be overridden on the command line,
      `--config.criteria.<name>.threshold=0.3`), or a sequence of field dicts that each
      carry a `name`.

  Returns:
    The criteria; names are unique.

  Example::

    crits = criteria_from_config({"bpb": dict(claim="c", metric="m", direction="lower")})
  """
  if hasattr(cfg, "items"):
    crits = tuple(Criterion.from_config(v, name=str(k)) for k, v in cfg.items())
  elif isinstance(cfg, Iterable) and not isinstance(cfg, str):
    crits = tuple(Criterion.from_config(v) for v in cfg)
  else:
    raise ValueError(f"config.criteria must be a mapping or a list, got {type(cfg).__name__}")
  names = [c.name for c in crits]
  dup = sorted({n for n in names if names.count(n) > 1})
  if dup:
    raise ValueError(f"Duplicate criterion names {dup}")
  return crits


@dataclasses.dataclass(frozen=True)
class Fact:
  """A property true by construction (storage bytes, a refit target): reported, never judged.

  Attributes:
    name: a short identifier.
    statement: what the fact says, e.g. "ECO stores no master weights".
    value: the number or text that shows it.
    unit: the value's unit, only for display.
  """
  name: str
  statement: str
  value: Any = None
  unit: str = ""


@dataclasses.dataclass(frozen=True)
class CriterionResult:
  """A judged criterion: its declaration, what was measured, and its verdict.

  `effect` and `se` are on the judged scale: the signed mean difference for
  `kind="difference"` (positive = the claimed direction), the signed mean
  log-ratio for `kind="ratio"`. `threshold` is the declared one (a factor for
  ratios). NaN / None when not defined (no seed, or fewer than 2 for `se`).
  `floor_effect` and `floor_se` are the baseline's lead over the floor's
  reference on the same scale, positive in the floor's direction (None without a
  floor); `signal` says whether it cleared `floor_margin` (None without a floor).
  """
  name: str
  claim: str
  metric: str
  direction: str
  kind: str
  threshold: float | int | None
  primary: bool
  effect: float | int | None
  se: float | int | None
  n: int
  n_missing: int
  verdict: str
  unit: str = ""
  method_mean: float | int | None = None
  baseline_mean: float | int | None = None
  mechanism: bool = False
  floor: str | None = None
  floor_margin: float | int | None = None
  reference_mean: float | int | None = None
  floor_effect: float | int | None = None
  floor_se: float | int | None = None
  signal: bool | None = None

  def __post_init__(self):
    if self.verdict not in CRITERION_VERDICTS:
      raise ValueError(f"CriterionResult {self.name!r}: verdict must be one of "
                       f"{CRITERION_VERDICTS}, got {self.verdict!r}")

  @classmethod
  def from_dict(cls, d: Mapping[str, Any]) -> "CriterionResult":
    """Inverse of `dataclasses.asdict` / `jaxlab.report.to_jsonable` (None stays None)."""
    known = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in d.items() if k in known})

  def effect_text(self) -> str:
    """The measured effect +- SE as text, e.g. "+0.52 +- 0.08 bits/byte (n=3)"."""
    return format_effect(self)


def _finite(x: float | None) -> bool:
  return x is not None and math.isfinite(x)


def format_effect(r: CriterionResult | Mapping[str, Any]) -> str:
  """Formats a result's effect +- SE; ratios as the geometric-mean factor."""
  g = r.get if isinstance(r, Mapping) else lambda k, d=None: getattr(r, k, d)
  effect, se, n, n_missing = g("effect"), g("se"), g("n", 0), g("n_missing", 0)
  seeds = f"n={n}" + (f", {n_missing} missing" if n_missing else "")
  if not _finite(effect):
    return f"not measured ({seeds})"
  se_ok = _finite(se)
  if g("kind") == "ratio":
    # Log-ratio effects read best as a factor, with the SE as a multiplicative spread.
    spread = f" (SE ×/÷ {math.exp(se):.3g})" if se_ok else " (SE undefined)"
    return f"{math.exp(effect):.3g}x{spread} ({seeds})"
  unit = f" {g('unit')}" if g("unit") else ""
  spread = f" ± {se:.3g}" if se_ok else " (SE undefined)"
  return f"{effect:+.3g}{spread}{unit} ({seeds})"


def _as_1d(x: Any, what: str, name: str) -> np.ndarray:
  """Per-seed values as float64 with None -> NaN, or a ValueError naming the argument."""
  if x is None:
    return np.full((0,), np.nan)
  if np.ndim(x) == 0:
    x = [x]
  try:
    arr = np.asarray([np.nan if v is None else v for v in np.asarray(x, dtype=object).ravel()],
                     dtype=np.float64).reshape(np.shape(x))
  except (TypeError, ValueError) as e:
    raise ValueError(f"Criterion {name!r}: {what} must be numbers per seed, got {x!r}") from e
  if arr.ndim != 1:
    raise ValueError(f"Criterion {name!r}: {what} must be 1-D (one value per seed), "
                     f"got shape {arr.shape}")
  return arr


def _signed_per_seed(c: Criterion, m: np.ndarray, b: np.ndarray | None,
                     what: str) -> np.ndarray:
  """Per-seed paired effects on the judged scale, positive in the claimed direction."""
  if c.kind == "ratio":
    if (m <= 0).any() or (b is not None and (b <= 0).any()):
      raise ValueError(f"Criterion {c.name!r}: kind='ratio' needs positive values, got "
                       f"{what}={m.tolist()}" + ("" if b is None else f", {b.tolist()}"))
    per_seed = np.log(m) if b is None else np.log(m) - np.log(b)
  else:
    per_seed = m if b is None else m - b
  return c.sign * per_seed


def _mean_se(per_seed: np.ndarray) -> tuple[float, float]:
  n = per_seed.size
  mean = float(per_seed.mean()) if n else math.nan
  return mean, (float(per_seed.std(ddof=1) / math.sqrt(n)) if n >= 2 else math.nan)


def _clears(margin: float, se: float) -> bool:
  """Whether an effect clears its threshold by more than `NUM_SE` paired SEs."""
  return margin > NUM_SE * se


def judge(criterion: Criterion, method: npt.ArrayLike | None,
          baseline: npt.ArrayLike | None = None,
          reference: npt.ArrayLike | None = None) -> CriterionResult:
  """Judges one criterion on paired seeds.

  Args:
    criterion: the declared criterion.
    method: the method's metric per seed, shape [seeds]; or, when `baseline` is None,
      the per-seed paired comparison itself: method - baseline (`kind="difference"`) or
      method / baseline (`kind="ratio"`), unsigned (the direction is applied here).
      None: not measured.
    baseline: the baseline's metric per seed, shape [seeds], paired with `method` by
      position (seed i of one is seed i of the other).
    reference: the floor's trivial reference per seed (shape [seeds], paired the same
      way), for a criterion that declares a `floor` without a `floor_value`.

  Returns:
    The result: effect (signed mean paired difference or log-ratio), its paired SE,
    the number of seeds used and missing, the floor's outcome, and the verdict (see
    the module docstring).

  Raises:
    ValueError: shapes that do not pair, non-positive values for a ratio, a declared
      floor without a reference (or a reference without a floor or a baseline).

  Example::

    c = Criterion("gap", "method beats baseline by 0.5", "accuracy", "higher", threshold=0.5)
    judge(c, [0.9, 1.0, 1.1], [0.1, 0.2, 0.3]).verdict   # effect 0.8 +- 0: "held"
    f = Criterion("acc", "beats the ablation", "accuracy", "higher", floor="chance",
                  floor_value=0.5, floor_margin=0.05)
    judge(f, [0.52, 0.49, 0.51], [0.50, 0.48, 0.51]).verdict   # baseline at chance: "no signal"
  """
  c = criterion
  m = _as_1d(method, "method", c.name)
  b = None if baseline is None else _as_1d(baseline, "baseline", c.name)
  if b is not None and b.shape != m.shape:
    raise ValueError(f"Criterion {c.name!r}: method and baseline must pair seed by seed, "
                     f"got {m.shape[0]} and {b.shape[0]} values")
  # An arm that did not run (method None / no finite seed) is "not measured", floor or not.
  r = _reference(c, reference, b, m.shape) if np.isfinite(m).any() else None
  ok = np.isfinite(m) if b is None else np.isfinite(m) & np.isfinite(b)
  if r is not None:
    ok &= np.isfinite(r)
  n, n_missing = int(ok.sum()), int((~ok).sum())
  m_ok, b_ok = m[ok], (None if b is None else b[ok])
  effect, se = _mean_se(_signed_per_seed(c, m_ok, b_ok, "method"))

  signal = floor_effect = floor_se = None
  if r is not None and n:
    floor_sign = c.sign if c.floor_direction is None else (
        1.0 if c.floor_direction == "higher" else -1.0)
    floor_effect, floor_se = _mean_se(
        floor_sign * c.sign * _signed_per_seed(c, b_ok, r[ok], "baseline, reference"))
    if n >= 2:  # with one seed the floor is as undecided as the criterion
      signal = _clears(floor_effect - c.judged_floor_margin, floor_se)
  both_zero = bool(b_ok is not None and n and not m_ok.any() and not b_ok.any())

  margin = effect - c.judged_threshold
  if n == 0:
    verdict = "not measured"
  elif signal is False or both_zero:
    verdict = "no signal"
  elif n < 2:
    verdict = "inconclusive"
  elif _clears(margin, se):
    # A missing seed might be the one that failed: a success needs every seed.
    verdict = "held" if n_missing == 0 else "inconclusive"
  elif _clears(-margin, se):
    verdict = "did not hold"
  else:
    verdict = "inconclusive"
  paired = bool(n and b is not None)
  return CriterionResult(
      name=c.name, claim=c.claim, metric=c.metric, direction=c.direction, kind=c.kind,
      threshold=c.threshold, primary=c.primary, effect=effect, se=se, n=n,
      n_missing=n_missing, verdict=verdict, unit=c.unit,
      method_mean=float(m_ok.mean()) if paired else None,
      baseline_mean=float(b_ok.mean()) if paired else None,
      mechanism=c.mechanism, floor=c.floor, floor_margin=c.floor_margin,
      reference_mean=float(r[ok].mean()) if (r is not None and n) else None,
      floor_effect=floor_effect, floor_se=floor_se, signal=signal)


def _reference(c: Criterion, reference: npt.ArrayLike | None, baseline: np.ndarray | None,
               shape: tuple[int, ...]) -> np.ndarray | None:
  """The floor's reference per seed (the constant `floor_value` broadcast), or None."""
  if c.floor is None:
    if reference is not None:
      raise ValueError(f"Criterion {c.name!r}: a reference was passed but no floor declared")
    return None
  if baseline is None:
    raise ValueError(f"Criterion {c.name!r}: a floor judges the baseline arm, so method and "
                     f"baseline must be passed separately")
  if reference is None:
    if c.floor_value is None:
      raise ValueError(f"Criterion {c.name!r}: floor {c.floor!r} has no floor_value, so its "
                       f"reference must be measured per seed and passed")
    return np.full(shape, c.floor_value)
  r = _as_1d(reference, "reference", c.name)
  if r.shape != shape:
    raise ValueError(f"Criterion {c.name!r}: reference must pair seed by seed with the arms, "
                     f"got {r.shape[0]} values for {shape[0]} seeds")
  return r


def row_verdict(results: Sequence[CriterionResult]) -> str:
  """The row's verdict from its criteria's results (only primary ones decide).

  Args:
    results: judged criteria, as returned by `judge`.

  Returns:
    One of `VERDICTS`: `did not hold` if a primary criterion did not hold; `no signal`
    if every measured primary one is `no signal`; `held` if every primary one held
    and `partly held` if a strict majority held (none failed), each only when a
    primary mechanism criterion is among those that held (else `inconclusive`);
    `not measured` if no primary one was measured; `inconclusive` otherwise.

  Example::

    c = Criterion("gap", "method beats baseline", "accuracy", "higher", mechanism=True)
    clear, noisy = judge(c, [0.9, 1.0, 1.1], [0.1, 0.2, 0.3]), judge(c, [0.1, -0.1, 0.05])
    row_verdict([clear, noisy, clear])   # 2 of 3 held, none failed: "partly held"
  """
  primary = [r for r in results if r.primary]
  verdicts = [r.verdict for r in primary]
  measured = [v for v in verdicts if v != "not measured"]
  if not measured:
    return "not measured"
  if "did not hold" in measured:
    return "did not hold"
  if all(v == "no signal" for v in measured):
    return "no signal"
  held = verdicts.count("held")
  row = ("held" if held == len(verdicts) else
         "partly held" if 2 * held > len(verdicts) else "inconclusive")
  if row != "inconclusive" and not any(r.mechanism and r.verdict == "held" for r in primary):
    return "inconclusive"  # what held is not the paper's own component
  return row


def judge_all(criteria: Sequence[Criterion] | Any,
              measured: Mapping[str, Any]) -> tuple[str, list[CriterionResult]]:
  """Judges every declared criterion and the row: each experiment's one call.

  Args:
    criteria: `Criterion`s, or `config.criteria` as declared in the config (see
      `criteria_from_config`). At least one must be primary.
    measured: criterion name -> per-seed values: `(method, baseline)` or
      `(method, baseline, reference)` (sequences), `{"method": ..., "baseline": ...,
      "reference": ...}`, or one sequence of per-seed comparisons (method - baseline,
      or method / baseline for ratios). A criterion missing from `measured`, or mapped
      to None, is `not measured`.

  Returns:
    (row verdict, results in the order of `criteria`).

  Raises:
    ValueError: no primary criterion, or a key of `measured` that is not a criterion
      (a typo would otherwise leave a criterion silently unmeasured).

  Example::

    crits = [Criterion("acc", "beats EDL", "AUROC", "higher", mechanism=True)]
    row, results = judge_all(crits, {"acc": ([0.91, 0.92, 0.90], [0.80, 0.82, 0.81])})
  """
  if not (isinstance(criteria, Sequence) and all(isinstance(c, Criterion) for c in criteria)):
    criteria = criteria_from_config(criteria)
  if not any(c.primary for c in criteria):
    raise ValueError(f"At least one criterion must be primary; got {[c.name for c in criteria]}")
  names = {c.name for c in criteria}
  unknown = sorted(set(measured) - names)
  if unknown:
    raise ValueError(f"measured has values for undeclared criteria {unknown}; "
                     f"declared: {sorted(names)}")
  results = []
  for c in criteria:
    value = measured.get(c.name)
    if isinstance(value, Mapping):
      results.append(judge(c, value.get("method"), value.get("baseline"),
                           value.get("reference")))
    elif (isinstance(value, (tuple, list)) and len(value) in (2, 3)
          and all(v is not None and np.ndim(v) == 1 for v in value)):
      results.append(judge(c, *value))
    else:
      results.append(judge(c, value))
  return row_verdict(results), results


@dataclasses.dataclass(frozen=True)
class Interpretation:
  """The row's verdict at one documented reading of a "jaxlab interpretation" knob.

  Where the paper leaves a detail open and the choice decides the verdict, the
  report shows the row at each reading, so a reader sees whether the result rests
  on our reading.

  Attributes:
    knob: the config key, e.g. "kernelband.parent_rule".
    reading: the knob's value at this reading, as text.
    verdict: the row's verdict at this reading (one of `VERDICTS`).
    mechanism_effect: the primary mechanism criteria's effects at this reading, as text.
    default: whether this is the config's default reading (its verdict is the row's).
    source: where the reading comes from ("the paper, Sec. 3", "the authors' code",
      "jaxlab interpretation").
  """
  knob: str
  reading: str
  verdict: str
  mechanism_effect: str = ""
  default: bool = False
  source: str = ""

  def __post_init__(self):
    if self.verdict not in VERDICTS:
      raise ValueError(f"Interpretation {self.knob}={self.reading}: verdict must be one of "
                       f"{VERDICTS}, got {self.verdict!r}")


def interpretation(knob: str, reading: Any, criteria: Sequence[Criterion] | Any,
                   measured: Mapping[str, Any], *, default: bool = False,
                   source: str = "") -> Interpretation:
  """Judges `measured` (taken at one reading of `knob`) into an `Interpretation`.

  Args:
    knob: the config key whose reading changed.
    reading: its value at this reading.
    criteria, measured: as for `judge_all`, measured at this reading.
    default: whether this is the config's default reading.
    source: where the reading comes from.

  Returns:
    The row's verdict at this reading and its primary mechanism criteria's effects.

  Example::

    crits = [Criterion("acc", "beats the ablation", "accuracy", "higher", mechanism=True)]
    i = interpretation("head.rule", "paper", crits, {"acc": ([0.9, 0.8, 0.85], [0.5, 0.5, 0.5])},
                       default=True, source="the paper")
    i.verdict   # "held"
  """
  row, results = judge_all(criteria, measured)
  effects = "; ".join(f"{r.name} {format_effect(r)}" for r in results
                      if r.primary and r.mechanism)
  return Interpretation(knob=knob, reading=str(reading), verdict=row,
                        mechanism_effect=effects, default=default, source=source)
