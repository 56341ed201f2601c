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
  with pytest.raises(ValueError, match="C_edit"):
    CostModel(nav_cost=0.0, delete_cost=0.0, type_cost=0.0)
  with pytest.raises(ValueError, match="navigation"):
    CostModel(navigation="per_token")


# Jitted: the eager scan would be traced again at every call.
_editing_cost = jax.jit(codecomp.editing_cost, static_argnames=("costs",))


def _cost(suggestion, truth, costs=codecomp.DEFAULT_COSTS, width=24):
  """editing_cost of token lists, padded to one width (one compilation per cost model)."""
  pad = lambda x: jnp.array(list(x) + [7] * (width - len(x)))
  return float(_editing_cost(pad(suggestion), len(suggestion), pad(truth), len(truth), costs))


def test_placeholder_vs_wrong_token_cost_hand_example():
  cm = CostModel()  # navigate 1 per edit region, delete 1, type 1, Tab 1
  assert (cm.edit_cost, cm.fill_cost, cm.rho) == (3.0, 2.0, pytest.approx(2 / 3))
  truth = encode("return self._name")
  wrong = encode("return self._size")     # 3 wrong bytes (n, a, m): navigate + 3 x (del + type)
  ph = encode("return self._") + [PLACEHOLDER, PLACEHOLDER] + encode("e")  # Tab + "nam" = 4
  right = encode("return self._name")
  f = lambda s, costs=cm: _cost(s, truth, costs)
  assert f(wrong) == 7.0
  assert f(ph) == 4.0
  assert f(right) == 0.0
  # Per byte, every wrong byte is reached on its own: 3 x (nav + del + type).
  per_byte = CostModel(navigation="per_byte")
  assert f(wrong, per_byte) == 9.0 and f(ph, per_byte) == 4.0
  # A placeholder where hard completion was right costs C_fill = 2 per byte span of length 1.
  one = encode("return self._nam") + [PLACEHOLDER]
  assert f(one) == cm.fill_cost
  # Two wrong regions are reached twice: "return self._nbmf" -> nav+2 (b), nav+2 (f).
  assert f(encode("return self._nbmf")) == 6.0
  # Padding beyond the valid lengths is ignored (here: other pad values and widths).
  assert float(codecomp.editing_cost(jnp.array(wrong + [9]), len(wrong), jnp.array(truth),
                                     len(truth))) == 7.0


def test_typing_a_byte_costs_the_same_into_a_placeholder_or_as_an_insertion():
  # The default user types a missing byte and a placeholder's byte at one price, and reaches
  # an edit region as a placeholder span (nav = Tab): the empty suggestion and the
  # all-placeholder one cost the same, and so do a gap and a placeholder over it.
  truth = encode("os.path.join(root, name)")
  cm = CostModel()
  assert cm.nav_cost == cm.tab_cost
  empty = _cost([], truth)
  assert empty == _cost([PLACEHOLDER], truth) == cm.nav_cost + len(truth) * cm.type_cost
  assert float(codecomp.editing_cost(jnp.zeros((0,), jnp.int32), 0, jnp.array(truth),
                                     len(truth))) == empty  # an unpadded empty suggestion
  gap = encode("os.path.join(") + encode(", name)")
  filled = encode("os.path.join(") + [PLACEHOLDER] + encode(", name)")
  assert _cost(gap, truth) == _cost(filled, truth) == 1.0 + len("root")
  # Only the deletions make a wrong guess dearer than a placeholder over it.
  wrong = encode("os.path.join(base, name)")
  assert _cost(wrong, truth) - _cost(filled, truth) == len("base") * cm.delete_cost
  # The per-byte reading charges a navigation per missing byte: a placeholder then beats
  # typing the same bytes by one keystroke per byte (the asymmetry it is kept to show).
  per_byte = CostModel(navigation="per_byte")
  assert _cost([], truth, per_byte) == 2 * len(truth)
  assert _cost([PLACEHOLDER], truth, per_byte) == 1 + len(truth)


def _alignments(s, t):
  """Every edit script of `s` into `t`: matches, substitutions, deletions, insertions, and
  each placeholder absorbing any number of the next target bytes."""
  if not s and not t:
    yield []
    return
  if s and s[0] == PLACEHOLDER:
    for k in range(len(t) + 1):
      yield from ([("fill", k)] + rest for rest in _alignments(s[1:], t[k:]))
  elif s:
    if t:
      op = "match" if s[0] == t[0] else "sub"
      yield from ([(op,)] + rest for rest in _alignments(s[1:], t[1:]))
    yield from ([("delete",)] + rest for rest in _alignments(s[1:], t))
  if t:
    yield from ([("insert",)] + rest for rest in _alignments(s, t[1:]))


def _script_cost(ops, c: CostModel) -> float:
  """Keystrokes of one edit script, counted op by op (regions = runs of edits)."""
  total, prev = 0.0, None
  for op in ops:
    if op[0] == "fill":
      total += c.tab_cost + c.type_cost * op[1]
    elif op[0] != "match":
      if c.navigation == "per_byte" or prev not in ("sub", "delete", "insert"):
        total += c.nav_cost
      total += {"sub": c.delete_cost + c.type_cost, "delete": c.delete_cost,
                "insert": c.type_cost}[op[0]]
    prev = op[0]
  return total


