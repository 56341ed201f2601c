"""Granularity worlds with known ground truth for zero-shot classifier expansion.

Both worlds are a jaxlab interpretation of the abstract's setting (a mixture of distinct and
similar classes): G groups of fine classes with prototypes mu_c = mu_g + ratio * delta_c (`fine_coarse_ratio` is the granularity knob),
features x ~ N(mu_c, sigma^2 I), and a linear softmax head trained on the seen classes
only (`jaxlab.train.optimizer`) that gives the target weights w_c = [W_c, b_c]. The unseen
classes get no weights: a mapping must synthesize them from semantics.

* synthetic: mu_g ~ N(0, I), delta_c ~ N(0, I); semantics of source m are
  a_c^(m) = A mu_c + B n^(m) + eps_c^(m) (A a fixed random map; n^(m) a non-causal nuisance
  shared by all classes of source m; eps class-specific noise).
* semi-real: the classes of `taxonomy.json`; semantics are given per source (MiniLM
  embeddings of prompt templates); delta_c = f*(mean_m a_c^(m)) standardised, with f* a
  fixed random 2-layer MLP (the world's ground truth), plus a random group offset mu_g.

Example:
  >>> from jaxlab.zeroshot import world
  >>> w = world.synthetic_world(world.SyntheticConfig(), seed=0)
  >>> w.semantics.shape, w.weights.shape, int(w.seen.sum())
  ((5, 48, 384), (48, 65), 36)
"""

import dataclasses
import importlib.resources
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, Int

from jaxlab.train.optimizers import optimizer as build_optimizer


class World(NamedTuple):
  """One draw of a world (numpy arrays; stack draws along a new leading axis for vmap)."""
  semantics: np.ndarray   # [sources, classes, sem_dim] float32
  weights: np.ndarray     # [classes, feat_dim + 1] float32; unseen rows are zero
  seen: np.ndarray        # [classes] bool
  groups: np.ndarray      # [classes] int32, the true group
  test_x: np.ndarray      # [n_test, feat_dim + 1] float32 (bias column of ones)
  test_y: np.ndarray      # [n_test] int32


@dataclasses.dataclass(frozen=True)
class FeatureConfig:
  """Feature space and the seen-class head shared by both worlds.

  Attributes:
    feat_dim: feature dimension (64).
    fine_coarse_ratio: ratio of fine (class) to coarse (group) prototype scale (0.35).
    feature_noise: sigma of x ~ N(mu_c, sigma^2 I) (0.5).
    num_unseen: unseen classes, at least one per group while they last.
    train_per_class: training samples per seen class for the head.
    test_per_class: test samples per class (seen and unseen).
    head_steps: optimizer steps of the linear head (full batch).
    head_optimizer: its optimizer (`jaxlab.train.optimizer` keys; the experiment's
      `optimizer.head` section): constant-rate Adam at 0.05 by default.
  """
  feat_dim: int = 64
  fine_coarse_ratio: float = 0.35
  feature_noise: float = 0.5
  num_unseen: int = 12
  train_per_class: int = 40
  test_per_class: int = 40
  head_steps: int = 300
  head_optimizer: Mapping[str, Any] = dataclasses.field(
      default_factory=lambda: {"learning_rate": 0.05, "schedule": "constant"}, hash=False)


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
  """The synthetic granularity world (defaults: 8 groups x 6 classes, 384-d semantics).

  Attributes:
    num_groups: G.
    classes_per_group: fine classes per group.
    sem_dim: semantic dimension.
    num_sources: semantic sources m (templates).
    nuisance: scale of the per-source nuisance B n^(m) (relative to A mu_c, ~1 per dim).
    class_noise: scale of the class-and-source-specific noise eps_c^(m).
    features: the shared feature/head settings.
  """
  num_groups: int = 8
  classes_per_group: int = 6
  sem_dim: int = 384
  num_sources: int = 5
  nuisance: float = 1.0
  class_noise: float = 0.3
  features: FeatureConfig = FeatureConfig()


