"""Writes `results.json` per experiment and renders them into REPORT.md."""

import dataclasses
import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxlab.report import verdict as _verdict

# Row verdicts; the rules that produce them live in `jaxlab.report.verdict`.
VERDICTS = _verdict.VERDICTS


@dataclasses.dataclass(frozen=True)
class ReportRow:
  """One method's line in REPORT.md.

  Attributes:
    method: the method's name, e.g. "Tiny LM (reference)".
    paper_claim: the paper's claim being reproduced (quoted or closely paraphrased; not measured).
    baseline: the baseline's measured figure, with units.
    ours: our measured figure, with units.
    verdict: one of `VERDICTS`. With `criteria`, it must be their row verdict
      (`jaxlab.report.verdict.judge_all` returns both), so no experiment can
      overrule its own criteria.
    details: free text (settings, caveats, interpretations).
    plots: PNG paths relative to the experiment's workdir.
    criteria: the judged criteria (`verdict.CriterionResult`, or their dicts as read
      back from results.json), each shown in the report with its effect +- SE and
      its own verdict.
    facts: properties true by construction (`verdict.Fact` or dicts), reported and
      never judged.
    interpretations: the row's verdict at each documented reading of a "jaxlab
      interpretation" knob that decides it (`verdict.Interpretation` or dicts); a
      default reading's verdict must be the row's.
  """
  method: str
  paper_claim: str
  baseline: str
  ours: str
  verdict: str
  details: str = ""
  plots: Sequence[str] = ()
  criteria: Sequence[_verdict.CriterionResult | Mapping[str, Any]] = ()
  facts: Sequence[_verdict.Fact | Mapping[str, Any]] = ()
  interpretations: Sequence[_verdict.Interpretation | Mapping[str, Any]] = ()

  def __post_init__(self):
    if self.verdict not in VERDICTS:
      raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
    criteria = tuple(c if isinstance(c, _verdict.CriterionResult)
                     else _verdict.CriterionResult.from_dict(c) for c in self.criteria)
    facts = tuple(f if isinstance(f, _verdict.Fact) else _verdict.Fact(**f) for f in self.facts)
    readings = tuple(i if isinstance(i, _verdict.Interpretation)
                     else _verdict.Interpretation(**i) for i in self.interpretations)
    object.__setattr__(self, "criteria", criteria)
    object.__setattr__(self, "facts", facts)
    object.__setattr__(self, "interpretations", readings)
    object.__setattr__(self, "plots", tuple(self.plots))
    if criteria and self.verdict != (expected := _verdict.row_verdict(criteria)):
      raise ValueError(f"verdict {self.verdict!r} contradicts the criteria, whose row verdict "
                       f"is {expected!r}; pass the verdict `verdict.judge_all` returns")
    for i in readings:
      if i.default and i.verdict != self.verdict:
        raise ValueError(f"the default reading {i.knob}={i.reading} gives {i.verdict!r}, "
                         f"but the row says {self.verdict!r}")


