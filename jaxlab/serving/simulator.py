"""A discrete-event simulator of a closed-loop LLM server with concurrency c.

c clients each keep one request in the system: when a request finishes, its
client submits the next one at once. A scheduler (`jaxlab.serving.schedulers`)
plans each step over the server's slots; a step-time backend
(`LinearStepModel` or `RooflineModel`) prices it; the clock advances by that
time. A step that would overflow the KV cache first preempts the most
recently admitted requests (recompute preemption, as vLLM does).

Throughput is total tokens (prompt + output) of the requests that complete
after a warm-up fraction, divided by the time they took.

Example:
  >>> from jaxlab.serving import cost, schedulers, simulator, workload
  >>> m = cost.H200_QWEN3_8B
  >>> r = simulator.simulate(schedulers.MBScheduler(64, 2048), m, workload.TABLE4,
  ...                        concurrency=32, num_requests=200, seed=0)
  >>> r.throughput > 0
  True
"""

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from jaxlab.serving.cost import LinearStepModel, RooflineModel
from jaxlab.serving.schedulers import Scheduler, SlotState, StepPlan
from jaxlab.serving.workload import Phase, Workload

MB_SHARES = ("window", "step")


@runtime_checkable
class StepExecutor(Protocol):
  """A backend that runs a step for real (e.g. `jaxlab.serving.engine.Engine`).

  `execute(state, plan)` is called before `state.apply(plan)` and returns the
  step's measured seconds, which advance the clock.
  """

  def execute(self, state: SlotState, plan: StepPlan) -> float:
    ...


Backend = LinearStepModel | RooflineModel | StepExecutor


@dataclasses.dataclass
class SimResult:
  """Outcome of one simulated run.

  Attributes:
    throughput: tokens/s over the measured (post warm-up) completions.
    rps: requests/s over the same window.
    overall_throughput: tokens/s over the whole run.
    duration: simulated seconds.
    steps: number of steps.
    completed: requests completed.
    preemptions: recompute preemptions.
    eb_step_share: fraction of steps planned in EB mode.
    mean_occupancy: mean number of running requests per step.
    ttft_mean, tpot_mean: mean time to first decode step and per output token (s).
  """
  throughput: float
  rps: float
  overall_throughput: float
  duration: float
  steps: int
  completed: int
  preemptions: int
  eb_step_share: float
  mean_occupancy: float
  ttft_mean: float
  tpot_mean: float


class TokenShare:
  """Decode share of recently processed tokens: EMA(decode tokens) / EMA(all tokens).

  Token-weighted, so a step that prefills 512 tokens next to 31 decodes
  counts by its tokens, not as one step; over a steady window the share tends
  to the workload share mu_O / (mu_L + mu_O).
  """

  def __init__(self, weight: float | int):
    if not 0.0 < weight <= 1.0:
      raise ValueError(f"share_ema must lie in (0, 1], got {weight!r}")
    self.weight = weight
    self.dec = self.tot = None

  def update(self, decode_tokens: int, prefill_tokens: int) -> float:
    tot = decode_tokens + prefill_tokens
    if self.tot is None:
      self.dec, self.tot = float(decode_tokens), float(tot)
    else:
      self.dec += self.weight * (decode_tokens - self.dec)
      self.tot += self.weight * (tot - self.tot)
    return self.dec / self.tot if self.tot > 0 else 1.0


def step_pricer(backend: Backend) -> Callable[[SlotState, StepPlan, float | int | None], float]:
  """`backend`'s step pricing as one function, (state, plan, share) -> seconds.

  The function prices (or, for a `StepExecutor`, runs) one planned step before it
  is applied to `state`. The backend's kind is decided here, once per run:
  `StepExecutor` is a runtime Protocol, and an `isinstance` check against it costs
  ~30 us, as much as pricing a step.

  Example:
    >>> from jaxlab.serving import cost, schedulers
    >>> state = schedulers.SlotState(num_slots=4, capacity=10_000)
    >>> state.submit(0, prompt=512, output=4)
    >>> plan = schedulers.MBScheduler(max_num_seqs=4, token_budget=2048).schedule(state)
    >>> price = step_pricer(cost.H200_QWEN3_8B)
    >>> round(price(state, plan, None) * 1e3, 2)  # ms: alpha_MB + beta_MB^e(0) * 512
    14.05
  """
  if isinstance(backend, StepExecutor):
    return lambda state, plan, share: float(backend.execute(state, plan))
  if isinstance(backend, RooflineModel):
    return lambda state, plan, share: backend.step_time(
        plan.prefill_tokens, state.prefilled[plan.prefill_slots], state.kv[plan.decode])

  def linear(state: SlotState, plan: StepPlan, share: float | int | None) -> float:
    k, p = int(plan.decode.size), int(plan.prefill_tokens.sum())
    if k + p == 0:
      return 0.0
    if plan.mode == "mb":
      return backend.mixed_time(k, p, share=share)
    if k and p:
      raise ValueError("an EB step mixes prefill and decode tokens; EB steps must be exclusive")
    return backend.prefill_time(p) if p else backend.decode_time(k)

  return linear