def load_taxonomy() -> dict[str, list[str]]:
  """The packaged two-level taxonomy (group -> class names), ~150 classes."""
  text = importlib.resources.files("jaxlab.zeroshot").joinpath("taxonomy.json").read_text()
  return json.loads(text)["groups"]


def _split_unseen(rng: np.random.Generator, groups: np.ndarray, num_unseen: int) -> np.ndarray:
  num_classes = groups.shape[0]
  if not 1 <= num_unseen < num_classes:
    raise ValueError(f"num_unseen must be in [1, {num_classes - 1}], got {num_unseen}")
  order = rng.permutation(num_classes)
  first = [order[np.flatnonzero(groups[order] == g)[0]] for g in np.unique(groups)]
  rest = [c for c in order if c not in set(first)]
  chosen = (list(rng.permutation(first)) + rest)[:num_unseen]
  seen = np.ones(num_classes, bool)
  seen[chosen] = False
  return seen


def train_head(x: Float[Array, "n d"], y: Int[Array, " n"], num_classes: int, *,
               steps: int, optimizer: Mapping[str, Any] | tuple) -> Float[Array, "c d1"]:
  """A linear softmax head [W, b] fitted full batch; rows of unused classes stay 0.

  Args:
    x: features [n, d].
    y: their classes [n].
    num_classes: rows of the head.
    steps: optimizer steps.
    optimizer: the optimizer's fields (`jaxlab.train.optimizer` keys), as a mapping or
      as its (key, value) items (hashable, for a static argument of `jax.jit`).

  Returns:
    [num_classes, d + 1] weights and biases.

  Example:
    >>> import jax.numpy as jnp
    >>> w = train_head(jnp.ones((4, 3)), jnp.array([0, 1, 0, 1]), 3, steps=2,
    ...                optimizer={"learning_rate": 0.05, "schedule": "constant"})
    >>> w.shape, float(abs(w[2]).sum())
    ((3, 4), 0.0)
  """
  if x.ndim != 2 or y.shape != (x.shape[0],):
    raise ValueError(f"x must be [n, d] and y [n]; got {x.shape}, {y.shape}")
  xa = jnp.concatenate([x, jnp.ones((x.shape[0], 1), x.dtype)], 1)
  present = jnp.zeros(num_classes, bool).at[y].set(True)
  opt = build_optimizer(dict(optimizer), steps, prefix="optimizer.head")

  def loss(w):
    logits = jnp.where(present[None, :], xa @ w.T, -1e9)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean() + 1e-4 * jnp.sum(w**2)

  def step(carry, _):
    w, s = carry
    g = jax.grad(loss)(w)
    upd, s = opt.update(g, s, w)
    return (optax.apply_updates(w, upd), s), None

  w0 = jnp.zeros((num_classes, xa.shape[1]))
  (w, _), _ = jax.lax.scan(step, (w0, opt.init(w0)), None, length=steps)
  return jnp.where(present[:, None], w, 0.0)


_train_head = jax.jit(train_head, static_argnames=("num_classes", "steps", "optimizer"))


def _finish(rng, semantics, mu, groups, cfg: FeatureConfig) -> World:
  num_classes, d = mu.shape
  seen = _split_unseen(rng, groups, cfg.num_unseen)
  seen_ids = np.flatnonzero(seen)
  tr_y = np.repeat(seen_ids, cfg.train_per_class)
  tr_x = mu[tr_y] + cfg.feature_noise * rng.standard_normal((tr_y.size, d))
  te_y = np.repeat(np.arange(num_classes), cfg.test_per_class)
  te_x = mu[te_y] + cfg.feature_noise * rng.standard_normal((te_y.size, d))
  w = _train_head(jnp.asarray(tr_x, jnp.float32), jnp.asarray(tr_y, jnp.int32),
                  num_classes=num_classes, steps=cfg.head_steps,
                  optimizer=tuple(sorted(cfg.head_optimizer.items())))
  te_x = np.concatenate([te_x, np.ones((te_y.size, 1))], 1)
  return World(np.asarray(semantics, np.float32), np.asarray(w, np.float32), seen,
               groups.astype(np.int32), te_x.astype(np.float32), te_y.astype(np.int32))


