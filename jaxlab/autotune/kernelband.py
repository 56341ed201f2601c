"""KernelBand (Ran et al., ICML 2026) as its official code implements it (systems.md 3a).

A frontier P of valid candidates (seeded with the default config), K
behavioural clusters of P (K-means++ on z-scored features phi), and a K x S
bandit over (cluster, strategy) arms:

1. re-cluster every `tau` iterations once |P| >= 2K, counted from the last
   clustering (the code's deviation D1); until then every member is in
   cluster 0 and the other clusters are empty;
2. mask M[i, s] = h(rep_i)[target(s)] < theta_sat, rep_i the member nearest
   cluster i's centroid; a cluster whose strategies are all masked unmasks
   those of its most-headroom resource; empty clusters are fully masked;
3. select the masked-UCB arm argmax mu + c sqrt(ln t / N);
4. draw the parent in cluster i by a softmax over headroom theta_sat - h[target(s)];
5. the proposer edits the parent with strategy s; the evaluator measures it;
6. reward max(0, (T_parent - T_child) / T_parent), 0 for an invalid child,
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
  """mu + c sqrt(ln t / N) where mask, -inf elsewhere (paper Eq. 3)."""
  bonus = c * np.sqrt(math.log(max(t, 1)) / np.asarray(n, float))
  return np.where(mask, mu + bonus, -np.inf)


def ucb_select(mu, n, t: int, c: float, mask) -> tuple[int, int]:
  """The (cluster, strategy) arm with the largest masked UCB (first in row-major order on ties)."""
  scores = ucb_scores(mu, n, t, c, mask)
  if not np.isfinite(scores).any():
    raise ValueError("every arm is masked")
  i, s = np.unravel_index(int(np.argmax(scores)), scores.shape)
  return int(i), int(s)


def ucb_update(mu: np.ndarray, n: np.ndarray, arm: tuple[int, int], reward: float) -> None:
  """N += 1; mu += (r - mu) / N, in place (the code's D2: also after failures, with r = 0)."""
  n[arm] += 1
  mu[arm] += (reward - mu[arm]) / n[arm]


def reward(parent_time: float, child_time: float, ok: bool) -> float:
  """max(0, (T_parent - T_child) / T_parent); 0 for a failed child."""
  if not ok or not np.isfinite(child_time):
    return 0.0
  return max(0.0, (parent_time - child_time) / parent_time)


def kmeans_pp(x: Float[np.ndarray, "p f"], k: int, *, seed: int = 42,
              iters: int = 50) -> tuple[Int[np.ndarray, "p"], Float[np.ndarray, "k f"]]:
  """K-means++ (seeded init, `iters` Lloyd steps) on rows of x; deterministic given seed.

  Returns (labels [p], centroids [k, f]); needs p >= k.
  """
  x = np.asarray(x, float)
  if x.ndim != 2 or len(x) < k or k < 1:
    raise ValueError(f"kmeans_pp needs >= k={k} rows of a 2-D array, got shape {x.shape}")
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
  """M[i, s] = h_rep[i, target(s)] < theta_sat[target(s)]; all-masked rows unmask the strategies
  of their most-headroom resource; empty clusters are fully masked."""
  targets = np.asarray(targets)
  h_rep, theta = np.asarray(h_rep, float), np.broadcast_to(np.asarray(theta_sat, float), (3,))
  mask = h_rep[:, targets] < theta[targets]
  for i in range(len(mask)):
    if not mask[i].any():
      best = int(np.argmax(theta - h_rep[i]))
      mask[i] = targets == best
  mask[~np.asarray(nonempty, bool)] = False
  return mask


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


class KernelBandPolicy(Policy):
  """Clusters + hardware mask + masked UCB + softmax-over-headroom parent (module docstring).

  Args:
    num_clusters: K (3 in the code; 1 = the "no clustering" ablation).
    tau: re-clustering period (D1: counted from the last clustering).
    c: UCB exploration constant (2.0).
    theta_sat: saturation threshold in %, a scalar or one per resource
      (compute, DRAM, capacity); inf = the "no mask" ablation.
    parent_temperature: softmax temperature over headroom in % (jaxlab
      interpretation: the code's temperature 1 on NCU percentages).
    mu0, n0: initial mean reward (0.5) and visit count (1) of every arm.
    kmeans_seed, kmeans_iters: K-means++ seed (42) and Lloyd iterations (50).
  """

  def __init__(self, *, num_clusters: int = 3, tau: int = 10, c: float = 2.0,
               theta_sat: float | Sequence[float] = 75.0, parent_temperature: float = 1.0,
               mu0: float = 0.5, n0: float = 1.0, kmeans_seed: int = 42, kmeans_iters: int = 50):
    if num_clusters < 1 or tau < 1 or c < 0 or parent_temperature <= 0:
      raise ValueError("need num_clusters >= 1, tau >= 1, c >= 0 and parent_temperature > 0")
    self.k, self.tau, self.c = int(num_clusters), int(tau), float(c)
    self.theta = np.broadcast_to(np.asarray(theta_sat, float), (3,)).copy()
    self.temp, self.mu0, self.n0 = float(parent_temperature), float(mu0), float(n0)
    self.kmeans_seed, self.kmeans_iters = kmeans_seed, kmeans_iters

  def reset(self, rng):
    super().reset(rng)
    s = len(space.STRATEGIES)
    self.mu = np.full((self.k, s), self.mu0)
    self.n = np.full((self.k, s), self.n0)
    self.t = 1
    self.labels: list[int] = []
    self.centroids = None
    self.norm = None
    self.last_cluster = None

  def _assign(self, phi: np.ndarray) -> int:
    if self.centroids is None:
      return 0
    z = (phi - self.norm[0]) / self.norm[1]
    return int(np.argmin(((self.centroids - z) ** 2).sum(-1)))

  def _maybe_recluster(self, frontier: list[Entry], step: int) -> None:
    while len(self.labels) < len(frontier):  # new members join their nearest cluster
      self.labels.append(self._assign(frontier[len(self.labels)].phi))
    due = self.last_cluster is None or step - self.last_cluster >= self.tau
    if self.k > 1 and len(frontier) >= 2 * self.k and due:
      phi = np.array([e.phi for e in frontier])
      mean, std = phi.mean(0), phi.std(0)
      std = np.where(std > 0, std, 1.0)
      labels, self.centroids = kmeans_pp((phi - mean) / std, self.k, seed=self.kmeans_seed,
                                         iters=self.kmeans_iters)
      self.norm = (mean, std)
      self.labels = [int(v) for v in labels]
      self.last_cluster = step

  def _mask(self, frontier: list[Entry]) -> np.ndarray:
    labels = np.array(self.labels)
    h_rep = np.zeros((self.k, 3))
    nonempty = np.zeros(self.k, bool)
    for i in range(self.k):
      idx = np.flatnonzero(labels == i)
      if len(idx) == 0:
        continue
      nonempty[i] = True
      if self.centroids is None:
        rep = idx[int(np.argmin([frontier[j].time for j in idx]))]
      else:
        z = (np.array([frontier[j].phi for j in idx]) - self.norm[0]) / self.norm[1]
        rep = idx[int(np.argmin(((z - self.centroids[i]) ** 2).sum(-1)))]
      h_rep[i] = frontier[rep].h
    return hardware_mask(h_rep, nonempty, self.theta)

  def choose(self, frontier, step):
    self._maybe_recluster(frontier, step)
    mask = self._mask(frontier)
    i, s = ucb_select(self.mu, self.n, self.t, self.c, mask)
    idx = np.flatnonzero(np.array(self.labels) == i)
    target = space.STRATEGY_TARGET[s]
    v = np.array([self.theta[target] - frontier[j].h[target] for j in idx]) / self.temp
    if not np.all(np.isfinite(v)):  # no mask (theta = inf): the fastest member
      return int(idx[np.argmin([frontier[j].time for j in idx])]), s, i
    p = np.exp(v - v.max())
    return int(self.rng.choice(idx, p=p / p.sum())), s, i

  def update(self, frontier, cluster, strategy, r, child):
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