def _fit_kv(state: SlotState, plan: StepPlan) -> StepPlan:
  """Preempts newest requests until the step's new KV tokens fit the capacity."""
  dec, ps, pt = plan.decode, plan.prefill_slots, plan.prefill_tokens
  while state.kv_used + dec.size + int(pt.sum()) > state.capacity:
    act = np.flatnonzero(state.active)
    if act.size == 0:
      raise RuntimeError("a single step does not fit in the KV cache; raise capacity")
    s = int(act[np.argmax(state.order[act])])
    state.preempt(s)
    keep = dec != s
    dec = dec[keep]
    keep = ps != s
    ps, pt = ps[keep], pt[keep]
  return StepPlan(plan.mode, dec, ps, pt)


def simulate(scheduler: Scheduler, backend: Backend,
             workload: Workload | Sequence[Phase], *, concurrency: int | None = None,
             num_requests: int | None = None, seed: int = 0, capacity: int = 10**9,
             num_slots: int | None = None, warmup_frac: float | int = 0.2, mb_share: str = "window",
             share_ema: float | int = 0.02, max_steps: int = 10**7, warmup_requests: int | None = None,
             keep_loaded: bool = False) -> SimResult:
  """Runs a closed-loop server until `num_requests` requests have completed.

  Args:
    scheduler: MB / EB / EB+ scheduler (it is mutated: use a fresh one per run).
    backend: step-time model, or a `StepExecutor` (the tiny engine) whose
      measured step times advance the clock.
    workload: a `Workload` (with `concurrency` and `num_requests`) or a sequence
      of `Phase` entries (non-stationary traffic: request i takes the workload of the
      phase its index falls in; the concurrency target follows the number of
      completions).
    concurrency: closed-loop concurrency c >= 1 (stationary workload only).
    num_requests: requests to complete (stationary workload only).
    seed: RNG seed of the request lengths.
    capacity: KV cache capacity in tokens.
    num_slots: server slots (default: the scheduler's max_num_seqs, else c).
    warmup_frac: fraction of completions excluded from `throughput`.
    warmup_requests: completions excluded from `throughput` (overrides
      `warmup_frac`). A closed loop that starts with c simultaneous requests
      needs a few times c completions to lose that synchronised start.
    keep_loaded: keep submitting past `num_requests` (from an extra pool of
      `max concurrency` requests of the last phase) so the server stays at its
      concurrency until the last measured completion; without it the run ends
      by draining, and a short run's throughput is mostly that tail.
    mb_share: how a `LinearStepModel` prices MB steps: "window" uses the decode
      share of recently processed tokens (`TokenShare`: token-weighted EMAs,
      weight `share_ema` per step) as the workload share r of beta_MB^e(r);
      "step" uses each step's own
      share (jaxlab interpretation; beta_MB^e is fitted against the workload
      share in the paper).
    share_ema: EMA weight of the "window" share.
    max_steps: safety cap.

  Returns:
    A `SimResult`.

  Example:
    >>> from jaxlab.serving import cost, schedulers, workload
    >>> model, wl = cost.H200_QWEN3_8B, workload.Workload(mu_l=64.0, mu_o=32.0)
    >>> mb = simulate(schedulers.MBScheduler(8, 256), model, wl, concurrency=8, num_requests=40)
    >>> eb = simulate(schedulers.EBScheduler(model, 8, 256, capacity=10**6), model, wl,
    ...               concurrency=8, num_requests=40)
    >>> mb.completed, mb.eb_step_share, eb.eb_step_share, mb.throughput > eb.throughput
    (40, 0.0, 1.0, True)
  """
  if isinstance(workload, Workload):
    if concurrency is None or num_requests is None:
      raise ValueError("a stationary workload needs concurrency and num_requests")
    phases = [Phase(workload, int(concurrency), int(num_requests))]
  else:
    phases = list(workload)
    if not phases or not all(isinstance(p, Phase) for p in phases):
      raise ValueError("workload must be a Workload or a non-empty sequence of Phase")
  if concurrency is not None and concurrency < 1:
    raise ValueError(f"concurrency must be >= 1, got {concurrency}")
  if num_requests is not None and num_requests < 1:
    raise ValueError(f"num_requests must be >= 1, got {num_requests}")
  if not 0.0 <= warmup_frac < 1.0:
    raise ValueError(f"warmup_frac must lie in [0, 1), got {warmup_frac}")
  if mb_share not in MB_SHARES:
    raise ValueError(f"mb_share must be one of {MB_SHARES}, got {mb_share!r}")
  if warmup_requests is not None and warmup_requests < 0:
    raise ValueError(f"warmup_requests must be >= 0, got {warmup_requests}")
  rng = np.random.default_rng(seed)
  bounds = np.cumsum([p.requests for p in phases])
  total = int(bounds[-1])
  lengths = [p.workload.sample(rng, p.requests) for p in phases]
  if keep_loaded:
    lengths.append(phases[-1].workload.sample(rng, max(p.concurrency for p in phases)))
  prompts = np.concatenate([pair[0] for pair in lengths])
  outs = np.concatenate([pair[1] for pair in lengths])
  conc = [p.concurrency for p in phases]
  if num_slots is None:
    num_slots = getattr(scheduler, "max_num_seqs", None) or getattr(getattr(scheduler, "mb", None),
                                                                      "max_num_seqs", None) or max(conc)
  state = SlotState(int(num_slots), int(capacity))
  submitted = completed = 0
  t = 0.0
  share = None
  window = TokenShare(share_ema)
  pool = len(prompts)
  finish_t = np.full(pool, np.nan)
  first_t = np.full(pool, np.nan)
  submit_t = np.zeros(pool)
  occ_sum = 0.0
  steps = eb_steps = 0

  def target(done):
    return conc[min(int(np.searchsorted(bounds, done, side="right")), len(conc) - 1)]

  def top_up():
    nonlocal submitted
    while submitted < pool and state.num_active + state.num_waiting < target(completed):
      state.submit(submitted, int(prompts[submitted]), int(outs[submitted]))
      submit_t[submitted] = t
      submitted += 1

  top_up()
  price = step_pricer(backend)
  while completed < total:
    if steps >= max_steps:
      raise RuntimeError(f"simulation exceeded max_steps={max_steps}")
    plan = scheduler.schedule(state)
    plan = _fit_kv(state, plan)
    if plan.empty and state.num_active == 0 and state.num_waiting:
      raise RuntimeError(f"the next waiting request does not fit in the KV cache "
                         f"(capacity {state.capacity} tokens)")
    if plan.empty:
      raise RuntimeError(f"{type(scheduler).__name__} planned an empty step with "
                         f"{state.num_active} running and {state.num_waiting} waiting requests")
    k, p = plan.decode.size, int(plan.prefill_tokens.sum())
    if mb_share == "window":
      share = window.update(k, p)
    dt = price(state, plan, share if mb_share == "window" else None)
    t += dt
    steps += 1
    eb_steps += plan.mode == "eb"
    occ_sum += state.num_active
    # First decode token time per request (for TTFT).
    if k:
      fresh = plan.decode[state.gen[plan.decode] == 0]
      ids = state.req[fresh]
      first_t[ids] = np.where(np.isnan(first_t[ids]), t, first_t[ids])
    done = state.apply(plan)
    if done.size:
      ids = state.req[done]
      finish_t[ids] = t
      completed += done.size
      scheduler.observe(state, state.orig_prompt[done], state.out[done])
      top_up()
    else:
      scheduler.observe(state, prompts[:0], outs[:0])
  fin = np.flatnonzero(np.isfinite(finish_t))
  order = fin[np.argsort(finish_t[fin], kind="stable")]
  warm = int(warmup_frac * total) if warmup_requests is None else int(warmup_requests)
  if warm >= order.size:
    raise ValueError(f"the warm-up ({warm} completions) leaves none of the {order.size} to measure")
  t0 = finish_t[order[warm - 1]] if warm > 0 else 0.0
  meas = order[warm:]
  window = max(t - t0, 1e-12)
  tokens = float((prompts[meas] + outs[meas]).sum())
  ttft = float(np.nanmean(first_t[fin] - submit_t[fin]))
  tpot = float(np.nanmean((finish_t[fin] - first_t[fin]) / np.maximum(outs[fin] - 1, 1)))
  return SimResult(throughput=float(tokens / window), rps=float(len(meas) / window),
                   overall_throughput=float((prompts[fin] + outs[fin]).sum()) / max(t, 1e-12), duration=t,
                   steps=steps, completed=completed, preemptions=state.preemptions,
                   eb_step_share=eb_steps / max(steps, 1), mean_occupancy=occ_sum / max(steps, 1),
                   ttft_mean=ttft if math.isfinite(ttft) else float("nan"), tpot_mean=tpot)
