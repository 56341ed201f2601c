"""Writes `results.json` per experiment and renders them into REPORT.md."""

import dataclasses
import json
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

VERDICTS = ("held", "partly held", "did not hold", "not measured")


@dataclasses.dataclass(frozen=True)
class ReportRow:
  """One method's line in REPORT.md.

  Attributes:
    method: the method's name, e.g. "Tiny LM (reference)".
    paper_claim: the claim being reproduced, in our words.
    baseline: the baseline's measured figure, with units.
    ours: our measured figure, with units.
    verdict: one of `VERDICTS`; decided by the experiment from its numbers.
    details: free text (settings, caveats, interpretations).
    plots: PNG paths relative to the experiment's workdir.
  """
  method: str
  paper_claim: str
  baseline: str
  ours: str
  verdict: str
  details: str = ""
  plots: tuple[str, ...] = ()

  def __post_init__(self):
    if self.verdict not in VERDICTS:
      raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")


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


def write_results(workdir: str, results: dict[str, Any]) -> str:
  """Writes `workdir/results.json` atomically and returns its path."""
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, "results.json")
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(to_jsonable(results), f, indent=2, sort_keys=True)
  os.replace(tmp, path)
  return path


def read_results(workdir: str) -> dict[str, Any]:
  with open(os.path.join(workdir, "results.json")) as f:
    return json.load(f)


def save_plot(workdir: str, name: str, draw: Callable[[Any], None]) -> str:
  """Draws with `draw(ax)` on a fresh figure, saves `workdir/name`, returns `name`."""
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


def _cell(text: str) -> str:
  return str(text).replace("|", "\\|").replace("\n", " ")


def render_report(entries: Sequence[tuple[str, str, dict[str, Any]]], path: str,
                  *, title: str = "jaxlab reproduction report", preamble: str = "") -> str:
  """Renders REPORT.md from `(name, workdir, results)` entries; returns `path`.

  Plot links are written relative to the report's folder.
  """
  root = os.path.dirname(os.path.abspath(path))
  lines = [f"# {title}", ""]
  if preamble:
    lines += [preamble, ""]
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
    if r.get("details"):
      lines += [r["details"], ""]
    for plot in r.get("plots", []):
      rel = os.path.relpath(os.path.join(workdir, plot), root)
      lines += [f"![{name} {plot}]({rel})", ""]
  with open(path, "w") as f:
    f.write("\n".join(lines).rstrip() + "\n")
  return path
