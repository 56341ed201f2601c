"""The APC cost model: editing vs filling, the ratio rho, and the critical entropy H*.

A simulated user turns a suggested completion into the code they meant, in
keystrokes. Typing one byte costs `type_cost` wherever it is typed: as a missing
byte, as the right byte in place of a wrong one, or into a placeholder. What
differs is getting there and clearing the way: an edit region (a contiguous run
of substituted, deleted or inserted bytes) is reached with `nav_cost` and each
wrong byte in it is deleted (`delete_cost`); a placeholder span is reached with
one Tab (`tab_cost`, once per contiguous span, since contiguous placeholders
collapse into one) and has nothing to delete. Correcting a wrong guess thus
costs more than filling a placeholder by the deletions, which is the paper's
premise ("filling placeholders incurs lower cost than correcting errors").
With nav = delete = type = Tab = 1 a wrong byte costs C_edit = 3 and a
one-byte placeholder C_fill = 2: the spec's per-token costs `C_edit(token) =
2 len + 1`, `C_fill(token) = len + 1` for byte tokens.

jaxlab interpretation, config knob `navigation`: "per_region" (the default)
charges `nav_cost` once per edit region, as a placeholder span pays one Tab, so
typing k missing bytes costs the same as filling a k-byte placeholder;
"per_byte" charges it for every edited byte (substitute 3, delete 2, insert 2),
so a missing byte costs twice a byte typed into a placeholder and a suggestion
of placeholders only is much cheaper than an empty one.

Per position with next-token distribution p, hard completion costs
`(1 - p_max) C_edit` in expectation and a placeholder `C_fill`, so a placeholder
pays iff `P_err = 1 - p_max > rho = C_fill / C_edit`. Fano's inequality
`H(p) <= h_b(P_err) + P_err log(V - 1)`, whose right side increases on
`P_err <= (V - 1) / V`, gives the critical entropy

  H*(rho, V) = h_b(rho) + rho log(V - 1):   H(p) > H*  =>  P_err > rho.

jaxlab interpretation (the paper's exact costs and bound were not readable): the
keystroke costs, the Fano form of the threshold, and the normalised reward of
`cost_reward` are reconstructions; every constant is a `CostModel` field.

Example:
  >>> cm = CostModel()
  >>> round(cm.rho, 4), round(critical_entropy(cm.rho, 256), 3)
  (0.6667, 4.331)
"""

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jaxtyping import Float, Int

# The reserved placeholder token `<PH>`: byte 0, which never occurs in the stdlib sources.
PLACEHOLDER = 0

NAVIGATION = ("per_region", "per_byte")


@dataclasses.dataclass(frozen=True)
class CostModel:
  """Keystroke-level costs of the simulated user (jaxlab interpretation).

  Attributes:
    nav_cost: move the cursor to an edit region (once per region, or per edited
      byte with `navigation="per_byte"`).
    delete_cost: delete one wrong or spurious suggested byte.
    type_cost: type one byte, wherever it is typed (missing, retyped, or into a
      placeholder).
    tab_cost: jump to a placeholder span (once per contiguous span).
    navigation: "per_region" or "per_byte" (see the module docstring).
  """
  nav_cost: float = 1.0
  delete_cost: float = 1.0
  type_cost: float = 1.0
  tab_cost: float = 1.0
  navigation: str = "per_region"

  def __post_init__(self):
    for f in dataclasses.fields(self):
      if f.name == "navigation":
        continue
      v = getattr(self, f.name)
      if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
        raise ValueError(f"CostModel.{f.name} must be a finite number >= 0, got {v!r}")
    if self.navigation not in NAVIGATION:
      raise ValueError(f"CostModel.navigation must be one of {NAVIGATION}, "
                       f"got {self.navigation!r}")
    if self.edit_cost <= 0:
      raise ValueError("CostModel.nav_cost + delete_cost + type_cost (C_edit) must be > 0, got "
                       f"{self.edit_cost}")

  @property
  def edit_cost(self) -> float:
    """C_edit: correct one isolated wrong byte (navigate, delete, retype)."""
    return self.nav_cost + self.delete_cost + self.type_cost

  @property
  def fill_cost(self) -> float:
    """C_fill: a one-byte placeholder (one Tab, one typed byte)."""
    return self.tab_cost + self.type_cost

  @property
  def rho(self) -> float:
    """rho = C_fill / C_edit: a placeholder pays where P_err > rho."""
    return self.fill_cost / self.edit_cost


