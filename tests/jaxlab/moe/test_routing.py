"""Property tests of the routers (hypothesis) plus hand-checked cases."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxlab import moe


@st.composite
def batches(draw):
  """Logits with many ties (small integers) and a valid (k0, k_max)."""
  # Two fixed shapes keep eager dispatch on compiled-op caches (fast tests).
  b, n = draw(st.sampled_from([(1, 6), (6, 8)]))
  k_max = draw(st.integers(1, n))
  k0 = draw(st.integers(1, k_max))
  vals = draw(st.lists(st.integers(-3, 3), min_size=b * n, max_size=b * n))
  logits = jnp.asarray(np.asarray(vals, np.float32).reshape(b, n) * 0.7)
  return logits, k0, k_max


SETTINGS = settings(max_examples=30, deadline=None)


@SETTINGS
@given(batches())
def test_oea_keeps_top_k0_stays_in_union_and_caps_k_max(args):
  logits, k0, k_max = args
  mask, w = moe.oea_route(logits, k0=k0, k_max=k_max)
  base, _ = moe.topk_route(logits, k0)
  mask, base = np.asarray(mask), np.asarray(base)
  union = base.any(0)
  assert (mask | ~base).all(), "a token lost one of its top-k0 experts"
  assert not (mask & ~union[None]).any(), "an expert outside the batch's base union is active"
  counts = mask.sum(-1)
  assert (counts <= k_max).all() and (counts >= k0).all()
  # Greedy piggybacking with max_p = N: each token fills up to k_max from the union.
  np.testing.assert_array_equal(counts, np.minimum(k_max, union.sum()))
  assert int(moe.num_active_experts(jnp.asarray(mask))) == int(union.sum())


@SETTINGS
@given(batches())
def test_weights_renormalized_over_the_mask(args):
  logits, k0, k_max = args
  probs = np.asarray(jax.nn.softmax(logits, -1))
  for mask, w in (moe.topk_route(logits, k_max), moe.pruned_topk_route(logits, k0),
                  moe.oea_route(logits, k0=k0, k_max=k_max)):
    mask, w = np.asarray(mask), np.asarray(w)
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)
    assert (w[~mask] == 0).all()
    expected = np.where(mask, probs, 0) / np.where(mask, probs, 0).sum(-1, keepdims=True)
    np.testing.assert_allclose(w, expected, rtol=1e-5, atol=1e-7)


@SETTINGS
@given(batches(), st.integers(0, 8))
def test_general_form_with_p_one_equals_simplified(args, extra):
  logits, k0, k_max = args
  n = logits.shape[-1]
  simple = moe.oea_route(logits, k0=k0, k_max=k_max)
  general = moe.oea_route(logits, k0=k0, k_max=k_max, p=1.0, max_p=n)
  np.testing.assert_array_equal(simple[0], general[0])
  np.testing.assert_array_equal(simple[1], general[1])
  # A smaller max_p only removes piggybacked experts, never base ones.
  max_p = min(n, k_max + extra)
  limited = np.asarray(moe.oea_route(logits, k0=k0, k_max=k_max, max_p=max_p)[0])
  assert (limited <= np.asarray(simple[0])).all()
  assert (limited >= np.asarray(moe.topk_route(logits, k0)[0])).all()


@SETTINGS
@given(batches(), st.floats(0.05, 0.99))
def test_top_p_phase_one(args, p):
  logits, k0, k_max = args
  probs = np.asarray(jax.nn.softmax(logits, -1))
  ranks = np.asarray(moe.expert_ranks(jnp.asarray(probs)))
  mask = np.asarray(moe.oea_route(logits, k0=k0, k_max=k_max, p=p)[0])
  for i in range(logits.shape[0]):
    sorted_p = probs[i][np.argsort(ranks[i])]
    t = int(np.argmax(np.cumsum(sorted_p) >= p - 1e-6)) + 1
    n_i = min(k0, t)
    top = ranks[i] < n_i
    assert mask[i][top].all()
    assert mask[i].sum() <= k_max


def test_topk_matches_lax_top_k_without_ties():
  logits = jax.random.normal(jax.random.key(0), (16, 32))
  mask, w = moe.topk_route(logits, 4)
  _, idx = jax.lax.top_k(logits, 4)
  expected = np.zeros((16, 32), bool)
  np.put_along_axis(expected, np.asarray(idx), True, axis=1)
  np.testing.assert_array_equal(mask, expected)


def test_hand_computed_oea():
  logits = jnp.log(jnp.array([[0.5, 0.3, 0.1, 0.1], [0.1, 0.1, 0.3, 0.5],
                              [0.4, 0.05, 0.05, 0.5]]))
  mask, w = moe.oea_route(logits, k0=1, k_max=2)
  # Union of top-1 experts = {0, 3}: rows 0, 1 piggyback on it; row 2 has both.
  np.testing.assert_array_equal(mask, [[1, 0, 0, 1], [1, 0, 0, 1], [1, 0, 0, 1]])
  np.testing.assert_allclose(w[0], [0.5 / 0.6, 0, 0, 0.1 / 0.6], rtol=1e-6)
  # The padding row 1 gets nothing and adds nothing to the union.
  mask_v, w_v = moe.oea_route(logits, k0=1, k_max=2, valid=jnp.array([True, False, True]))
  np.testing.assert_array_equal(mask_v, [[1, 0, 0, 1], [0, 0, 0, 0], [1, 0, 0, 1]])
  assert float(w_v[1].sum()) == 0.0


def test_oea_jits_and_vmaps():
  logits = jax.random.normal(jax.random.key(1), (3, 6, 8))
  f = jax.jit(jax.vmap(lambda lg: moe.oea_route(lg, k0=2, k_max=4)))
  mask, _ = f(logits)
  for s in range(3):
    np.testing.assert_array_equal(mask[s], moe.oea_route(logits[s], k0=2, k_max=4)[0])


ROUTERS = {
    "topk": lambda lg: moe.topk_route(lg, 3),
    "pruned": lambda lg: moe.pruned_topk_route(lg, 2),
    "oea": lambda lg: moe.oea_route(lg, k0=1, k_max=3),
    "oea_general": lambda lg: moe.oea_route(lg, k0=2, k_max=3, p=0.5, max_p=5),
}


@pytest.mark.parametrize("bad", ["nan", "+inf", "all_-inf"])
@pytest.mark.parametrize("router", sorted(ROUTERS))
def test_nonfinite_row_is_its_own_problem(router, bad):
  # Issue 17 finding 3: a NaN/+Inf/all -Inf row used to select all N experts
  # with zero weight, raising T and changing the other tokens' OEA choices.
  logits = np.array(jax.random.normal(jax.random.key(7), (6, 8)), np.float32)
  logits[2, 0] = -np.inf  # an ordinary -Inf expert in a finite row: not a bad row
  bad_logits = logits.copy()
  if bad == "nan":
    bad_logits[4, 5] = np.nan
  elif bad == "+inf":
    bad_logits[4, 1] = np.inf
  else:
    bad_logits[4, :] = -np.inf
  route = ROUTERS[router]
  mask, w = map(np.asarray, route(jnp.asarray(bad_logits)))
  others = [0, 1, 2, 3, 5]
  mask_ref, w_ref = map(np.asarray, route(jnp.asarray(logits[others])))
  np.testing.assert_array_equal(mask[others], mask_ref)
  np.testing.assert_array_equal(w[others], w_ref)
  assert not mask[4].any(), "a non-finite row selected experts"
  assert np.isnan(w[4]).all(), "a non-finite row's weights must be NaN, never a silent zero"
  assert int(moe.num_active_experts(jnp.asarray(mask))) == int(
      moe.num_active_experts(jnp.asarray(mask_ref)))
  np.testing.assert_array_equal(moe.nonfinite_rows(jnp.asarray(bad_logits)),
                                np.arange(6) == 4)


def test_nonfinite_padding_row_stays_zero_and_out_of_the_union():
  logits = jnp.log(jnp.array([[0.5, 0.3, 0.1, 0.1], [0.1, 0.1, 0.3, 0.5], [0.4, 0.05, 0.05, 0.5]]))
  logits = logits.at[1, 0].set(jnp.nan)
  mask, w = moe.oea_route(logits, k0=1, k_max=2, valid=jnp.array([True, False, True]))
  np.testing.assert_array_equal(mask, [[1, 0, 0, 1], [0, 0, 0, 0], [1, 0, 0, 1]])
  assert float(w[1].sum()) == 0.0  # padding rule: zero weights, finite or not


@pytest.mark.parametrize("kwargs,match", [
    (dict(k0=0, k_max=2), "k0"), (dict(k0=3, k_max=2), r"k0 must be an int in \[1, k_max=2\]"),
    (dict(k0=1, k_max=9), r"k_max must be an int in \[1, num_experts=8\]"),
    (dict(k0=True, k_max=2), "k0"),
    (dict(k0=1, k_max=2, p=0.0), "p must"), (dict(k0=1, k_max=2, max_p=1), "max_p")])
def test_bad_arguments(kwargs, match):
  with pytest.raises(ValueError, match=match):
    moe.oea_route(jnp.zeros((2, 8)), **kwargs)
  with pytest.raises(ValueError, match="routing"):
    moe.route(jnp.zeros((2, 8)), routing="lynx", k=2)
