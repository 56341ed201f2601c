"""The `escot` experiment: smoke run + resume, its criteria fed failing numbers, its knobs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxlab.data
from jaxlab.distill import data as kd_data
from jaxlab.distill import losses, spans, tokenize, training
from jaxlab.experiments import escot
from jaxlab.report import VERDICTS, criteria_from_config, judge_all, read_results
from jaxlab.train.optimizers import resolve
from launch.configs import load_config


class _Stop(Exception):
  """Raised by a spy once it has seen what it needed."""


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("escot"))
  config = load_config("escot", "smoke")
  return config, workdir, escot.run(config, workdir)


def test_smoke_run_writes_table_and_resumes(smoke):
  config, workdir, results = smoke
  assert config.experiment == "escot" and len(config.seeds) >= 3
  on_disk = read_results(workdir)
  report = on_disk["report"]
  assert report["verdict"] in VERDICTS and report["verdict"] == results["report"]["verdict"]
  assert {c["name"] for c in report["criteria"]} == set(config.criteria)
  measured = [c for c in report["criteria"] if c["verdict"] != "not measured"]
  assert {c["name"] for c in measured} == {
      "escot_renyi_mechanism", "escot_span_mechanism", "escot_not_below_sft",
      "escot_beats_ctkd", "uld_below_sft", "mined_below_sft"}
  assert all(c["n"] == len(config.seeds) for c in measured)
  # The floors' reference is the low-overlap students' unigram bits/byte.
  unigram = on_disk["students"]["char"]["unigram_bpb"]
  assert 4.0 < unigram < 7.0  # ASCII text: above a few bits, below log2(128)
  for c in measured:
    if c["floor"] is not None:
      np.testing.assert_allclose(c["reference_mean"], unigram)
  assert [i["reading"] for i in report["interpretations"]] == ["char"]
  students = kd_data.parse_students(config.tokenizers.students)
  assert set(on_disk["table"]) == set(students)
  ablating = set(escot.split_names(config.distill.ablation_students))
  for s in students:
    expected = set(escot.METHODS) - (set() if s in ablating else set(escot.ABLATIONS))
    assert set(on_disk["table"][s]) == expected
    for cell in on_disk["table"][s].values():
      # Bits/byte of an untrained-ish student: finite, between 0 and log2(vocab) + margin.
      assert len(cell["per_seed"]) == len(config.seeds)
      assert all(0.0 < v < 12.0 for v in cell["per_seed"])
    overlap = on_disk["students"][s]["overlap"]
    assert 0.0 < overlap["jaccard"] <= 1.0
  # Paired seeds: SFT differs from E-SCOT only by the distillation term.
  sft, esc = (np.asarray(on_disk["table"]["char"][m]["per_seed"]) for m in ("sft", "escot"))
  assert np.all(sft != esc)
  for ablation in escot.ABLATIONS:
    assert np.all(np.asarray(on_disk["table"]["char"][ablation]["per_seed"]) != esc)
  # Every arm of a student starts from the seed's init on the seed's first batch.
  first_ce = {m: on_disk["arms"][f"char.{m}"]["first_ce"] for m in escot.METHODS}
  assert len({tuple(v) for v in first_ce.values()}) == 1, first_ce
  assert len(set(first_ce["sft"])) == len(config.seeds)  # and seeds differ
  bench = on_disk["bench"]
  assert len(bench["sparse"]) == len(bench["dense"]) == len(config.bench.lengths)
  # A second run loads every arm, the teacher and the tokenizers from the workdir.
  again = escot.run(config, workdir)
  assert again["table"] == on_disk["table"] and again["bench"] == bench


def _measured(escot_vs_rest: float, noise: float, seeds: int = 3, *,
              escot_vs_ablations: float | None = None, unigram: float = 3.0) -> dict:
  """Per-seed bits/byte with E-SCOT ahead of (positive) or behind the others; the baselines
  sit 1 bit/byte under the unigram reference unless `unigram` says otherwise."""
  rng = np.random.default_rng(0)
  base = np.full(seeds, 2.0)
  def jitter():  # mean 0 over the seeds: each effect is exactly the one asked for
    x = rng.standard_normal(seeds)
    return noise * (x - x.mean())
  ablations = escot_vs_rest if escot_vs_ablations is None else escot_vs_ablations
  pair = lambda gain: dict(method=base - gain + jitter(), baseline=base + jitter(),
                           reference=np.full(seeds, unigram))
  measured = {
      "escot_renyi_mechanism": pair(ablations), "escot_span_mechanism": pair(ablations),
      "escot_not_below_sft": pair(escot_vs_rest), "escot_beats_ctkd": pair(escot_vs_rest),
      "uld_below_sft": (base + escot_vs_rest + jitter(), base + jitter(),
                        np.full(seeds, unigram)),
      "mined_below_sft": (base + escot_vs_rest + jitter(), base + jitter(),
                          np.full(seeds, unigram)),
      "escot_gain_same_vocab": pair(escot_vs_rest),
  }
  return measured


def test_criteria_fail_when_escot_clearly_loses_and_are_inconclusive_in_noise():
  config = load_config("escot", "quick")
  row, results = judge_all(config.criteria, _measured(-0.2, noise=0.005))
  assert row == "did not hold"
  assert all(r.verdict == "did not hold" for r in results), [(r.name, r.verdict) for r in results]
  row, results = judge_all(config.criteria, _measured(0.0, noise=0.3))
  assert {r.name: r.verdict for r in results}["escot_beats_ctkd"] == "inconclusive"
  assert row == "inconclusive"
  row, _ = judge_all(config.criteria, _measured(0.2, noise=0.005))
  assert row == "held"


def test_mechanism_criteria_decide_the_row():
  config = load_config("escot", "quick")
  crits = {c.name: c for c in criteria_from_config(config.criteria)}
  mechanism = {n for n, c in crits.items() if c.mechanism and c.primary}
  assert mechanism == {"escot_renyi_mechanism", "escot_span_mechanism"}
  # E-SCOT clearly ahead of SFT and the earlier CTKD methods, but no better than E-SCOT
  # without its Renyi weights or without its span constraint: the components are not what
  # works, so the row does not hold.
  row, results = judge_all(config.criteria,
                           _measured(0.2, noise=0.005, escot_vs_ablations=0.0))
  by_name = {r.name: r.verdict for r in results}
  assert by_name["escot_not_below_sft"] == by_name["escot_beats_ctkd"] == "held"
  assert {by_name[n] for n in mechanism} == {"inconclusive"}
  assert row != "held" and row != "partly held"
  # Clearly behind its ablations: the mechanism criteria fail, and with them the row.
  row, results = judge_all(config.criteria,
                           _measured(0.2, noise=0.005, escot_vs_ablations=-0.05))
  assert {r.verdict for r in results if r.name in mechanism} == {"did not hold"}
  assert row == "did not hold"


def test_baselines_at_the_unigram_floor_give_no_signal():
  # Baselines no better than a unigram model of their tokenizer (within the 0.1 bits/byte
  # margin): whatever E-SCOT does, the floored criteria say nothing, and neither does the row.
  config = load_config("escot", "quick")
  for unigram in (2.0, 2.05):
    row, results = judge_all(config.criteria, _measured(0.2, noise=0.005, unigram=unigram))
    floored = {r.name: r.verdict for r in results if r.floor == "unigram"}
    assert set(floored) == {"escot_renyi_mechanism", "escot_span_mechanism",
                            "escot_not_below_sft", "escot_beats_ctkd", "escot_gain_same_vocab",
                            "uld_below_sft", "mined_below_sft"}
    assert set(floored.values()) == {"no signal"}
    assert row == "no signal"
  row, _ = judge_all(config.criteria, _measured(0.2, noise=0.005, unigram=2.2))
  assert row == "held"


def test_measure_pairs_seeds_and_finds_the_teacher_tokenizer_student_by_spec():
  rng = np.random.default_rng(0)
  table = {s: {m: {"per_seed": rng.uniform(1.5, 3.0, 3).tolist()} for m in escot.METHODS}
           for s in ("own", "char", "spm")}
  unigram = {"own": 3.1, "char": 4.5, "spm": 3.4}
  seeds = lambda s, m: np.asarray(table[s][m]["per_seed"])
  low_mean = lambda m: (seeds("char", m) + seeds("spm", m)) / 2
  # The teacher-tokenizer student is found by its spec, not by the name "same" (a student
  # named otherwise used to leave escot_gain_same_vocab silently unmeasured).
  m = escot._measure(table, ["char", "spm"], "own", unigram)
  assert set(m) == {"escot_renyi_mechanism", "escot_span_mechanism", "escot_not_below_sft",
                    "escot_beats_ctkd", "uld_below_sft", "mined_below_sft",
                    "escot_gain_same_vocab"}
  pairs = lambda name: (m[name]["method"], m[name]["baseline"])
  np.testing.assert_allclose(pairs("escot_gain_same_vocab"), (seeds("own", "escot"),
                                                              seeds("own", "sft")))
  np.testing.assert_allclose(m["escot_gain_same_vocab"]["reference"], [3.1] * 3)
  np.testing.assert_allclose(pairs("escot_not_below_sft"), (low_mean("escot"), low_mean("sft")))
  np.testing.assert_allclose(m["escot_not_below_sft"]["reference"], [3.95] * 3)
  np.testing.assert_allclose(pairs("uld_below_sft"), (low_mean("uld"), low_mean("sft")))
  # Each mechanism criterion: E-SCOT against itself without one component, seed by seed.
  np.testing.assert_allclose(pairs("escot_renyi_mechanism"),
                             (low_mean("escot"), low_mean("escot_uniform")))
  np.testing.assert_allclose(pairs("escot_span_mechanism"),
                             (low_mean("escot"), low_mean("escot_dense")))
  # "the better of ULD and MinED", seed by seed.
  np.testing.assert_allclose(m["escot_beats_ctkd"]["baseline"],
                             np.minimum(low_mean("uld"), low_mean("mined")))
  # A student without the ablation arms leaves the mechanism criteria unmeasured.
  for ablation in escot.ABLATIONS:
    del table["spm"][ablation]
  assert not {"escot_renyi_mechanism", "escot_span_mechanism"} & set(
      escot._measure(table, ["char", "spm"], "own", unigram))
  assert "escot_renyi_mechanism" in escot._measure(table, ["char"], "own", unigram)
  assert "escot_gain_same_vocab" not in escot._measure(table, ["char"], None, unigram)
  # Every criterion declares the unigram floor, so each is judged with its reference.
  crits = criteria_from_config(load_config("escot", "quick").criteria)
  assert all(c.floor == "unigram" for c in crits)
  # A floored criterion without its arms is "not measured" (not an error).
  del m["escot_gain_same_vocab"]
  results = dict((r.name, r) for r in judge_all(crits, m)[1])
  assert results["escot_gain_same_vocab"].verdict == "not measured"


def test_ablation_arms_differ_from_escot_only_in_their_component():
  # The trainer's distillation term for each method is E-SCOT's loss with exactly one
  # component changed: uniform span weights, or a dense coupling with the span marginals.
  config = load_config("escot", "smoke")
  code = "def f(x):\n    return x + 1\n"
  teacher = tokenize.train_tokenizer("bpe", code * 40, 140)
  student = tokenize.train_tokenizer("char", "", 0)
  chunks = [code] * 2  # identical rows: the batch mean is the one chunk's loss
  t_toks, s_toks = (kd_data.encode_chunks(tok, chunks) for tok in (teacher, student))
  rng = np.random.default_rng(0)
  width_t, k = t_toks.inputs.shape[1], config.distill.top_k
  char_t = np.tile(rng.dirichlet(np.full(128, 0.3), width_t), (2, 1, 1)).astype(np.float32)
  top = -np.sort(-np.tile(rng.dirichlet(np.ones(8), width_t), (2, 1, 1)), -1)[..., :k]
  stats = dict(char_t=char_t, top_t=top.astype(np.float32),
               top_ids=np.zeros(top.shape, np.int32),
               ent_t=np.asarray(losses.renyi_entropy(jnp.asarray(char_t), config.distill.alpha)))
  arrays, k_max = kd_data.alignment_arrays(t_toks, s_toks, stats,
                                            np.zeros(teacher.get_vocab_size(), np.int32),
                                            "overlap")
  arrays = jax.tree.map(jnp.asarray, arrays)
  # The ablation's marginals are the span coupling's own.
  n, m = (len(o) for o in (t_toks.offsets[0], s_toks.offsets[0]))
  coupling = spans.overlap_coupling(t_toks.offsets[0], s_toks.offsets[0])
  mass_t, mass_s = spans.coupling_marginals(coupling, n, m)
  np.testing.assert_allclose(arrays["mass_t"][0, :n], mass_t, rtol=1e-6)
  np.testing.assert_allclose(arrays["mass_s"][0, :m], mass_s, rtol=1e-6)
  assert not np.any(arrays["mass_t"][0, n:]) and not np.any(arrays["mass_s"][0, m:])

  first = jnp.asarray(tokenize.first_char_matrix(tokenize.vocab_strings(student)))
  model = training.make_lm(config.model.to_dict(), s_toks.vocab)
  methods = ("escot", "escot_uniform", "escot_dense")
  loss_fn = training.make_student_loss(config.distill, model, s_toks.vocab, np.asarray(first),
                                       k_max, methods)
  d = config.distill
  shared = dict(num_spans=k_max, alpha=d.alpha, tau=d.tau, char_weight=d.char_weight,
                rank_weight=d.rank_weight, entropy_on=d.entropy_on)

  @jax.jit
  def check(arrays):
    params = model.init(jax.random.key(0), arrays["inputs"][:1])["params"]
    got = [loss_fn(params, arrays, i)[1] for i in range(len(methods))]
    row = {key: v[0] for key, v in arrays.items()}
    logp = training.token_log_probs(model, params, row["inputs"][None], s_toks.vocab)[0]
    teacher_side = (row["char_t"], row["top_t"], row["ent_t"], row["span_t"], logp, first,
                    row["span_s"])
    sparse = (row["pt"], row["ps"], row["pspan"], row["pmass"])
    want = [losses.escot_loss(*teacher_side, *sparse, weighting=d.weighting, **shared),
            losses.escot_loss(*teacher_side, *sparse, weighting="none", **shared),
            losses.escot_dense_loss(*teacher_side, row["mass_t"], row["mass_s"],
                                    weighting=d.weighting, epsilon=d.dense_epsilon,
                                    num_iters=d.dense_iters, **shared)]
    return got, want
  got, want = check(arrays)
  for method, (ce, kd), expected in zip(methods, got, want, strict=True):
    np.testing.assert_allclose(kd, expected, rtol=2e-5, err_msg=method)
    np.testing.assert_array_equal(ce, got[0][0])  # the cross-entropy term is untouched
  # The Renyi weights are not uniform here, so each ablation changes the loss.
  assert not np.isclose(got[0][1], got[1][1]) and not np.isclose(got[0][1], got[2][1])


def test_escot_uses_optimizer_learning_rate(monkeypatch, tmp_path):
  # The teacher (the "teacher" stage of config.optimizer) and the students (its top level)
  # build their optimizers with `jaxlab.train.optimizer`; tests/jaxlab/train/
  # test_optimizers.py checks that every key of it is honoured.
  seen = []

  def spy(opt, num_steps, stage=None, **kwargs):
    seen.append((stage, resolve(opt, stage)["learning_rate"], num_steps))
    if stage is None:  # the students' optimizer: all this test needed
      raise _Stop
    return real(opt, num_steps, stage=stage, **kwargs)

  def untrained_teacher(model, toks, tx, **kwargs):  # the teacher's optimizer, not its training
    return model.init(jax.random.key(0), jnp.asarray(toks.inputs[:1]))["params"]

  real = escot.optimizer
  monkeypatch.setattr(escot, "optimizer", spy)
  monkeypatch.setattr(training, "train_teacher", untrained_teacher)
  config = load_config("escot", "smoke")
  config.optimizer.learning_rate = 0.0123
  config.optimizer.teacher.learning_rate = 0.0456
  with pytest.raises(_Stop):
    escot.run(config, str(tmp_path))
  assert seen == [("teacher", 0.0456, config.teacher.num_steps),
                  (None, 0.0123, config.train.num_steps)]


@pytest.mark.parametrize("field,value,match", [
    ("tokenizers.students", "nospec", "name=spec"),
    ("tokenizers.low_overlap", "missing", "low_overlap"),
    ("distill.methods", "sft,kd", "subset"),
    ("distill.coupling", "dense", "coupling"),
    ("distill.ablation_students", "char,nobody", "ablation_students"),
])
def test_bad_config_raises(field, value, match, tmp_path):
  config = load_config("escot", "smoke")
  section, key = field.split(".")
  config[section][key] = value
  with pytest.raises(ValueError, match=match):
    escot.run(config, str(tmp_path))


@pytest.mark.parametrize("field,value", [
    ("distill.temperature", 0.0),       # NaN teacher statistics
    ("distill.temperature", -1.0),      # an inverted teacher distribution, silently
    ("distill.entropy_on", "Char"),     # read as "token" by the teacher statistics
    ("distill.weighting", "softmx"),    # failed only after the teacher's training
    ("distill.lam", -0.5),
    ("distill.top_k", 0),
    ("data.val_chunks", 0),             # bits/byte divided by zero characters
    ("data.student_chars", 10),         # no student chunk
    ("distill.dense_epsilon", 0.0),     # a NaN Sinkhorn plan in the span ablation
    ("distill.dense_iters", 0),
])
def test_bad_value_raises_before_any_work(field, value, tmp_path, monkeypatch):
  def stop(**kwargs):
    raise _Stop
  monkeypatch.setattr(jaxlab.data, "load_corpus", stop)
  config = load_config("escot", "smoke")
  section, key = field.split(".")
  config[section][key] = value
  with pytest.raises(ValueError, match=field.replace(".", r"\.")):
    escot.run(config, str(tmp_path))


def test_tokenizer_specs_take_the_sentencepiece_marker():
  text = "def f(x):\n    return x\n" * 30
  sp = kd_data.tokenizer_from_spec("bpe:140:sp", text)
  assert any(s.startswith(tokenize.SP_MARKER) for s in tokenize.vocab_strings(sp))
  gpt2 = tokenize.vocab_strings(kd_data.tokenizer_from_spec("bpe:140", text))
  assert not any(s.startswith(tokenize.SP_MARKER) for s in gpt2)
  with pytest.raises(ValueError, match="tokenizer spec"):
    kd_data.tokenizer_from_spec("unigram:1024:gpt3", text)


@pytest.mark.slow
def test_marker_copy_reuses_the_arms_that_do_not_read_vocabulary_strings(tmp_path):
  config = load_config("escot", "smoke")
  config.tokenizers.update(students="same=teacher,marker=marker", low_overlap="marker")
  config.distill.methods = "sft,mined"
  results = escot.run(config, str(tmp_path))
  assert results["arms"]["marker.sft"]["same_run_as"] == "same.sft"
  assert results["table"]["marker"]["sft"] == results["table"]["same"]["sft"]
  assert "same_run_as" not in results["arms"]["marker.mined"]  # MinED reads the strings