# nav = delete = type = Tab = 1, one navigation per edit region: C_edit = 3, C_fill = 2.
DEFAULT_COSTS = CostModel()


class _Weights(NamedTuple):
  """The edit-script DP's weights: per substituted / deleted / inserted byte, to open or
  extend an edit region, per placeholder span, per byte a placeholder absorbs."""
  sub: float
  delete: float
  insert: float
  open: float
  extend: float
  tab: float
  fill: float


def _weights(c: CostModel) -> _Weights:
  extend = c.nav_cost if c.navigation == "per_byte" else 0.0
  return _Weights(sub=c.delete_cost + c.type_cost, delete=c.delete_cost, insert=c.type_cost,
                  open=c.nav_cost, extend=extend, tab=c.tab_cost, fill=c.type_cost)


# Levenshtein distance of the text outside placeholders: placeholders absorb for free.
_WILDCARD = _Weights(sub=1.0, delete=1.0, insert=1.0, open=0.0, extend=0.0, tab=0.0, fill=0.0)


def binary_entropy(p: float) -> float:
  """h_b(p) in nats (0 at p in {0, 1})."""
  if not 0.0 <= p <= 1.0:
    raise ValueError(f"p must be in [0, 1], got {p}")
  if p in (0.0, 1.0):
    return 0.0
  return -p * math.log(p) - (1 - p) * math.log(1 - p)


def critical_entropy(rho: float, vocab_size: int) -> float:
  """The Fano threshold H*(rho, V) = h_b(rho) + rho log(V - 1), in nats.

  Args:
    rho: C_fill / C_edit, in [0, (V - 1) / V] (where Fano's bound increases).
    vocab_size: V >= 2, the number of tokens the model chooses among.

  Returns:
    H* such that every distribution over V tokens with entropy > H* has
    error probability 1 - p_max > rho.

  Example:
    >>> round(critical_entropy(0.5, 2), 4)   # h_b(0.5) = log 2: never exceeded
    0.6931
  """
  if int(vocab_size) != vocab_size or vocab_size < 2:
    raise ValueError(f"vocab_size must be an integer >= 2, got {vocab_size}")
  if not 0.0 <= rho <= (vocab_size - 1) / vocab_size:
    raise ValueError(f"rho must be in [0, (V-1)/V] = [0, {(vocab_size - 1) / vocab_size:.4f}], "
                     f"got {rho}")
  return binary_entropy(rho) + rho * math.log(vocab_size - 1)


def entropy(logits: Float[Array | np.ndarray, "*b v"]) -> Float[Array | np.ndarray, "*b"]:
  """Entropy in nats of softmax(logits) over the last axis.

  A -inf logit is a token the model rules out (probability 0, no contribution). A row
  with no distribution, i.e. a NaN logit, a +inf logit or every logit -inf, has entropy
  NaN: counting it as 0 would make a diverged model look fully confident, so the
  threshold rule would never give it a placeholder.

  Args:
    logits: next-token scores, [..., v].

  Returns:
    [...] entropies in nats, in [0, log v], or NaN for a row with no distribution.

  Example:
    >>> round(float(entropy(jnp.array([0.0, 0.0, -jnp.inf]))), 4)   # log 2
    0.6931
    >>> float(entropy(jnp.array([0.0, jnp.nan])))
    nan
  """
  logp = jax.nn.log_softmax(jnp.asarray(logits, jnp.float32), axis=-1)
  p = jnp.exp(logp)
  # p = 0 (a -inf logit) adds 0 * log 0 = 0; a NaN p (the row has no distribution) must
  # reach the sum, so the guard tests p > 0 and p == 0 separately.
  return -jnp.sum(jnp.where(p > 0, p * logp, jnp.where(p == 0, 0.0, jnp.nan)), axis=-1)


def _check_seq(x, length, name):
  if np.ndim(x) != 1:
    raise ValueError(f"{name} must be a 1-D token array (vmap for batches), got {np.shape(x)}")
  if np.ndim(length) != 0:
    raise ValueError(f"{name}_len must be a scalar, got shape {np.shape(length)}")


