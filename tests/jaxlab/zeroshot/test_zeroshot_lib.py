"""jaxlab.zeroshot: metrics on hand examples, routing, mapping shapes/losses, bad input.

Shape mismatches between annotated arguments are caught by the runtime shape checker that
tests/conftest.py installs (TypeCheckError) before the functions' own ValueError, which is
what a user without the checker sees; `BAD` accepts either.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import TypeCheckError

from jaxlab.zeroshot import expansion, mapping, metrics, routing, world

BAD = (ValueError, TypeCheckError)


def test_harmonic_mean_hand_values():
  np.testing.assert_allclose(metrics.harmonic_mean(jnp.float32(0.6), jnp.float32(0.3)), 0.4,
                             rtol=1e-6)
  assert float(metrics.harmonic_mean(jnp.float32(0.0), jnp.float32(0.0))) == 0.0
  np.testing.assert_allclose(metrics.harmonic_mean(jnp.float32(0.5), jnp.float32(0.5)), 0.5)


def _hand_case():
  # 4 classes: group 0 = {0, 1}, group 1 = {2, 3}; classes 1 and 3 unseen.
  groups = jnp.array([0, 0, 1, 1])
  seen = jnp.array([True, False, True, False])
  labels = jnp.array([0, 0, 1, 1, 3, 3, 2])
  # Predictions (argmax): 0, 1 | 0, 2 | 3, 1 | 2
  pred = jnp.array([0, 1, 0, 2, 3, 1, 2])
  logits = jax.nn.one_hot(pred, 4) * 2.0
  # Class-1 samples: second-best score on class 1 (a sibling-only argmax picks it).
  logits = logits.at[3, 1].set(1.0)
  return logits, labels, groups, seen


def test_gzsl_accuracies_hand_example():
  logits, labels, _, seen = _hand_case()
  out = metrics.gzsl_accuracies(logits, labels, seen)
  # seen: class 0 -> 1/2, class 2 -> 1/1 => s = 0.75; unseen: class 1 -> 0/2, class 3 -> 1/2.
  np.testing.assert_allclose(out["s"], 0.75)
  np.testing.assert_allclose(out["u"], 0.25)
  np.testing.assert_allclose(out["H"], 2 * 0.75 * 0.25 / 1.0)
  # T: unseen-only argmax. Class 1 samples: row 2 (scores 0 on 1, 3) ties -> a miss (a tie
  # counts against the sample, never for the first index); row 3 -> class 1. Class 3:
  # row 4 -> 3, row 5 -> 1. T = (0.5 + 0.5) / 2.
  np.testing.assert_allclose(out["T"], 0.5)


def test_group_accuracies_hand_example():
  logits, labels, groups, seen = _hand_case()
  out = metrics.group_accuracies(logits, labels, groups, ~seen)
  # Unseen class 1 (group 0): row 2 predicts 0 (same group), row 3 predicts 2 (other group)
  # -> between 1/2; within-group argmax over {0, 1}: row 2 -> 0, row 3 -> 1 -> 1/2.
  # Unseen class 3 (group 1): row 4 -> 3 (in group), row 5 -> 1 (out) -> between 1/2;
  # within over {2, 3}: row 4 -> 3, row 5 -> tie (0, 0) -> a miss -> 1/2.
  np.testing.assert_allclose(out["between"], 0.5)
  np.testing.assert_allclose(out["within"], 0.5)


def test_nan_never_becomes_an_accuracy():
  # harmonic_mean(NaN, 0.5) was 0 (the u + s > 0 guard); NaN logits gave finite s, u, H.
  assert np.isnan(float(metrics.harmonic_mean(jnp.float32(jnp.nan), jnp.float32(0.5))))
  assert np.isnan(float(metrics.harmonic_mean(jnp.float32(0.5), jnp.float32(jnp.nan))))
  logits, labels, groups, seen = _hand_case()
  logits = logits.at[6, 0].set(jnp.nan)   # one sample of a seen class
  for fn in (lambda f: f, jax.jit):
    out = fn(metrics.gzsl_accuracies)(logits, labels, seen)
    out.update(fn(metrics.group_accuracies)(logits, labels, groups, ~seen))
    assert all(np.isnan(float(v)) for v in out.values()), out


def test_constant_scores_earn_no_accuracy():
  # Every class scored alike: a tie counts against the sample (the argmax's first-index
  # tie-break gave class 0's samples, hence s, full credit).
  _, labels, groups, seen = _hand_case()
  out = metrics.gzsl_accuracies(jnp.zeros((7, 4)), labels, seen)
  out.update(metrics.group_accuracies(jnp.zeros((7, 4)), labels, groups, ~seen))
  assert {k: float(v) for k, v in out.items()} == {
      "s": 0.0, "u": 0.0, "H": 0.0, "T": 0.0, "within": 0.0, "between": 0.0}
  # A lone class in its group wins the within-group argmax (its only candidate), and a
  # group holding every class wins between-group.
  one = metrics.group_accuracies(jnp.zeros((2, 2)), jnp.array([0, 1]), jnp.array([0, 1]),
                                 jnp.array([True, True]))
  assert float(one["within"]) == 1.0 and float(one["between"]) == 0.0
  all_in = metrics.group_accuracies(jnp.zeros((2, 2)), jnp.array([0, 1]), jnp.array([0, 0]),
                                    jnp.array([True, True]))
  assert float(all_in["between"]) == 1.0 and float(all_in["within"]) == 0.0


def test_metrics_bad_input():
  with pytest.raises(BAD):
    metrics.gzsl_accuracies(jnp.zeros((3, 4)), jnp.zeros(2, jnp.int32), jnp.ones(4, bool))
  with pytest.raises(BAD):
    metrics.gzsl_accuracies(jnp.zeros((3, 4)), jnp.zeros(3, jnp.int32), jnp.ones(5, bool))
  with pytest.raises(ValueError, match="sources"):
    metrics.template_spread(jnp.zeros((1, 3, 4)))


def test_template_spread_zero_iff_sources_agree():
  w = jax.random.normal(jax.random.key(0), (1, 5, 7))
  assert float(metrics.template_spread(jnp.concatenate([w, 3.0 * w]))) < 1e-6
  assert float(metrics.template_spread(jnp.concatenate([w, -w]))) > 0.5


def test_kmeans_recovers_well_separated_groups_and_routes():
  centers = jnp.eye(4, 16) * 5.0
  x = jnp.repeat(centers, 6, 0) + 0.1 * jax.random.normal(jax.random.key(1), (24, 16))
  assign, found = routing.kmeans(x, 4, jax.random.key(0))
  truth = np.repeat(np.arange(4), 6)
  a = np.asarray(assign)
  assert np.all((truth[:, None] == truth[None]) == (a[:, None] == a[None]))
  hard = routing.route(x, found, routing="hard")
  np.testing.assert_array_equal(np.argmax(hard, -1), a)
  soft = routing.route(x, found, routing="soft", temperature=0.1)
  np.testing.assert_allclose(np.sum(soft, -1), 1.0, rtol=1e-5)
  with pytest.raises(ValueError, match="routing"):
    routing.route(x, found, routing="top2")
  with pytest.raises(ValueError, match="num_clusters"):
    routing.kmeans(x, 0, jax.random.key(0))


def test_group_mean_weights_groups_equally():
  values = jnp.array([1.0, 1.0, 1.0, 4.0])
  groups = jax.nn.one_hot(jnp.array([0, 0, 0, 1]), 2)
  np.testing.assert_allclose(routing.group_mean(values, groups), 2.5)  # (1 + 4) / 2, not 1.75


def test_mapping_shapes_losses_and_bad_input():
  m = mapping.DualMapping(sem_dim=8, weight_dim=5, latent_dim=4, hidden_dim=6, num_groups=3)
  a, w = jnp.ones((6, 8)), jnp.ones((6, 5))
  r = jax.nn.one_hot(jnp.arange(6) % 3, 3)
  params = m.init(jax.random.key(0), a, w, r)
  out = m.apply(params, a, w, r)
  assert {k: v.shape for k, v in out.items()} == dict(a2a=(6, 8), w2a=(6, 8), w2w=(6, 5),
                                                      a2w=(6, 5))
  with pytest.raises(BAD):
    m.apply(params, a, jnp.ones((6, 1)), method=m.synthesize)
  with pytest.raises(BAD):
    m.apply(params, jnp.ones((6, 9)), r, method=m.synthesize)
  sem = jax.random.normal(jax.random.key(2), (2, 6, 8))
  seen = jnp.array([True] * 4 + [False] * 2)
  cfg = mapping.LossConfig(lam_inv=1.0, lam_margin=1.0, group_norm=True)
  # One compiled value-and-grad (eager flax + autodiff op by op is slow on CPU).
  (loss, terms), grads = jax.jit(jax.value_and_grad(
      lambda p: mapping.mapping_loss(m, p, sem, w.at[4:].set(0.0), seen, r, cfg),
      has_aux=True))(params)
  assert set(terms) == {"icis", "inv", "sep"} and np.isfinite(float(loss))
  assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))


def test_invariance_and_margin_hand_values():
  p = jnp.array([[[1.0, 0.0]], [[0.0, 1.0]]])  # two sources, one class, orthogonal
  np.testing.assert_allclose(mapping.invariance_loss(p), 1 - np.cos(np.pi / 4), rtol=1e-5)
  w = jnp.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
  g = jax.nn.one_hot(jnp.array([0, 0, 1]), 2)
  # Only the pair (0, 1) is same-group, with cos 1 -> relu(1 - 0.5) = 0.5.
  np.testing.assert_allclose(mapping.intra_group_margin(w, g, jnp.ones(3, bool), 0.5), 0.5,
                             rtol=1e-5)


def test_world_shapes_taxonomy_and_bad_input():
  cfg = world.SyntheticConfig(num_groups=3, classes_per_group=4, sem_dim=16, num_sources=2,
                              features=world.FeatureConfig(feat_dim=8, num_unseen=4,
                                                           head_steps=20))
  w = world.synthetic_world(cfg, seed=0)
  assert w.semantics.shape == (2, 12, 16) and w.weights.shape == (12, 9)
  assert int((~w.seen).sum()) == 4
  assert set(w.groups[~w.seen][:3]) | set(w.groups[~w.seen]) == {0, 1, 2}  # every group
  assert np.all(w.weights[~w.seen] == 0)
  tax = world.load_taxonomy()
  names, groups = world.classes_of(tax)
  assert 140 <= len(names) <= 160 and len(set(names)) == len(names) and groups.max() >= 10
  with pytest.raises(ValueError, match="num_unseen"):
    world.synthetic_world(cfg.__class__(features=world.FeatureConfig(num_unseen=0)), 0)
  with pytest.raises(ValueError, match="embeddings"):
    world.semireal_world(np.zeros((1, 5, 4)), np.zeros(5, np.int32), world.FeatureConfig(), 0)


def test_fit_and_evaluate_bad_arm():
  w = _small_world()
  for bad, match in ((expansion.ArmConfig(routing="x"), "routing"),
                     (expansion.ArmConfig(num_groups=3, group_rule="oracle"), "group_rule")):
    with pytest.raises(ValueError, match=match):
      expansion.fit_and_evaluate(w, bad, expansion.TrainConfig(), jax.random.key(0))


def test_fit_and_evaluate_docstring_names_the_returned_cluster_key():
  doc = expansion.fit_and_evaluate.__doc__
  assert "cluster_rand_index" in doc and "cluster_purity" not in doc


def _blobs(num_groups, per_group, dim=16, seed=1):
  centers = 5.0 * jnp.eye(num_groups, dim)
  x = jnp.repeat(centers, per_group, 0)
  return x + 0.3 * jax.random.normal(jax.random.key(seed), x.shape)


_estimate = jax.jit(routing.estimate_num_groups,
                    static_argnames=("max_groups", "rule", "num_restarts"))


@pytest.mark.parametrize("rule", routing.GROUP_RULES)
def test_estimate_num_groups_recovers_separable_counts(rule):
  # 30 points either way (one compile per rule). Several k-means++ seedings per count, as
  # the experiment runs it: one seeding can put two centres in one blob, and that count's
  # silhouette then undersells it.
  for num_groups, per_group in ((3, 10), (5, 6)):
    k, scores = _estimate(_blobs(num_groups, per_group), jax.random.key(0), max_groups=10,
                          rule=rule, num_restarts=4)
    assert int(k) == num_groups and scores.shape == (9,)


def test_estimate_num_groups_bad_input():
  x = _blobs(3, 6)
  with pytest.raises(ValueError, match="rule"):
    routing.estimate_num_groups(x, jax.random.key(0), max_groups=5, rule="bic")
  with pytest.raises(ValueError, match="max_groups"):
    routing.estimate_num_groups(x, jax.random.key(0), max_groups=x.shape[0])
  with pytest.raises(ValueError, match="min_groups"):
    routing.estimate_num_groups(x, jax.random.key(0), max_groups=5, min_groups=1)


def test_silhouette_hand_values():
  x = jnp.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
  # Cosine distance 0 inside the clusters, 1 across: every s_i = (1 - 0) / 1.
  np.testing.assert_allclose(routing.silhouette(x, jnp.array([0, 0, 1, 1]), 3), 1.0, atol=1e-6)
  # A point alone in its cluster scores 0 (Rousseeuw); the others still 1 -> mean 2/3.
  np.testing.assert_allclose(routing.silhouette(x[:3], jnp.array([0, 0, 1]), 2), 2 / 3,
                             atol=1e-6)
  # Splitting a true cluster: a = 0 for the pair, b = 1; the split singletons score 0.
  np.testing.assert_allclose(routing.silhouette(x, jnp.array([0, 0, 1, 2]), 3), 0.5, atol=1e-6)
  assert float(routing.silhouette(x, jnp.zeros(4, jnp.int32), 2)) == 0.0  # one cluster


def test_kmeans_and_route_use_only_the_active_centres():
  x = _blobs(4, 6)
  kmeans = jax.jit(routing.kmeans, static_argnums=1, static_argnames="num_restarts")
  assign, centers = kmeans(x, 6, jax.random.key(0), num_active=jnp.int32(2), num_restarts=3)
  assert int(assign.max()) <= 1 and np.all(np.asarray(centers[2:]) == 0)
  for mode in routing.ROUTINGS:
    r = routing.route(x, centers, routing=mode, num_active=2)
    np.testing.assert_allclose(np.asarray(r[:, 2:]), 0.0)
    np.testing.assert_allclose(np.sum(r, -1), 1.0, rtol=1e-5)
  with pytest.raises(ValueError, match="num_active"):
    routing.kmeans(x, 6, jax.random.key(0), num_active=7)


def test_kmeans_and_silhouette_never_build_on_a_nan_point():
  x = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [jnp.nan, 0.9]])
  with pytest.raises(ValueError, match="x must be finite"):
    routing.kmeans(x, 2, jax.random.key(0))
  # Traced: every centre NaN and no cluster (-1), never a partition around the NaN.
  for restarts in (1, 3):
    assign, centers = jax.jit(lambda v, r=restarts: routing.kmeans(
        v, 2, jax.random.key(0), num_restarts=r))(x)
    assert np.isnan(np.asarray(centers)).all() and np.asarray(assign).tolist() == [-1] * 4
  assert np.isnan(float(routing.silhouette(x, jnp.array([0, 0, 1, 1]), 2)))


def test_chance_levels_hand_values():
  groups = jnp.array([0, 0, 0, 1, 1])
  seen = jnp.array([True, True, False, True, False])
  out = metrics.chance_levels(groups, seen)
  # Unseen classes 2 (group of 3) and 4 (group of 2): (1/3 + 1/2) / 2; T = 1/2; s = u = H = 1/5.
  np.testing.assert_allclose(out["within"], (1 / 3 + 1 / 2) / 2, rtol=1e-6)
  np.testing.assert_allclose(out["T"], 0.5)
  for k in ("s", "u", "H"):
    np.testing.assert_allclose(out[k], 0.2, rtol=1e-6)
  # A random classifier's measured accuracies match (Monte Carlo, 4000 samples per class:
  # the per-class SE is <= 0.008).
  labels = jnp.repeat(jnp.arange(5), 4000)
  logits = jax.random.uniform(jax.random.key(3), (labels.shape[0], 5))
  got = metrics.group_accuracies(logits, labels, groups, ~seen)
  np.testing.assert_allclose(got["within"], out["within"], atol=0.03)
  np.testing.assert_allclose(metrics.gzsl_accuracies(logits, labels, seen)["u"], 0.2, atol=0.03)


def test_grouped_heads_mix_per_class_like_a_per_row_einsum():
  m = mapping.DualMapping(sem_dim=8, weight_dim=5, latent_dim=4, hidden_dim=6, num_groups=3)
  a = jax.random.normal(jax.random.key(0), (2, 6, 8))  # 2 sources x 6 classes
  r = jax.nn.softmax(jax.random.normal(jax.random.key(1), (6, 3)), -1)
  params = m.init(jax.random.key(2), a, jnp.ones((2, 6, 5)), r)
  params = jax.tree.map(lambda p: p + 0.1, params)  # non-zero heads
  got = m.apply(params, a, r, method=m.synthesize)
  z = m.apply(params, a, method=lambda mod, x: mod.enc_a(x))
  base = m.apply(params, z, method=lambda mod, x: mod.dec_w(x))
  heads = params["params"]["heads"]
  want = base + jnp.einsum("ck,scl,klw->scw", r, jax.nn.relu(z), heads)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _small_world(seed=0):
  # 8 classes a group: the eigengap's local scale (the 7th neighbour) stays inside a group.
  cfg = world.SyntheticConfig(num_groups=3, classes_per_group=8, sem_dim=16, num_sources=2,
                              features=world.FeatureConfig(feat_dim=8, num_unseen=3,
                                                           head_steps=20, test_per_class=5))
  return world.synthetic_world(cfg, seed=seed)


def test_fit_discovers_its_groups_and_never_reads_the_true_ones():
  w = _small_world()
  train = expansion.TrainConfig(num_steps=3, latent_dim=4, hidden_dim=8)
  arm = expansion.ArmConfig(num_groups=6, group_rule="silhouette", num_restarts=2,
                            loss=mapping.LossConfig(lam_inv=1.0, lam_margin=1.0))
  fit = jax.jit(expansion.fit_and_evaluate, static_argnums=(1, 2))
  out = fit(w, arm, train, jax.random.key(0))
  for k in ("s", "u", "H", "T", "within", "between", "weight_spread", "cluster_rand_index"):
    assert 0.0 <= float(out[k]) <= 1.0 + 1e-6, k
  assert int(out["num_groups_found"]) == 3 and int(out["num_groups_true"]) == 3
  assert float(out["cluster_rand_index"]) == 1.0
  # Relabel the world's true groups (one group of all classes): only the scores that use
  # the truth may change; the fit, the found count and s/u/H/T may not.
  lumped = fit(w._replace(groups=np.zeros_like(w.groups)), arm, train, jax.random.key(0))
  for k in ("s", "u", "H", "T", "weight_spread", "loss", "num_groups_found"):
    np.testing.assert_array_equal(out[k], lumped[k], err_msg=k)
  assert int(lumped["num_groups_true"]) == 1


def test_group_rules_that_agree_on_the_count_route_identically():
  # The rule enters the fit only through `class_routes`; where two rules find the same
  # count they give the same routes, so the experiment reuses the default reading's fit.
  w = _small_world()
  sem = expansion.prepare_semantics(jnp.asarray(w.semantics))
  key = jax.random.split(jax.random.key(0))[1]  # the routing key fit_and_evaluate uses
  arm = expansion.ArmConfig(num_groups=6, group_rule="silhouette", num_restarts=2)
  eig = dataclasses.replace(arm, group_rule="eigengap")
  routes = jax.jit(expansion.class_routes, static_argnums=1)
  sil_out, eig_out = routes(sem, arm, key), routes(sem, eig, key)
  assert int(sil_out[2]) == int(eig_out[2]) == 3
  for x, y in zip(sil_out, eig_out, strict=True):
    np.testing.assert_array_equal(x, y)
