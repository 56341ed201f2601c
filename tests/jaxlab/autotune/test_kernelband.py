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


def test_all_masked_cluster_gets_one_strategy_back_as_the_authors_masker_picks_it():
  # kernelband/mab/masking.py: the first strategy with the most headroom theta - h, searched
  # from -1, so strategy 0 when every headroom is <= -1 point.
  h = np.array([[90.0, 75.5, 80.0],     # all saturated; DRAM is 0.5 past theta: vectorization
                [95.0, 80.0, 90.0],     # all >= 1 point past theta: strategy 0 (tiling)
                [10.0, 90.0, 90.0],     # compute has headroom: its strategies stay
                [0.0, 0.0, 0.0]])
  mask = kernelband.hardware_mask(h, np.array([True, True, True, False]), np.full(3, 75.0))
  np.testing.assert_array_equal(mask[0], [False, True, False, False, False, False])
  np.testing.assert_array_equal(mask[1], [True, False, False, False, False, False])
  np.testing.assert_array_equal(mask[2], space.STRATEGY_TARGET == 0)
  assert not mask[3].any()
  per_resource = kernelband.hardware_mask(h[:1], np.array([True]), np.array([95.0, 70.0, 75.0]))
  np.testing.assert_array_equal(per_resource[0], space.STRATEGY_TARGET == 0)


def test_parent_probabilities_match_the_authors_softmax_by_hand():
  # kernelband/mab/ucb.py sample_from_cluster: exp(V) / sum exp(V), V = theta - h[target] in %
  # for a profiled kernel and 0 for one without a hardware signature; temperature 1.
  # V = [75 - 74, 75 - 76, (unprofiled) 0, 75 - 73.5] = [1, -1, 0, 1.5];
  # exp(V) = [2.718282, 0.367879, 1, 4.481689], sum 8.567850.
  h_target = np.array([74.0, 76.0, 70.0, 73.5])
  p = kernelband.parent_probabilities(75.0 - h_target, np.array([True, True, False, True]))
  np.testing.assert_allclose(p, [0.317265, 0.042937, 0.116715, 0.523082], atol=1e-6)
  # Temperature 2 halves every V: exp([0.5, -0.5, 0, 0.75]) / 5.372252.
  p2 = kernelband.parent_probabilities(75.0 - h_target, np.array([True, True, False, True]), 2.0)
  np.testing.assert_allclose(p2, [0.306896, 0.112901, 0.186142, 0.394062], atol=1e-6)
  with pytest.raises(ValueError, match="temperature"):
    kernelband.parent_probabilities(np.zeros(2), np.ones(2, bool), 0.0)
  with pytest.raises(ValueError, match="non-empty"):
    kernelband.parent_probabilities(np.zeros(0), np.zeros(0, bool))


def _entry(time: float, h_capacity: float) -> kernelband.Entry:
  return kernelband.Entry(KernelConfig(), time, np.array([50.0, 50.0, h_capacity]), np.zeros(5))


def test_parent_draw_follows_the_authors_rule_on_a_hand_worked_frontier():
  # Four kernels, fewer than 2K = 6, so no clustering yet: all in cluster 0, whose
  # representative is the fastest kernel (clustering.py get_cluster_representative) and the
  # only one profiled. Its capacity use 74 % < 75 leaves every arm unmasked; at t = 1 every
  # UCB score is 0.5, so the first arm wins: (cluster 0, tiling), target capacity.
  # V = [75 - 74, 0, 0, 0]: p = [e, 1, 1, 1] / (e + 3) = [0.475367, 0.174878 x 3].
  # (Profiling every kernel would give V = [1, 65, -15, 0]: kernel 1 almost surely.)
  frontier = [_entry(1.0, 74.0), _entry(2.0, 10.0), _entry(3.0, 90.0), _entry(4.0, 75.0)]
  pol = kernelband.KernelBandPolicy()
  pol.reset(np.random.default_rng(0))
  draws = [pol.choose(frontier, 0) for _ in range(4000)]
  assert {(s, i) for _, s, i in draws} == {(0, 0)}
  freq = np.bincount([p for p, _, _ in draws], minlength=4) / len(draws)
  np.testing.assert_allclose(freq, [0.475367, 0.174878, 0.174878, 0.174878], atol=0.03)
  # A child joins the cluster of the arm that made it, unprofiled.
  pol.update(frontier + [_entry(0.5, 20.0)], 2, 0, 0.5, None)
  assert pol.labels[-1] == 2 and pol.profiled == [True, False, False, False, False]