def _edit_dp(suggestion, suggestion_len, target, target_len, w: _Weights):
  """The cheapest edit script's cost under weights `w` (see `editing_cost`).

  Two states per cell: A = the last step closed no edit region (a match, a
  placeholder span, or the start), B = it was an edit, so a further edit
  extends the region (`w.extend`) instead of opening one (`w.open`).
  """
  suggestion = jnp.asarray(suggestion, jnp.int32)
  target = jnp.asarray(target, jnp.int32)
  m = target.shape[0]
  inf = jnp.float32(jnp.inf)
  j_idx = jnp.arange(m + 1, dtype=jnp.float32)
  # Row 0: nothing suggested consumed; the first j target bytes are one inserted region.
  a0 = jnp.where(j_idx == 0, 0.0, inf)
  b0 = jnp.where(j_idx == 0, inf, w.open + (j_idx - 1) * w.extend + j_idx * w.insert)
  prev_tok = jnp.concatenate([jnp.full((1,), -1, jnp.int32), suggestion])[:-1]

  def row(prev, xs):
    a_up_row, b_up_row = prev
    tok, before, i = xs
    is_ph = tok == PLACEHOLDER
    # A placeholder continuing a placeholder run pays no second Tab (spans collapse).
    tab = jnp.where(before == PLACEHOLDER, 0.0, w.tab)
    d_up_row = jnp.minimum(a_up_row, b_up_row)

    def cell(carry, j):
      a_left, b_left, run = carry  # run: min over j' <= j-1 of D[i-1][j'] + tab + fill (j-1-j')
      jm = jnp.maximum(j - 1, 0)
      a_up, b_up, d_up = a_up_row[j], b_up_row[j], d_up_row[j]
      open_up = jnp.minimum(a_up + w.open, b_up + w.extend)
      open_diag = jnp.minimum(a_up_row[jm] + w.open, b_up_row[jm] + w.extend)
      open_left = jnp.minimum(a_left + w.open, b_left + w.extend)
      first = j == 0
      insert = jnp.where(first, inf, open_left + w.insert)
      # A suggested byte: match it, substitute it (a wrong one) or delete it.
      match = (target[jm] == tok) & ~first
      a_tok = jnp.where(match, d_up_row[jm], inf)
      sub = jnp.where(match | first, inf, open_diag + w.sub)
      b_tok = jnp.minimum(jnp.minimum(sub, open_up + w.delete), insert)
      # A placeholder: its span absorbs target[j':j] (possibly empty); inserts may follow it.
      run = jnp.minimum(run + w.fill, d_up + tab)
      a = jnp.where(is_ph, run, a_tok)
      b = jnp.where(is_ph, insert, b_tok)
      return (a, b, run), (a, b)

    _, (a_new, b_new) = jax.lax.scan(cell, (inf, inf, inf), jnp.arange(m + 1))
    keep = i < suggestion_len
    return (jnp.where(keep, a_new, a_up_row), jnp.where(keep, b_new, b_up_row)), None

  xs = (suggestion, prev_tok, jnp.arange(suggestion.shape[0]))
  (a, b), _ = jax.lax.scan(row, (a0, b0), xs)
  j = jnp.clip(target_len, 0, m)
  return jnp.minimum(a[j], b[j])


def editing_cost(suggestion: Int[Array | np.ndarray, "n"],
                 suggestion_len: int | Int[Array | np.ndarray, ""],
                 target: Int[Array | np.ndarray, "m"],
                 target_len: int | Int[Array | np.ndarray, ""],
                 costs: CostModel = DEFAULT_COSTS) -> Float[Array | np.ndarray, ""]:
  """The simulated user's cheapest edit script from a suggestion to the target.

  A weighted edit distance in which every `PLACEHOLDER` token is a wildcard: a
  contiguous run of placeholders absorbs any (possibly empty) substring of the
  target for `tab_cost + type_cost * len`. Other tokens match for free, or are
  substituted (`delete_cost + type_cost`) or deleted (`delete_cost`); a missing
  byte is inserted (`type_cost`); each edit region (a run of consecutive edits)
  costs `nav_cost` once, or once per edit with `navigation="per_byte"`.
  Jittable and vmappable (a scan over suggestion tokens, each row a scan over
  target tokens).

  Args:
    suggestion: int tokens [n]; positions >= `suggestion_len` are ignored.
    suggestion_len: number of valid suggestion tokens, in [0, n].
    target: int tokens [m]; positions >= `target_len` are ignored.
    target_len: number of valid target tokens, in [0, m].
    costs: the `CostModel`.

  Returns:
    float32 cost (0 iff the suggestion equals the target, placeholders aside
    when their spans absorb nothing and tab_cost = 0).

  Example:
    >>> t = jnp.array([ord(c) for c in "x = foo(1)"])
    >>> s = jnp.array([ord(c) for c in "x = bar(1)"])
    >>> float(editing_cost(s, 10, t, 10))             # navigate once, delete + retype 3
    7.0
    >>> float(editing_cost(s, 10, t, 10, CostModel(navigation="per_byte")))
    9.0
    >>> p = jnp.array([ord(c) for c in "x = "] + [PLACEHOLDER] + [ord(c) for c in "(1)"])
    >>> float(editing_cost(p, 8, t, 10))               # Tab + type "foo"
    4.0
  """
  _check_seq(suggestion, suggestion_len, "suggestion")
  _check_seq(target, target_len, "target")
  return _edit_dp(suggestion, suggestion_len, target, target_len, _weights(costs))


