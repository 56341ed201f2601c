"""Span construction from character offsets and the span-local (sparse) coupling.

Two tokenizations of the same text (teacher tokens i with character intervals
[start_i, end_i), student tokens j likewise) agree on some token boundaries:
the synchronisation points A = {0, len} u (ends_T n ends_S). Consecutive
points of A delimit spans; span k owns the teacher tokens I_k and the student
tokens J_k lying inside it. A teacher and a student token can only be coupled
inside their span, so the coupling is block-diagonal and local.

The deterministic coupling (jaxlab interpretation of E-SCOT, whose exact
formulation is unpublished) puts pi_ij proportional to the number of shared
characters, size(chars(i) n chars(j)), inside each span, with mass 1/K per span
(K spans). The characters of two interval partitions overlap in a staircase,
so at most n + m - 1 pairs (i, j) have pi_ij > 0: the coupling is stored as a
list of pairs and costs O(n + m), where a dense coupling costs O(n m).

Everything here is NumPy data preparation (it runs once per tokenised text);
the losses in `jaxlab.distill.losses` consume the padded pair arrays under jit.
"""

import dataclasses

import numpy as np
from jaxtyping import Float, Int


def _check_partition(offsets: np.ndarray, name: str, text_len: int | None) -> np.ndarray:
  offsets = np.asarray(offsets)
  if offsets.ndim != 2 or offsets.shape[1] != 2 or offsets.shape[0] < 1:
    raise ValueError(f"{name} must have shape [n >= 1, 2] (start, end), got {offsets.shape}")
  starts, ends = offsets[:, 0], offsets[:, 1]
  if starts[0] != 0 or np.any(starts[1:] != ends[:-1]) or np.any(ends <= starts):
    raise ValueError(f"{name} must partition the text: start at 0, each token non-empty and "
                     "starting where the previous one ends")
  if text_len is not None and ends[-1] != text_len:
    raise ValueError(f"{name} ends at {ends[-1]} but the text has {text_len} characters")
  return offsets.astype(np.int64)


@dataclasses.dataclass(frozen=True)
class Spans:
  """Span assignment of two tokenizations of one text.

  Attributes:
    teacher: [n] span id of each teacher token.
    student: [m] span id of each student token.
    bounds: [K + 1] character offsets of the synchronisation points (0 ... len).
  """
  teacher: np.ndarray
  student: np.ndarray
  bounds: np.ndarray

  @property
  def num_spans(self) -> int:
    return len(self.bounds) - 1


def spans_from_offsets(teacher_offsets: Int[np.ndarray, "n 2"],
                       student_offsets: Int[np.ndarray, "m 2"]) -> Spans:
  """Spans of two tokenizations of the same text, from their character offsets.

  Two pointers walk the two (sorted) lists of token ends once: O(n + m).

  Args:
    teacher_offsets: [n, 2] (start, end) character offsets; tokens must
      partition the text [0, len) in order.
    student_offsets: [m, 2] likewise, for the same text.

  Returns:
    A `Spans`: the span id of every token and the span boundaries.

  Raises:
    ValueError: an offset list is not a partition, or the two cover different lengths.

  Example:
    >>> import numpy as np
    >>> s = spans_from_offsets(np.array([[0, 3], [3, 5]]), np.array([[0, 1], [1, 3], [3, 5]]))
    >>> s.teacher.tolist(), s.student.tolist(), s.bounds.tolist()
    ([0, 1], [0, 0, 1], [0, 3, 5])
  """
  t = _check_partition(teacher_offsets, "teacher_offsets", None)
  s = _check_partition(student_offsets, "student_offsets", int(t[-1, 1]))
  t_end, s_end = t[:, 1].tolist(), s[:, 1].tolist()
  n, m = len(t_end), len(s_end)
  span_t, span_s = np.empty(n, np.int32), np.empty(m, np.int32)
  bounds = [0]
  i = j = k = 0
  while i < n and j < m:  # ends are strictly increasing on both sides
    if t_end[i] == s_end[j]:
      span_t[i] = span_s[j] = k
      bounds.append(t_end[i])
      i, j, k = i + 1, j + 1, k + 1
    elif t_end[i] < s_end[j]:
      span_t[i] = k
      i += 1
    else:
      span_s[j] = k
      j += 1
  return Spans(teacher=span_t, student=span_s, bounds=np.asarray(bounds, np.int64))


@dataclasses.dataclass(frozen=True)
class Coupling:
  """The deterministic in-span coupling as a list of pairs (sparse).

  Attributes:
    teacher: [P] teacher token index of each pair.
    student: [P] student token index of each pair.
    span: [P] span id of each pair.
    mass: [P] pi_ij (sums to 1 over all pairs; 1/K within each span).
  """
  teacher: np.ndarray
  student: np.ndarray
  span: np.ndarray
  mass: np.ndarray


