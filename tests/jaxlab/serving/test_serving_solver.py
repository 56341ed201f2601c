"""Tests of the EB solver and the step-time models against the spec's anchors."""

import math

import numpy as np
import pytest

from jaxlab.serving import cost, solver
from jaxlab.serving.workload import Workload

H200 = cost.H200_QWEN3_8B


def test_worked_anchor_decode_heavy_h200():
  # Repo reproduction log: theta0 = 0.0116, p0 = 4.7e-4, N = 315, k = 4.
  p0 = 4.7e-4
  theta0 = solver.theta_cfr(H200, p0)
  assert abs(theta0 - 0.0116) / 0.0116 < 0.01
  # Small-C expansion theta ~ sqrt(2C) of the asymptotic equation.
  c = -math.log1p(-p0) * H200.alpha_p / H200.alpha_d
  assert abs(theta0 - math.sqrt(2 * c)) / theta0 < 0.01
  # KV capacity from the H200's numbers (0.9 x 141 GB - 16.4 GB of weights, 144 KiB/token):
  # the log's exact capacity is unknown, so N is checked to 5%.
  cap = cost.kv_capacity_tokens(cost.H200_SPEC)
  n = solver.memory_safe_batch_size(theta0, p0, 128.0, float(cap))
  assert abs(n - 315) / 315 < 0.05
  # Prop. 1's discrete rule at the anchor's N gives k = 4.
  assert solver.optimal_k_discrete(H200, 315, p0) == 4
  assert solver.optimal_k_discrete(H200, n, p0) == 4


@pytest.mark.parametrize("theta", [1e-3, 0.0116, 0.1, 0.5, 0.9])
def test_bisection_inverts_threshold_equation(theta):
  c = solver.threshold_lhs(theta)
  got = solver.solve_threshold_equation(c)
  assert abs(got - theta) < 1e-9
  assert abs(solver.threshold_lhs(got) - c) <= 1e-9 * max(1.0, c)


def test_worked_theta0_per_workload():
  # Spec: 0.017/0.023/0.046 on H200 and 0.029/0.041/0.080 on RTX (decode-heavy/balanced/prefill-heavy).
  for m, want in ((H200, (0.017, 0.023, 0.046)), (cost.RTX_PRO_6000_QWEN3_8B, (0.029, 0.041, 0.080))):
    got = [solver.theta_cfr(m, 1.0 / mu_o) for mu_o in (1024.0, 512.0, 128.0)]
    np.testing.assert_allclose(got, want, atol=0.0006)


