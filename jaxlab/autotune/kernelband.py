"""KernelBand (Ran et al., ICML 2026) as its official code implements it (systems.md 3a).

A frontier P of valid candidates (seeded with the default config), K
behavioural clusters of P (K-means++ on z-scored features phi), and a K x S
bandit over (cluster, strategy) arms. Each iteration follows the authors'
`kernelband/agents/optim_agent.py: OptimAgent.run`, phases 0-4:

1. re-cluster once `|P|` >= 2K and then every `tau` iterations counted from the
   last clustering (the code's deviation D1); until the first clustering every
   member is in cluster 0 and the other clusters are empty; a child joins the
   cluster of the arm that produced it;
2. profile each cluster's representative (`clustering.py:
   get_cluster_representative`: the member nearest the centroid in raw phi,
   or the fastest member before any clustering); a profiled kernel keeps its
   hardware signature h, the others have none (the code runs NCU only on
   representatives);
3. mask M[i, s] = h(rep_i)[target(s)] < theta_sat (`masking.py`); a cluster
   whose strategies are all masked gets one back; empty clusters are masked;
4. select the masked-UCB arm argmax mu + c sqrt(ln t / N), t = max(rounds, 1)
   (`ucb.py: UCBSelector.select`, paper Eq. 3);
5. draw the parent in cluster i by a softmax over V_hw = theta_sat -
   h[target(s)] in percent at temperature 1, a kernel without a hardware
   signature scoring 0 (`ucb.py: UCBSelector.sample_from_cluster`; the
   `parent_rule` knob keeps other readings);
6. the proposer edits the parent with strategy s; the evaluator measures it;
7. reward max(0, (T_parent - T_child) / T_parent), 0 for an invalid child,
   and the arm is updated either way (D2); a valid child joins P.

Example:
  >>> import numpy as np
  >>> from jaxlab.autotune import cost_model, proposers, space
  >>> task = space.Task("matmul", (256, 256, 256), "bfloat16", "h100")
  >>> kb = KernelBand(cost_model.CostModelEvaluator(), proposers.LocalProposer())
  >>> result = kb.search(task, budget=10, seed=0)
  >>> len(result.trials)
  10
"""

import abc
import dataclasses
import math
from collections.abc import Sequence

import numpy as np
from jaxtyping import Bool, Float, Int

from jaxlab.autotune import space
from pallas_kernels.tuning import KernelConfig

# ---------------------------------------------------------------------------------------------
# Pure pieces (unit-tested against hand-computed values).


def ucb_scores(mu: Float[np.ndarray, "k s"], n: Float[np.ndarray, "k s"], t: int, c: float,
               mask: Bool[np.ndarray, "k s"]) -> Float[np.ndarray, "k s"]:
  """mu + c sqrt(ln t / N) where mask, -inf elsewhere (paper Eq. 3).

  Example:
    >>> mu, n = np.full((2, 3), 0.5), np.ones((2, 3))
    >>> mask = np.ones((2, 3), bool); mask[0, 0] = False       # a saturated resource
    >>> scores = ucb_scores(mu, n, 10, 2.0, mask)
    >>> float(scores[0, 0]), round(float(scores[0, 1]), 3)     # 0.5 + 2 sqrt(ln 10)
    (-inf, 3.535)
  """
  bonus = c * np.sqrt(math.log(max(t, 1)) / np.asarray(n, float))
  return np.where(mask, mu + bonus, -np.inf)


def ucb_select(mu, n, t: int, c: float, mask) -> tuple[int, int]:
  """The (cluster, strategy) arm with the largest masked UCB (first in row-major order on ties).

  Example:
    >>> mu, n = np.full((2, 3), 0.5), np.ones((2, 3))
    >>> mask = np.ones((2, 3), bool); mask[0, 0] = False
    >>> ucb_select(mu, n, 10, 2.0, mask)                       # first unmasked arm on ties
    (0, 1)
  """
  scores = ucb_scores(mu, n, t, c, mask)
  if not np.isfinite(scores).any():
    raise ValueError("every arm is masked")
  i, s = np.unravel_index(int(np.argmax(scores)), scores.shape)
  return int(i), int(s)


def ucb_update(mu: np.ndarray, n: np.ndarray, arm: tuple[int, int], reward: float) -> None:
  """N += 1; mu += (r - mu) / N, in place (the code's D2: also after failures, with r = 0).

  Example:
    >>> mu, n = np.full((2, 3), 0.5), np.ones((2, 3))
    >>> ucb_update(mu, n, (1, 2), 1.0)
    >>> float(mu[1, 2]), float(n[1, 2])
    (0.75, 2.0)
  """
  n[arm] += 1
  mu[arm] += (reward - mu[arm]) / n[arm]