def synthetic_world(cfg: SyntheticConfig, seed: int) -> World:
  """One seeded draw of the synthetic granularity world."""
  if cfg.num_groups < 2 or cfg.classes_per_group < 2:
    raise ValueError("the world needs >= 2 groups of >= 2 classes, got "
                     f"{cfg.num_groups} x {cfg.classes_per_group}")
  if cfg.num_sources < 2:
    raise ValueError(f"num_sources must be >= 2, got {cfg.num_sources}")
  f = cfg.features
  rng = np.random.default_rng(seed)
  groups = np.repeat(np.arange(cfg.num_groups), cfg.classes_per_group)
  mu_g = rng.standard_normal((cfg.num_groups, f.feat_dim))
  delta = rng.standard_normal((groups.size, f.feat_dim))
  mu = mu_g[groups] + f.fine_coarse_ratio * delta
  a_map = rng.standard_normal((f.feat_dim, cfg.sem_dim)) / np.sqrt(f.feat_dim)
  nuis = rng.standard_normal((cfg.num_sources, 1, cfg.sem_dim))
  eps = rng.standard_normal((cfg.num_sources, groups.size, cfg.sem_dim))
  semantics = (mu @ a_map)[None] + cfg.nuisance * nuis + cfg.class_noise * eps
  return _finish(rng, semantics, mu, groups, f)


def semireal_world(embeddings: Float[np.ndarray, "m c s"], groups: Int[np.ndarray, " c"],
                   cfg: FeatureConfig, seed: int, *, hidden: int = 128) -> World:
  """One seeded draw of the semi-real world from per-source class embeddings.

  Args:
    embeddings: semantics per source (e.g. MiniLM embeddings of 5 templates), [m, c, s].
    groups: the taxonomy group of each class, [c].
    cfg: feature/head settings.
    seed: the draw (f*, group offsets, split, samples).
    hidden: width of the ground-truth MLP f*.
  """
  embeddings = np.asarray(embeddings, np.float32)
  if embeddings.ndim != 3 or embeddings.shape[0] < 2:
    raise ValueError(f"embeddings must be [sources >= 2, classes, dim], got {embeddings.shape}")
  if groups.shape != (embeddings.shape[1],):
    raise ValueError(f"groups must be [{embeddings.shape[1]}], got {groups.shape}")
  rng = np.random.default_rng(seed)
  _, groups = np.unique(groups, return_inverse=True)
  mean = embeddings.mean(0)
  w1 = rng.standard_normal((mean.shape[1], hidden)) / np.sqrt(mean.shape[1])
  w2 = rng.standard_normal((hidden, cfg.feat_dim)) / np.sqrt(hidden)
  delta = np.tanh(mean @ w1 * 4.0) @ w2
  delta = (delta - delta.mean(0)) / (delta.std(0) + 1e-8)
  mu_g = rng.standard_normal((groups.max() + 1, cfg.feat_dim))
  mu = mu_g[groups] + cfg.fine_coarse_ratio * delta
  return _finish(rng, embeddings, mu, groups, cfg)


def stack(worlds: list[World]) -> World:
  """Stacks draws of the same shapes along a new leading (seed) axis."""
  return World(*[np.stack(x) for x in zip(*worlds, strict=True)])


def classes_of(taxonomy: dict[str, list[str]]) -> tuple[list[str], np.ndarray]:
  """(class names, group index per class) of a taxonomy."""
  names = [n for members in taxonomy.values() for n in members]
  groups = np.concatenate([np.full(len(m), i) for i, m in enumerate(taxonomy.values())])
  return names, groups.astype(np.int32)


def unit_rows(x: Float[np.ndarray, "*b d"]) -> Float[np.ndarray, "*b d"]:
  """Rows scaled to unit norm (numpy)."""
  return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


