"""KernelBand's bandit pieces against hand-computed values, its loop, proposers and evaluators."""

import math

import numpy as np
import pytest

from jaxlab import autotune
from jaxlab.autotune import benchmark, cost_model, kernelband, space
from pallas_kernels.tuning import KernelConfig


def test_ucb_select_and_update_match_a_hand_computed_sequence():
  mu, n = np.full((2, 3), 0.5), np.ones((2, 3))
  mask = np.array([[True, True, False], [True, False, True]])
  # t = 1: ln 1 = 0, all scores 0.5 -> the first unmasked arm in row-major order.
  assert kernelband.ucb_select(mu, n, 1, 2.0, mask) == (0, 0)
  kernelband.ucb_update(mu, n, (0, 0), 0.2)      # N = 2, mu = 0.5 + (0.2 - 0.5) / 2 = 0.35
  assert n[0, 0] == 2 and mu[0, 0] == pytest.approx(0.35)
  scores = kernelband.ucb_scores(mu, n, 2, 2.0, mask)
  assert scores[0, 0] == pytest.approx(0.35 + 2 * math.sqrt(math.log(2) / 2))
  assert scores[0, 1] == pytest.approx(0.5 + 2 * math.sqrt(math.log(2)))
  assert scores[0, 2] == -np.inf
  assert kernelband.ucb_select(mu, n, 2, 2.0, mask) == (0, 1)
  kernelband.ucb_update(mu, n, (0, 1), 0.0)      # a failure still counts: N = 2, mu = 0.25
  assert mu[0, 1] == pytest.approx(0.25) and n[0, 1] == 2
  # t = 3: untouched arms (1, 0), (1, 2) lead with 0.5 + 2 sqrt(ln 3); (1, 0) comes first.
  assert kernelband.ucb_select(mu, n, 3, 2.0, mask) == (1, 0)


def test_all_masked_cluster_unmasks_its_max_headroom_resource_and_empty_is_masked():
  h = np.array([[90.0, 80.0, 76.0],     # every resource saturated; capacity has most headroom
                [10.0, 90.0, 90.0],
                [0.0, 0.0, 0.0]])
  mask = kernelband.hardware_mask(h, np.array([True, True, False]), np.full(3, 75.0))
  np.testing.assert_array_equal(mask[0], space.STRATEGY_TARGET == 2)
  np.testing.assert_array_equal(mask[1], space.STRATEGY_TARGET == 0)
  assert not mask[2].any()
  per_resource = kernelband.hardware_mask(h[:1], np.array([True]), np.array([95.0, 70.0, 75.0]))
  np.testing.assert_array_equal(per_resource[0], space.STRATEGY_TARGET == 0)


def test_kmeans_pp_is_deterministic_under_a_seed_and_finds_separated_blobs():
  rng = np.random.default_rng(0)
  x = np.concatenate([rng.normal(c, 0.1, (10, 5)) for c in (0.0, 5.0, 10.0)])
  l1, c1 = kernelband.kmeans_pp(x, 3, seed=42)
  l2, c2 = kernelband.kmeans_pp(x, 3, seed=42)
  np.testing.assert_array_equal(l1, l2)
  np.testing.assert_array_equal(c1, c2)
  assert all(len(set(l1[i * 10:(i + 1) * 10])) == 1 for i in range(3))
  assert len(set(l1)) == 3
  with pytest.raises(ValueError, match="rows"):
    kernelband.kmeans_pp(x[:2], 3)


class _Recorder(kernelband.KernelBandPolicy):
  def update(self, frontier, cluster, strategy, r, child):
    self.seen = getattr(self, "seen", []) + [(cluster, strategy, r, child is None)]
    super().update(frontier, cluster, strategy, r, child)


class _AlwaysInvalid:
  def propose(self, task, parent, strategy, rng):
    return KernelConfig(block_m=3)   # never divides a power-of-two shape


def test_invalid_candidate_gets_zero_reward_and_still_updates_its_arm():
  task = space.Task("matmul", (256, 256, 256), "bfloat16", "h100")
  pol = _Recorder()
  res = kernelband.run_search(task, pol, cost_model.CostModelEvaluator(), _AlwaysInvalid(),
                              budget=4, seed=0)
  assert [t.ok for t in res.trials] == [False] * 4 and [t.reward for t in res.trials] == [0.0] * 4
  assert pol.n.sum() == pol.n0 * pol.n.size + 4 and pol.t == 5
  assert len(res.frontier) == 1
  arm = (pol.seen[0][0], pol.seen[0][1])
  assert pol.mu[arm] < 0.5
  assert kernelband.reward(2.0, 1.0, True) == 0.5 and kernelband.reward(1.0, 2.0, True) == 0.0


