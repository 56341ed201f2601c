"""APC building blocks: Fano threshold, cost model, placeholders, snippet round trip, file split."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab import codecomp, data
from jaxlab.codecomp import PLACEHOLDER, CostModel, encode


def test_fano_threshold_implies_error_above_rho_on_random_distributions():
  rng = np.random.default_rng(0)
  for vocab in (2, 5, 256):
    for rho in (0.1, 1 / 3, 0.5, 2 / 3):
      if rho > (vocab - 1) / vocab:
        continue
      h_star = codecomp.critical_entropy(rho, vocab)
      # Dirichlet draws of several concentrations cover peaked to flat distributions.
      for alpha in (0.05, 0.3, 1.0, 5.0):
        p = rng.dirichlet(np.full(vocab, alpha), size=300)
        h = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=1)
        above = h > h_star
        assert np.all(1.0 - p.max(1)[above] > rho), (vocab, rho, alpha)
  # The bound is tight: a distribution with P_err = rho spread evenly has entropy H* exactly.
  v, rho = 10, 0.4
  p = np.array([1 - rho] + [rho / (v - 1)] * (v - 1))
  np.testing.assert_allclose(float(codecomp.entropy(jnp.log(jnp.asarray(p)))),
                             codecomp.critical_entropy(rho, v), rtol=1e-5)


def test_critical_entropy_rejects_bad_input():
  with pytest.raises(ValueError, match="rho"):
    codecomp.critical_entropy(0.99, 4)
  with pytest.raises(ValueError, match="vocab_size"):
    codecomp.critical_entropy(0.5, 1)
  with pytest.raises(ValueError, match="edit_cost"):
    CostModel(edit_cost=0.0)


# Jitted: the eager scan would be traced again at every call.
_editing_cost = jax.jit(codecomp.editing_cost, static_argnames=("costs",))


def _cost(suggestion, truth, width=24):
  """editing_cost of token lists, padded to one width (one compilation for every call)."""
  pad = lambda x: jnp.array(list(x) + [7] * (width - len(x)))
  return float(_editing_cost(pad(suggestion), len(suggestion), pad(truth), len(truth)))


def test_placeholder_vs_wrong_token_cost_hand_example():
  cm = CostModel()  # substitute 3, delete 2, insert 2, Tab 1, type 1
  assert cm.rho == pytest.approx(2 / 3)
  truth = encode("return self._name")
  wrong = encode("return self._size")     # 3 wrong bytes (n, a, m): 3 substitutions = 9
  ph = encode("return self._") + [PLACEHOLDER, PLACEHOLDER] + encode("e")  # Tab + "nam" = 4
  right = encode("return self._name")
  f = lambda s: _cost(s, truth)
  assert f(wrong) == 9.0
  assert f(ph) == 4.0
  assert f(right) == 0.0
  # A placeholder where hard completion was right costs C_fill = 2 per byte span of length 1.
  one = encode("return self._nam") + [PLACEHOLDER]
  assert f(one) == cm.fill_cost
  # Padding beyond the valid lengths is ignored (here: other pad values and widths).
  assert float(codecomp.editing_cost(jnp.array(wrong + [9]), len(wrong), jnp.array(truth),
                                     len(truth))) == 9.0


def test_editing_cost_matches_reference_dp_on_random_pairs():
  rng = np.random.default_rng(1)
  cm = CostModel(edit_cost=3.0, delete_cost=1.5, insert_cost=2.0, tab_cost=1.0, type_cost=0.5)
  n, m = 7, 6
  cases = []
  for _ in range(40):
    s = rng.integers(0, 4, size=rng.integers(0, n + 1)).tolist()  # 0 = PLACEHOLDER, often
    t = rng.integers(1, 4, size=rng.integers(0, m + 1)).tolist()
    cases.append((s, t))
  s_arr = np.array([s + [5] * (n - len(s)) for s, _ in cases])
  t_arr = np.array([t + [6] * (m - len(t)) for _, t in cases])
  got = jax.vmap(lambda s, a, t, b: codecomp.editing_cost(s, a, t, b, cm))(
      s_arr, np.array([len(s) for s, _ in cases]), t_arr, np.array([len(t) for _, t in cases]))
  want = [codecomp.reference_editing_cost(s, t, cm) for s, t in cases]
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


def test_collapse_and_snippet_round_trip():
  toks = encode("f(") + [PLACEHOLDER] * 3 + encode(", $x, ") + [PLACEHOLDER] + encode(")")
  snippet = codecomp.render_snippet(toks)
  assert snippet == "f(${1}, \\$x, ${2})"
  assert codecomp.parse_snippet(snippet) == codecomp.collapse(toks)
  assert codecomp.collapse(codecomp.parse_snippet(snippet)) == codecomp.parse_snippet(snippet)
  assert codecomp.render_snippet(encode("plain")) == "plain"
  # Collapsed and uncollapsed completions cost the same: a run is one span.
  c = lambda s: _cost(s, encode("f(a, $x, b)"))
  assert c(toks) == c(codecomp.collapse(toks))


def test_threshold_placeholders_and_edit_log_targets():
  toks = jnp.array([[1, 2, 3]])
  h = jnp.array([[0.1, 2.0, 0.3]])
  np.testing.assert_array_equal(codecomp.threshold_placeholders(toks, h, 1.0),
                                [[1, PLACEHOLDER, 3]])
  assert codecomp.placeholder_target(encode("abcdef"), encode("uvwxyz")) is None
  t = codecomp.placeholder_target(encode("os.path.join(a, b)"), encode("os.path.join(x, b)"))
  assert codecomp.render_snippet(t) == "os.path.join(${1}, b)"


def test_line_completions_come_from_held_out_files_only():
  corpus = data.load_corpus(max_bytes=300_000)
  assert not set(corpus.train_files) & set(corpus.val_files)
  ex = codecomp.line_completions(corpus.val, 50, prefix_len=16, max_target_len=20, seed=0)
  assert ex.prompts.shape == (50, 16) and ex.targets.shape == (50, 20)
  val, train = corpus.val.tobytes(), corpus.train.tobytes()
  for i in range(50):
    cut, n = int(ex.starts[i]), int(ex.target_lens[i])
    assert 1 <= n <= 20
    assert corpus.val[cut + n] == ord("\n")            # the target is the rest of the line
    assert bytes(ex.targets[i, :n].astype(np.uint8)) == val[cut:cut + n]
    assert np.all(ex.targets[i, n:] == 0)
  # A cut's line (prefix end + target) is a val line, and lines that exist only in val files
  # are not in the train stream (checked on the longer ones, which are distinctive).
  long_lines = [val[int(s) - 16:int(s) + int(n)] for s, n in zip(ex.starts, ex.target_lens,
                                                                  strict=True)]
  assert sum(line in train for line in long_lines) < len(long_lines)
  again = codecomp.line_completions(corpus.val, 50, prefix_len=16, max_target_len=20, seed=0)
  np.testing.assert_array_equal(again.prompts, ex.prompts)


def test_cost_reward_and_score():
  r = codecomp.cost_reward(jnp.array([0.0, 6.0]), jnp.array([4, 2]),
                           malformed=jnp.array([False, True]))
  np.testing.assert_allclose(r, [0.0, -1.0 - 1.0])
  targets = jnp.array([encode("ab") + [0, 0], encode("cd") + [0, 0]])
  sugg = jnp.array([encode("ab") + [10, 0], [PLACEHOLDER] + encode("d") + [10, 0]])
  hard = jnp.array([encode("ab") + [10, 0], encode("xd") + [10, 0]])
  s = codecomp.score(sugg, jnp.array([2, 2]), targets, jnp.array([2, 2]), hard)
  np.testing.assert_allclose(s.cost, [0.0, 2.0])
  np.testing.assert_allclose(s.exact, [1.0, 1.0])
  np.testing.assert_allclose(s.spans, [0.0, 1.0])
  np.testing.assert_allclose(s.placed_wrong, [0.0, 1.0])


def test_bad_shapes_raise():
  # (The tests' runtime type checker may object first: a TypeError.)
  with pytest.raises((ValueError, TypeError), match="suggestion"):
    codecomp.editing_cost(jnp.zeros((2, 3), jnp.int32), 3, jnp.zeros(3, jnp.int32), 3)
  with pytest.raises((ValueError, TypeError)):
    codecomp.threshold_placeholders(jnp.zeros((2, 3)), jnp.zeros((2, 4)), 1.0)
  with pytest.raises(ValueError, match="stream"):
    codecomp.line_completions(np.zeros((2, 2)), 1, prefix_len=1, max_target_len=1, seed=0)



def test_decode_records_the_uncertainty_of_the_distribution_it_samples_from():
  from jaxlab.nn import Transformer, TransformerConfig
  model = Transformer(TransformerConfig(vocab_size=256, d_model=16, num_layers=1, num_heads=2,
                                        num_kv_heads=2, d_ff=32, max_len=16))
  rng = np.random.default_rng(0)
  prompts = jnp.asarray(rng.integers(1, 256, (2, 4)), jnp.int32)
  shapes = jax.eval_shape(model.init, jax.random.key(0), prompts)["params"]  # no init compile
  params = jax.tree.map(lambda s: jnp.asarray(rng.normal(0.0, 0.5, s.shape), s.dtype), shapes)
  logits_of = jax.jit(lambda seq: model.apply({"params": params}, seq))
  for temperature in (0.0, 3.0):
    out = codecomp.decode(model, params, prompts, jax.random.key(1), num_tokens=3,
                          temperature=temperature)
    seq = jnp.concatenate([prompts, out.tokens], 1)[:, :-1]
    logits = np.asarray(logits_of(seq)[:, 3:], np.float64)   # the logits each token came from
    # Greedy records the model's own distribution (T = 1); sampling records softmax(logits / T).
    z = logits / (temperature or 1.0)
    logp = z - z.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    np.testing.assert_allclose(out.entropy, -(np.exp(logp) * logp).sum(-1), rtol=1e-4)
    np.testing.assert_allclose(out.p_max, np.exp(logp.max(-1)), rtol=1e-4)
    chosen = np.take_along_axis(logp, np.asarray(out.tokens)[..., None], -1)[..., 0]
    np.testing.assert_allclose(out.logp, chosen, rtol=1e-4, atol=1e-5)
  # GRPO differentiates the distribution it sampled from (`make_grpo_step`).
  seq_logp = jax.jit(functools.partial(codecomp.sequence_logp, model, temperature=3.0))
  np.testing.assert_allclose(seq_logp(params, prompts, out.tokens), out.logp, rtol=1e-4,
                             atol=1e-5)
  with pytest.raises(ValueError, match="temperature"):
    codecomp.make_grpo_step(model, optax.sgd(0.1), CostModel(), num_tokens=3, group_size=2,
                            temperature=0.0)