def reward(parent_time: float, child_time: float, ok: bool) -> float:
  """max(0, (T_parent - T_child) / T_parent); 0 for a failed child.

  Example:
    >>> reward(2.0, 1.5, True), reward(2.0, 1.5, False), reward(1.0, 2.0, True)
    (0.25, 0.0, 0.0)
  """
  if not ok or not np.isfinite(child_time):
    return 0.0
  return max(0.0, (parent_time - child_time) / parent_time)


def kmeans_pp(x: Float[np.ndarray, "p f"], k: int, *, seed: int = 42,
              iters: int = 50) -> tuple[Int[np.ndarray, "p"], Float[np.ndarray, "k f"]]:
  """K-means++ (seeded init, `iters` Lloyd steps) on rows of x; deterministic given seed.

  Returns (labels [p], centroids [k, f]); needs p >= k.

  Example:
    >>> x = np.array([[0.0, 0.0], [0.0, 1.0], [10.0, 10.0], [10.0, 11.0]])
    >>> labels, centroids = kmeans_pp(x, 2)
    >>> labels.tolist(), centroids.tolist()
    ([0, 0, 1, 1], [[0.0, 0.5], [10.0, 10.5]])
  """
  x = np.asarray(x, float)
  if x.ndim != 2 or len(x) < k or k < 1:
    raise ValueError(f"kmeans_pp needs >= k={k} rows of a 2-D array, got shape {x.shape}")
  # A NaN row has no distance to anything: it would join an arbitrary cluster and turn that
  # centroid NaN, so a non-finite x is an error, not a point.
  if not np.all(np.isfinite(x)):
    raise ValueError(f"x must be finite; got {int(np.sum(~np.isfinite(x)))} non-finite values")
  rng = np.random.default_rng(seed)
  centers = [x[rng.integers(len(x))]]
  for _ in range(1, k):
    d2 = np.min([np.sum((x - c) ** 2, 1) for c in centers], 0)
    total = d2.sum()
    p = d2 / total if total > 0 else np.full(len(x), 1 / len(x))
    centers.append(x[rng.choice(len(x), p=p)])
  cent = np.array(centers)
  labels = np.zeros(len(x), int)
  for _ in range(iters):
    labels = np.argmin(((x[:, None] - cent[None]) ** 2).sum(-1), 1)
    new = np.array([x[labels == j].mean(0) if np.any(labels == j) else cent[j]
                    for j in range(k)])
    if np.allclose(new, cent):
      break
    cent = new
  return labels, cent


def hardware_mask(h_rep: Float[np.ndarray, "k 3"], nonempty: Bool[np.ndarray, "k"],
                  theta_sat: Float[np.ndarray, "3"],
                  targets: Sequence[int] = tuple(space.STRATEGY_TARGET)) -> np.ndarray:
  """The hardware mask M [k, s] of each cluster's representative signature.

  Follows the authors' `kernelband/mab/masking.py: HardwareMasker.compute_masks`:
  M[i, s] = h_rep[i, target(s)] < theta_sat[target(s)]. A cluster with every
  strategy masked gets exactly one back, as `_find_least_saturated_strategy`
  picks it: the first strategy with the largest headroom theta - h, searched
  from a best headroom of -1, so when every headroom is <= -1 points it is
  strategy 0. Empty clusters are masked entirely (`optim_agent.py`, phase 0).

  Args:
    h_rep: each cluster's representative utilisation [compute, DRAM, capacity] in %.
    nonempty: whether each cluster has a member.
    theta_sat: the saturation threshold in %, one per resource (or a scalar).
    targets: the resource each strategy targets (`space.STRATEGY_TARGET`).

  Returns:
    Bool [k, s]: True where the arm may be played.

  Example:
    >>> m = hardware_mask(np.array([[90.0, 80.0, 60.0]]), np.array([True]), np.full(3, 75.0))
    >>> m.astype(int).tolist()
    [[1, 0, 0, 0, 0, 0]]
  """
  targets = np.asarray(targets)
  h_rep, theta = np.asarray(h_rep, float), np.broadcast_to(np.asarray(theta_sat, float), (3,))
  if h_rep.ndim != 2 or h_rep.shape[1] != 3:
    raise ValueError(f"h_rep must be [clusters, 3], got shape {h_rep.shape}")
  mask = h_rep[:, targets] < theta[targets]
  for i in range(len(mask)):
    if not mask[i].any():
      headroom = theta[targets] - h_rep[i, targets]
      mask[i, int(np.argmax(headroom)) if headroom.max() > -1.0 else 0] = True
  mask[~np.asarray(nonempty, bool)] = False
  return mask


