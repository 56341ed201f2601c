"""Batch schedulers: MB (chunked prefill), EB(k*) (phase machine), EB+ (online switch).

All three drive a `SlotState` (the server's running requests in fixed slots,
plus a FIFO of waiting requests) and return a `StepPlan` per step. The same
objects drive the discrete-event simulator (`jaxlab.serving.simulator`) and
the tiny JAX engine (`jaxlab.serving.engine`).

  * `MBScheduler`: vLLM v1 chunked prefill. Each step schedules every decoding
    request (one token each), then prefill chunks of partially prefilled and
    newly admitted requests fill the rest of the token budget B, with at most
    N running requests.
  * `EBScheduler`: exclusive batching. Steps are prefill-only or decode-only.
    Decode until `min(q, N - n) / n >= theta / (1 - theta)` (n decoding, q
    waiting; the authors' code test), then admit and prefill the free slots.
    theta is learned online (hazard fit of completed output lengths, CFR
    threshold, IFR correction, EMA) and N is the memory-safe batch size.
  * `EBPlusScheduler`: starts in MB and evaluates the crossover condition
    every `eval_every` completions with EMAs of the workload; switches to EB
    when `left > right + delta`, back only when `left < right - sticky delta`,
    with a cooldown and no decision while the observed occupancy is < 16.

Example:
  >>> import numpy as np
  >>> st = SlotState(num_slots=4, capacity=10_000)
  >>> st.submit(0, prompt=8, output=2)
  >>> plan = MBScheduler(max_num_seqs=4, token_budget=16).schedule(st)
  >>> plan.mode, plan.prefill_tokens.tolist()
  ('mb', [8])
"""

import collections
import math
from typing import NamedTuple

import numpy as np

from jaxlab.serving import solver
from jaxlab.serving.cost import LinearStepModel

_EMPTY = np.zeros(0, np.int64)


class StepPlan(NamedTuple):
  """One step: `decode` slots get one token each; `prefill_slots[i]` gets `prefill_tokens[i]`.

  `mode` is "mb" (a mixed-batching step) or "eb" (an exclusive step).
  """
  mode: str
  decode: np.ndarray
  prefill_slots: np.ndarray
  prefill_tokens: np.ndarray

  @property
  def num_tokens(self) -> int:
    return int(self.decode.size + self.prefill_tokens.sum())

  @property
  def empty(self) -> bool:
    return self.decode.size == 0 and self.prefill_slots.size == 0


