"""Zero-shot classifier-expansion metrics: s, u, H, T, within/between-group, template spread.

Every accuracy is a mean of per-class top-1 accuracies (the Xian et al. protocol used by
ICIS and CF-ZSCE), so a large class cannot dominate. GZSL: the prediction is the argmax
over all classes (seen weights + synthesized unseen weights); s and u average the classes
of each split; H = 2us / (u + s). ZSL T: the argmax over unseen classes only.

Granularity (the spec's fine vs coarse): for test samples of the given classes,
between-group accuracy is the per-class rate at which the predicted class lies in the
true class's group (coarse); within-group accuracy is top-1 accuracy when the argmax is
restricted to the classes of the true group (fine: siblings only).

Ties count against the sample: a prediction is right only when the true class (or, for
between-group accuracy, the true group) scores strictly above every other candidate, so
a collapsed classifier whose scores are all equal gets 0, never the credit an argmax's
first-index tie-break would give. NaN in, NaN out: a NaN anywhere in `logits` makes every
accuracy NaN (a classifier that outputs NaN for any sample has no defined accuracy; only
an accuracy over no sample at all keeps its 0), and `harmonic_mean` of a NaN is NaN.

Example:
  >>> import jax.numpy as jnp
  >>> from jaxlab.zeroshot import metrics
  >>> float(metrics.harmonic_mean(jnp.float32(0.6), jnp.float32(0.3)))  # doctest: +ELLIPSIS
  0.4...
"""

import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int


def _check(logits, labels, name="logits"):
  if logits.ndim != 2:
    raise ValueError(f"{name} must be [n, num_classes], got shape {logits.shape}")
  if labels.ndim != 1 or labels.shape[0] != logits.shape[0]:
    raise ValueError(f"labels must be [n] with n = {logits.shape[0]}, got shape {labels.shape}")


def harmonic_mean(s: Float[Array, "*b"], u: Float[Array, "*b"]) -> Float[Array, "*b"]:
  """H = 2us / (u + s), defined as 0 where u + s = 0 (both accuracies zero).

  Args:
    s: seen-class accuracy, in [0, 1].
    u: unseen-class accuracy, in [0, 1].

  Returns:
    H, NaN wherever s or u is NaN (the u + s = 0 guard must not turn it into 0).

  Example:
    >>> float(harmonic_mean(jnp.float32(0.5), jnp.float32(jnp.nan)))
    nan
  """
  s, u = jnp.asarray(s, jnp.float32), jnp.asarray(u, jnp.float32)
  total = s + u
  h = jnp.where(total > 0, 2 * s * u / jnp.where(total > 0, total, 1.0), 0.0)
  return jnp.where(jnp.isnan(total), jnp.nan, h)


def _wins(logits: Array, labels: Array, candidates: Array) -> tuple[Array, Array]:
  """The tie-pessimistic top-1 hit of an argmax restricted to `candidates` ([n, c] bool).

  Returns:
    ([n] bool: the true class is a candidate and scores strictly above every other one, a
    tie counting as a miss and a lone candidate as a hit; [n] bool: the row's candidate
    scores hold a NaN, which `jnp.max` propagates).
  """
  is_label = jnp.arange(logits.shape[1])[None, :] == labels[:, None]
  others = candidates & ~is_label
  best_other = jnp.max(jnp.where(others, logits, -jnp.inf), -1)
  own = jnp.take_along_axis(logits, labels[:, None], 1)[:, 0]
  in_candidates = jnp.any(candidates & is_label, -1)
  hit = in_candidates & (~jnp.any(others, -1) | (own > best_other))
  return hit, jnp.isnan(own) | jnp.isnan(best_other)


def _scores(hit: Array, bad: Array) -> Array:
  """Per-sample hits as floats, every one NaN when any row in `bad` holds a NaN score.

  The NaN enters before the per-class sums rather than as a `where` on the accuracies:
  an op between a caller's reductions can change how XLA compiles them, hence their
  float32 rounding, and finite inputs must give the values they gave before.
  """
  return hit.astype(jnp.float32) + jnp.where(jnp.any(bad), jnp.nan, 0.0)


def per_class_accuracy(correct: Bool[Array, " n"], labels: Int[Array, " n"],
                       class_mask: Bool[Array, " c"]) -> Float[Array, ""]:
  """Mean over the classes in `class_mask` (that have samples) of their top-1 accuracy."""
  return _per_class_mean(correct.astype(jnp.float32), labels, class_mask)


def _per_class_mean(correct: Array, labels: Array, class_mask: Array) -> Array:
  num_classes = class_mask.shape[0]
  hits = jnp.zeros(num_classes).at[labels].add(correct)
  counts = jnp.zeros(num_classes).at[labels].add(1.0)
  use = class_mask & (counts > 0)
  acc = hits / jnp.maximum(counts, 1.0)
  return jnp.sum(jnp.where(use, acc, 0.0)) / jnp.maximum(jnp.sum(use), 1)


