"""Classifier expansion end to end: fit a semantics -> weights mapping, synthesize, evaluate.

`ArmConfig` names one arm of the reproduction:

* shared mapping (ICIS): `num_groups=0`, no extra terms;
* plus source separation: every source is its own training view and L_inv ties the weights
  synthesized from different sources together (the abstract's stage 1, multi-source
  semantics, + the invariance of its stage 3);
* full GA-ZSCE (reconstruction): + k-means groups with one residual head each (the abstract's stage
  2, routing), per-group loss normalisation and the intra-group margin (stage 3). The number of groups is
  discovered from the class semantics (`group_rule`, see `routing.estimate_num_groups`);
  a fixed count is an explicit override, never the world's ground truth.

Every arm trains on all (source, class) pairs, so the arms differ only in these terms.
The world's true groups enter only the evaluation (within/between-group accuracy, the
Rand index of the discovered grouping, chance levels), never the fit.

`fit_and_evaluate` is pure and jittable (vmap it over seeds). Evaluation synthesizes the
unseen weights from each source separately, rescales them to the mean norm of the seen
weights (jaxlab interpretation: cosine losses leave the norm free, and GZSL needs seen and
unseen scores on one scale), appends them to the seen head and reports the metrics of
`jaxlab.zeroshot.metrics` averaged over sources, plus their spread across sources.

Example:
  >>> import jax
  >>> from jaxlab.zeroshot import expansion, world
  >>> w = world.synthetic_world(world.SyntheticConfig(), seed=0)
  >>> out = expansion.fit_and_evaluate(w, expansion.ArmConfig(), expansion.TrainConfig(
  ...     num_steps=5), jax.random.key(0))
  >>> sorted(out)[:3]
  ['H', 'H_template_std', 'T']
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, Int

from jaxlab.train.optimizers import optimizer
from jaxlab.zeroshot import mapping, metrics, routing
from jaxlab.zeroshot.world import World

GROUP_RULES = ("fixed",) + routing.GROUP_RULES


@dataclasses.dataclass(frozen=True)
class ArmConfig:
  """One arm. jaxlab interpretation of what the abstract leaves open (all knobs).

  Attributes:
    num_groups: residual heads (0 = one shared mapping). With `group_rule="fixed"` every
      head is a group; otherwise the largest group count considered.
    group_rule: "fixed" (use `num_groups` groups), or a rule of
      `routing.estimate_num_groups` ("silhouette", "eigengap") that picks the count in
      [min_groups, num_groups] from the class semantics.
    min_groups: smallest count a rule considers.
    num_restarts: k-means seedings per count (the lowest inertia is kept).
    routing: "hard" or "soft" routing of a class to the heads.
    temperature: soft-routing temperature.
    loss: which loss terms to use.
  """
  num_groups: int = 0
  group_rule: str = "fixed"
  min_groups: int = 2
  num_restarts: int = 1
  routing: str = "hard"
  temperature: float = 0.1
  loss: mapping.LossConfig = mapping.LossConfig()


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Mapping training (full batch; ICIS uses Adam).

  Attributes:
    num_steps: optimisation steps.
    optimizer: the optimizer's fields (`jaxlab.train.optimizer` keys; the experiment's
      `config.optimizer`): constant-rate Adam at 1e-3 by default.
    latent_dim: shared latent width.
    hidden_dim: MLP hidden width.
    kmeans_iters: Lloyd iterations of the grouping.
  """
  num_steps: int = 500
  optimizer: Mapping[str, Any] = dataclasses.field(
      default_factory=lambda: {"learning_rate": 1e-3, "schedule": "constant"}, hash=False)
  latent_dim: int = 128
  hidden_dim: int = 256
  kmeans_iters: int = 30