def wildcard_distance(suggestion: Int[Array | np.ndarray, "n"],
                      suggestion_len: int | Int[Array | np.ndarray, ""],
                      target: Int[Array | np.ndarray, "m"],
                      target_len: int | Int[Array | np.ndarray, ""]
                      ) -> Float[Array | np.ndarray, ""]:
  """Levenshtein distance of the suggestion's text to the target, placeholders free.

  Every placeholder span absorbs any substring of the target at no cost; other
  bytes cost 1 per substitution, deletion or insertion. 0 iff the text outside
  the placeholders matches the target (the exact match of a completion with
  placeholders). Arguments as for `editing_cost`.

  Example:
    >>> t = jnp.array([ord(c) for c in "x = foo(1)"])
    >>> p = jnp.array([ord(c) for c in "x = "] + [PLACEHOLDER] + [ord(c) for c in "(2)"])
    >>> float(wildcard_distance(p, 8, t, 10))
    1.0
  """
  _check_seq(suggestion, suggestion_len, "suggestion")
  _check_seq(target, target_len, "target")
  return _edit_dp(suggestion, suggestion_len, target, target_len, _WILDCARD)


def reference_editing_cost(suggestion, target, costs: CostModel = DEFAULT_COSTS) -> float:
  """Pure-Python `editing_cost` of two token lists (the test oracle; slow)."""
  w = _weights(costs)
  inf = math.inf
  n, m = len(suggestion), len(target)
  # a: the last step closed no edit region; b: it was an edit (a further one extends it).
  a = [[inf] * (m + 1) for _ in range(n + 1)]
  b = [[inf] * (m + 1) for _ in range(n + 1)]
  a[0][0] = 0.0
  for j in range(1, m + 1):
    b[0][j] = min(a[0][j - 1] + w.open, b[0][j - 1] + w.extend) + w.insert
  for i in range(1, n + 1):
    tok = suggestion[i - 1]
    opened = lambda r, j: min(a[r][j] + w.open, b[r][j] + w.extend)
    for j in range(m + 1):
      if tok == PLACEHOLDER:
        tab = 0.0 if i >= 2 and suggestion[i - 2] == PLACEHOLDER else w.tab
        a[i][j] = min(min(a[i - 1][k], b[i - 1][k]) + tab + w.fill * (j - k)
                      for k in range(j + 1))
      else:
        b[i][j] = opened(i - 1, j) + w.delete
        if j >= 1 and target[j - 1] == tok:
          a[i][j] = min(a[i - 1][j - 1], b[i - 1][j - 1])
        elif j >= 1:
          b[i][j] = min(b[i][j], opened(i - 1, j - 1) + w.sub)
      if j >= 1:
        b[i][j] = min(b[i][j], opened(i, j - 1) + w.insert)
  return min(a[n][m], b[n][m])


def cost_reward(cost: Float[Array | np.ndarray, "*b"], target_len: Int[Array | np.ndarray, "*b"],
                costs: CostModel = DEFAULT_COSTS, *, malformed: Array | None = None,
                malformed_penalty: float = 1.0) -> Float[Array | np.ndarray, "*b"]:
  """The RL reward: minus the editing cost in units of retyping the target.

  `R = -cost / (C_edit * max(len(target), 1)) - malformed_penalty * malformed`
  (jaxlab interpretation of the paper's cost-based reward).

  Args:
    cost: `editing_cost` of each sampled completion.
    target_len: length of its target.
    costs: the `CostModel` (for C_edit).
    malformed: bool, True where the completion never ended (no newline).
    malformed_penalty: subtracted where `malformed`.

  Returns:
    float32 rewards with `cost`'s shape.
  """
  r = -jnp.asarray(cost, jnp.float32) / (costs.edit_cost * jnp.maximum(target_len, 1))
  if malformed is not None:
    r = r - malformed_penalty * jnp.asarray(malformed, jnp.float32)
  return r