def gzsl_accuracies(logits: Float[Array, "n c"], labels: Int[Array, " n"],
                    seen: Bool[Array, " c"]) -> dict[str, Float[Array, ""]]:
  """s, u, H (argmax over all classes) and T (argmax over unseen classes only).

  Args:
    logits: test scores of every class, [n, c].
    labels: true class of each sample, [n].
    seen: which classes are seen, [c].

  Returns:
    dict with "s", "u", "H", "T" (fractions in [0, 1]; ties count as misses; all NaN
    when `logits` holds a NaN).

  Example:
    >>> out = gzsl_accuracies(jnp.zeros((2, 3)), jnp.array([0, 2]),
    ...                       jnp.array([True, False, False]))
    >>> {k: float(v) for k, v in out.items()}   # all scores tied: no credit
    {'s': 0.0, 'u': 0.0, 'H': 0.0, 'T': 0.0}
  """
  _check(logits, labels)
  if seen.shape != (logits.shape[1],):
    raise ValueError(f"seen must be [{logits.shape[1]}], got shape {seen.shape}")
  every = jnp.ones(logits.shape, bool)
  hit, bad = _wins(logits, labels, every)   # every class a candidate: every score checked
  hit = _scores(hit, bad)
  s = _per_class_mean(hit, labels, seen)
  u = _per_class_mean(hit, labels, ~seen)
  t = _per_class_mean(_scores(_wins(logits, labels, every & ~seen[None, :])[0], bad), labels,
                      ~seen)
  return {"s": s, "u": u, "H": harmonic_mean(s, u), "T": t}


def group_accuracies(logits: Float[Array, "n c"], labels: Int[Array, " n"],
                     groups: Int[Array, " c"], class_mask: Bool[Array, " c"]
                     ) -> dict[str, Float[Array, ""]]:
  """Within-group (fine) and between-group (coarse) accuracy over the classes in `class_mask`.

  Args:
    logits: test scores of every class, [n, c].
    labels: true class of each sample, [n].
    groups: the (true) group of each class, [c].
    class_mask: the classes whose samples are scored, e.g. the unseen ones, [c].

  Returns:
    dict with "within" (argmax restricted to the true group's classes) and "between"
    (the argmax over all classes lands in the true group): a tie between the true class
    and a sibling (within), or between the true group's best class and another group's
    (between), is a miss; both NaN when `logits` holds a NaN.
  """
  _check(logits, labels)
  if groups.shape != (logits.shape[1],) or class_mask.shape != (logits.shape[1],):
    raise ValueError(f"groups and class_mask must be [{logits.shape[1]}], got "
                     f"{groups.shape} and {class_mask.shape}")
  true_group = groups[labels]
  siblings = groups[None, :] == true_group[:, None]
  best_in = jnp.max(jnp.where(siblings, logits, -jnp.inf), -1)
  best_out = jnp.max(jnp.where(siblings, -jnp.inf, logits), -1)
  in_group = ~jnp.any(~siblings, -1) | (best_in > best_out)
  bad = jnp.isnan(best_in) | jnp.isnan(best_out)   # together they span every score of a row
  between = _per_class_mean(_scores(in_group, bad), labels, class_mask)
  within = _per_class_mean(_scores(_wins(logits, labels, siblings)[0], bad), labels, class_mask)
  return {"within": within, "between": between}


def chance_levels(groups: Int[Array, " c"], seen: Bool[Array, " c"]
                  ) -> dict[str, Float[Array, ""]]:
  """The metrics of a classifier that scores every class at random (the floors' reference).

  A uniformly random argmax over all c classes hits each class with probability 1/c, so
  s = u = H = 1/c; over the unseen classes only, T = 1/#unseen; among the true group's
  classes, an unseen class c is hit with probability 1 / size(group(c)) (`within`, averaged
  over the unseen classes as the per-class metric is).

  Args:
    groups: the group of each class, [c].
    seen: which classes are seen, [c] (at least one unseen).

  Returns:
    dict with "s", "u", "H", "T", "within".

  Example:
    >>> import jax.numpy as jnp
    >>> out = chance_levels(jnp.array([0, 0, 0, 1, 1]), jnp.array([True, True, False, True,
    ...                                                             False]))
    >>> round(float(out["within"]), 4), float(out["T"]), round(float(out["H"]), 4)
    (0.4167, 0.5, 0.2)
  """
  if groups.ndim != 1 or seen.shape != groups.shape:
    raise ValueError(f"groups and seen must both be [c], got {groups.shape} and {seen.shape}")
  c = groups.shape[0]
  size = jnp.sum(groups[:, None] == groups[None, :], -1).astype(jnp.float32)
  unseen = ~seen
  n_unseen = jnp.maximum(jnp.sum(unseen), 1)
  within = jnp.sum(jnp.where(unseen, 1.0 / size, 0.0)) / n_unseen
  flat = jnp.float32(1.0 / c)
  return {"s": flat, "u": flat, "H": flat, "T": 1.0 / n_unseen.astype(jnp.float32),
          "within": within}


def template_spread(weights: Float[Array, "m c d"]) -> Float[Array, ""]:
  """Sensitivity of synthesized weights to the prompt template (source).

  Mean over classes of 1 - cos(w_c^(m), mean_m w_c^(m)), averaged over sources m:
  0 when every template gives the same direction.
  """
  if weights.ndim != 3 or weights.shape[0] < 2:
    raise ValueError(f"weights must be [sources >= 2, classes, dim], got {weights.shape}")
  unit = weights / jnp.maximum(jnp.linalg.norm(weights, axis=-1, keepdims=True), 1e-12)
  mean = jnp.mean(unit, 0, keepdims=True)
  mean = mean / jnp.maximum(jnp.linalg.norm(mean, axis=-1, keepdims=True), 1e-12)
  return jnp.mean(1.0 - jnp.sum(unit * mean, -1))
