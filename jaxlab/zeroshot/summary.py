"""The zero-shot expansion study's report text: per-arm descriptions and the details line.

Tables are world -> arm -> metric -> `jaxlab.report.seed_summary` of fractions, shown in %.

Example:
  >>> from jaxlab.zeroshot import summary
  >>> cell = {m: {"mean": 0.5, "std": 0.01, "per_seed": [0.49, 0.51]}
  ...         for m in ("u", "s", "H", "within")}
  >>> summary.describe({"synthetic": {"shared": cell}}, "shared", ["synthetic"])
  'synthetic: u 50.0 ± 1.0, s 50.0 ± 1.0, H 50.0 ± 1.0, within-group unseen 50.0 ± 1.0 %'
"""

from collections.abc import Sequence
from typing import Any

from jaxlab.study import mean_std


def _pm(s: dict) -> str:
  return mean_std(s, digits=1, scale=100)


def _counts(cell: dict) -> str:
  return ",".join(str(int(k)) for k in cell["num_groups_found"]["per_seed"])


def describe(table: dict, arm: str, worlds: Sequence[str], groups: bool = False) -> str:
  """One arm across worlds: unseen / seen accuracy, H, within-group unseen accuracy.

  Args:
    table: world -> arm -> metric -> `seed_summary`.
    arm: the arm described.
    worlds: the worlds, in order (those without the arm are skipped).
    groups: also the groups found per seed and the world's true count (the full arm).

  Returns:
    "world: u ..., s ..., H ..., within-group unseen ... %[, groups found ...]; ...".

  Example:
    >>> c = {m: {"mean": 0.2, "std": 0.0, "per_seed": [0.2]} for m in ("u", "s", "H", "within")}
    >>> c["num_groups_found"] = c["num_groups_true"] = {"per_seed": [8]}
    >>> describe({"w": {"full": c}}, "full", ["w"], groups=True).split(", groups")[1]
    ' found 8 (true 8)'
  """
  return "; ".join(
      f"{w}: u {_pm(table[w][arm]['u'])}, s {_pm(table[w][arm]['s'])}, "
      f"H {_pm(table[w][arm]['H'])}, within-group unseen {_pm(table[w][arm]['within'])} %"
      + (f", groups found {_counts(table[w][arm])} (true "
         f"{int(table[w][arm]['num_groups_true']['per_seed'][0])})" if groups else "")
      for w in worlds if arm in table[w])


def details(method: Any, table: dict, at_reading: dict, arms: Sequence[str],
            worlds: Sequence[str]) -> str:
  """The row's details: every world x arm, the group counts per rule, the reconstruction.

  Args:
    method: the experiment's `config.method` section.
    table: world -> arm -> metric -> `seed_summary`.
    at_reading: world -> group-count rule -> the full arm's summaries at that rule.
    arms: the arms run.
    worlds: the worlds run.

  Returns:
    One paragraph.

  Example:
    >>> import ml_collections
    >>> m = ml_collections.ConfigDict(dict(routing="hard", num_groups=0, group_rule="eigengap",
    ...     max_groups=12, group_norm=True, lam_inv=1.0, margin=0.5, lam_margin=1.0))
    >>> c = {k: {"mean": 0.5, "std": 0.0, "per_seed": [0.5]} for k in ("u", "s", "H", "T",
    ...      "within", "between", "weight_spread", "H_template_std")}
    >>> details(m, {"w": {"shared": c}}, {}, ["shared"], ["w"]).split(":")[0]
    'World x arm, mean ± std over 1 paired seeds, in % (u / s / H / T / within-group unseen / between-group unseen; template sensitivity = spread of the unseen weights across sources, 1 - cos x 100, and std of H across sources)'
  """
  num_seeds = len(next(iter(table[worlds[0]].values()))["u"]["per_seed"])
  lines = [f"World x arm, mean ± std over {num_seeds} paired seeds, in % (u / s / H / T / "
           "within-group unseen / between-group unseen; template sensitivity = spread of the "
           "unseen weights across sources, 1 - cos x 100, and std of H across sources):"]
  for w in worlds:
    for a in arms:
      c = table[w][a]
      lines.append(f"{w}/{a}: " + " / ".join(_pm(c[m]) for m in ("u", "s", "H", "T", "within",
                                                                    "between"))
                   + f"; template spread {_pm(c['weight_spread'])}, H std across templates "
                   f"{_pm(c['H_template_std'])}.")
  for w, by_rule in at_reading.items():
    lines.append(f"{w}: groups found per seed by rule: " + "; ".join(
        f"{rule} {_counts(cell)} (H {_pm(cell['H'])}, within {_pm(cell['within'])} %)"
        for rule, cell in by_rule.items()) + ".")
  m = method
  lines.append(
      "GA-ZSCE is a jaxlab reconstruction from the abstract (no paper text or code): k-means "
      f"groups ({m.routing} routing), their number "
      + (f"fixed at {m.num_groups} (an override)" if m.num_groups > 0 else
         f"chosen by {m.group_rule} in [2, {m.max_groups}] from the class semantics")
      + f", with residual weight heads, per-group loss normalisation={m.group_norm}, L_inv "
      f"weight {m.lam_inv}, intra-group margin kappa={m.margin} weight {m.lam_margin}; "
      "ICIS = dual autoencoder with four cosine terms. Unseen weights are rescaled to the seen "
      "weights' mean norm. Within-group accuracy = argmax among the true group's classes.")
  return " ".join(lines)
