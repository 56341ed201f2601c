"""APC evaluation: each arm's completions of held-out lines, scored by the simulated user.

An arm is a `Suggestion`: completions (`<PH>` marks placeholders), their lengths,
and the hard completion its placeholders' precision is judged against. The
pieces: hard completion in fixed-size chunks (`hard_in_chunks`), the trivial
suggestions every cost comparison must beat (`trivial_suggestions`), a trained
model's three arms (`trained_suggestions`), the threshold sweep (`cost_sweep`),
and per-arm summaries under one cost model (`score_arms`, `summarise`).

Example:
  >>> s = trivial_suggestions(np.full((2, 4), 97, np.int32))
  >>> sorted(s)
  ['all_ph', 'empty']
"""

from typing import NamedTuple

import jax
import numpy as np
from jaxtyping import Int

from jaxlab.codecomp.cost import PLACEHOLDER, CostModel
from jaxlab.codecomp.data import line_completions
from jaxlab.codecomp.decode import Decoded, Scores, decode, own_guesses, score
from jaxlab.codecomp.placeholders import threshold_placeholders
from jaxlab.codecomp.train import hard_completion


class Suggestion(NamedTuple):
  """One arm's completions of the evaluation set: tokens [b, n] (`<PH>` marks placeholders),
  lengths [b], and the hard completion its placeholders' precision is judged against."""
  tokens: np.ndarray
  lengths: np.ndarray
  hard: np.ndarray


def summarise(s: Scores, hc_cost: float) -> dict:
  """Means of one arm's `Scores`, its cost relative to `hc_cost`, and its placeholders'
  precision (wrong hard tokens they cover / placed; None when none was placed).

  Example:
    >>> s = Scores(*(np.array([2.0, 4.0]),) * 3, np.array([1, 0]), np.array([1, 0]),
    ...            np.array([1, 0]))
    >>> summarise(s, hc_cost=6.0)["rel_cost"]
    0.5
  """
  s = jax.device_get(s)
  placed = float(np.sum(s.placed))
  return dict(cost=float(np.mean(s.cost)), rel_cost=float(np.mean(s.cost)) / hc_cost,
              exact=float(np.mean(s.exact)), similarity=float(np.mean(s.similarity)),
              ph_rate=float(np.mean(s.spans > 0)), spans=float(np.mean(s.spans)),
              precision=float(np.sum(s.placed_wrong)) / placed if placed else None)


def cost_sweep(dec: Decoded, ex, thresholds, costs: CostModel) -> np.ndarray:
  """Mean cost of threshold APC (`<PH>` where the entropy exceeds t) at each threshold t.

  Args:
    dec: the hard completions of `ex.prompts` with their entropies.
    ex: the `Completions` (targets and their lengths).
    thresholds: entropy thresholds (nats).
    costs: the simulated user.

  Returns:
    [len(thresholds)] mean editing costs.

  Example:
    >>> sweep = cost_sweep(dec, ex, (0.5, 2.0), DEFAULT_COSTS)  # doctest: +SKIP
  """
  return np.asarray([float(np.mean(score(
      threshold_placeholders(dec.tokens, dec.entropy, t), dec.lengths, ex.targets,
      ex.target_lens, dec.tokens, costs).cost)) for t in thresholds])


def hard_in_chunks(model, params, prompts: np.ndarray, n: int, chunk: int) -> Decoded:
  """Hard completion of any number of prompts in zero-padded chunks of one batch size, so
  that the evaluation, tuning and edit-log sets share one compilation (host arrays).

  Example:
    >>> dec = hard_in_chunks(model, params, prompts, n=24, chunk=256)  # doctest: +SKIP
  """
  k = len(prompts)
  padded = np.pad(prompts, ((0, -k % chunk), (0, 0)))
  outs = [jax.device_get(hard_completion(model, params, padded[i:i + chunk], num_tokens=n))
          for i in range(0, len(padded), chunk)]
  return jax.tree.map(lambda *x: np.concatenate(x)[:k], *outs)


