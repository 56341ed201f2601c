"""The tiny JAX engine: exact logits, scheduler-driven runs, no recompiles, calibration."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.nn import Transformer, TransformerConfig
from jaxlab.serving import cost, simulator
from jaxlab.serving import engine as E
from jaxlab.serving import schedulers as S
from jaxlab.serving import workload as W

CFG = TransformerConfig(vocab_size=32, d_model=16, num_layers=1, num_heads=2, num_kv_heads=1, d_ff=32)
WL = W.Workload(6.0, 4.0)


@pytest.fixture(scope="module")
def eng():
  # Token buckets (1, 2, 4): three programs, compiled once (the ebplus smoke
  # run uses the same shapes and reuses them).
  e = E.Engine.create(CFG, jax.random.key(0), num_slots=2, max_len=E.max_len_for(WL.mu_l, WL.mu_o),
                      max_tokens=4, midpoints=False)
  e.precompile()
  return e


def test_token_buckets():
  assert E.token_buckets(4, midpoints=False) == (1, 2, 4)
  assert E.token_buckets(40) == (1, 2, 4, 8, 12, 16, 24, 32, 40)
  assert E.bucket(5, (1, 2, 4, 8)) == 8
  with pytest.raises(ValueError, match="max_tokens"):
    E.bucket(9, (1, 2, 4, 8))


def test_engine_steps_match_full_forward(eng):
  # Two requests through a packed prefill, a mixed step (decode + chunk) and a
  # decode step on the engine's compiled programs, against the model's full forward.
  eng.reset()
  rng = np.random.default_rng(0)
  a, b = rng.integers(0, 32, 5), rng.integers(0, 32, 5)
  full = np.asarray(jax.jit(lambda x: Transformer(CFG).apply({"params": eng.params}, x))(
      jnp.asarray(np.stack([a, b]), jnp.int32)))
  # Prefill a[:3] in slot 1 and b[:1] in slot 0 (4 packed tokens).
  lg, _ = eng.run_raw([], [], [1, 0], [0, 0], [3, 1], pre_tokens=[a[:3], b[:1]], return_logits=True)
  np.testing.assert_allclose(lg, np.stack([full[0, 2], full[1, 0]]), atol=2e-5)
  # Mixed: decode a[3] at position 3 next to the chunk b[1:4].
  lg, _ = eng.run_raw([1], [3], [0], [1], [3], dec_tokens=[a[3]], pre_tokens=[b[1:4]], return_logits=True)
  np.testing.assert_allclose(lg, np.stack([full[0, 3], full[1, 3]]), atol=2e-5)
  # Decode a[4] and b[4].
  lg, _ = eng.run_raw([1, 0], [4, 4], [], [], [], dec_tokens=[a[4], b[4]], return_logits=True)
  np.testing.assert_allclose(lg, full[:, 4], atol=2e-5)
  # Greedy tokens are the argmax of those logits.
  tok, dt = eng.run_raw([1, 0], [5, 5], [], [], [])
  assert tok.shape == (2,) and dt > 0


@pytest.mark.parametrize("kind", ["MB", "EB", "EB+"])
def test_schedulers_drive_engine_without_recompiles(eng, kind):
  m = cost.RTX_PRO_6000_QWEN3_8B
  mb = S.MBScheduler(2, 4)
  eb = S.EBScheduler(m, 2, 4, capacity=eng.capacity, min_samples=4, update_every=4)
  sch = {"MB": mb, "EB": eb, "EB+": S.EBPlusScheduler(m, mb, eb, eval_every=4, n_obs_min=1.0)}[kind]
  eng.reset()
  before = eng.compiles
  wl = WL
  r = simulator.simulate(sch, eng, wl, concurrency=2, num_requests=8, capacity=eng.capacity, seed=1,
                         warmup_frac=0.0)
  assert eng.compiles == before  # every bucket was compiled in warm-up
  assert r.completed == 8
  p, o = wl.sample(np.random.default_rng(1), 8)
  log = np.array(eng.step_log)
  assert len(log) == r.steps
  # Every prompt token was prefilled once and every output token decoded once (no preemption here).
  assert r.preemptions == 0
  assert log[:, 0].sum() == p.sum() and log[:, 1].sum() == o.sum()
  assert r.duration == pytest.approx(log[:, 2].sum())
  if kind == "EB":
    assert np.all((log[:, 0] == 0) | (log[:, 1] == 0))


def test_calibration_fits_a_positive_model(eng):
  m, r2, samples = E.calibrate(eng, repeats=1)
  assert set(r2) == {"r2_prefill", "r2_decode", "r2_mixed"}
  assert m.alpha_p > 0 and m.alpha_d > 0 and m.beta_p > 0 and m.beta_d > 0
  assert all(s.seconds > 0 for s in samples)
  assert {(s.prefill_tokens > 0, s.decode_tokens > 0) for s in samples} == {(True, False), (False, True),
                                                                            (True, True)}


def test_bad_inputs_raise(eng):
  with pytest.raises(ValueError, match="slot"):
    eng.run_raw([5], [0], [], [], [])
  with pytest.raises(ValueError, match="max_len"):
    eng.run_raw([0], [eng.max_len], [], [], [])
  with pytest.raises(ValueError, match="max_tokens"):
    eng.run_raw([], [], [0], [0], [5])
  with pytest.raises(ValueError, match="at least one"):
    eng.run_raw([], [], [], [], [])
  with pytest.raises(ValueError, match="num_slots"):
    E.Engine.create(CFG, jax.random.key(0), num_slots=0, max_len=8)