def make_arm(name: str, method: Any, group_rule: str | None = None) -> ArmConfig:
  """The `ArmConfig` of an arm name ("shared", "separation", "full") from a `method` section.

  Args:
    name: the arm.
    method: the experiment's `config.method` (num_groups, group_rule, max_groups,
      num_restarts, routing, temperature, lam_inv, lam_margin, margin, group_norm,
      margin_unseen).
    group_rule: the full arm's group-count rule (None = `method.group_rule`).

  Returns:
    The arm. The full arm's group count is `method.num_groups` when > 0 (an explicit
    override), else chosen by the rule in [2, `method.max_groups`]; no world count enters.

  Example:
    >>> import ml_collections
    >>> m = ml_collections.ConfigDict(dict(num_groups=0, group_rule="silhouette", max_groups=12,
    ...     num_restarts=2, routing="hard", temperature=0.1, lam_inv=1.0, lam_margin=1.0,
    ...     margin=0.5, group_norm=True, margin_unseen=True))
    >>> arm = make_arm("full", m, group_rule="eigengap")
    >>> arm.num_groups, arm.group_rule
    (12, 'eigengap')
  """
  m = method
  if name == "shared":
    return ArmConfig()
  if name == "separation":
    return ArmConfig(loss=mapping.LossConfig(lam_inv=m.lam_inv))
  if name == "full":
    fixed = m.num_groups > 0
    return ArmConfig(
        num_groups=m.num_groups if fixed else m.max_groups,
        group_rule="fixed" if fixed else (group_rule or m.group_rule),
        num_restarts=m.num_restarts, routing=m.routing, temperature=m.temperature,
        loss=mapping.LossConfig(lam_inv=m.lam_inv, lam_margin=m.lam_margin, margin=m.margin,
                                group_norm=m.group_norm, margin_unseen=m.margin_unseen))
  raise ValueError(f"Unknown arm {name!r}; expected shared, separation or full")


def prepare_semantics(semantics: jax.Array) -> jax.Array:
  """Centres the semantics over all (source, class) pairs and scales rows to unit norm.

  Sentence embeddings share a large common component; centring lets cosine losses see the
  class-specific part (jaxlab interpretation, applied identically to every arm).
  """
  if semantics.ndim != 3:
    raise ValueError(f"semantics must be [sources, classes, dim], got {semantics.shape}")
  x = semantics - jnp.mean(semantics, (0, 1), keepdims=True)
  return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def class_routes(semantics: Float[Array, "m c s"], arm: ArmConfig, key: jax.Array, *,
                 num_iters: int = 30) -> tuple[Float[Array, "c k"], Int[Array, " c"],
                                               Int[Array, ""]]:
  """Discovers the class groups from the source-mean semantics and routes to them.

  Args:
    semantics: prepared per-source class semantics (`prepare_semantics`), [m, c, s].
    arm: the arm (its grouping fields).
    key: PRNG key of the k-means seedings.
    num_iters: Lloyd iterations.

  Returns:
    (routing weights [c, k] with k = max(arm.num_groups, 1), cluster id of each class [c],
    the number of groups used).
  """
  if arm.group_rule not in GROUP_RULES:
    raise ValueError(f"arm.group_rule must be one of {GROUP_RULES}, got {arm.group_rule!r}")
  c = semantics.shape[1]
  if arm.num_groups == 0:
    return jnp.ones((c, 1)), jnp.zeros(c, jnp.int32), jnp.int32(1)
  mean = jnp.mean(semantics, 0)
  if arm.group_rule == "fixed":
    count = jnp.int32(arm.num_groups)
  else:
    count, _ = routing.estimate_num_groups(
        mean, key, max_groups=arm.num_groups, min_groups=arm.min_groups, rule=arm.group_rule,
        num_iters=num_iters, num_restarts=arm.num_restarts)
  assign, centers = routing.kmeans(mean, arm.num_groups, key, num_iters=num_iters,
                                   num_active=count, num_restarts=arm.num_restarts)
  routes = routing.route(mean, centers, routing=arm.routing, temperature=arm.temperature,
                         num_active=count)
  return routes, assign, count


def group_count(world: World, arm: ArmConfig, train: TrainConfig,
                key: jax.Array) -> Int[Array, ""]:
  """The number of groups `fit_and_evaluate(world, arm, train, key)` uses (cheap: no fit).

  Args:
    world: one draw (arrays without a seed axis).
    arm: the arm.
    train: training settings (its k-means iterations).
    key: the same PRNG key as given to `fit_and_evaluate`.

  Returns:
    The count (1 for the shared mapping).
  """
  _, k_route = jax.random.split(key)
  sem = prepare_semantics(jnp.asarray(world.semantics))
  return class_routes(sem, arm, k_route, num_iters=train.kmeans_iters)[2]