def test_other_parent_rules_and_the_no_mask_ablation():
  frontier = [_entry(1.0, 74.0), _entry(2.0, 10.0), _entry(3.0, 90.0), _entry(4.0, 75.0)]
  expected = {"all_profiled": kernelband.parent_probabilities(
                  np.array([1.0, 65.0, -15.0, 0.0]), np.ones(4, bool)),
              "uniform": np.full(4, 0.25), "fastest": np.array([1.0, 0, 0, 0])}
  for rule, p in expected.items():
    pol = kernelband.KernelBandPolicy(parent_rule=rule)
    pol.reset(np.random.default_rng(0))
    pol.choose(frontier, 0)
    idx, got = pol.parent_distribution(frontier, 0, 0)
    np.testing.assert_array_equal(idx, np.arange(4))
    np.testing.assert_allclose(got, p, atol=1e-12)
  # No mask: a saturated representative (capacity 90 %) no longer masks tiling; the parent
  # rule keeps its finite theta.
  pol = benchmark.make_policy("no_mask", {})
  assert not pol.use_mask and np.all(pol.theta == 75.0)
  pol.reset(np.random.default_rng(0))
  assert pol.choose([_entry(1.0, 90.0)], 0)[1:] == (0, 0)
  with pytest.raises(ValueError, match="parent_rule"):
    kernelband.KernelBandPolicy(parent_rule="best")
  with pytest.raises(ValueError, match="theta_sat"):
    kernelband.KernelBandPolicy(theta_sat=float("inf"))


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


def test_kmeans_pp_rejects_a_non_finite_point():
  # A NaN row has no distance: it landed in an arbitrary cluster and turned its centroid NaN.
  x = np.random.default_rng(0).normal(size=(12, 5))
  for bad in (np.nan, np.inf):
    y = x.copy()
    y[3, 2] = bad
    with pytest.raises(ValueError, match="x must be finite"):
      kernelband.kmeans_pp(y, 3)


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
  assert pol.n.sum() == pol.n0 * pol.n.size + 4 and pol.t == 4   # rounds played
  assert len(res.frontier) == 1
  arm = (pol.seen[0][0], pol.seen[0][1])
  assert pol.mu[arm] < 0.5
  assert kernelband.reward(2.0, 1.0, True) == 0.5 and kernelband.reward(1.0, 2.0, True) == 0.0


def test_kernelband_improves_on_the_default_and_is_reproducible():
  task = space.Task("matmul", (1024, 1024, 1024), "bfloat16", "tpu_v5e")
  ev = cost_model.CostModelEvaluator()
  kb = autotune.KernelBand(ev, autotune.LocalProposer())
  # At the quick preset's largest budget; at T = 20 this seed's best measured config is a
  # 3 % noise draw away from the default, no faster in truth.
  a, b = kb.search(task, 50, seed=3), kb.search(task, 50, seed=3)
  assert [t.config for t in a.trials] == [t.config for t in b.trials]
  assert ev.true_time(task, a.best_after(50)) < ev.true_time(task, a.default.config)
  _, t_oracle = ev.oracle(task)
  assert t_oracle <= ev.true_time(task, a.best_after(50))


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
    ev.evaluate(space.Task("softmax", (64, 32), "float32", "cpu"), KernelConfig(),
                np.random.default_rng(0))