def parent_probabilities(v_hw: Float[np.ndarray, "p"], profiled: Bool[np.ndarray, "p"],
                         temperature: float = 1.0) -> Float[np.ndarray, "p"]:
  """Probabilities of each cluster member to be the parent: softmax(V / temperature).

  Follows the authors' `kernelband/mab/ucb.py: UCBSelector.sample_from_cluster`:
  V = V_hw(k, s) = theta_sat - h(k)[target(s)] (in percent, as NCU reports it)
  for a member with a hardware signature, 0 ("neutral") for one without.

  Args:
    v_hw: each member's headroom theta_sat - h[target] in % (ignored where not profiled).
    profiled: whether each member has a hardware signature.
    temperature: the softmax temperature (the code's `within_cluster_temperature`, 1.0).

  Returns:
    Probabilities [p] summing to 1.

  Example:
    >>> parent_probabilities(np.array([1.0, 50.0]), np.array([True, False])).round(3).tolist()
    [0.731, 0.269]
  """
  v_hw, profiled = np.asarray(v_hw, float), np.asarray(profiled, bool)
  if v_hw.ndim != 1 or v_hw.shape != profiled.shape or not len(v_hw):
    raise ValueError(f"v_hw and profiled must be equal-length non-empty vectors, got shapes "
                     f"{v_hw.shape} and {profiled.shape}")
  if not temperature > 0:
    raise ValueError(f"temperature must be > 0, got {temperature}")
  v = np.where(profiled, v_hw, 0.0) / temperature
  if not np.all(np.isfinite(v)):
    raise ValueError(f"v_hw must be finite where profiled, got {v_hw}")
  p = np.exp(v - v.max())
  return p / p.sum()


# ---------------------------------------------------------------------------------------------
# The search loop shared by KernelBand and the baselines.


@dataclasses.dataclass
class Entry:
  """A measured config in the tuner's archive: its time (s), utilisation h [3] (%) and
  features phi [5] (`cost_model.analyze`'s)."""
  config: KernelConfig
  time: float
  h: np.ndarray
  phi: np.ndarray


@dataclasses.dataclass(frozen=True)
class Trial:
  """One proposal: its strategy, parent time, child, measurement and reward."""
  strategy: str
  cluster: int
  parent_time: float
  config: KernelConfig
  ok: bool
  time: float
  reward: float


@dataclasses.dataclass
class SearchResult:
  """The default entry, every trial in order, and the final frontier."""
  task: space.Task
  default: Entry
  trials: list[Trial]
  frontier: list[Entry]

  def best_after(self, t: int) -> KernelConfig:
    """The config with the best measured time among the default and the first t trials."""
    best, best_t = self.default.config, self.default.time
    for tr in self.trials[:t]:
      if tr.ok and tr.time < best_t:
        best, best_t = tr.config, tr.time
    return best

  def any_valid_after(self, t: int) -> bool:
    return any(tr.ok for tr in self.trials[:t])


class Policy(abc.ABC):
  """Chooses (parent index, strategy index, cluster) and learns from rewards."""

  def reset(self, rng: np.random.Generator) -> None:
    self.rng = rng

  @abc.abstractmethod
  def choose(self, frontier: list[Entry], step: int) -> tuple[int, int, int]:
    """(parent index, strategy index, cluster) for the next candidate."""

  def update(self, frontier: list[Entry], cluster: int, strategy: int, r: float,  # noqa: B027
             child: Entry | None) -> None:
    """Learns from a reward; the baselines do not learn, so the default does nothing."""


# How the parent is drawn within the chosen cluster (the `parent_rule` knob).
PARENT_RULES = ("code", "all_profiled", "uniform", "fastest")


