"""Simulator and scheduler tests on hand-checkable cases."""

import numpy as np
import pytest

from jaxlab.serving import cost, simulator
from jaxlab.serving import schedulers as S
from jaxlab.serving import workload as W

M = cost.RTX_PRO_6000_QWEN3_8B
FIXED = W.Workload(100.0, 10.0, jitter=0.0, output_dist="fixed")


def test_single_request_mb_exact_time():
  r = simulator.simulate(S.MBScheduler(4, 4096), M, FIXED, concurrency=1, num_requests=1,
                         warmup_frac=0.0, mb_share="step")
  # One prefill step (share 0) then 10 one-token decode steps (share 1).
  want = M.alpha_mb + M.beta_mb(0.0) * 100 + 10 * (M.alpha_mb + M.beta_mb(1.0))
  assert r.duration == pytest.approx(want, rel=1e-12)
  assert r.steps == 11
  assert r.throughput == pytest.approx(110 / want, rel=1e-12)


def test_single_request_eb_exact_time():
  eb = S.EBScheduler(M, 4, 4096)
  r = simulator.simulate(eb, M, FIXED, concurrency=1, num_requests=1, warmup_frac=0.0)
  want = M.prefill_time(100) + 10 * M.decode_time(1)
  assert r.duration == pytest.approx(want, rel=1e-12)
  assert r.eb_step_share == 1.0


def test_eb_batch_of_four_in_lockstep():
  # c = N = 4 equal requests: one prefill step of 400 tokens, then 10 decode steps of 4.
  eb = S.EBScheduler(M, 4, 4096)
  r = simulator.simulate(eb, M, FIXED, concurrency=4, num_requests=4, warmup_frac=0.0)
  assert r.duration == pytest.approx(M.prefill_time(400) + 10 * M.decode_time(4), rel=1e-12)
  # Token budget splits the prefill into chunks: 400 tokens under B=150 -> 3 prefill steps.
  eb = S.EBScheduler(M, 4, 150)
  r = simulator.simulate(eb, M, FIXED, concurrency=4, num_requests=4, warmup_frac=0.0)
  want = M.prefill_time(150) * 2 + M.prefill_time(100) + 10 * M.decode_time(4)
  assert r.duration == pytest.approx(want, rel=1e-12)


def test_keep_loaded_holds_concurrency_to_the_end():
  # c = N = 4, 6 completions, the first 4 are warm-up. Draining: the second
  # cohort has only the 2 remaining requests. Kept loaded: it is a full cohort
  # of 4 (two from the extra pool), all measured.
  cohort = lambda n: M.prefill_time(100 * n) + 10 * M.decode_time(n)
  drained = simulator.simulate(S.EBScheduler(M, 4, 4096), M, FIXED, concurrency=4, num_requests=6,
                               warmup_requests=4)
  assert drained.duration == pytest.approx(cohort(4) + cohort(2), rel=1e-12)
  assert drained.throughput == pytest.approx(2 * 110 / cohort(2), rel=1e-12)
  loaded = simulator.simulate(S.EBScheduler(M, 4, 4096), M, FIXED, concurrency=4, num_requests=6,
                              warmup_requests=4, keep_loaded=True)
  assert loaded.duration == pytest.approx(2 * cohort(4), rel=1e-12)
  assert loaded.completed == 8
  assert loaded.throughput == pytest.approx(4 * 110 / cohort(4), rel=1e-12)
  with pytest.raises(ValueError, match="warm-up"):
    simulator.simulate(S.EBScheduler(M, 4, 4096), M, FIXED, concurrency=4, num_requests=4,
                       warmup_requests=4)
  with pytest.raises(ValueError, match="warmup_requests"):
    simulator.simulate(S.EBScheduler(M, 4, 4096), M, FIXED, concurrency=4, num_requests=4,
                       warmup_requests=-1)


class _Checked(S.Scheduler):
  """Wraps a scheduler and checks invariants on every plan."""

  def __init__(self, inner, c, exclusive):
    self.inner, self.c, self.exclusive = inner, c, exclusive
    self.max_num_seqs = getattr(inner, "max_num_seqs", None) or inner.mb.max_num_seqs
    self.plans = 0

  def schedule(self, state):
    assert state.num_active + state.num_waiting <= self.c
    assert state.kv_used <= state.capacity
    plan = self.inner.schedule(state)
    if self.exclusive:
      assert plan.decode.size == 0 or plan.prefill_slots.size == 0
    assert np.all(state.active[plan.decode]) and np.all(state.active[plan.prefill_slots])
    assert np.all(plan.prefill_tokens > 0)
    self.plans += 1
    return plan

  def observe(self, state, fp, fo):
    self.inner.observe(state, fp, fo)