def test_kernelband_improves_on_the_default_and_is_reproducible():
  task = space.Task("matmul", (1024, 1024, 1024), "bfloat16", "tpu_v5e")
  ev = cost_model.CostModelEvaluator()
  kb = autotune.KernelBand(ev, autotune.LocalProposer())
  a, b = kb.search(task, 20, seed=3), kb.search(task, 20, seed=3)
  assert [t.config for t in a.trials] == [t.config for t in b.trials]
  assert ev.true_time(task, a.best_after(20)) < ev.true_time(task, a.default.config)
  _, t_oracle = ev.oracle(task)
  assert t_oracle <= ev.true_time(task, a.best_after(20))


def test_benchmark_has_30_tasks_with_valid_defaults():
  tasks = benchmark.default_tasks()
  assert len(tasks) >= 30
  ev = cost_model.CostModelEvaluator(noise=0.0)
  for t in tasks:
    d = space.default_config(t, cost_model.get_device(t.device).kind)
    assert np.isfinite(ev.true_time(t, d)), t.name


def test_bad_input_gets_clear_errors():
  with pytest.raises(ValueError, match="Unknown op"):
    space.Task("conv", (1, 2, 3))
  with pytest.raises(ValueError, match="Unknown device"):
    cost_model.get_device("a100")
  task = space.Task("matmul", (64, 64, 64), "bfloat16", "h100")
  with pytest.raises(ValueError, match="budget"):
    kernelband.run_search(task, kernelband.KernelBandPolicy(), cost_model.CostModelEvaluator(),
                          autotune.LocalProposer(), budget=0, seed=0)
  with pytest.raises(ValueError, match="Unknown method"):
    benchmark.make_policy("random", {})
  with pytest.raises(ValueError, match="Unknown strategy"):
    space.apply_strategy(task, KernelConfig(), "unrolling", np.random.default_rng(0))
  with pytest.raises(ValueError, match="no valid config"):   # empty config space
    cost_model.CostModelEvaluator().oracle(space.Task("softmax", (8, 1 << 16), "float32", "h100"))


class _FakeClient:
  def __init__(self, replies):
    self.replies, self.messages = list(replies), []

  def generate(self, messages):
    self.messages.append(messages)
    return self.replies.pop(0)


def test_llm_proposer_parses_json_and_rejects_non_json():
  task = space.Task("matmul", (256, 256, 256), "bfloat16", "h100")
  reply = 'Sure:\n```json\n{"block_m": 128, "block_n": 64, "num_stages": 3}\n```'
  client = _FakeClient([reply, "I cannot help with that."])
  prop = autotune.LLMProposer(client)
  cfg = prop.propose(task, KernelConfig(), "tiling", np.random.default_rng(0))
  assert cfg == KernelConfig(block_m=128, block_n=64, num_stages=3)
  assert "tiling" in client.messages[0][0]["content"]
  assert prop.propose(task, KernelConfig(), "pipeline", np.random.default_rng(0)) is None
  with pytest.raises(ValueError, match="no JSON"):
    autotune.LLMProposer(_FakeClient(["nope"]), strict=True).propose(
        task, KernelConfig(), "tiling", np.random.default_rng(0))
  with pytest.raises(ValueError, match="generate"):
    autotune.LLMProposer(object())


def test_timing_evaluator_times_blocked_matmul_on_cpu_and_checks_correctness():
  ev = autotune.TimingEvaluator(repeats=2)
  task = space.Task("matmul", (64, 128, 64), "float32", "cpu")
  m = ev.evaluate(task, KernelConfig(block_m=32, block_n=32, block_k=64), np.random.default_rng(0))
  assert m.ok and 0 < m.time < 1.0 and m.h.shape == (3,) and m.phi.shape == (5,)
  assert not ev.evaluate(task, KernelConfig(block_m=48), np.random.default_rng(0)).ok
  row = ev.evaluate(space.Task("rmsnorm", (64, 32), "float32", "cpu"), KernelConfig(block_m=16),
                    np.random.default_rng(0))
  assert row.ok
  with pytest.raises(ValueError, match="times"):
    ev.evaluate(space.Task("softmax", (64, 32), "float32", "cpu"), KernelConfig(), np.random.default_rng(0))