def fit_and_evaluate(world: World, arm: ArmConfig, train: TrainConfig,
                     key: jax.Array) -> dict[str, jax.Array]:
  """Trains one arm on one world draw and evaluates GZSL/ZSL and granularity metrics.

  Args:
    world: one draw (arrays without a seed axis).
    arm: the arm.
    train: training settings.
    key: PRNG key (initialisation and k-means seeding).

  Returns:
    dict of scalars: s, u, H, T, within, between (unseen classes; means over sources),
    H_template_std and within_template_std (std over sources), weight_spread
    (`metrics.template_spread` of the unseen weights), loss (final), num_groups_found
    (the groups the arm discovered; 1 for the shared mapping), num_groups_true (the
    world's, for scoring), cluster_rand_index
    (pairwise Rand index of the routing's class grouping against the true groups), and
    the world's chance levels `chance_<metric>` (`metrics.chance_levels`).
  """
  if arm.routing not in routing.ROUTINGS:
    raise ValueError(f"arm.routing must be one of {routing.ROUTINGS}, got {arm.routing!r}")
  if arm.group_rule not in GROUP_RULES:
    raise ValueError(f"arm.group_rule must be one of {GROUP_RULES}, got {arm.group_rule!r}")
  k_init, k_route = jax.random.split(key)
  sem = prepare_semantics(jnp.asarray(world.semantics))
  weights, seen = jnp.asarray(world.weights), jnp.asarray(world.seen)
  routes, assign, count = class_routes(sem, arm, k_route, num_iters=train.kmeans_iters)
  model = mapping.DualMapping(sem_dim=sem.shape[-1], weight_dim=weights.shape[-1],
                              latent_dim=train.latent_dim, hidden_dim=train.hidden_dim,
                              num_groups=arm.num_groups)
  params = model.init(k_init, sem, jnp.broadcast_to(weights, sem.shape[:1] + weights.shape),
                      routes)
  opt = optimizer(train.optimizer, train.num_steps)

  def loss_fn(p):
    return mapping.mapping_loss(model, p, sem, weights, seen, routes, arm.loss)[0]

  def step(carry, _):
    p, s = carry
    loss, g = jax.value_and_grad(loss_fn)(p)
    upd, s = opt.update(g, s, p)
    return (optax.apply_updates(p, upd), s), loss

  (params, _), losses = jax.lax.scan(step, (params, opt.init(params)), None,
                                     length=train.num_steps)

  synth = model.apply(params, sem, routes, method=model.synthesize)   # [m, c, w]
  seen_norm = jnp.sum(jnp.where(seen[:, None], jnp.linalg.norm(weights, axis=-1,
                                                              keepdims=True), 0.0))
  seen_norm = seen_norm / jnp.maximum(seen.sum(), 1)
  synth = synth / jnp.maximum(jnp.linalg.norm(synth, axis=-1, keepdims=True), 1e-8) * seen_norm
  groups = jnp.asarray(world.groups)
  test_x, test_y = jnp.asarray(world.test_x), jnp.asarray(world.test_y)

  def evaluate(w_synth):
    full = jnp.where(seen[:, None], weights, w_synth)
    logits = test_x @ full.T
    out = metrics.gzsl_accuracies(logits, test_y, seen)
    out.update(metrics.group_accuracies(logits, test_y, groups, ~seen))
    return out

  per_source = jax.vmap(evaluate)(synth)
  result = {k: jnp.mean(v) for k, v in per_source.items()}
  result["H_template_std"] = jnp.std(per_source["H"])
  result["within_template_std"] = jnp.std(per_source["within"])
  # metrics.template_spread restricted to the unseen rows (a mask keeps shapes static).
  unit = synth / jnp.maximum(jnp.linalg.norm(synth, axis=-1, keepdims=True), 1e-12)
  mean = jnp.mean(unit, 0)
  mean = mean / jnp.maximum(jnp.linalg.norm(mean, axis=-1, keepdims=True), 1e-12)
  dist = 1.0 - jnp.sum(unit * mean[None], -1)  # [m, c]
  result["weight_spread"] = jnp.sum(jnp.where(~seen[None], dist, 0.0)) / jnp.maximum(
      (~seen).sum() * synth.shape[0], 1)
  result["loss"] = losses[-1]
  same_true = groups[:, None] == groups[None, :]
  same_found = assign[:, None] == assign[None, :]
  # Pairwise agreement (Rand index) of the discovered grouping with the true one.
  result["cluster_rand_index"] = jnp.mean(same_true == same_found)
  result["num_groups_found"] = count
  # Scoring context only (how many groups the world really has).
  result["num_groups_true"] = jnp.sum(jnp.zeros(groups.shape[0]).at[groups].add(1.0) > 0)
  result.update({f"chance_{k}": v for k, v in metrics.chance_levels(groups, seen).items()})
  return result

