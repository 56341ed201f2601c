"""jaxlab.recsys: gates (Gumbel-top-k, STE, KL), gated SASRec, ranking metrics, the world."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.recsys import arms, gates, metrics, sasrec, world

CFG = sasrec.SASRecConfig(num_items=30, max_len=7, d_model=8, num_heads=2, num_layers=2,
                          d_ff=12, dropout=0.0)


@pytest.fixture(scope="module")
def backbone():
  items = jnp.array([[0, 0, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 7]])
  return sasrec.SASRec(CFG).init(jax.random.key(0), items)["params"], items


# --- gates -----------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 5, 17, 32])
def test_gumbel_top_k_keeps_exactly_k(k):
  z = jax.random.normal(jax.random.key(1), (6, 32))
  z = z.at[0].set(0.0)  # all ties: still exactly k
  for key, shared in ((None, False), (jax.random.key(2), False), (jax.random.key(3), True)):
    m = jax.jit(gates.top_k_mask)(z, k, key, shared)
    np.testing.assert_array_equal(m.sum(-1), np.full(6, k))
    assert set(np.unique(np.asarray(m))) <= {0.0, 1.0}
  # Without noise the kept gates are the k largest logits.
  m = gates.top_k_mask(z[1:], k)
  kth = jnp.sort(z[1:], axis=-1)[:, -k][:, None]
  np.testing.assert_array_equal(m, (z[1:] >= kth).astype(np.float32))


def test_top_k_mask_is_the_rank_mask_of_a_stable_descending_sort():
  # The definition the radix select must reproduce bit for bit: ranks of a stable argsort of
  # -z (NaN as -inf, -0 and +0 tied), kept where rank < k; k <= 0 keeps none, k >= d all.
  # Rows: ties in every position, signed zeros, infinities, NaN, all equal, random.
  d = 12
  rows = np.stack([
      np.array([1, 0.5, 1, -0.0, 0.0, 0.5, -0.0, 1, 0.0, -2, 0.5, 0.0], np.float32),
      np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, np.nan, 3, -np.inf, np.inf, 3, -3, 0],
               np.float32),
      np.full(d, -1.5, np.float32),
      np.asarray(jax.random.normal(jax.random.key(4), (d,))),
      np.round(np.asarray(jax.random.normal(jax.random.key(5), (d,))) * 2) / 2,
  ])
  zn = np.where(np.isnan(rows), -np.inf, rows)
  ranks = np.argsort(np.argsort(-zn, axis=-1, kind="stable"), axis=-1, kind="stable")
  masks = jax.jit(jax.vmap(gates.top_k_mask, in_axes=(None, 0)))(
      jnp.asarray(rows), jnp.arange(-1, d + 2, dtype=jnp.int32))
  for k, m in zip(range(-1, d + 2), np.asarray(masks), strict=True):
    np.testing.assert_array_equal(m, (ranks < k).astype(np.float32), err_msg=f"k={k}")


@pytest.mark.parametrize("k", [0, -1, 5, 9, jnp.int32(0)])
def test_top_k_mask_rejects_concrete_k_outside_one_to_d(k):
  with pytest.raises(ValueError, match=r"k must be an integer scalar in \[1, 4\]"):
    gates.top_k_mask(jnp.array([[0.3, -1.0, 2.0, 0.1]]), k)


def test_shared_noise_gives_the_same_mask_for_equal_logits():
  z = jnp.tile(jax.random.normal(jax.random.key(0), (1, 40)), (5, 1))
  shared = gates.top_k_mask(z, 10, jax.random.key(1), True)
  each = gates.top_k_mask(z, 10, jax.random.key(1), False)
  assert bool(jnp.all(shared == shared[:1]))
  assert not bool(jnp.all(each == each[:1]))


def test_keep_count_is_ceil_of_kept_fraction():
  assert int(gates.keep_count(1536, 0.1)) == 1383   # ceil(1382.4)
  assert int(gates.keep_count(8, 0.25)) == 6
  assert int(gates.keep_count(10, 0.0)) == 10
  with pytest.raises(ValueError, match="rho"):
    gates.keep_count(10, 1.0)


def test_straight_through_is_hard_forward_and_softmax_gradient_backward():
  z = jax.random.normal(jax.random.key(0), (3, 16))
  w = jax.random.normal(jax.random.key(1), (3, 16))
  hard = gates.top_k_mask(z, 5, jax.random.key(2))
  m = gates.straight_through(hard, z, 0.5)
  np.testing.assert_array_equal(m, hard)  # exactly binary in the forward pass
  grad = jax.grad(lambda z: jnp.sum(gates.straight_through(hard, z, 0.5) * w))(z)
  v = jax.nn.softmax(z / 0.5, axis=-1)
  expected = v * (w - jnp.sum(v * w, -1, keepdims=True)) / 0.5  # softmax JVP
  np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-7)
  assert float(jnp.abs(grad).min()) > 0


def test_temperature_schedules_end_points():
  for s in gates.TAU_SCHEDULES:
    np.testing.assert_allclose(gates.temperature(0, 11, schedule=s), 0.7, rtol=1e-6)
    np.testing.assert_allclose(gates.temperature(10, 11, schedule=s), 0.3, rtol=1e-6)
  np.testing.assert_allclose(gates.temperature(5, 11, schedule="cosine"), 0.5, rtol=1e-6)
  with pytest.raises(ValueError, match="schedule"):
    gates.temperature(0, 10, schedule="step")


def test_bernoulli_kl_matches_closed_form():
  z = jnp.array([[0.0, 2.0, -1.0, 5.0]])
  p0 = 0.8
  pi = 1 / (1 + np.exp(-np.asarray(z, np.float64)))
  kl = pi * np.log(pi / p0) + (1 - pi) * np.log((1 - pi) / (1 - p0))
  np.testing.assert_allclose(gates.bernoulli_kl(z, p0), kl.mean(-1), rtol=1e-5)
  at_prior = jnp.full((1, 3), np.log(p0 / (1 - p0)), jnp.float32)
  np.testing.assert_allclose(gates.bernoulli_kl(at_prior, p0), 0.0, atol=1e-6)
  assert np.isfinite(float(gates.bernoulli_kl(z, 1.0)[0]))  # rho = 0: prior clipped


# --- gated SASRec ----------------------------------------------------------------------------

def test_all_ones_masks_reproduce_the_frozen_backbone_exactly(backbone):
  params, items = backbone
  model = sasrec.SASRec(CFG)
  layout = sasrec.gate_layout(CFG, "ffn_wo")
  ones = sasrec.split_gates(jnp.ones((2, sasrec.num_gates(CFG))), layout)
  fwd = lambda g: model.apply({"params": params}, model.apply(
      {"params": params}, items, gates=g), method=model.scores)
  # Op by op, x * 1.0 is exact: the gated scores are bit-identical.
  np.testing.assert_array_equal(fwd(ones), fwd(None))
  # Under jit XLA may pick a different dot layout for the gated operand (a float32
  # summation-order difference, not the mask): equal to float32 rounding.
  np.testing.assert_allclose(jax.jit(fwd)(ones), jax.jit(fwd)(None), rtol=1e-5, atol=1e-6)


def test_row_column_gates_equal_the_masked_weight_matrix():
  x = jax.random.normal(jax.random.key(0), (2, 3, 5))
  col = (jax.random.uniform(jax.random.key(1), (2, 5)) > 0.4).astype(jnp.float32)
  row = (jax.random.uniform(jax.random.key(2), (2, 4)) > 0.4).astype(jnp.float32)
  layer = sasrec.GatedDense(4)
  p = layer.init(jax.random.key(3), x)["params"]
  p = dict(p, bias=jnp.arange(4.0))
  got = layer.apply({"params": p}, x, col, row)
  for b in range(2):
    w = p["kernel"].T * jnp.outer(row[b], col[b])  # W ⊙ r cᵀ in (out, in) layout
    np.testing.assert_allclose(got[b], x[b] @ w.T + p["bias"], rtol=1e-5, atol=1e-6)


def test_gates_change_scores_and_causality_holds(backbone):
  params, items = backbone
  model = sasrec.SASRec(CFG)
  layout = sasrec.gate_layout(CFG, "wo")
  m = jnp.ones((2, sasrec.num_gates(CFG, "wo"))).at[:, :4].set(0.0)
  h_gated = model.apply({"params": params}, items, gates=sasrec.split_gates(m, layout))
  h = model.apply({"params": params}, items)
  assert float(jnp.abs(h_gated - h).max()) > 1e-4
  # Position t never sees later items; padding items never change real positions.
  later = items.at[1, -1].set(9)
  h2 = model.apply({"params": params}, later)
  np.testing.assert_allclose(h2[1, :-1], h[1, :-1], atol=1e-6)
  pad = items.at[0, 0].set(0).at[0, 1].set(0)
  np.testing.assert_allclose(model.apply({"params": params}, pad)[0, 2:], h[0, 2:], atol=1e-6)


def test_gate_layout_sizes_and_bad_input():
  assert sasrec.num_gates(CFG, "wo") == 2 * (8 + 8)
  assert sasrec.num_gates(CFG, "ffn") == 2 * (12 + 8 + 8 + 12)
  with pytest.raises(ValueError, match="scope"):
    sasrec.gate_layout(CFG, "qkv")
  with pytest.raises(ValueError, match="gates must be"):
    sasrec.split_gates(jnp.ones((2, 3)), sasrec.gate_layout(CFG, "wo"))
  with pytest.raises(ValueError, match="num_heads"):
    sasrec.SASRecConfig(num_items=5, d_model=6, num_heads=4)
  with pytest.raises(ValueError, match="kind"):
    arms.ArmConfig("rerank")


def test_next_item_loss_ignores_padding_targets():
  logits = jnp.array([[[0.0, 1.0, 2.0], [5.0, 0.0, 0.0]]])
  loss = sasrec.next_item_loss(logits, jnp.array([[2, 0]]))
  np.testing.assert_allclose(loss, -jax.nn.log_softmax(logits[0, 0])[2], rtol=1e-6)


# --- metrics ---------------------------------------------------------------------------------

def test_metrics_match_hand_examples():
  scores = jnp.array([[-1e9, 0.9, 0.1, 0.5, 0.7, 0.5],
                      [-1e9, 0.2, 0.8, 0.3, 0.1, 0.0]])
  targets = jnp.array([3, 2])
  full = metrics.full_ranks(scores, targets)
  np.testing.assert_array_equal(full, [3, 0])  # row 0: 0.9, 0.7 and the tie 0.5 beat it
  got = metrics.ranking_metrics(full, k=3)
  np.testing.assert_allclose(got["hr"], [0.0, 1.0])
  np.testing.assert_allclose(got["ndcg"], [0.0, 1.0])
  got = metrics.ranking_metrics(full, k=10)
  np.testing.assert_allclose(got["ndcg"], [1 / np.log2(5), 1.0], rtol=1e-6)
  np.testing.assert_allclose(got["mrr"], [0.25, 1.0], rtol=1e-6)
  sampled = metrics.sampled_ranks(scores, targets, jnp.array([[2, 4], [1, 5]]))
  np.testing.assert_array_equal(sampled, [1, 0])
  nan = metrics.sampled_ranks(scores.at[0, 3].set(jnp.nan), targets, jnp.array([[2, 4], [1, 5]]))
  np.testing.assert_array_equal(nan, [-1, 0])  # a NaN target has no rank, never a hit
  np.testing.assert_array_equal(metrics.ranking_metrics(nan, k=10)["hr"], [np.nan, 1.0])


def test_genre_share_and_negatives():
  genres = jnp.array([[0, 0], [1, 0], [1, 1], [0, 1], [0, 1]], jnp.float32)
  scores = jnp.array([[9.0, 4.0, 3.0, 2.0, 1.0]])
  share = metrics.top_k_genre_share(scores, genres, jnp.array([1]), k=2)
  np.testing.assert_allclose(share, [0.5])  # top 2 = items 1, 2 (padding 0 excluded)
  rng = np.random.default_rng(0)
  inter = np.array([[1, 2, 3, 0], [4, 4, 5, 6]])
  neg = metrics.sample_negatives(rng, inter, 12, 6)
  for row, n in zip(inter, neg, strict=True):
    assert len(set(n)) == 6 and not set(n) & set(row) and 0 not in n


def test_genre_share_excludes_padding_when_k_exceeds_the_real_items():
  scores = jnp.array([[-1e9, 0.9, 0.1, 0.5, 0.7], [5.0, 0.1, 0.2, 0.4, 0.3]])
  genres = jnp.array([[0, 0], [1, 0], [0, 1], [1, 0], [0, 1]], jnp.float32)
  # Every real item is listed once (row 1's padding score ignored): genre 0 on items 1
  # and 3, i.e. 2 of the 4; genre 1 on items 2 and 4.
  share_fn = jax.jit(metrics.top_k_genre_share, static_argnames="k")
  share = share_fn(scores, genres, jnp.array([0, 1]), k=10)
  np.testing.assert_allclose(share, [0.5, 0.5])
  # A NaN among the real items leaves that row's top-k undefined.
  share = share_fn(scores.at[1, 3].set(jnp.nan), genres, jnp.array([0, 1]), k=10)
  np.testing.assert_allclose(share, [0.5, np.nan])
  with pytest.raises(ValueError, match="k must be >= 1"):
    metrics.top_k_genre_share(scores, genres, jnp.array([0, 0]), k=0)


# --- world -----------------------------------------------------------------------------------

def test_world_requests_follow_their_intent():
  cfg = world.WorldConfig(num_items=120, num_genres=5, num_train_users=200, num_test_users=100,
                          max_len=6, min_len=3, num_negatives=20)
  w = world.make_world(cfg, 0)
  for eps, held in ((w.train, False), (w.test, True)):
    has = w.item_genres[eps.target, np.maximum(eps.genre, 0)]
    assert np.all(has[eps.intent == 1] == 1) and np.all(has[eps.intent == 2] == 0)
    for i, g, r in zip(eps.intent, eps.genre, eps.requests, strict=True):
      intent = world.INTENTS[i]
      assert r in world.request_texts(intent, 5, held)
      assert (g >= 0) == (intent != "none")
    assert np.all(eps.target > 0) and np.all(eps.history[:, -1] > 0)
  assert not set(w.train.requests) & set(w.test.requests)  # held-out paraphrases
  assert w.neutral_request in world.request_texts("none", 5, True)