class KernelBandPolicy(Policy):
  """Clusters + hardware mask + masked UCB + the parent rule (module docstring).

  Args:
    num_clusters: K (3 in the code; 1 = the "no clustering" ablation).
    tau: re-clustering period (D1: counted from the last clustering).
    c: UCB exploration constant (2.0).
    theta_sat: saturation threshold in %, a scalar or one per resource
      (compute, DRAM, capacity); 75 in the code.
    mask: apply the hardware mask (False = the "no mask" ablation: every arm of
      a non-empty cluster stays playable; the parent rule still uses theta_sat).
    parent_rule: how the parent is drawn within the chosen cluster:

      * "code" (default, the authors' `ucb.py: sample_from_cluster`): softmax over
        V_hw = theta_sat - h[target] in % at `parent_temperature`, where only
        kernels that were once a cluster representative carry a signature and
        the others score 0;
      * "all_profiled" (jaxlab interpretation, this module's earlier reading): the
        same softmax with every kernel profiled;
      * "uniform" (jaxlab interpretation): uniform over the cluster;
      * "fastest" (the code's fallback without hardware signatures): the fastest
        member.

    parent_temperature: softmax temperature over headroom in % (1.0 in the code).
    mu0, n0: initial mean reward (0.5) and visit count (1) of every arm.
    kmeans_seed, kmeans_iters: K-means++ seed (42) and Lloyd iterations (50); the
      seed restarts at each clustering (the code keeps one generator running).
  """

  def __init__(self, *, num_clusters: int = 3, tau: int = 10, c: float = 2.0,
               theta_sat: float | Sequence[float] = 75.0, mask: bool = True,
               parent_rule: str = "code", parent_temperature: float = 1.0,
               mu0: float = 0.5, n0: float = 1.0, kmeans_seed: int = 42, kmeans_iters: int = 50):
    if num_clusters < 1 or tau < 1 or c < 0 or parent_temperature <= 0:
      raise ValueError("need num_clusters >= 1, tau >= 1, c >= 0 and parent_temperature > 0")
    if parent_rule not in PARENT_RULES:
      raise ValueError(f"parent_rule must be one of {PARENT_RULES}, got {parent_rule!r}")
    self.theta = np.broadcast_to(np.asarray(theta_sat, float), (3,)).copy()
    if not np.all(np.isfinite(self.theta)):
      raise ValueError(f"theta_sat must be finite (mask=False is the no-mask ablation), "
                       f"got {theta_sat}")
    self.k, self.tau, self.c = int(num_clusters), int(tau), float(c)
    self.use_mask, self.parent_rule = bool(mask), parent_rule
    self.temp, self.mu0, self.n0 = float(parent_temperature), float(mu0), float(n0)
    self.kmeans_seed, self.kmeans_iters = kmeans_seed, kmeans_iters

  def reset(self, rng):
    super().reset(rng)
    s = len(space.STRATEGIES)
    self.mu = np.full((self.k, s), self.mu0)
    self.n = np.full((self.k, s), self.n0)
    self.t = 0                      # rounds played (the code's total_t)
    self.labels: list[int] = []     # cluster of each frontier member
    self.profiled: list[bool] = []  # whether each member has a hardware signature
    self.centroids = None           # [k, 5] in raw phi, as the code denormalises them
    self.last_cluster = None

  def _track(self, frontier: list[Entry], cluster: int) -> None:
    """New frontier members join `cluster` unprofiled (the code: the arm's cluster)."""
    while len(self.labels) < len(frontier):
      self.labels.append(cluster)
      self.profiled.append(False)

  def _maybe_recluster(self, frontier: list[Entry], step: int) -> None:
    due = self.last_cluster is None or step - self.last_cluster >= self.tau
    if len(frontier) >= 2 * self.k and due:
      phi = np.array([e.phi for e in frontier])
      mean, std = phi.mean(0), phi.std(0)
      std = np.where(std < 1e-8, 1.0, std)
      labels, cent = kmeans_pp((phi - mean) / std, self.k, seed=self.kmeans_seed,
                               iters=self.kmeans_iters)
      self.centroids = cent * std + mean
      self.labels = [int(v) for v in labels]
      self.last_cluster = step

  def _representatives(self, frontier: list[Entry]) -> list[int | None]:
    """Each cluster's representative index (None if empty), profiled from now on."""
    labels, reps = np.array(self.labels), []
    for i in range(self.k):
      idx = np.flatnonzero(labels == i)
      if len(idx) == 0:
        reps.append(None)
        continue
      if self.centroids is None:
        key = [frontier[j].time for j in idx]
      else:
        key = [np.linalg.norm(frontier[j].phi - self.centroids[i]) for j in idx]
      rep = int(idx[int(np.argmin(key))])
      self.profiled[rep] = True
      reps.append(rep)
    return reps

  def parent_distribution(self, frontier: list[Entry], cluster: int,
                          strategy: int) -> tuple[np.ndarray, np.ndarray]:
    """(member indices, probabilities) of the parent draw in `cluster` under `parent_rule`."""
    idx = np.flatnonzero(np.array(self.labels) == cluster)
    if len(idx) == 0:  # the code falls back to the whole frontier
      idx = np.arange(len(frontier))
    target = space.STRATEGY_TARGET[strategy]
    profiled = np.array([self.profiled[j] for j in idx])
    fastest = np.zeros(len(idx))
    fastest[int(np.argmin([frontier[j].time for j in idx]))] = 1.0
    if self.parent_rule == "fastest" or (self.parent_rule == "code" and not profiled.any()):
      return idx, fastest
    if self.parent_rule == "uniform":
      return idx, np.full(len(idx), 1.0 / len(idx))
    if self.parent_rule == "all_profiled":
      profiled = np.ones(len(idx), bool)
    v = np.array([self.theta[target] - frontier[j].h[target] for j in idx])
    return idx, parent_probabilities(v, profiled, self.temp)

  def choose(self, frontier, step):
    self._track(frontier, 0)  # the seed kernel(s) start in cluster 0
    self._maybe_recluster(frontier, step)
    reps = self._representatives(frontier)
    nonempty = np.array([r is not None for r in reps])
    if self.use_mask:
      h_rep = np.array([frontier[r].h if r is not None else np.zeros(3) for r in reps])
      mask = hardware_mask(h_rep, nonempty, self.theta)
    else:
      mask = np.repeat(nonempty[:, None], len(space.STRATEGIES), 1)
    i, s = ucb_select(self.mu, self.n, max(self.t, 1), self.c, mask)
    idx, p = self.parent_distribution(frontier, i, s)
    return int(self.rng.choice(idx, p=p)), s, i

  def update(self, frontier, cluster, strategy, r, child):
    self._track(frontier, cluster)
    ucb_update(self.mu, self.n, (cluster, strategy), r)
    self.t += 1