class SlotState:
  """The server's requests: fixed slots for running ones, a FIFO for waiting ones.

  Per-slot arrays (int64 unless noted): `active` (bool), `prompt` (tokens to
  prefill, including regenerated ones after a preemption), `prefilled`, `gen`
  (output tokens produced), `out` (output length), `orig_prompt`, `kv` (KV
  tokens held), `order` (admission counter), `req` (request id).

  A request needs `prompt` prefill tokens and then `out` decode steps; it is
  "decoding" once `prefilled >= prompt` and finishes when `gen >= out`.
  """

  def __init__(self, num_slots: int, capacity: int):
    if num_slots < 1:
      raise ValueError(f"num_slots must be >= 1, got {num_slots}")
    if capacity < 1:
      raise ValueError(f"capacity (KV tokens) must be >= 1, got {capacity}")
    self.num_slots = int(num_slots)
    self.capacity = int(capacity)
    z = lambda: np.zeros(num_slots, np.int64)
    self.active = np.zeros(num_slots, bool)
    self.prompt, self.prefilled, self.gen, self.out = z(), z(), z(), z()
    self.orig_prompt, self.kv, self.order, self.req = z(), z(), z(), z()
    self.waiting: collections.deque = collections.deque()
    self._counter = 0
    self.preemptions = 0

  # -- queries ---------------------------------------------------------------
  @property
  def num_active(self) -> int:
    return int(self.active.sum())

  @property
  def num_waiting(self) -> int:
    return len(self.waiting)

  @property
  def kv_used(self) -> int:
    return int(self.kv.sum())

  def decoding(self) -> np.ndarray:
    """Slots of decoding requests, oldest admission first."""
    idx = np.flatnonzero(self.active & (self.prefilled >= self.prompt))
    return idx[np.argsort(self.order[idx], kind="stable")]

  def prefilling(self) -> np.ndarray:
    """Slots of partially prefilled requests, oldest admission first."""
    idx = np.flatnonzero(self.active & (self.prefilled < self.prompt))
    return idx[np.argsort(self.order[idx], kind="stable")]

  # -- mutations ---------------------------------------------------------------
  def submit(self, req_id: int, prompt: int, output: int, generated: int = 0, *, front: bool = False) -> None:
    """Queues a request (`generated` > 0 re-queues a preempted one)."""
    if prompt < 1:
      raise ValueError(f"prompt length must be >= 1, got {prompt}")
    if output < 1:
      raise ValueError(f"output length must be >= 1, got {output}")
    item = (int(req_id), int(prompt), int(output), int(generated))
    (self.waiting.appendleft if front else self.waiting.append)(item)

  def admit(self, m: int, *, reserved: int = 0) -> list[int]:
    """Moves up to m waiting requests into free slots while their prompts fit in the KV cache.

    Args:
      m: most requests to admit.
      reserved: KV tokens already promised to this step (not yet in `kv`).

    Returns:
      The slots filled, in admission order.
    """
    out = []
    free = np.flatnonzero(~self.active)
    used = self.kv_used + reserved + int((self.prompt - self.prefilled)[self.active].sum())
    for s in free[:max(0, m)]:
      if not self.waiting:
        break
      rid, p, o, g = self.waiting[0]
      need = p + g
      if used + need > self.capacity:
        break
      self.waiting.popleft()
      used += need
      self.active[s] = True
      self.prompt[s], self.prefilled[s], self.gen[s], self.out[s] = need, 0, g, o
      self.orig_prompt[s], self.kv[s], self.req[s] = p, 0, rid
      self.order[s] = self._counter
      self._counter += 1
      out.append(int(s))
    return out

  def preempt(self, s: int) -> None:
    """Frees slot s and re-queues its request at the front (recompute preemption)."""
    self.active[s] = False
    self.kv[s] = 0
    self.preemptions += 1
    self.submit(int(self.req[s]), int(self.orig_prompt[s]), int(self.out[s]), int(self.gen[s]), front=True)

  def apply(self, plan: StepPlan) -> np.ndarray:
    """Advances the slots by one executed step; returns the slots that finished (now freed)."""
    if plan.prefill_slots.size:
      self.prefilled[plan.prefill_slots] += plan.prefill_tokens
      self.kv[plan.prefill_slots] += plan.prefill_tokens
    if plan.decode.size:
      self.gen[plan.decode] += 1
      self.kv[plan.decode] += 1
      done = plan.decode[self.gen[plan.decode] >= self.out[plan.decode]]
    else:
      done = _EMPTY
    self.active[done] = False
    self.kv[done] = 0
    return done


def _chunks(state: SlotState, slots: np.ndarray | list, budget: int) -> tuple[np.ndarray, np.ndarray]:
  """Prefill chunks for `slots` in order, filling at most `budget` tokens."""
  ss, tt = [], []
  for s in slots:
    if budget <= 0:
      break
    n = int(min(state.prompt[s] - state.prefilled[s], budget))
    if n > 0:
      ss.append(int(s))
      tt.append(n)
      budget -= n
  return np.asarray(ss, np.int64), np.asarray(tt, np.int64)


class Scheduler:
  """Interface: `schedule(state) -> StepPlan`; `observe(...)` after each step."""
  name = "base"

  def schedule(self, state: SlotState) -> StepPlan:
    raise TypeError(f"{type(self).__name__} must define schedule()")

  def observe(self, state: SlotState, finished_prompt: np.ndarray, finished_out: np.ndarray) -> None:
    del state, finished_prompt, finished_out


