"""Synthetic serving workloads: prompt/output length distributions and phases.

The paper's synthetic workloads fix mean prompt and output lengths
(mu_L, mu_O) with +-50% uniform jitter: decode-heavy (128, 1024), balanced
(512, 512), prefill-heavy (1024, 128). Output lengths can instead be geometric
(constant hazard, the CFR model).

Example:
  >>> import numpy as np
  >>> w = Workload(mu_l=512.0, mu_o=256.0)
  >>> p, o = w.sample(np.random.default_rng(0), 4)
  >>> p.shape, o.shape
  ((4,), (4,))
"""

import dataclasses
import math

import numpy as np

OUTPUT_DISTS = ("uniform", "geometric", "fixed")


@dataclasses.dataclass(frozen=True)
class Workload:
  """Request length distribution.

  Attributes:
    mu_l: mean prompt length (tokens) >= 1.
    mu_o: mean output length (decode steps) >= 1.
    jitter: relative half-width of the uniform jitter in [0, 1) (0.5 = +-50%).
    output_dist: "uniform" (mu_O +- jitter), "geometric" (mean mu_O) or "fixed".
    name: label.
  """
  mu_l: float
  mu_o: float
  jitter: float | int = 0.5
  output_dist: str = "uniform"
  name: str = ""

  def __post_init__(self):
    for f in ("mu_l", "mu_o"):
      v = getattr(self, f)
      if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 1):
        raise ValueError(f"Workload.{f} must be a mean length >= 1 token, got {v!r}")
    if not (0.0 <= self.jitter < 1.0):
      raise ValueError(f"Workload.jitter must lie in [0, 1), got {self.jitter!r}")
    if self.output_dist not in OUTPUT_DISTS:
      raise ValueError(f"Workload.output_dist must be one of {OUTPUT_DISTS}, got {self.output_dist!r}")

  @property
  def decode_share(self) -> float:
    return self.mu_o / (self.mu_l + self.mu_o)

  def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Draws n (prompt_len, output_len) pairs as int64 arrays, all >= 1."""
    if n < 0:
      raise ValueError(f"n must be >= 0, got {n}")
    j = self.jitter
    prompt = np.round(self.mu_l * rng.uniform(1 - j, 1 + j, n)).astype(np.int64)
    if self.output_dist == "uniform":
      out = np.round(self.mu_o * rng.uniform(1 - j, 1 + j, n)).astype(np.int64)
    elif self.output_dist == "geometric":
      out = rng.geometric(min(1.0, 1.0 / self.mu_o), n).astype(np.int64)
    else:
      out = np.full(n, int(round(self.mu_o)), np.int64)
    return np.maximum(prompt, 1), np.maximum(out, 1)


DECODE_HEAVY = Workload(128.0, 1024.0, name="decode-heavy")
BALANCED = Workload(512.0, 512.0, name="balanced")
PREFILL_HEAVY = Workload(1024.0, 128.0, name="prefill-heavy")
TABLE4 = Workload(512.0, 256.0, name="table4")


@dataclasses.dataclass(frozen=True)
class Phase:
  """One segment of a non-stationary run: `requests` completions under `workload` at concurrency c."""
  workload: Workload
  concurrency: int
  requests: int

  def __post_init__(self):
    if self.concurrency < 1:
      raise ValueError(f"Phase.concurrency must be >= 1, got {self.concurrency}")
    if self.requests < 1:
      raise ValueError(f"Phase.requests must be >= 1, got {self.requests}")