def run_search(task: space.Task, policy: Policy, evaluator, proposer, *, budget: int,
               seed: int) -> SearchResult:
  """`budget` proposals from the default config; every proposal is one evaluation.

  Args:
    task: what to tune.
    policy: how parent and strategy are chosen (`KernelBandPolicy` or a baseline).
    evaluator: `.evaluate(task, config, rng) -> Measurement` and `.device_kind(task)`.
    proposer: `.propose(task, parent, strategy, rng) -> KernelConfig | None` (None = invalid).
    budget: number of proposals T (>= 1).
    seed: drives the evaluator noise, the proposer and the policy.

  Returns:
    A `SearchResult`.

  Example:
    >>> from jaxlab.autotune import CostModelEvaluator, LocalProposer
    >>> task = space.Task("matmul", (1024, 1024, 1024), "bfloat16", "h100")
    >>> result = run_search(task, KernelBandPolicy(), CostModelEvaluator(), LocalProposer(),
    ...                     budget=10, seed=0)
    >>> len(result.trials), result.best_after(10) != result.default.config
    (10, True)
  """
  if int(budget) < 1:
    raise ValueError(f"budget must be >= 1, got {budget}")
  rng = np.random.default_rng(seed)
  default = space.default_config(task, evaluator.device_kind(task))
  m = evaluator.evaluate(task, default, rng)
  if not m.ok:
    raise ValueError(f"{task.name}: the default config {default} is invalid: {m.error}")
  frontier = [Entry(default, m.time, m.h, m.phi)]
  seen = {default}
  policy.reset(rng)
  trials = []
  for step in range(int(budget)):
    parent_idx, s, cluster = policy.choose(frontier, step)
    parent = frontier[parent_idx]
    child_cfg = proposer.propose(task, parent.config, space.STRATEGIES[s], rng)
    if child_cfg is None:
      ok, t, child = False, float("inf"), None
    else:
      cm = evaluator.evaluate(task, child_cfg, rng)
      ok, t = cm.ok, cm.time
      child = Entry(child_cfg, cm.time, cm.h, cm.phi) if cm.ok else None
    r = reward(parent.time, t, ok)
    trials.append(Trial(space.STRATEGIES[s], cluster, parent.time, child_cfg or parent.config,
                        ok, t, r))
    if child is not None and child_cfg not in seen:
      frontier.append(child)
      seen.add(child_cfg)
    policy.update(frontier, cluster, s, r, child)
  return SearchResult(task, frontier[0], trials, frontier)


class KernelBand:
  """KernelBand over one evaluator and proposer; `search(task, budget, seed)`."""

  def __init__(self, evaluator, proposer, **policy_kwargs):
    self.evaluator, self.proposer = evaluator, proposer
    self.policy_kwargs = policy_kwargs

  def search(self, task: space.Task, budget: int, seed: int = 0) -> SearchResult:
    return run_search(task, KernelBandPolicy(**self.policy_kwargs), self.evaluator,
                      self.proposer, budget=budget, seed=seed)
