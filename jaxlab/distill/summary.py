"""The students x methods table of a distillation run, as text and as a bar chart.

`table` is student -> method -> `jaxlab.report.seed_summary` of held-out bits/byte (a
method a student did not run is absent); `overlaps` is student ->
`jaxlab.distill.tokenize.vocab_overlap` with the teacher's vocabulary.

Example:
  >>> table = {"char": {"sft": dict(mean=2.5, std=0.01), "escot": dict(mean=2.4, std=0.02)}}
  >>> overlaps = {"char": dict(jaccard=0.05, of_student=0.6)}
  >>> student_lines(table, overlaps, {"char": 4.4}, ["sft", "escot"])
  ['char (5% / 60%; unigram 4.400): sft 2.500 ± 0.010; escot 2.400 ± 0.020.']
"""

from collections.abc import Sequence

import numpy as np

from jaxlab.study import mean_std


def student_lines(table: dict, overlaps: dict, unigram: dict, methods: Sequence[str]
                  ) -> list[str]:
  """One line per student: its vocabulary overlap, unigram bits/byte and every method's.

  Args:
    table, overlaps: as the module docstring.
    unigram: student -> unigram bits/byte (the floors' reference).
    methods: the methods, in the order shown.

  Returns:
    "name (Jaccard % / of-student %; unigram u): method mean ± std; ...." per student.

  Example:
    >>> student_lines({"s": {"sft": dict(mean=1.0, std=0.0)}},
    ...               {"s": dict(jaccard=1.0, of_student=1.0)}, {"s": 2.0}, ["sft", "uld"])
    ['s (100% / 100%; unigram 2.000): sft 1.000 ± 0.000.']
  """
  lines = []
  for s, row in table.items():
    o = overlaps[s]
    cells = "; ".join(f"{m} {mean_std(row[m])}" for m in methods if m in row)
    lines.append(f"{s} ({100 * o['jaccard']:.0f}% / {100 * o['of_student']:.0f}%; unigram "
                 f"{unigram[s]:.3f}): {cells}.")
  return lines


def draw_students(ax, table: dict, overlaps: dict, methods: Sequence[str]) -> None:
  """Bars of held-out bits/byte (± std over seeds) per student and method.

  Example:
    >>> import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
    >>> draw_students(plt.figure().gca(), {"s": {"sft": dict(mean=1.0, std=0.1)}},
    ...               {"s": dict(jaccard=0.5)}, ["sft"])
  """
  students = list(table)
  width = 0.8 / len(methods)
  x = np.arange(len(students))
  for i, m in enumerate(methods):
    ran = [k for k, s in enumerate(students) if m in table[s]]  # ablations: some students
    ax.bar(x[ran] + i * width, [table[students[k]][m]["mean"] for k in ran], width,
           yerr=[table[students[k]][m]["std"] for k in ran], label=m)
  ax.set_xticks(x + 0.4 - width / 2,
                [f"{s}\n{100 * overlaps[s]['jaccard']:.0f}%" for s in students], fontsize=7)
  lo = min(cell["mean"] for s in students for cell in table[s].values())
  ax.set_ylim(lo * 0.95, None)
  ax.set_ylabel("held-out bits/byte (lower is better)")
  ax.set_title("Students x method (vocab overlap = Jaccard)")
  ax.legend(fontsize=7)


def marker_line(markers: Sequence[str]) -> str:
  """Why a "marker" student (the teacher's BPE with another word marker) is no low-overlap one.

  Example:
    >>> marker_line(["marker"])[:32]
    'The marker student keeps the tea'
  """
  return (f"The {', '.join(markers)} student keeps the teacher's token boundaries (only the "
          "word-boundary marker differs), so every span is one teacher and one student token: "
          "its E-SCOT, SFT and ULD arms are the teacher-tokenizer student's by construction, "
          "and MinED's string mapping is broken by construction; it is not a low-overlap "
          "student.")


def interpretation_line(distill) -> str:
  """The jaxlab interpretations of E-SCOT's unpublished formula, with the `distill` values.

  Example:
    >>> import types
    >>> d = types.SimpleNamespace(coupling="overlap", char_weight=1.0, rank_weight=1.0,
    ...                           top_k=4, alpha=2.0, tau=1.0, entropy_on="char")
    >>> interpretation_line(d)[:60]
    "jaxlab interpretation (E-SCOT's formula is unpublished): spa"
  """
  d = distill
  return ("jaxlab interpretation (E-SCOT's formula is unpublished): spans from shared token "
          f"ends; coupling '{d.coupling}' (pi ~ shared characters, 1/K per span); cost = "
          f"{d.char_weight} KL(next-char) + {d.rank_weight} sorted top-{d.top_k} L1; weights K "
          f"softmax(|Delta H_{d.alpha}| / {d.tau}) on {d.entropy_on} distributions; ULD pairs "
          "positions by index; MinED maps teacher top-k tokens to min-edit-distance student "
          "tokens and pairs tokens by character offsets.")
