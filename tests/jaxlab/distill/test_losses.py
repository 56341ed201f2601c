"""Renyi entropy, ULD (sorted W1), span weights and the E-SCOT / MinED losses."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from jaxlab.distill import (
    coupling_marginals,
    dense_ot_loss,
    escot_dense_loss,
    escot_loss,
    kl_divergence,
    mined_loss,
    overlap_coupling,
    renyi_entropy,
    sinkhorn,
    span_weights,
    spans_from_offsets,
    uld_distance,
    uld_loss,
)


def _probs(rng, *shape):
  x = rng.gamma(0.3, size=shape)
  return jnp.asarray(x / x.sum(-1, keepdims=True), jnp.float32)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0, math.inf])
def test_renyi_entropy_closed_forms(alpha):
  p = _probs(np.random.default_rng(0), 3, 6)
  pn = np.asarray(p, np.float64)
  if alpha == 1.0:
    ref = -(pn * np.log(pn)).sum(-1)
  elif math.isinf(alpha):
    ref = -np.log(pn.max(-1))
  else:
    ref = np.log((pn ** alpha).sum(-1)) / (1 - alpha)
  np.testing.assert_allclose(renyi_entropy(p, alpha), ref, rtol=1e-4)
  np.testing.assert_allclose(renyi_entropy(jnp.ones(5) / 5, alpha), math.log(5), rtol=1e-5)
  # Renyi entropies decrease in alpha.
  assert np.all(np.asarray(renyi_entropy(p, 0.5)) >= np.asarray(renyi_entropy(p, 2.0)) - 1e-6)


@pytest.mark.parametrize("alpha", [0.5, 2.0, math.inf])
def test_renyi_entropy_exact_on_peaked_distributions(alpha):
  # One confident logit over a 4096 vocabulary: the others are ~1e-13 or ~1e-26.
  # A 1e-9 floor before p ** alpha used to give 0.2435 instead of 0.0025 at alpha = 0.5.
  logits = np.zeros((3, 4096))
  logits[0, 0], logits[1, 7], logits[2, :] = 30.0, 60.0, np.linspace(0.0, 3.0, 4096)
  p64 = np.exp(logits - logits.max(-1, keepdims=True))
  p64 /= p64.sum(-1, keepdims=True)
  if math.isinf(alpha):
    ref = -np.log(p64.max(-1))
  else:
    ref = np.log((p64 ** alpha).sum(-1)) / (1 - alpha)
  p = jnp.asarray(p64, jnp.float32)
  np.testing.assert_allclose(renyi_entropy(p, alpha), ref, rtol=1e-4, atol=1e-6)
  grad = jax.grad(lambda x: jnp.sum(renyi_entropy(jax.nn.softmax(x), alpha)))(
      jnp.asarray(logits, jnp.float32))
  assert np.all(np.isfinite(grad))
  # Gradients in p itself stay finite too, zeros and subnormals included.
  q = jnp.array([0.7, 0.3 - 1e-44, 1e-44, 0.0])
  assert np.all(np.isfinite(jax.grad(lambda x: renyi_entropy(x, alpha))(q)))


def test_uld_equals_sorted_w1_closed_form():
  rng = np.random.default_rng(1)
  for v, w in [(7, 7), (5, 11), (16, 3)]:
    p, q = _probs(rng, v), _probs(rng, w)
    length = max(v, w)
    pad = lambda x, length=length: np.pad(np.asarray(x, np.float64), (0, length - len(x)))
    ref = wasserstein_distance(pad(p), pad(q)) * length
    np.testing.assert_allclose(uld_distance(p, q), ref, rtol=1e-5)
  # Top-k truncation compares only the k largest probabilities.
  p, q = jnp.array([0.6, 0.3, 0.1]), jnp.array([0.1, 0.5, 0.2, 0.2])
  np.testing.assert_allclose(uld_distance(p, q, k=2), 0.1 + 0.1, rtol=1e-6)


def test_span_weights_mean_one_and_follow_the_entropy_gap():
  ent_t = jnp.array([1.0, 1.0, 3.0, 0.5])
  ent_s = jnp.array([1.0, 1.0, 0.0, 0.5, 0.0])
  span_t = jnp.array([0, 1, 2, 3])
  span_s = jnp.array([0, 1, 2, 3, 9])  # the last student token is padding
  weights = jax.jit(span_weights, static_argnames=("num_spans", "weighting"))
  w = weights(ent_t, ent_s, span_t, span_s, 5)
  assert float(w[4]) == 0.0
  np.testing.assert_allclose(w[:4].sum(), 4.0, rtol=1e-5)
  assert float(w[2]) == float(w.max())
  np.testing.assert_allclose(w[:4], 4 * jax.nn.softmax(jnp.array([0.0, 0.0, 3.0, 0.0])),
                             rtol=1e-5)
  flat = weights(ent_t, ent_s, span_t, span_s, 5, weighting="none")
  np.testing.assert_allclose(flat, [1, 1, 1, 1, 0])
  with pytest.raises(ValueError, match="weighting"):
    span_weights(ent_t, ent_s, span_t, span_s, 5, weighting="bad")


def test_escot_loss_matches_a_hand_computation_and_vanishes_at_the_teacher():
  rng = np.random.default_rng(2)
  t_off = np.array([[0, 3], [3, 5], [5, 6]])
  s_off = np.array([[0, 1], [1, 3], [3, 6]])
  spans = spans_from_offsets(t_off, s_off)
  c = overlap_coupling(t_off, s_off, spans)
  vocab, chars, r = 6, 4, 3
  first = np.zeros((vocab, chars), np.float32)
  first[np.arange(vocab), [0, 1, 2, 3, 0, 1]] = 1
  logp_s = jnp.log(_probs(rng, 3, vocab))
  char_t = _probs(rng, 3, chars)
  top_t = jax.lax.top_k(_probs(rng, 3, 5), r)[0]
  ent_t = renyi_entropy(char_t, 2.0)
  args = (char_t, top_t, ent_t, jnp.asarray(spans.teacher), logp_s, jnp.asarray(first),
          jnp.asarray(spans.student), jnp.asarray(c.teacher), jnp.asarray(c.student),
          jnp.asarray(c.span), jnp.asarray(c.mass, jnp.float32))
  loss = jax.jit(escot_loss, static_argnames=("num_spans", "weighting", "rank_weight"))
  got = loss(*args, num_spans=spans.num_spans, weighting="none", rank_weight=0.5)
  p_s = np.exp(np.asarray(logp_s))
  char_s = p_s @ first
  ref = 0.0
  for i, j, m in zip(c.teacher, c.student, c.mass, strict=True):
    pt = np.asarray(char_t[i], np.float64)
    kl = np.sum(pt * (np.log(pt) - np.log(char_s[j])))
    rank = np.abs(np.asarray(top_t[i]) - np.sort(p_s[j])[::-1][:r]).sum()
    ref += m * (kl + 0.5 * rank)
  np.testing.assert_allclose(got, ref, rtol=1e-5)
  # Weighted and differentiable: finite gradient w.r.t. the student.
  grad = jax.jit(jax.grad(lambda lp: loss(*args[:4], lp, *args[5:],
                                           num_spans=spans.num_spans)))(logp_s)
  assert np.all(np.isfinite(grad))
  # A student equal to the teacher (same tokenizer and distributions) has zero loss.
  same = loss(char_t, top_t, ent_t, jnp.arange(3), jnp.log(char_t),
                    jnp.eye(chars), jnp.arange(3), jnp.arange(3), jnp.arange(3), jnp.arange(3),
                    jnp.ones(3) / 3, num_spans=3, rank_weight=0.0)
  np.testing.assert_allclose(same, 0.0, atol=1e-6)


def test_uld_and_mined_losses():
  rng = np.random.default_rng(4)
  top_t = jax.lax.top_k(_probs(rng, 4, 8), 3)[0]
  logp_s = jnp.log(_probs(rng, 6, 5))
  valid = jnp.array([1.0, 1.0, 1.0, 0.0])
  got = jax.jit(uld_loss)(top_t, logp_s, valid)
  p_s = np.exp(np.asarray(logp_s))
  ref = np.mean([np.abs(np.asarray(top_t[t]) - np.sort(p_s[t])[::-1][:3]).sum()
                 for t in range(3)])
  np.testing.assert_allclose(got, ref, rtol=1e-5)
  ids = jnp.asarray(rng.integers(0, 5, (4, 3)), jnp.int32)
  t_index = jnp.array([0, 0, 1, 2, 3, 3])
  mask = jnp.array([1.0, 1.0, 1.0, 1.0, 1.0, 0.0])
  got = jax.jit(mined_loss)(top_t, ids, logp_s, t_index, mask)
  ref = []
  for j in range(5):
    q = np.asarray(top_t[t_index[j]]) / float(top_t[t_index[j]].sum())
    ref.append(np.sum(q * (np.log(q) - np.asarray(logp_s[j])[np.asarray(ids[t_index[j]])])))
  np.testing.assert_allclose(got, np.mean(ref), rtol=1e-5)


def test_dense_ot_loss_is_the_sinkhorn_plan_times_the_pairwise_kl():
  rng = np.random.default_rng(3)
  p = jnp.asarray(rng.dirichlet(np.full(6, 0.5), 5), jnp.float32)
  q = jnp.asarray(rng.dirichlet(np.full(6, 0.5), 7), jnp.float32)
  cost = kl_divergence(p[:, None, :], q[None, :, :])
  plan = jax.jit(lambda c: sinkhorn(c, jnp.full(5, 1 / 5), jnp.full(7, 1 / 7), epsilon=0.1,
                                    num_iters=20).coupling)(cost)
  loss = jax.jit(lambda p, q: dense_ot_loss(p, q, epsilon=0.1, num_iters=20))(p, q)
  np.testing.assert_allclose(loss, jnp.sum(plan * cost), rtol=1e-5)


def _escot_case(rng, t_off, s_off, vocab=6, chars=4, r=3):
  """Teacher statistics, a student and the span coupling of one sequence."""
  spans = spans_from_offsets(t_off, s_off)
  c = overlap_coupling(t_off, s_off, spans)
  first = np.zeros((vocab, chars), np.float32)
  first[np.arange(vocab), np.arange(vocab) % chars] = 1
  n, m = len(t_off), len(s_off)
  char_t = _probs(rng, n, chars)
  return dict(
      char_t=char_t, top_t=jax.lax.top_k(_probs(rng, n, 5), r)[0],
      # No student probability near the 1e-9 clamp of the KL, so the hand cost is exact.
      ent_t=renyi_entropy(char_t, 2.0), logp_s=jnp.log(0.9 * _probs(rng, m, vocab) + 0.1 / vocab),
      first=jnp.asarray(first), spans=spans, coupling=c,
      marginals=[jnp.asarray(x, jnp.float32) for x in coupling_marginals(c, n, m)])


_STATIC = ("num_spans", "weighting", "rank_weight", "epsilon", "num_iters")


def _sparse(case, **kw):
  sp, c = case["spans"], case["coupling"]
  return jax.jit(escot_loss, static_argnames=_STATIC[:3])(case["char_t"], case["top_t"], case["ent_t"], jnp.asarray(sp.teacher),
                    case["logp_s"], case["first"], jnp.asarray(sp.student),
                    jnp.asarray(c.teacher), jnp.asarray(c.student), jnp.asarray(c.span),
                    jnp.asarray(c.mass, jnp.float32), num_spans=sp.num_spans, **kw)


def _dense(case, **kw):
  sp = case["spans"]
  return jax.jit(escot_dense_loss, static_argnames=_STATIC)(case["char_t"], case["top_t"], case["ent_t"],
                          jnp.asarray(sp.teacher), case["logp_s"], case["first"],
                          jnp.asarray(sp.student), *case["marginals"],
                          num_spans=sp.num_spans, **kw)


def test_escot_dense_loss_is_the_sinkhorn_plan_with_the_span_marginals_times_the_same_cost():
  rng = np.random.default_rng(5)
  case = _escot_case(rng, np.array([[0, 3], [3, 5], [5, 6], [6, 9]]),
                     np.array([[0, 1], [1, 3], [3, 6], [6, 7], [7, 9]]))
  got = _dense(case, weighting="none", rank_weight=0.5, epsilon=0.2, num_iters=300)
  # By hand: E-SCOT's pair cost on every (i, j), the Sinkhorn plan between the marginals of
  # the span coupling (not uniform ones), no span mask.
  p_s = np.exp(np.asarray(case["logp_s"], np.float64))
  char_s, char_t = p_s @ np.asarray(case["first"]), np.asarray(case["char_t"], np.float64)
  top_s = -np.sort(-p_s, -1)[:, :3]
  cost = np.array([[np.sum(char_t[i] * (np.log(char_t[i]) - np.log(char_s[j])))
                    + 0.5 * np.abs(np.asarray(case["top_t"][i]) - top_s[j]).sum()
                    for j in range(5)] for i in range(4)])
  a, b = case["marginals"]
  plan = sinkhorn(jnp.asarray(cost, jnp.float32), a, b, epsilon=0.2, num_iters=300).coupling
  np.testing.assert_allclose(got, np.sum(np.asarray(plan) * cost), rtol=1e-4)
  np.testing.assert_allclose(plan.sum(1), a, atol=1e-5)
  np.testing.assert_allclose(plan.sum(0), b, atol=1e-5)
  # The plan leaves the spans: mass lands on pairs the span coupling never couples.
  off_span = case["spans"].teacher[:, None] != case["spans"].student[None, :]
  assert float(np.sum(np.asarray(plan)[off_span])) > 0.01
  # Weighted like E-SCOT, and differentiable in the student.
  weighted = _dense(case, epsilon=0.2, num_iters=300)
  assert np.isfinite(float(weighted)) and float(weighted) != float(got)
  grad = jax.jit(jax.grad(lambda lp: _dense(dict(case, logp_s=lp), epsilon=0.2)))(
      case["logp_s"])
  assert np.all(np.isfinite(grad)) and np.any(grad != 0)


@pytest.mark.parametrize("weighting", ["none", "softmax", "ratio"])
def test_escot_dense_loss_equals_escot_loss_when_the_plan_is_the_span_coupling(weighting):
  # Only the support differs: where the best dense plan is the span coupling itself (one token
  # per span on both sides, the matched pairs far cheaper than any other), the two losses
  # agree, weights included.
  rng = np.random.default_rng(6)
  offsets = np.array([[0, 2], [2, 3], [3, 5], [5, 6]])
  case = _escot_case(rng, offsets, offsets, vocab=4, chars=4, r=2)
  peaked = jnp.asarray(np.eye(4) * 0.97 + 0.01, jnp.float32)
  case.update(char_t=peaked, top_t=jax.lax.top_k(peaked, 2)[0],
              logp_s=jnp.log(peaked * 0.9 + 0.025),
              ent_t=jnp.asarray([0.1, 1.0, 0.3, 2.0]))
  sparse = _sparse(case, weighting=weighting)
  dense = _dense(case, weighting=weighting, epsilon=0.01, num_iters=200)
  np.testing.assert_allclose(dense, sparse, rtol=1e-3)
  assert float(sparse) > 0.0
