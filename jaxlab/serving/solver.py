"""The EB solver: switching threshold, IFR correction, hazard fit, memory-safe N.

Exclusive batching (EB) runs a phase machine: decode the running batch of N
requests until k of them have finished, then prefill k new requests in a
prefill-only step, and repeat. This module holds the closed forms that pick
k (Prop. 1 and its asymptotic equation), correct it for output lengths with an
increasing hazard rate (Thm. 2), estimate that hazard from completed output
lengths, size N so the KV cache overflows with probability at most epsilon
(Prop. 3), and decide between EB and mixed batching (MB, Prop. 4).

Everything here is plain Python on floats: the scheduler calls it every few
hundred completions, far off the hot path.

Example:
  >>> from jaxlab.serving import cost, solver
  >>> m = cost.H200_QWEN3_8B
  >>> theta0 = solver.theta_cfr(m, 4.7e-4)
  >>> round(theta0, 4)
  0.0115
  >>> solver.optimal_k_discrete(m, 315, 4.7e-4)
  4
"""

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from jaxlab.serving.cost import LinearStepModel

THETA_HARD_MIN = 0.01


def _check_prob(name: str, p: float | int) -> None:
  if not (isinstance(p, (int, float)) and math.isfinite(p) and 0.0 < p < 1.0):
    raise ValueError(f"{name} must be a completion probability in (0, 1), got {p!r}")


def _check_pos(name: str, x: float | int, *, allow_zero: bool = False) -> None:
  ok = isinstance(x, (int, float)) and math.isfinite(x) and (x >= 0 if allow_zero else x > 0)
  if not ok:
    bound = ">= 0" if allow_zero else "> 0"
    raise ValueError(f"{name} must be a finite number {bound}, got {x!r}")


def threshold_lhs(theta: float | int) -> float:
  """Left side of the asymptotic threshold equation, `theta/(1-theta) + ln(1-theta)`.

  It is 0 at theta=0, increasing on (0, 1) and tends to infinity at 1, so the
  equation `threshold_lhs(theta) = C` has one root for every C > 0.

  Example:
    >>> round(threshold_lhs(0.5), 4)  # 1 + ln(0.5)
    0.3069
  """
  if not 0.0 <= theta < 1.0:
    raise ValueError(f"theta must lie in [0, 1), got {theta!r}")
  return theta / (1.0 - theta) + math.log1p(-theta)


def solve_threshold_equation(c: float | int, *, tol: float | int = 1e-13, max_iter: int = 200) -> float:
  """Solves `theta/(1-theta) + ln(1-theta) = c` for theta in (0, 1) by bisection.

  Args:
    c: the right side, > 0 (e.g. `p * alpha_p / alpha_d`).
    tol: bracket width at which bisection stops.
    max_iter: iteration cap.

  Returns:
    The root theta (for small c, theta is about sqrt(2c)).

  Example:
    >>> round(solve_threshold_equation(threshold_lhs(0.3)), 6)
    0.3
  """
  _check_pos("c", c)
  lo, hi = 0.0, 1.0 - 1e-15
  for _ in range(max_iter):
    mid = 0.5 * (lo + hi)
    if threshold_lhs(mid) < c:
      lo = mid
    else:
      hi = mid
    if hi - lo < tol:
      break
  return 0.5 * (lo + hi)


def theta_cfr(model: LinearStepModel, p0: float | int, *, exact: bool = True) -> float:
  """The CFR threshold ratio theta_0 = k*/N for geometric output lengths.

  Args:
    model: step-time model (uses alpha_p and alpha_d).
    p0: per-step completion probability (1 / mean output length).
    exact: True uses the code's exact `C = -ln(1-p0) alpha_p/alpha_d`; False
      the paper's `C = p0 alpha_p/alpha_d`. The two agree to O(p0).

  Returns:
    theta_0 in (0, 1).

  Example:
    >>> from jaxlab.serving import cost
    >>> round(theta_cfr(cost.H200_QWEN3_8B, 4.7e-4), 4)  # the code's decode-heavy anchor
    0.0115
  """
  _check_prob("p0", p0)
  rate = -math.log1p(-p0) if exact else p0
  return solve_threshold_equation(rate * model.alpha_p / model.alpha_d)