@pytest.mark.parametrize("navigation", ["per_region", "per_byte"])
def test_editing_cost_is_the_cheapest_edit_script_on_random_pairs(navigation):
  rng = np.random.default_rng(1)
  cm = CostModel(nav_cost=1.5, delete_cost=0.5, type_cost=1.0, tab_cost=0.7,
                 navigation=navigation)
  n, m = 6, 5
  cases = []
  for _ in range(40):
    s = rng.integers(0, 4, size=rng.integers(0, n + 1)).tolist()  # 0 = PLACEHOLDER, often
    t = rng.integers(1, 4, size=rng.integers(0, m + 1)).tolist()
    cases.append((s, t))
  # The oracle: the cheapest of all edit scripts, enumerated (placeholder runs collapsed).
  want = [min(_script_cost(o, cm) for o in _alignments(codecomp.collapse(s), t))
          for s, t in cases]
  assert [codecomp.reference_editing_cost(s, t, cm) for s, t in cases] == pytest.approx(want)
  s_arr = np.array([s + [5] * (n - len(s)) for s, _ in cases])
  t_arr = np.array([t + [6] * (m - len(t)) for _, t in cases])
  got = jax.vmap(lambda s, a, t, b: codecomp.editing_cost(s, a, t, b, cm))(
      s_arr, np.array([len(s) for s, _ in cases]), t_arr, np.array([len(t) for _, t in cases]))
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
  dist = jax.vmap(codecomp.wildcard_distance)(
      s_arr, np.array([len(s) for s, _ in cases]), t_arr, np.array([len(t) for _, t in cases]))
  # Free placeholders: the unit edit distance, fills costing nothing.
  free = [min(sum(0.0 if o[0] in ("fill", "match") else 1.0 for o in ops)
              for ops in _alignments(codecomp.collapse(s), t)) for s, t in cases]
  np.testing.assert_allclose(np.asarray(dist), free)


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


def test_entropy_of_a_row_with_no_distribution_is_nan_never_zero():
  # A NaN logit, every logit -inf, or a +inf logit: no distribution, entropy NaN (it was 0,
  # so a diverged model looked fully confident). A -inf logit alone is a ruled-out token.
  ent = codecomp.entropy(jnp.array([[0.0, jnp.nan, 1.0], [-jnp.inf, -jnp.inf, -jnp.inf],
                                    [0.0, jnp.inf, 1.0], [0.0, 0.0, -jnp.inf]]))
  assert np.isnan(np.asarray(ent[:3])).all()
  np.testing.assert_allclose(ent[3], np.log(2.0), rtol=1e-6)
  np.testing.assert_array_equal(jax.jit(codecomp.entropy)(jnp.array([[jnp.nan, 0.0]])), [np.nan])


def test_a_nan_score_is_never_a_confident_guess():
  toks, h = jnp.array([5, 6, 7]), jnp.array([0.1, jnp.nan, 2.0])
  with pytest.raises(ValueError, match="scores must not be NaN"):
    codecomp.threshold_placeholders(toks, h, 1.0)
  with pytest.raises(ValueError, match="threshold must not be NaN"):
    codecomp.threshold_placeholders(toks, jnp.zeros(3), float("nan"))
  # Traced: no exception possible; the NaN position gets a placeholder, not the guess.
  out = jax.jit(codecomp.threshold_placeholders)(toks, h, 1.0)
  assert out.tolist() == [5, PLACEHOLDER, PLACEHOLDER]


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
    # The guess is the greedy token with <PH> excluded, in the context actually decoded.
    np.testing.assert_array_equal(out.guess, np.argmax(logits[..., 1:], -1) + 1)
  # GRPO differentiates the distribution it sampled from (`make_grpo_step`).
  seq_logp = jax.jit(functools.partial(codecomp.sequence_logp, model, temperature=3.0))
  np.testing.assert_allclose(seq_logp(params, prompts, out.tokens), out.logp, rtol=1e-4,
                             atol=1e-5)
  with pytest.raises(ValueError, match="temperature"):
    codecomp.make_grpo_step(model, optax.sgd(0.1), CostModel(), num_tokens=3, group_size=2,
                            temperature=0.0)


def test_own_guesses_replace_exactly_the_placeholders():
  # A greedy APC completion "a<PH>c<PH>" whose model would have guessed "b" and "\n" there.
  tokens = jnp.array([[97, PLACEHOLDER, 99, PLACEHOLDER, 101]])
  guess = jnp.array([[97, 98, 99, 10, 101]])
  ones = jnp.ones((1, 5))
  out = codecomp.Decoded(tokens, ones, ones, ones, jnp.array([5]), jnp.array([False]), guess)
  replaced, lengths = codecomp.own_guesses(out)
  np.testing.assert_array_equal(replaced, [[97, 98, 99, 10, 101]])
  np.testing.assert_array_equal(lengths, [3])  # the guessed newline ends the completion
  # Without placeholders the completion is its own ablation.
  plain = out._replace(tokens=guess)
  np.testing.assert_array_equal(codecomp.own_guesses(plain)[0], guess)
