"""The APC cost model: editing vs filling, the ratio rho, and the critical entropy H*.

A simulated user turns a suggested completion into the code they meant. A wrong
suggested byte is substituted (`edit_cost`: find it, delete it, retype it), a
spurious one deleted (`delete_cost`), a missing one typed (`insert_cost`); a
placeholder is reached with one Tab (`tab_cost`, once per contiguous span, since
contiguous placeholders collapse into one) and filled by typing its content
(`type_cost` per byte). With byte tokens and the spec's per-token costs
`C_edit(token) = 2 len + 1`, `C_fill(token) = len + 1` this gives 3 and 2.

Per position with next-token distribution p, hard completion costs
`(1 - p_max) C_edit` in expectation and a placeholder `C_fill`, so a placeholder
pays iff `P_err = 1 - p_max > rho = C_fill / C_edit`. Fano's inequality
`H(p) <= h_b(P_err) + P_err log(V - 1)`, whose right side increases on
`P_err <= (V - 1) / V`, gives the critical entropy

  H*(rho, V) = h_b(rho) + rho log(V - 1):   H(p) > H*  =>  P_err > rho.

jaxlab interpretation (the paper's exact costs and bound were not readable): the
per-byte costs, the Fano form of the threshold, and the normalised reward of
`cost_reward` are reconstructions; every constant is a `CostModel` field.

Example:
  >>> cm = CostModel()
  >>> round(cm.rho, 4), round(critical_entropy(cm.rho, 256), 3)
  (0.6667, 4.331)
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jaxtyping import Float, Int

# The reserved placeholder token `<PH>`: byte 0, which never occurs in the stdlib sources.
PLACEHOLDER = 0


@dataclasses.dataclass(frozen=True)
class CostModel:
  """Keystroke-level costs of the simulated user (jaxlab interpretation).

  Attributes:
    edit_cost: replace one wrong suggested byte (navigate + delete + retype): C_edit.
    delete_cost: delete one spurious suggested byte.
    insert_cost: type one byte the suggestion is missing.
    tab_cost: jump to a placeholder span (once per contiguous span).
    type_cost: type one byte into a placeholder.
  """
  edit_cost: float = 3.0
  delete_cost: float = 2.0
  insert_cost: float = 2.0
  tab_cost: float = 1.0
  type_cost: float = 1.0

  def __post_init__(self):
    for f in dataclasses.fields(self):
      v = getattr(self, f.name)
      if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
        raise ValueError(f"CostModel.{f.name} must be a finite number >= 0, got {v!r}")
    if self.edit_cost <= 0:
      raise ValueError(f"CostModel.edit_cost must be > 0, got {self.edit_cost}")

  @property
  def fill_cost(self) -> float:
    """C_fill: a one-byte placeholder (one Tab, one typed byte)."""
    return self.tab_cost + self.type_cost

  @property
  def rho(self) -> float:
    """rho = C_fill / C_edit: a placeholder pays where P_err > rho."""
    return self.fill_cost / self.edit_cost


# The spec's byte costs: C_edit = 3, C_fill = 2 (rho = 2/3).
DEFAULT_COSTS = CostModel()


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
  """Entropy in nats of softmax(logits) over the last axis (-inf logits allowed)."""
  logp = jax.nn.log_softmax(jnp.asarray(logits, jnp.float32), axis=-1)
  p = jnp.exp(logp)
  return -jnp.sum(jnp.where(p > 0, p * logp, 0.0), axis=-1)


def _check_seq(x, length, name):
  if np.ndim(x) != 1:
    raise ValueError(f"{name} must be a 1-D token array (vmap for batches), got {np.shape(x)}")
  if np.ndim(length) != 0:
    raise ValueError(f"{name}_len must be a scalar, got shape {np.shape(length)}")


def editing_cost(suggestion: Int[Array | np.ndarray, "n"],
                 suggestion_len: int | Int[Array | np.ndarray, ""],
                 target: Int[Array | np.ndarray, "m"],
                 target_len: int | Int[Array | np.ndarray, ""],
                 costs: CostModel = DEFAULT_COSTS) -> Float[Array | np.ndarray, ""]:
  """The simulated user's cheapest edit script from a suggestion to the target.

  A weighted edit distance in which every `PLACEHOLDER` token is a wildcard: a
  contiguous run of placeholders absorbs any (possibly empty) substring of the
  target for `tab_cost + type_cost * len`. Other tokens match for free or cost
  `edit_cost` (substitute), `delete_cost`, `insert_cost`. Jittable and vmappable
  (a scan over suggestion tokens, each row a scan over target tokens).

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
    >>> float(editing_cost(s, 10, t, 10))                      # 3 substitutions
    9.0
    >>> p = jnp.array([ord(c) for c in "x = "] + [PLACEHOLDER] + [ord(c) for c in "(1)"])
    >>> float(editing_cost(p, 8, t, 10))                        # Tab + type "foo"
    4.0
  """
  _check_seq(suggestion, suggestion_len, "suggestion")
  _check_seq(target, target_len, "target")
  suggestion = jnp.asarray(suggestion, jnp.int32)
  target = jnp.asarray(target, jnp.int32)
  m = target.shape[0]
  c = costs
  j_idx = jnp.arange(m + 1, dtype=jnp.float32)
  first = j_idx * c.insert_cost  # row 0: type every target byte

  prev_tok = jnp.concatenate([jnp.full((1,), -1, jnp.int32), suggestion[:-1]])

  def row(prev, xs):
    tok, before, i = xs
    is_ph = tok == PLACEHOLDER
    # A placeholder continuing a placeholder run pays no second Tab (spans collapse).
    tab = jnp.where(before == PLACEHOLDER, 0.0, c.tab_cost)

    def cell(carry, j):
      left, run = carry  # D[i][j-1], min over j' <= j-1 of D[i-1][j'] + tab + type (j-1 - j')
      up = prev[j]
      diag = prev[jnp.maximum(j - 1, 0)]
      match = target[jnp.maximum(j - 1, 0)] == tok
      sub = diag + jnp.where(match, 0.0, c.edit_cost)
      normal = jnp.minimum(jnp.minimum(up + c.delete_cost, sub), left + c.insert_cost)
      run = jnp.minimum(run + c.type_cost, up + tab)
      ph = jnp.minimum(run, left + c.insert_cost)
      first_col = jnp.where(is_ph, up + tab, up + c.delete_cost)
      value = jnp.where(j == 0, first_col, jnp.where(is_ph, ph, normal))
      return (value, run), value

    init = (jnp.float32(jnp.inf), jnp.float32(jnp.inf))
    _, new = jax.lax.scan(cell, init, jnp.arange(m + 1))
    new = jnp.where(i < suggestion_len, new, prev)
    return new, None

  xs = (suggestion, prev_tok, jnp.arange(suggestion.shape[0]))
  last, _ = jax.lax.scan(row, first, xs)
  return last[jnp.clip(target_len, 0, m)]


def reference_editing_cost(suggestion, target, costs: CostModel = DEFAULT_COSTS) -> float:
  """Pure-Python `editing_cost` of two token lists (the test oracle; slow)."""
  c = costs
  n, m = len(suggestion), len(target)
  d = [[0.0] * (m + 1) for _ in range(n + 1)]
  for j in range(m + 1):
    d[0][j] = j * c.insert_cost
  for i in range(1, n + 1):
    tok = suggestion[i - 1]
    if tok == PLACEHOLDER:
      tab = 0.0 if i >= 2 and suggestion[i - 2] == PLACEHOLDER else c.tab_cost
      for j in range(m + 1):
        absorb = min(d[i - 1][k] + tab + c.type_cost * (j - k) for k in range(j + 1))
        d[i][j] = absorb if j == 0 else min(absorb, d[i][j - 1] + c.insert_cost)
    else:
      d[i][0] = d[i - 1][0] + c.delete_cost
      for j in range(1, m + 1):
        sub = d[i - 1][j - 1] + (0.0 if target[j - 1] == tok else c.edit_cost)
        d[i][j] = min(d[i - 1][j] + c.delete_cost, sub, d[i][j - 1] + c.insert_cost)
  return d[n][m]


# Unit costs with free placeholders: the edit distance of what is *not* a placeholder.
UNIT_COSTS = CostModel(edit_cost=1.0, delete_cost=1.0, insert_cost=1.0, tab_cost=0.0,
                       type_cost=0.0)


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