def _discrete_reference(m, n, p):
  tau = lambda j: (m.alpha_d + m.beta_d * j) / (1 - (1 - p) ** j)
  for k in range(1, n):
    if k * tau(n - k) - sum(tau(j) for j in range(n - k + 1, n + 1)) >= m.alpha_p:
      return k
  return max(1, n // 5)


@pytest.mark.parametrize("n,p", [(64, 0.01), (315, 4.7e-4), (1000, 2e-3), (50, 0.2)])
def test_discrete_rule_matches_direct_loop(n, p):
  assert solver.optimal_k_discrete(H200, n, p) == _discrete_reference(H200, n, p)


@pytest.mark.parametrize("n", [1, 2, 10])
def test_discrete_rule_falls_back_to_n_over_5_when_no_k_qualifies(n):
  # A prefill too costly for any k < N (k = N once always qualified: tau(0) = inf).
  m = H200.replace(alpha_p=100.0)
  assert solver.optimal_k_discrete(m, n, 0.01) == _discrete_reference(m, n, 0.01) == max(1, n // 5)


def test_discrete_rule_maximises_cycle_throughput():
  # With CFR decoding the cycle throughput k / (E[decode phase] + T_p) is maximised near k*.
  m, n, p = cost.RTX_PRO_6000_QWEN3_8B, 200, 0.01
  tau = lambda j: (m.alpha_d + m.beta_d * j) / (1 - (1 - p) ** j)
  # Decode phase from n down to n-k requests; prefill of k requests (per-token cost cancels).
  tput = [k / (sum(tau(j) for j in range(n - k + 1, n + 1)) + m.alpha_p) for k in range(1, n)]
  k_best = int(np.argmax(tput)) + 1
  assert abs(solver.optimal_k_discrete(m, n, p) - k_best) <= 1


def test_ifr_correction():
  th0, p0 = 0.02, 1e-3
  assert solver.ifr_correction(th0, p0, 0.0, H200, 300) == 0.0
  eta = 1e-9
  lam = -math.log(1 - th0)
  rho = H200.beta_d * 300 / H200.alpha_d
  want = eta * (1 - th0) ** 2 / (p0 ** 2 * th0) * (lam * (th0 / (1 - th0) - lam / 2) + rho * (lam - th0))
  assert want > 0
  np.testing.assert_allclose(solver.ifr_correction(th0, p0, eta, H200, 300), want, rtol=1e-12)
  assert solver.ifr_correction(th0, p0, 1.0, H200, 300) == pytest.approx(5 * th0)


def test_hazard_estimation_geometric_and_linear():
  rng = np.random.default_rng(0)
  p0, eta = solver.estimate_hazard(rng.geometric(0.01, 20000))
  assert abs(p0 - 0.01) / 0.01 < 0.1 and eta < 2e-5
  # Linear hazard h(t) = 0.002 + 2e-5 t sampled step by step.
  t = np.arange(1, 2000)
  h = np.minimum(0.002 + 2e-5 * t, 1.0)
  surv = np.concatenate([[1.0], np.cumprod(1 - h)[:-1]])
  pmf = surv * h
  lengths = rng.choice(t, size=50000, p=pmf / pmf.sum())
  p0, eta = solver.estimate_hazard(lengths)
  assert abs(eta - 2e-5) / 2e-5 < 0.3
  assert p0 >= 1.0 / lengths.mean() - 1e-12  # the code's floor


def test_memory_safe_batch_size_forms_and_monotone():
  cap = 500_000.0
  n_clt = solver.memory_safe_batch_size(0.02, 1e-3, 512.0, cap)
  n_paper = solver.memory_safe_batch_size(0.02, 1e-3, 512.0, cap, form="paper")
  d = 512 + 0.98 / (0.02 * 1e-3) * -math.log(0.98)
  assert n_clt <= cap / d and n_paper <= cap / d
  assert solver.memory_safe_batch_size(0.02, 1e-3, 512.0, 2 * cap) > n_clt
  assert solver.memory_safe_batch_size(0.02, 1e-3, 512.0, cap, n_max=10) == 10


def test_crossover_table4_choices():
  # Spec: for mu_L=512, mu_O=256 the crossover picks MB at N=32 and EB from N~256 up.
  m = cost.RTX_PRO_6000_QWEN3_8B
  th = solver.theta_cfr(m, 1 / 256)
  assert not solver.crossover(m, 512.0, 256.0, 32.0, th).eb_wins
  assert all(solver.crossover(m, 512.0, 256.0, float(n), th).eb_wins for n in (256, 512, 2048))
  ms = cost.H200_QWEN3_8B_SHIPPED
  th = solver.theta_cfr(ms, 1 / 256)
  assert not solver.crossover(ms, 512.0, 256.0, 32.0, th).eb_wins
  assert solver.crossover(ms, 512.0, 256.0, 512.0, th).eb_wins
  # Right side falls as 1/N.
  r1 = solver.crossover(m, 512.0, 256.0, 100.0, th).right
  r2 = solver.crossover(m, 512.0, 256.0, 200.0, th).right
  assert r1 == pytest.approx(2 * r2)


def test_crossover_shares():
  assert cost.crossover_share(cost.H200_QWEN3_8B_SHIPPED) == pytest.approx(0.365, abs=1e-3)
  assert cost.crossover_share(cost.RTX_PRO_6000_QWEN3_8B_SHIPPED) == pytest.approx(0.206, abs=1e-3)
  assert cost.crossover_share(cost.H200_QWEN3_8B) == pytest.approx(0.8, abs=1e-9)
  assert cost.crossover_share(cost.RTX_PRO_6000_QWEN3_8B) == pytest.approx(0.2, abs=1e-9)
  # Refit keeps a and c; b near the spec's 14.3 us.
  assert cost.H200_QWEN3_8B.mb_b / cost.US == pytest.approx(14.33, abs=0.01)


def test_fit_linear_model_recovers_coefficients():
  m = cost.RTX_PRO_6000_QWEN3_8B
  samples = [cost.StepSample(n, 0, m.prefill_time(n)) for n in (256, 1024, 4096)]
  samples += [cost.StepSample(0, k, m.decode_time(k)) for k in (16, 256, 1024)]
  for k, p in ((64, 1000), (256, 256), (512, 100), (128, 2000)):
    samples.append(cost.StepSample(p, k, m.mixed_time(k, p)))
  fit, r2 = cost.fit_linear_model(samples)
  for f in ("alpha_p", "beta_p", "alpha_d", "beta_d", "mb_a", "mb_b", "mb_c"):
    assert getattr(fit, f) == pytest.approx(getattr(m, f), rel=1e-6), f
  assert min(r2.values()) > 0.999999


def test_roofline_interference_and_unreachable_share():
  # Decode steps get slower with context (KV reads); mixed steps pay interference.
  r = cost.RooflineModel(cost.RTX_PRO_6000_SPEC, kappa=1.0)
  assert r.step_time([], [], np.full(64, 2048.0)) > r.step_time([], [], np.full(64, 128.0))
  r0 = cost.RooflineModel(cost.RTX_PRO_6000_SPEC, kappa=0.0)
  args = ([512.0], [0.0], np.full(64, 1024.0))
  assert r.step_time(*args) > r0.step_time(*args)
  # With this roofline the calibrated crossover share stays near 0.5 and then jumps to 0
  # (MB always worse) as kappa grows: 0.2 and 0.8 are not reachable, and the fit says so.
  with pytest.raises(ValueError, match="not reachable|outside"):
    cost.fit_kappa(r0, 0.2)
  with pytest.raises(ValueError, match="not reachable|outside"):
    cost.fit_kappa(cost.RooflineModel(cost.H200_SPEC), 0.8)
  # A reachable target (H200: the share drifts from 0.527 to 0.525 as kappa goes -1 -> 4) is hit.
  h = cost.RooflineModel(cost.H200_SPEC)
  k = cost.fit_kappa(h, 0.5255, kappa_max=4.0, tol=1e-4)
  got = cost.crossover_share(cost.calibrate_roofline(cost.RooflineModel(cost.H200_SPEC, kappa=k)))
  assert got == pytest.approx(0.5255, abs=1e-4)


@pytest.mark.parametrize("kwargs", [
    dict(mu_l=-1.0, mu_o=10.0), dict(mu_l=10.0, mu_o=0.0), dict(mu_l=10.0, mu_o=10.0, jitter=1.5),
    dict(mu_l=10.0, mu_o=10.0, output_dist="pareto")])
def test_bad_workload_raises(kwargs):
  with pytest.raises(ValueError):
    Workload(**kwargs)


def test_bad_solver_inputs_raise():
  with pytest.raises(ValueError, match="capacity"):
    solver.memory_safe_batch_size(0.02, 1e-3, 512.0, 0.0)
  with pytest.raises(ValueError, match="mu_o"):
    solver.crossover(H200, 512.0, -5.0, 100.0, 0.02)
  with pytest.raises(ValueError, match="p0"):
    solver.theta_cfr(H200, 1.5)
  with pytest.raises(ValueError, match="lengths"):
    solver.estimate_hazard([3, 0, 5])
  with pytest.raises(ValueError, match="n"):
    solver.optimal_k_discrete(H200, 0, 0.01)
  with pytest.raises(ValueError, match="beta_d"):
    H200.replace(beta_d=-1.0)