def _check_int(name, v, lo=1):
  if not isinstance(v, (int, np.integer)) or v < lo:
    raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")


class MBScheduler(Scheduler):
  """Mixed batching = vLLM v1 chunked prefill under token budget B and sequence cap N."""
  name = "MB"

  def __init__(self, max_num_seqs: int, token_budget: int):
    _check_int("max_num_seqs", max_num_seqs)
    _check_int("token_budget", token_budget)
    self.max_num_seqs, self.token_budget = int(max_num_seqs), int(token_budget)

  def schedule(self, state: SlotState) -> StepPlan:
    dec = state.decoding()[:self.token_budget]
    left = self.token_budget - dec.size
    slots = list(state.prefilling())
    room = self.max_num_seqs - state.num_active
    # Admit while the budget has tokens left after the chunks already owed.
    remaining = left - int(sum(state.prompt[s] - state.prefilled[s] for s in slots))
    while remaining > 0 and room > 0 and state.num_waiting:
      new = state.admit(1, reserved=dec.size)
      if not new:
        break
      slots += new
      remaining -= int(state.prompt[new[0]])
      room -= 1
    ps, pt = _chunks(state, slots, left)
    return StepPlan("mb", dec, ps, pt)


class EBScheduler(Scheduler):
  """Exclusive batching EB(k*) with the online IFR threshold and memory-safe N.

  Args:
    model: step-time model used by the solver (alpha/beta of prefill/decode).
    max_num_seqs: cap on N.
    token_budget: most prefill tokens per prefill step.
    capacity: KV capacity (tokens) for the memory-safe N; None keeps N = max_num_seqs.
    eps: allowed KV overflow probability.
    theta_cold: theta used before `min_samples` completions (code: 0.70).
    min_samples, window, update_every: hazard fit on the last `window` output
      lengths, refreshed every `update_every` completions once `min_samples` exist.
    theta_ema: EMA weight of a new theta estimate (code: 0.3).
    theta_min, theta_max: clamp of theta (code: 0.01, 0.80).
    ifr: apply the IFR correction (camera-ready path); False uses the CFR theta.
    ifr_cap: IFR correction capped at `ifr_cap * theta0`.
    n_form: memory-safe N form, "clt" (code) or "paper".
    fixed_theta: if set, theta is this constant (EB with a fixed ratio).
  """
  name = "EB"

  def __init__(self, model: LinearStepModel, max_num_seqs: int, token_budget: int, *,
               capacity: int | None = None, eps: float | int = 0.01, theta_cold: float | int = 0.70,
               min_samples: int = 30, window: int = 500, update_every: int = 100,
               theta_ema: float | int = 0.3, theta_min: float | int = solver.THETA_HARD_MIN, theta_max: float | int = 0.80,
               ifr: bool = True, ifr_cap: float | int = 5.0, n_form: str = "clt",
               fixed_theta: float | int | None = None):
    _check_int("max_num_seqs", max_num_seqs)
    _check_int("token_budget", token_budget)
    if capacity is not None:
      _check_int("capacity", capacity)
    for nm, v in (("theta_cold", theta_cold), ("theta_max", theta_max)):
      if not 0.0 < v < 1.0:
        raise ValueError(f"{nm} must lie in (0, 1), got {v!r}")
    if fixed_theta is not None and not 0.0 < fixed_theta < 1.0:
      raise ValueError(f"fixed_theta must lie in (0, 1), got {fixed_theta!r}")
    self.model = model
    self.max_num_seqs, self.token_budget, self.capacity = int(max_num_seqs), int(token_budget), capacity
    self.eps, self.theta_cold, self.min_samples = eps, theta_cold, min_samples
    self.update_every, self.theta_ema = update_every, theta_ema
    self.theta_min, self.theta_max = theta_min, theta_max
    self.ifr, self.ifr_cap, self.n_form = ifr, ifr_cap, n_form
    self.fixed_theta = fixed_theta
    self.samples: collections.deque = collections.deque(maxlen=window)
    self.prompts: collections.deque = collections.deque(maxlen=window)
    self.theta = fixed_theta if fixed_theta is not None else theta_cold
    self.n_target = self.max_num_seqs
    self.p0, self.eta, self.theta0 = float("nan"), 0.0, float("nan")
    self._since = 0
    self._initialized = False
    self.history: list[dict] = []

  @property
  def k_hat(self) -> int:
    return max(1, int(self.theta * self.n_target))

  def schedule(self, state: SlotState) -> StepPlan:
    pf = state.prefilling()
    if pf.size:
      ps, pt = _chunks(state, pf, self.token_budget)
      return StepPlan("eb", _EMPTY, ps, pt)
    dec = state.decoding()
    n, q = dec.size, state.num_waiting
    free = min(self.n_target, state.num_slots) - state.num_active
    if q and free > 0 and (n == 0 or min(q, free) / n >= self.theta / (1.0 - self.theta)):
      new = state.admit(min(q, free))
      if new:
        ps, pt = _chunks(state, new, self.token_budget)
        return StepPlan("eb", _EMPTY, ps, pt)
    return StepPlan("eb", dec, _EMPTY, _EMPTY)

  def observe(self, state: SlotState, finished_prompt: np.ndarray, finished_out: np.ndarray) -> None:
    del state
    if finished_out.size == 0:
      return
    self.samples.extend(int(o) for o in finished_out)
    self.prompts.extend(int(p) for p in finished_prompt)
    self._since += finished_out.size
    if self._since >= self.update_every and len(self.samples) >= self.min_samples:
      self._since = 0
      self.update()

  def update(self) -> None:
    """Re-estimates (p0, eta), theta and N from the sample window (Algorithm 1)."""
    p0, eta = solver.estimate_hazard(np.asarray(self.samples))
    self.p0, self.eta = p0, eta
    mu_l = max(1.0, float(np.mean(self.prompts)))
    th0 = min(max(solver.theta_cfr(self.model, p0), self.theta_min), 0.99)
    self.theta0 = th0
    if self.fixed_theta is None:
      d = solver.ifr_correction(th0, p0, eta, self.model, self.n_target, cap=self.ifr_cap) if self.ifr else 0.0
      th = min(max(th0 + d, self.theta_min), self.theta_max)
      self.theta = th if not self._initialized else self.theta_ema * th + (1 - self.theta_ema) * self.theta
      self._initialized = True
    if self.capacity is not None:
      self.n_target = solver.memory_safe_batch_size(self.theta, p0, mu_l, float(self.capacity), eps=self.eps,
                                                    n_max=self.max_num_seqs, form=self.n_form)
    self.history.append({"p0": p0, "eta": eta, "theta0": th0, "theta": self.theta, "n": self.n_target,
                         "k": self.k_hat, "mu_l": mu_l})