def overlap_coupling(teacher_offsets: Int[np.ndarray, "n 2"],
                     student_offsets: Int[np.ndarray, "m 2"], spans: Spans | None = None,
                     *, mode: str = "overlap") -> Coupling:
  """pi_ij inside each span, as a list of the (at most n + m - 1) non-zero pairs.

  Args:
    teacher_offsets: [n, 2] teacher token offsets (a partition of the text).
    student_offsets: [m, 2] student token offsets (a partition of the same text).
    spans: their `spans_from_offsets` (computed when None).
    mode: jaxlab interpretation of the in-span coupling: "overlap" (pi_ij
      proportional to shared characters, the spec's default) or "start" (the
      span's whole mass on its first teacher and first student token, the one
      pair conditioned on exactly the same prefix).

  Returns:
    A `Coupling`. Marginals: for "overlap", teacher token i gets
    len(i) / (len(span) K) and student token j gets len(j) / (len(span) K).

  Example:
    >>> import numpy as np
    >>> c = overlap_coupling(np.array([[0, 3]]), np.array([[0, 1], [1, 3]]))
    >>> c.teacher.tolist(), c.student.tolist(), np.round(c.mass, 3).tolist()
    ([0, 0], [0, 1], [0.333, 0.667])
  """
  if mode not in ("overlap", "start"):
    raise ValueError(f"mode must be 'overlap' or 'start', got {mode!r}")
  t = _check_partition(teacher_offsets, "teacher_offsets", None)
  s = _check_partition(student_offsets, "student_offsets", int(t[-1, 1]))
  spans = spans or spans_from_offsets(t, s)
  num_spans = spans.num_spans
  span_len = np.diff(spans.bounds)
  if mode == "start":
    first_t = np.searchsorted(spans.teacher, np.arange(num_spans))
    first_s = np.searchsorted(spans.student, np.arange(num_spans))
    span = np.arange(num_spans, dtype=np.int32)
    return Coupling(first_t.astype(np.int32), first_s.astype(np.int32), span,
                    np.full(num_spans, 1.0 / num_spans))
  # Merge the two sorted end lists: every elementary interval between consecutive
  # boundaries of either side lies in exactly one teacher and one student token.
  cuts = np.union1d(t[:, 1], s[:, 1])
  lefts = np.concatenate([[0], cuts[:-1]])
  ti = np.searchsorted(t[:, 1], cuts, side="left")  # token whose end is the first >= cut
  sj = np.searchsorted(s[:, 1], cuts, side="left")
  # Consecutive elementary intervals with the same (i, j) pair merge into one pair.
  new = np.ones(len(cuts), bool)
  new[1:] = (ti[1:] != ti[:-1]) | (sj[1:] != sj[:-1])
  group = np.cumsum(new) - 1
  chars = np.bincount(group, weights=cuts - lefts)
  pi, pj = ti[new], sj[new]
  span = spans.teacher[pi]
  mass = chars / (span_len[span] * num_spans)
  return Coupling(pi.astype(np.int32), pj.astype(np.int32), span.astype(np.int32), mass)


def dense_coupling(coupling: Coupling, n: int, m: int) -> Float[np.ndarray, "n m"]:
  """The [n, m] matrix of a sparse `Coupling` (for tests and plots)."""
  out = np.zeros((n, m))
  np.add.at(out, (coupling.teacher, coupling.student), coupling.mass)
  return out


def coupling_marginals(coupling: Coupling, n: int, m: int
                       ) -> tuple[Float[np.ndarray, " n"], Float[np.ndarray, " m"]]:
  """The teacher and student marginals of a sparse `Coupling`, in O(n + m + P).

  They are what a dense coupling must transport to differ from the span coupling
  only in its support (E-SCOT's span-constraint ablation).

  Args:
    coupling: a sparse coupling of n teacher and m student tokens.
    n: number of teacher tokens (rows past the coupled ones get 0).
    m: number of student tokens.

  Returns:
    ([n] mass per teacher token, [m] mass per student token); each sums to the
    coupling's total mass (1 for `overlap_coupling`).

  Example:
    >>> import numpy as np
    >>> c = overlap_coupling(np.array([[0, 3]]), np.array([[0, 1], [1, 3]]))
    >>> [np.round(x, 3).tolist() for x in coupling_marginals(c, 1, 2)]
    [[1.0], [0.333, 0.667]]
  """
  if n <= int(np.max(coupling.teacher, initial=-1)) or m <= int(
      np.max(coupling.student, initial=-1)):
    raise ValueError(f"n={n} and m={m} must exceed every coupled teacher / student index")
  return (np.bincount(coupling.teacher, weights=coupling.mass, minlength=n),
          np.bincount(coupling.student, weights=coupling.mass, minlength=m))