def to_jsonable(x: Any) -> Any:
  """Converts numpy/jax scalars and arrays to plain Python; NaN becomes None."""
  if dataclasses.is_dataclass(x) and not isinstance(x, type):
    return to_jsonable(dataclasses.asdict(x))
  if isinstance(x, dict):
    return {str(k): to_jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [to_jsonable(v) for v in x]
  if hasattr(x, "tolist"):  # numpy / jax arrays and scalars
    return to_jsonable(x.tolist())
  if isinstance(x, float) and not math.isfinite(x):
    return None
  return x


def seed_summary(values: Any, *, skip_missing: bool = False) -> dict[str, Any]:
  """`dict(mean, std, per_seed)` of one metric over paired seeds (std with ddof = 0).

  By default a non-finite seed makes mean and std non-finite (None once written by
  `write_results`). With `skip_missing`, None / non-finite seeds are reported as None and
  left out of mean and std (None when no seed is left).

  >>> seed_summary([1.0, 3.0])
  {'mean': 2.0, 'std': 1.0, 'per_seed': [1.0, 3.0]}
  >>> seed_summary([1.0, None], skip_missing=True)["mean"]
  1.0
  """
  if not skip_missing:
    v = np.asarray(values, np.float64)
    return dict(mean=float(np.mean(v)), std=float(np.std(v)), per_seed=v.tolist())
  v = np.asarray([np.nan if x is None else x for x in values], np.float64)
  ok = v[np.isfinite(v)]
  return dict(mean=float(ok.mean()) if ok.size else None,
              std=float(ok.std()) if ok.size else None,
              per_seed=[float(x) if np.isfinite(x) else None for x in v])


def _writes_files() -> bool:
  """False on processes other than 0 of a multi-process JAX run (process 0 writes for all).

  A multi-process run has imported jax (its runtime is what makes it one), so
  this module need not import it.
  """
  jax = sys.modules.get("jax")
  return jax is None or jax.process_index() == 0


def write_results(workdir: str, results: dict[str, Any]) -> str:
  """Writes `workdir/results.json` atomically (process 0 only) and returns its path."""
  path = os.path.join(workdir, "results.json")
  if not _writes_files():
    return path
  os.makedirs(workdir, exist_ok=True)
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(to_jsonable(results), f, indent=2, sort_keys=True)
  os.replace(tmp, path)
  return path


def read_results(workdir: str) -> dict[str, Any]:
  with open(os.path.join(workdir, "results.json")) as f:
    return json.load(f)


def save_plot(workdir: str, name: str, draw: Callable[[Any], None]) -> str:
  """Draws with `draw(ax)` on a fresh figure, saves `workdir/name` (process 0 only), returns `name`."""
  if not _writes_files():
    return name
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=110)
  try:
    draw(ax)
    fig.tight_layout()
    fig.savefig(os.path.join(workdir, name))
  finally:
    plt.close(fig)
  return name


def _cell(text: Any) -> str:
  return str(text).replace("|", "\\|").replace("\n", " ")


# Said once above the table: what is quoted, what is measured, and how verdicts are reached.
LEGEND = (
    "The *paper claim* column and each criterion's *claim* are the paper's statements (quoted or "
    "closely paraphrased), not measurements. *Baseline*, *ours*, each criterion's means, "
    "effect ± SE and seed count are measured in this run. Each criterion was declared in the "
    "experiment's config before the run and is judged on paired seeds: the effect is the mean "
    "paired difference (or geometric-mean ratio) in the claimed direction; it *held* when it "
    "clears the threshold by more than 2 paired standard errors, *did not hold* when it misses "
    "it by more than that, and is *inconclusive* in between, with fewer than 2 seeds, or (instead "
    "of held) when a seed's value is missing. A criterion with a *floor* names a trivial "
    "reference (chance, a mean predictor, unigram): unless its baseline beats that reference by "
    "the declared margin (by more than 2 SE), or when both arms are exactly 0, it says *no "
    "signal*, never held nor failed. A *mechanism* criterion compares the method with the same "
    "pipeline without the paper's distinctive component, at equal budget. A row *held* when "
    "every primary criterion held, *did not hold* when one failed, *partly held* when a "
    "majority held and none failed, *no signal* when every measured primary criterion has no "
    "signal, and is *inconclusive* otherwise; it is never held or partly held unless a primary "
    "mechanism criterion held. Where a jaxlab interpretation of an open detail decides a row, "
    "the row's verdict at each documented reading is listed under it. Facts are true by "
    "construction and are reported, not judged.")


def _fmt(x: Any) -> str:
  if isinstance(x, float):
    return f"{x:.4g}"
  return "n/a" if x is None else str(x)


def _threshold_text(c: Mapping[str, Any]) -> str:
  t = c.get("threshold")
  if c.get("kind") == "ratio":
    return f"> {1.0 if t is None else t:g}x"
  unit = f" {c['unit']}" if c.get("unit") else ""
  return f"> {0.0 if t is None else t:+g}{unit}"


def _floor_text(c: Mapping[str, Any]) -> str:
  """The floor column: the reference, the baseline's lead over it, and whether it counts."""
  if not c.get("floor"):
    return ""
  if c.get("reference_mean") is None:  # not measured: nothing to compare with yet
    return str(c["floor"])
  lead = _verdict.format_effect(dict(c, effect=c.get("floor_effect"), se=c.get("floor_se")))
  margin = _threshold_text(dict(c, threshold=c.get("floor_margin")))
  status = {True: "signal", False: "no signal"}.get(c.get("signal"), "undecided")
  return (f"{c['floor']} = {_fmt(c.get('reference_mean'))}; baseline lead {lead}, "
          f"needs {margin}: {status}")