def optimal_k_discrete(model: LinearStepModel, n: int, p: float | int) -> int:
  """Prop. 1: the smallest k with `k tau(N-k) - sum_{j=N-k+1..N} tau(j) >= alpha_p`.

  `tau(j) = (alpha_d + beta_d j) / (1 - (1-p)^j)` is the expected decode time
  per completion while j requests decode. If no k < N qualifies, the code's
  fallback N // 5 is returned (at least 1).

  Args:
    model: step-time model.
    n: batch size N >= 1.
    p: per-step completion probability.

  Returns:
    k* in [1, N].

  Example:
    >>> from jaxlab.serving import cost
    >>> optimal_k_discrete(cost.H200_QWEN3_8B, 315, 4.7e-4)  # N = 315: refill 4 at a time
    4
  """
  if not isinstance(n, (int, np.integer)) or n < 1:
    raise ValueError(f"n (batch size N) must be an int >= 1, got {n!r}")
  _check_prob("p", p)
  j = np.arange(1, n + 1, dtype=np.float64)
  tau = (model.alpha_d + model.beta_d * j) / -np.expm1(j * math.log1p(-p))  # tau[j - 1]
  # k < N: k = N would leave no request decoding (tau(0) = inf) and always qualify.
  k = np.arange(1, n)
  # sum_{j=N-k+1..N} tau(j) for k = 1..N-1 is a reversed cumulative sum.
  tail = np.cumsum(tau[::-1][:n - 1])
  ok = k * tau[n - k - 1] >= tail + model.alpha_p
  hits = np.flatnonzero(ok)
  return int(k[hits[0]]) if hits.size else max(1, n // 5)


def ifr_correction(theta0: float | int, p0: float | int, eta: float | int, model: LinearStepModel, n: int,
                   *, cap: float | int = 5.0) -> float:
  """Thm. 2: the first-order shift of theta for hazard `h(t) = p0 + eta t`.

  `dtheta = eta (1-theta0)^2 / (p0^2 theta0) [L (theta0/(1-theta0) - L/2)
  + rho (L - theta0)]` with `L = -ln(1-theta0)` and `rho = beta_d N / alpha_d`,
  clipped to `[0, cap * theta0]` as the authors' code does.

  Args:
    theta0: CFR threshold in (0, 1).
    p0: hazard intercept in (0, 1).
    eta: hazard slope >= 0 (0 gives no correction).
    model: step-time model (alpha_d, beta_d).
    n: batch size N >= 1.
    cap: the correction is at most `cap * theta0`.

  Returns:
    dtheta >= 0.

  Example:
    >>> from jaxlab.serving import cost
    >>> m = cost.H200_QWEN3_8B
    >>> round(ifr_correction(theta_cfr(m, 4.7e-4), 4.7e-4, 1e-7, m, 315), 5)  # a rising hazard
    0.00677
  """
  if not 0.0 < theta0 < 1.0:
    raise ValueError(f"theta0 must lie in (0, 1), got {theta0!r}")
  _check_prob("p0", p0)
  _check_pos("eta", eta, allow_zero=True)
  if n < 1:
    raise ValueError(f"n must be >= 1, got {n!r}")
  if eta == 0.0:
    return 0.0
  lam = -math.log1p(-theta0)
  rho = model.beta_d * n / model.alpha_d
  bracket = lam * (theta0 / (1.0 - theta0) - lam / 2.0) + rho * (lam - theta0)
  d = eta * (1.0 - theta0) ** 2 / (p0 ** 2 * theta0) * bracket
  return float(min(max(d, 0.0), cap * theta0))


def estimate_hazard(lengths: Sequence[int] | np.ndarray, *, min_survivors: int = 5,
                    lo_pct: float | int = 5.0, hi_pct: float | int = 95.0) -> tuple[float, float]:
  """Fits the linear hazard `h(t) = p0 + eta t` to observed output lengths.

  Empirical hazard `h(t) = #{O = t} / #{O >= t}` (points with fewer than
  `min_survivors` survivors skipped), weighted least squares with weight
  `#{O >= t}` over t between the `lo_pct` and `hi_pct` percentiles (at least
  a 10-step range); eta is clamped at 0 and p0 floored at 1/mean(O), as in the
  authors' code.

  Args:
    lengths: output lengths (ints >= 1), at least 2 of them.

  Returns:
    (p0, eta).

  Example:
    >>> lengths = np.random.default_rng(0).geometric(1 / 200, size=5000)  # constant hazard
    >>> p0, eta = estimate_hazard(lengths)
    >>> round(p0, 3), eta
    (0.005, 0.0)
  """
  o = np.asarray(lengths)
  if o.ndim != 1 or o.size < 2:
    raise ValueError(f"lengths must be a 1-D sequence of >= 2 output lengths, got shape {o.shape}")
  if not np.issubdtype(o.dtype, np.integer):
    if not np.all(np.isfinite(o)) or np.any(o != np.round(o)):
      raise ValueError("lengths must be whole numbers of tokens")
    o = o.astype(np.int64)
  if np.any(o < 1):
    raise ValueError(f"lengths must all be >= 1, got min {int(o.min())}")
  mean = float(o.mean())
  p_floor = min(1.0 / mean, 1.0 - 1e-9)
  srt = np.sort(o)
  t_start = max(int(srt[int(len(srt) * lo_pct / 100.0)]), 1)
  t_end = max(int(srt[min(int(len(srt) * hi_pct / 100.0), len(srt) - 1)]), t_start + 10)
  counts = np.bincount(o, minlength=int(o.max()) + 2).astype(np.float64)
  survivors = np.cumsum(counts[::-1])[::-1]  # survivors[t] = #{O >= t}
  t = np.arange(t_start, min(t_end, int(o.max())) + 1)
  n_t = survivors[t]
  keep = n_t >= min_survivors
  t, n_t = t[keep], n_t[keep]
  if n_t.sum() < 10:
    return p_floor, 0.0
  h = counts[t] / n_t
  w = n_t
  sw, swt, swt2 = w.sum(), (w * t).sum(), (w * t * t).sum()
  swh, swth = (w * h).sum(), (w * t * h).sum()
  det = sw * swt2 - swt * swt
  if abs(det) < 1e-10:
    return p_floor, 0.0
  p0 = (swt2 * swh - swt * swth) / det
  eta = (sw * swth - swt * swh) / det
  return float(min(max(p0, p_floor), 1.0 - 1e-9)), float(max(eta, 0.0))


def memory_safe_batch_size(theta: float | int, p0: float | int, mu_l: float | int, capacity: float | int, *,
                           eps: float | int = 0.01, n_max: int | None = None,
                           form: str = "clt") -> int:
  """Prop. 3: the largest N whose KV cache overflows with probability <= eps.

  `D(theta) = mu_L + (1-theta)/(theta p0) ln(1/(1-theta))` is the mean KV
  footprint per request over an EB cycle.

  * form="clt" (the authors' code, used for the paper's results): largest N
    with `N D + sigma sqrt(N ln(1/eps)) <= C`,
    `sigma^2 = 2 L (1 + (p0 mu_L + L/theta)^2) / p0^2`, `L = -ln(1-theta)`.
  * form="paper": `floor((C - nu ln(1/eps)) / D)`, `nu = 1/(p0^2 mu_L)`.

  Args:
    theta: threshold ratio in (0, 1).
    p0: completion probability in (0, 1).
    mu_l: mean prompt length (tokens) > 0.
    capacity: KV capacity C in tokens > 0.
    eps: allowed overflow probability in (0, 0.5].
    n_max: optional upper cap (e.g. max_num_seqs).
    form: "clt" or "paper".

  Returns:
    N >= 1.

  Example:
    >>> from jaxlab.serving import cost
    >>> theta0 = theta_cfr(cost.H200_QWEN3_8B, 4.7e-4)
    >>> memory_safe_batch_size(theta0, 4.7e-4, 512, 500_000)  # the code's CLT form
    184
    >>> memory_safe_batch_size(theta0, 4.7e-4, 512, 500_000, form="paper")
    174
  """
  if not 0.0 < theta < 1.0:
    raise ValueError(f"theta must lie in (0, 1), got {theta!r}")
  _check_prob("p0", p0)
  _check_pos("mu_l", mu_l)
  _check_pos("capacity", capacity)
  if not 0.0 < eps <= 0.5:
    raise ValueError(f"eps must lie in (0, 0.5], got {eps!r}")
  lam = -math.log1p(-theta)
  d = mu_l + (1.0 - theta) / (theta * p0) * lam
  log_inv = math.log(1.0 / eps)
  if form == "clt":
    sigma2 = 2.0 * lam * (1.0 + (p0 * mu_l + lam / theta) ** 2) / p0 ** 2
    sigma = math.sqrt(sigma2)
    sqrt_n = (-sigma * math.sqrt(log_inv) + math.sqrt(sigma2 * log_inv + 4.0 * d * capacity)) / (2.0 * d)
    n = int(math.floor(max(0.0, sqrt_n) ** 2))
  elif form == "paper":
    nu = 1.0 / (p0 ** 2 * mu_l)
    n = int(math.floor((capacity - nu * log_inv) / d))
  else:
    raise ValueError(f"form must be 'clt' or 'paper', got {form!r}")
  n = max(1, n)
  return min(n, n_max) if n_max is not None else n


@dataclasses.dataclass(frozen=True)
class Crossover:
  """Prop. 4's two sides. EB beats MB exactly when `left > right`.

  Attributes:
    left: MB's per-token interference penalty `beta_MB^e(r) - beta_EB^w` (s/token).
    right: EB's extra amortised per-token overhead (s/token).
    share: the workload's decode-token share r = mu_O / (mu_L + mu_O).
  """
  left: float
  right: float
  share: float

  @property
  def eb_wins(self) -> bool:
    return self.left > self.right

  @property
  def margin(self) -> float:
    return self.left - self.right


def crossover(model: LinearStepModel, mu_l: float | int, mu_o: float | int, n: float | int, theta0: float | int) -> Crossover:
  """Prop. 4, the EB-vs-MB crossover condition.

  `left = beta_MB^e(r) - (beta_p mu_L + beta_d mu_O)/(mu_L + mu_O)`,
  `right = [(alpha_p - alpha_d ln(1-theta0) mu_O)/(theta0 N) - alpha_MB (1+mu_O)/N] / (mu_L+mu_O)`.

  Args:
    model: step-time model.
    mu_l: mean prompt length > 0.
    mu_o: mean output length > 0.
    n: (observed) batch size N > 0.
    theta0: threshold ratio in (0, 1).

  Returns:
    A `Crossover`.

  Example:
    >>> from jaxlab.serving import cost
    >>> m = cost.RTX_PRO_6000_QWEN3_8B
    >>> theta0 = theta_cfr(m, 1 / 256)
    >>> [crossover(m, 512, 256, n, theta0).eb_wins for n in (32, 1024)]  # concurrency N
    [False, True]
  """
  _check_pos("mu_l", mu_l)
  _check_pos("mu_o", mu_o)
  _check_pos("n", n)
  if not 0.0 < theta0 < 1.0:
    raise ValueError(f"theta0 must lie in (0, 1), got {theta0!r}")
  tot = mu_l + mu_o
  r = mu_o / tot
  beta_w = (model.beta_p * mu_l + model.beta_d * mu_o) / tot
  left = model.beta_mb(r) - beta_w
  eb = (model.alpha_p - model.alpha_d * math.log1p(-theta0) * mu_o) / (theta0 * n)
  mb = model.alpha_mb * (1.0 + mu_o) / n
  return Crossover(left=float(left), right=float((eb - mb) / tot), share=float(r))