class EBPlusScheduler(Scheduler):
  """EB+: MB or EB, chosen online by the crossover condition with hysteresis.

  Args:
    model: step-time model with the MB interference fit (beta_MB^e).
    mb: the MB scheduler used in MB mode.
    eb: the EB scheduler used in EB mode (it keeps learning theta in both modes).
    delta: hysteresis margin in s/token (code default 1e-4 ms/token = 1e-7 s).
    sticky: leave EB only when `left < right - sticky * delta` (code: 3).
    cooldown: evaluation ticks without a decision after a switch (code: 3).
    eval_every: completions between evaluations (code: 100).
    n_obs_min: no decision while the occupancy EMA is below this (code: 16).
    ema_l, ema_o, ema_p: EMA weights of mu_L, mu_O, p per evaluation (code: 0.05, 0.2, 0.2).
    n_obs_up, n_obs_down: weights of the asymmetric occupancy EMA per step when
      occupancy rises / falls (jaxlab interpretation; the code's exact values
      are not in the spec).
    crossover_theta: theta_0 of the crossover condition: "cfr" (Prop. 4's CFR
      threshold at the EMA of p, the spec) or "eb" (the EB scheduler's current
      IFR-corrected, smoothed theta; jaxlab variant).
  """
  name = "EB+"

  def __init__(self, model: LinearStepModel, mb: MBScheduler, eb: EBScheduler, *, delta: float | int = 1e-7,
               sticky: float | int = 3.0, cooldown: int = 3, eval_every: int = 100, n_obs_min: float | int = 16.0,
               ema_l: float | int = 0.05, ema_o: float | int = 0.2, ema_p: float | int = 0.2,
               n_obs_up: float | int = 0.5, n_obs_down: float | int = 0.05, crossover_theta: str = "cfr"):
    if delta < 0:
      raise ValueError(f"delta must be >= 0, got {delta!r}")
    if crossover_theta not in ("cfr", "eb"):
      raise ValueError(f"crossover_theta must be 'cfr' or 'eb', got {crossover_theta!r}")
    self.crossover_theta = crossover_theta
    self.model, self.mb, self.eb = model, mb, eb
    self.delta, self.sticky, self.cooldown_max = delta, sticky, cooldown
    self.eval_every, self.n_obs_min = eval_every, n_obs_min
    self.ema_l, self.ema_o, self.ema_p = ema_l, ema_o, ema_p
    self.n_obs_up, self.n_obs_down = n_obs_up, n_obs_down
    self.mode = "mb"
    self.n_obs = 0.0
    self.mu_l = self.mu_o = self.p = None
    self._cool = 0
    self._buf_l: list[int] = []
    self._buf_o: list[int] = []
    self.history: list[dict] = []
    self.steps = {"mb": 0, "eb": 0}

  def schedule(self, state: SlotState) -> StepPlan:
    self.steps[self.mode] += 1
    return (self.mb if self.mode == "mb" else self.eb).schedule(state)

  def observe(self, state: SlotState, finished_prompt: np.ndarray, finished_out: np.ndarray) -> None:
    occ = float(state.num_active)
    w = self.n_obs_up if occ > self.n_obs else self.n_obs_down
    self.n_obs += w * (occ - self.n_obs)
    self.eb.observe(state, finished_prompt, finished_out)
    self._buf_l.extend(int(x) for x in finished_prompt)
    self._buf_o.extend(int(x) for x in finished_out)
    if len(self._buf_o) >= self.eval_every:
      self._evaluate()

  def _ema(self, old, new, w):
    return new if old is None else old + w * (new - old)

  def _evaluate(self) -> None:
    bl, bo = float(np.mean(self._buf_l)), float(np.mean(self._buf_o))
    self._buf_l, self._buf_o = [], []
    self.mu_l = self._ema(self.mu_l, bl, self.ema_l)
    self.mu_o = self._ema(self.mu_o, bo, self.ema_o)
    p_new = self.eb.p0 if math.isfinite(self.eb.p0) else 1.0 / bo
    self.p = self._ema(self.p, p_new, self.ema_p)
    if self._cool > 0:
      self._cool -= 1
      return
    if self.n_obs < self.n_obs_min:
      return
    if self.crossover_theta == "cfr":
      theta0 = solver.theta_cfr(self.model, min(max(self.p, 1e-9), 1.0 - 1e-9))
    else:
      theta0 = min(max(self.eb.theta, 1e-4), 0.99)
    c = solver.crossover(self.model, self.mu_l, self.mu_o, max(1.0, self.n_obs), theta0)
    old = self.mode
    if c.left > c.right + self.delta:
      self.mode = "eb"
    elif c.left < c.right - self.sticky * self.delta:
      self.mode = "mb"
    if self.mode != old:
      self._cool = self.cooldown_max
    self.history.append({"left": c.left, "right": c.right, "n_obs": self.n_obs, "theta": theta0, "p": self.p,
                         "mu_l": self.mu_l, "mu_o": self.mu_o, "mode": self.mode})