def position_error_rate(hard: np.ndarray, lengths: np.ndarray, targets: np.ndarray,
                        target_lens: np.ndarray) -> float | None:
  """Share of positions i < lengths[b] where the hard completion is wrong.

  The chance level of placeholder precision: placeholders put at random among a
  completion's positions land on a wrong hard token this often (positions pooled,
  as `Scores.placed_wrong / placed` pools them).

  Args:
    hard: [b, n] the hard completion the precision is judged against.
    lengths: [b] valid positions of the completion that places the placeholders.
    targets: [b, m] the truth, valid up to target_lens [b]; a position past it is wrong.

  Returns:
    The share, or None when no position is valid.

  Example:
    >>> position_error_rate(np.array([[1, 2, 3]]), np.array([3]), np.array([[1, 2, 4]]),
    ...                     np.array([3]))
    0.3333333333333333
  """
  n = hard.shape[1]
  pos = np.arange(n)[None, :]
  valid = pos < np.asarray(lengths)[:, None]
  t_pad = np.pad(targets, ((0, 0), (0, max(n - targets.shape[1], 0))))[:, :n]
  wrong = (hard != t_pad) | (pos >= np.asarray(target_lens)[:, None])
  return float(wrong[valid].mean()) if valid.any() else None


def trivial_suggestions(hard: Int[np.ndarray, "b n"]) -> dict[str, Suggestion]:
  """The empty suggestion and the single-placeholder one, for completions shaped like `hard`.

  Every completion is left for the user to type: from scratch, or after one Tab into
  a placeholder spanning the line. A model's suggestion is worth something only
  where it costs less than the cheaper of the two.

  Args:
    hard: the hard completions [b, n] (shape, and the reference of precision).

  Returns:
    {"empty": ..., "all_ph": ...}, each a `Suggestion`.

  Example:
    >>> s = trivial_suggestions(np.full((2, 4), 97, np.int32))
    >>> s["empty"].lengths.tolist(), s["all_ph"].tokens[0, :s["all_ph"].lengths[0]].tolist()
    ([0, 0], [0])
  """
  b, _ = hard.shape
  return dict(empty=Suggestion(np.zeros_like(hard), np.zeros(b, np.int32), hard),
              all_ph=Suggestion(np.full_like(hard, PLACEHOLDER), np.ones(b, np.int32), hard))


def trained_suggestions(model, params, ex, n: int, name: str,
                        chunk: int) -> tuple[dict[str, Suggestion], Decoded]:
  """A trained model's arms on `ex.prompts`, and its APC decode (for display).

  Returns:
    ({name: its APC decode, name + "_guess": its placeholders replaced by its own
    greedy tokens, name + "_hc": decoded with <PH> excluded}, the APC decode).

  Example:
    >>> arms, shown = trained_suggestions(model, params, ex, 24, "sft", 256)  # doctest: +SKIP
  """
  hard = hard_in_chunks(model, params, ex.prompts, n, chunk)
  apc = jax.device_get(decode(model, params, ex.prompts, jax.random.key(0), num_tokens=n))
  guess, guess_lens = jax.device_get(own_guesses(apc))
  return {name: Suggestion(apc.tokens, apc.lengths, hard.tokens),
          f"{name}_guess": Suggestion(guess, guess_lens, hard.tokens),
          f"{name}_hc": Suggestion(hard.tokens, hard.lengths, hard.tokens)}, apc


def score_arms(suggestions: dict[str, Suggestion], ex, costs: CostModel) -> dict:
  """Each arm's `summarise` under `costs`, relative costs against the "hc" arm.

  Example:
    >>> table = score_arms({"hc": hc, "empty": empty}, ex, DEFAULT_COSTS)  # doctest: +SKIP
  """
  scores = {a: score(s.tokens, s.lengths, ex.targets, ex.target_lens, s.hard, costs)
            for a, s in suggestions.items()}
  hc_cost = float(np.mean(jax.device_get(scores["hc"].cost)))
  return {a: summarise(sc, hc_cost) for a, sc in scores.items()}


def completions(apc_cfg, stream, num: int, seed: int):
  """`num` line completions of `stream` under the APC settings (prefix and target lengths).

  Example:
    >>> ex = completions(config.apc, corpus.val, 256, seed=0)  # doctest: +SKIP
  """
  return line_completions(stream, num, prefix_len=apc_cfg.prefix_len,
                          max_target_len=apc_cfg.max_target_len, seed=seed)
