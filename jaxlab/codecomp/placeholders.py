"""Placeholders: threshold placement, span collapsing, snippet rendering, targets from edit logs.

Completions are byte-token sequences in which the reserved token `PLACEHOLDER`
(`<PH>`, byte 0) marks a span the user fills. Contiguous placeholders collapse
into one span; a completion renders to an editor snippet with tab stops
`${1}`, `${2}`, ... (jaxlab interpretation: the paper's placeholder syntax was
not visible; `<PH>` and the snippet syntax are our choices).

Example:
  >>> toks = encode("x = ") + [PLACEHOLDER, PLACEHOLDER] + encode("(1)")
  >>> render_snippet(toks)
  'x = ${1}(1)'
  >>> parse_snippet('x = ${1}(1)') == collapse(toks)
  True
"""

import difflib
import re

import jax.numpy as jnp
import numpy as np
from jax import Array
from jaxtyping import Bool, Float, Int

from jaxlab import validation
from jaxlab.codecomp.cost import PLACEHOLDER

_TAB_STOP = re.compile(r"\$\{\d+\}")


def encode(text: str) -> list[int]:
  """UTF-8 bytes of `text` as a token list."""
  return list(text.encode("utf-8"))


def collapse(tokens) -> list[int]:
  """Merges each run of contiguous placeholders into one placeholder."""
  out: list[int] = []
  for t in (int(x) for x in tokens):
    if t == PLACEHOLDER and out and out[-1] == PLACEHOLDER:
      continue
    out.append(t)
  return out


def render_snippet(tokens) -> str:
  """Text with each (collapsed) placeholder span as a tab stop `${k}`, k = 1, 2, ...

  A literal `$` is escaped as `\\$` (editor snippet syntax), so `parse_snippet`
  inverts this exactly.
  """
  parts: list[str] = []
  k = 0
  run: list[int] = []
  for t in collapse(tokens) + [PLACEHOLDER]:
    if t == PLACEHOLDER:
      parts.append(bytes(run).decode("utf-8", errors="replace").replace("\\", "\\\\")
                   .replace("$", "\\$"))
      run = []
      k += 1
      parts.append(f"${{{k}}}")
    else:
      run.append(t)
  return "".join(parts[:-1])  # the sentinel's tab stop is not part of the text


def parse_snippet(snippet: str) -> list[int]:
  """Tokens of a rendered snippet: each `${k}` becomes one placeholder."""
  out: list[int] = []
  i = 0
  while i < len(snippet):
    if snippet[i] == "\\" and i + 1 < len(snippet):
      out.extend(encode(snippet[i + 1]))
      i += 2
      continue
    m = _TAB_STOP.match(snippet, i)
    if m:
      out.append(PLACEHOLDER)
      i = m.end()
      continue
    out.extend(encode(snippet[i]))
    i += 1
  return out


def threshold_placeholders(tokens: Int[Array | np.ndarray, "*b n"],
                           scores: Float[Array | np.ndarray, "*b n"],
                           threshold: float | Float[Array | np.ndarray, ""]) -> Int[Array, "*b n"]:
  """Entropy-threshold APC: a placeholder wherever `scores > threshold`.

  Args:
    tokens: the hard (greedy) completion.
    scores: the per-position uncertainty, e.g. the entropy of the next-token
      distribution in nats (threshold H*), or 1 - p_max (threshold rho).
    threshold: positions strictly above it become placeholders.

  Returns:
    `tokens` with `PLACEHOLDER` at the uncertain positions (not yet collapsed;
    `editing_cost` treats runs as one span).

  Raises:
    ValueError: if concrete `scores` or `threshold` hold a NaN (e.g. the entropy of a
      diverged model). Traced ones cannot raise: there a NaN score (or threshold) is a
      placeholder, never a confident guess, since a NaN fails every comparison and
      `scores > threshold` would silently keep the guess.

  Example:
    >>> threshold_placeholders(jnp.array([7, 8]), jnp.array([0.1, 2.0]), 1.0).tolist()
    [7, 0]
  """
  if np.shape(tokens) != np.shape(scores):
    raise ValueError(f"scores must have tokens' shape {np.shape(tokens)}, got {np.shape(scores)}")
  for name, x in (("scores", scores), ("threshold", threshold)):
    v = validation.concrete(x)
    if v is not None and np.any(np.isnan(v)):
      raise ValueError(f"{name} must not be NaN; got {int(np.sum(np.isnan(v)))} NaN values")
  certain = jnp.asarray(scores) <= threshold
  return jnp.where(certain, jnp.asarray(tokens), PLACEHOLDER)


def placeholder_target(suggestion, truth, *, min_similarity: float = 0.8,
                       max_span: int = 8) -> list[int] | None:
  """An APC training target from one edit-log entry (suggestion vs what the user kept).

  The two byte strings are aligned (`difflib.SequenceMatcher`, no autojunk);
  when their similarity ratio is at least `min_similarity`, every differing
  span of the truth shorter than or equal to `max_span` bytes becomes one
  placeholder and longer ones stay as the truth's bytes (jaxlab interpretation
  of "replace the differing short spans by <PH>"). Pairs below the similarity
  are discarded (None): the suggestion was not a near miss.

  Args:
    suggestion: the model's completion (tokens, no placeholders).
    truth: the user's final code for the same span.
    min_similarity: the similarity in [0, 1] a pair needs.
    max_span: the longest truth span a placeholder replaces.

  Returns:
    The target tokens, or None for a discarded pair.

  Example:
    >>> render_snippet(placeholder_target(encode("foo(a, bar)"), encode("foo(a, baz)")))
    'foo(a, ba${1})'
  """
  if not 0.0 <= min_similarity <= 1.0:
    raise ValueError(f"min_similarity must be in [0, 1], got {min_similarity}")
  s, t = bytes(int(x) for x in suggestion), bytes(int(x) for x in truth)
  sm = difflib.SequenceMatcher(None, s, t, autojunk=False)
  if sm.ratio() < min_similarity:
    return None
  out: list[int] = []
  for op, _, _, j1, j2 in sm.get_opcodes():
    if op == "delete":  # spurious suggested bytes: the truth has nothing to fill there
      continue
    if op == "equal" or j2 - j1 > max_span:
      out.extend(t[j1:j2])
    else:
      out.append(PLACEHOLDER)
  return collapse(out)


def placeholder_precision(placeholders: Bool[Array | np.ndarray, "*b n"],
                          hard_wrong: Bool[Array | np.ndarray, "*b n"],
                          valid: Bool[Array | np.ndarray, "*b n"]) -> tuple[Array, Array]:
  """(placed, placed where hard completion was wrong), counted over valid positions."""
  ph = jnp.asarray(placeholders) & jnp.asarray(valid)
  return ph.sum(), (ph & jnp.asarray(hard_wrong)).sum()
