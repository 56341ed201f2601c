"""Baselines and ablation policies of the KernelBand benchmark (systems.md 3d), at equal budget.

* `BestOfN`: parent and strategy uniform at random (the paper's BoN, with the
  frontier as the pool of parents).
* `Greedy`: the fastest parent, a uniformly random strategy.
* `EpsilonGreedy`: the fastest parent; the strategy with the best mean reward,
  or a random one with probability epsilon.
* `HeuristicStrategy`: the fastest parent; the strategy targeting the resource
  with most headroom on it (ties broken at random). jaxlab interpretation: the
  stand-in for the paper's ablation "the LLM picks the strategy".
"""

import numpy as np

from jaxlab.autotune import space
from jaxlab.autotune.kernelband import Policy

_S = len(space.STRATEGIES)


def _fastest(frontier) -> int:
  return int(np.argmin([e.time for e in frontier]))


class BestOfN(Policy):
  """Parent and strategy uniform at random (the paper's BoN)."""

  def choose(self, frontier, step):
    return int(self.rng.integers(len(frontier))), int(self.rng.integers(_S)), 0


class Greedy(Policy):
  """The fastest parent, a uniformly random strategy."""

  def choose(self, frontier, step):
    return _fastest(frontier), int(self.rng.integers(_S)), 0


class EpsilonGreedy(Policy):
  """Args: epsilon: exploration probability (0.1); mu0: initial mean reward (0.5)."""

  def __init__(self, epsilon: float = 0.1, mu0: float = 0.5):
    if not 0 <= epsilon <= 1:
      raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    self.epsilon, self.mu0 = float(epsilon), float(mu0)

  def reset(self, rng):
    super().reset(rng)
    self.mu, self.n = np.full(_S, self.mu0), np.ones(_S)

  def choose(self, frontier, step):
    if self.rng.random() < self.epsilon:
      s = int(self.rng.integers(_S))
    else:
      best = np.flatnonzero(self.mu == self.mu.max())
      s = int(self.rng.choice(best))
    return _fastest(frontier), s, 0

  def update(self, frontier, cluster, strategy, r, child):
    self.n[strategy] += 1
    self.mu[strategy] += (r - self.mu[strategy]) / self.n[strategy]


class HeuristicStrategy(Policy):
  """The fastest parent, a strategy targeting its resource with the most headroom."""

  def choose(self, frontier, step):
    p = _fastest(frontier)
    headroom = -np.asarray(frontier[p].h, float)
    target = int(self.rng.choice(np.flatnonzero(headroom == headroom.max())))
    s = int(self.rng.choice(np.flatnonzero(space.STRATEGY_TARGET == target)))
    return p, s, 0