@pytest.mark.parametrize("kind", ["MB", "EB", "EB+"])
def test_invariants_and_preemption(kind):
  mb, eb = S.MBScheduler(32, 512), S.EBScheduler(M, 32, 512, capacity=3500)
  inner = {"MB": mb, "EB": eb, "EB+": S.EBPlusScheduler(M, mb, eb)}[kind]
  sch = _Checked(inner, 40, exclusive=(kind == "EB"))
  # A small KV cache forces recompute preemptions; every request still completes.
  r = simulator.simulate(sch, M, W.Workload(64.0, 128.0), concurrency=40, num_requests=300, capacity=3500)
  assert r.completed == 300
  if kind == "MB":
    assert r.preemptions > 0


def test_throughput_is_token_count_over_time():
  # Warm-up 0, one client: throughput = all tokens / duration.
  r = simulator.simulate(S.MBScheduler(8, 1024), M, W.Workload(50.0, 20.0), concurrency=1, num_requests=20,
                         warmup_frac=0.0, seed=3)
  p, o = W.Workload(50.0, 20.0).sample(np.random.default_rng(3), 20)
  assert r.throughput == pytest.approx((p + o).sum() / r.duration, rel=1e-12)


def test_eb_theta_learning_tracks_workload():
  eb = S.EBScheduler(M, 256, 8192, capacity=400_000)
  simulator.simulate(eb, M, W.Workload(256.0, 200.0, output_dist="geometric"), concurrency=256,
                     num_requests=1500)
  # Geometric outputs: p0 ~ 1/200, eta ~ 0, theta ~ CFR theta0.
  assert abs(eb.p0 - 1 / 200) / (1 / 200) < 0.25
  from jaxlab.serving import solver
  assert eb.theta == pytest.approx(solver.theta_cfr(M, 1 / 200), rel=0.3)


def test_ebplus_follows_crossover_sign():
  # RTX, mu_L=512, mu_O=256: crossover says MB at low occupancy, EB at high.
  cap = cost.kv_capacity_tokens(cost.RTX_PRO_6000_SPEC)
  res = {}
  for c in (8, 256):
    mb, eb = S.MBScheduler(1024, 8192), S.EBScheduler(M, 1024, 8192, capacity=cap)
    plus = S.EBPlusScheduler(M, mb, eb, n_obs_min=4.0)
    simulator.simulate(plus, M, W.TABLE4, concurrency=c, num_requests=250 if c < 100 else 500, capacity=cap)
    # Decisions taken at full load (the run's tail drains the server and lowers N_obs).
    res[c] = {h["mode"] for h in plus.history if h["n_obs"] >= 0.9 * c}
  assert res == {8: {"mb"}, 256: {"eb"}}


def test_bad_inputs_raise():
  with pytest.raises(ValueError, match="capacity"):
    S.SlotState(4, 0)
  with pytest.raises(ValueError, match="concurrency"):
    simulator.simulate(S.MBScheduler(4, 64), M, FIXED, concurrency=0, num_requests=1)
  with pytest.raises(ValueError, match="max_num_seqs"):
    S.MBScheduler(0, 64)
  with pytest.raises(ValueError, match="prompt"):
    S.SlotState(4, 100).submit(0, prompt=-3, output=4)
  with pytest.raises(ValueError, match="mb_share"):
    simulator.simulate(S.MBScheduler(4, 64), M, FIXED, concurrency=1, num_requests=1, mb_share="x")
  with pytest.raises(RuntimeError, match="KV"):
    simulator.simulate(S.MBScheduler(4, 64), M, FIXED, concurrency=1, num_requests=1, capacity=10)


def test_window_share_is_token_weighted():
  # Seven decode-only steps of 32 tokens, then 31 decodes + a 512-token prefill, repeated:
  # the token share is (7*32 + 31) / (8*32 - 1 + 512) = 0.332, the per-step average 0.88.
  w = simulator.TokenShare(0.02)
  for _ in range(200):
    for _ in range(7):
      r = w.update(32, 0)
    r = w.update(31, 512)
  assert r == pytest.approx(255 / 767, abs=0.05)
  # Weight 1 reproduces each step's own share.
  assert simulator.TokenShare(1.0).update(3, 1) == 0.75
  with pytest.raises(ValueError, match="share_ema"):
    simulator.TokenShare(0.0)


def test_ebplus_crossover_uses_cfr_theta0():
  # At the first evaluation EB+ prices the crossover with theta_0 = CFR threshold at the EMA of p.
  cap = cost.kv_capacity_tokens(cost.RTX_PRO_6000_SPEC)
  mb, eb = S.MBScheduler(256, 8192), S.EBScheduler(M, 256, 8192, capacity=cap)
  plus = S.EBPlusScheduler(M, mb, eb, n_obs_min=1.0)
  simulator.simulate(plus, M, W.TABLE4, concurrency=256, num_requests=150, capacity=cap)
  h = plus.history[0]
  from jaxlab.serving import solver
  assert h["theta"] == pytest.approx(solver.theta_cfr(M, h["p"]))
  with pytest.raises(ValueError, match="crossover_theta"):
    S.EBPlusScheduler(M, mb, eb, crossover_theta="x")