def _criteria_lines(report: Mapping[str, Any]) -> list[str]:
  """The per-criterion table, the interpretation lines and the facts of one row."""
  lines = []
  criteria = report.get("criteria") or []
  if criteria:
    lines += ["| criterion | claim (paper) | metric | better | ours / baseline (mean) | "
              "effect ± SE (measured, + = claimed direction) | needs effect | floor | verdict |",
              "|---|---|---|---|---|---|---|---|---|"]
    for c in criteria:
      tags = [t for t, on in (("mechanism", c.get("mechanism")),
                              ("secondary", not c.get("primary", True))) if on]
      name = c.get("name", "") + (f" ({', '.join(tags)})" if tags else "")
      means = (f"{_fmt(c.get('method_mean'))} / {_fmt(c.get('baseline_mean'))}"
               if c.get("baseline_mean") is not None else "")
      lines.append("| " + " | ".join(_cell(x) for x in (
          name, c.get("claim", ""), c.get("metric", ""), c.get("direction", ""),
          means, _verdict.format_effect(c), _threshold_text(c), _floor_text(c),
          c.get("verdict", ""))) + " |")
    lines.append("")
  lines += _interpretation_lines(report.get("interpretations") or [])
  for f in report.get("facts") or []:
    unit = f" {f['unit']}" if f.get("unit") else ""
    lines.append(f"- fact (by construction, not judged): {f.get('statement', f.get('name', ''))}"
                 f": {_fmt(f.get('value'))}{unit}")
  if report.get("facts"):
    lines.append("")
  return lines


def _interpretation_lines(readings: Sequence[Mapping[str, Any]]) -> list[str]:
  """One line per knob: the row's verdict at each of its documented readings."""
  knobs: dict[str, list[str]] = {}
  for i in readings:
    tags = ", ".join(t for t in ("default" if i.get("default") else "", i.get("source", "")) if t)
    effect = f" ({i['mechanism_effect']})" if i.get("mechanism_effect") else ""
    knobs.setdefault(i["knob"], []).append(
        f"`{i['reading']}`" + (f" [{tags}]" if tags else "") + f" → {i['verdict']}{effect}")
  lines = [f"- interpretation `{knob}`: " + "; ".join(parts) for knob, parts in knobs.items()]
  return lines + [""] if lines else []


def render_report(entries: Sequence[tuple[str, str, dict[str, Any]]], path: str,
                  *, title: str = "jaxlab reproduction report", preamble: str = "") -> str:
  """Renders REPORT.md from `(name, workdir, results)` entries; returns `path`.

  The summary table has one row per experiment; each experiment's section lists its
  criteria (claim, measured means, effect +- SE, threshold, own verdict), its facts,
  details and plots. `LEGEND` (what is quoted, what is measured, the verdict rules)
  follows the preamble. Plot links are written relative to the report's folder.

  Args:
    entries: `(name, workdir, results)`, where `results["report"]` is a `ReportRow`
      as a dict (`to_jsonable(row)`).
    path: where to write the markdown.
    title: the first heading.
    preamble: a paragraph before the legend (the preset, the command).

  Returns:
    `path`.

  Example::

    row = ReportRow("m", "claim", "1.0", "2.0", "held")
    render_report([("exp", "runs/exp", {"report": to_jsonable(row)})], "runs/REPORT.md")
  """
  root = os.path.dirname(os.path.abspath(path))
  lines = [f"# {title}", ""]
  if preamble:
    lines += [preamble, ""]
  lines += [LEGEND, ""]
  lines += ["| experiment | method | paper claim | baseline | ours | verdict |",
            "|---|---|---|---|---|---|"]
  for name, _, results in entries:
    r = results.get("report", {})
    lines.append("| " + " | ".join(_cell(x) for x in (
        name, r.get("method", ""), r.get("paper_claim", ""), r.get("baseline", ""),
        r.get("ours", ""), r.get("verdict", "not measured"))) + " |")
  for name, workdir, results in entries:
    r = results.get("report", {})
    lines += ["", f"## {name}: {r.get('method', '')}", ""]
    lines += _criteria_lines(r)
    if r.get("details"):
      lines += [r["details"], ""]
    for plot in r.get("plots", []):
      rel = os.path.relpath(os.path.join(workdir, plot), root)
      lines += [f"![{name} {plot}]({rel})", ""]
  with open(path, "w") as f:
    f.write("\n".join(lines).rstrip() + "\n")
  return path
