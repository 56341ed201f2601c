"""The `escot` experiment: smoke run + resume, its criteria fed failing numbers, its knobs."""

import numpy as np
import pytest

from jaxlab.experiments import escot
from jaxlab.report import VERDICTS, judge_all, read_results
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
  assert {c["name"] for c in measured} == {"escot_not_below_sft", "escot_beats_ctkd",
                                           "uld_below_sft", "mined_below_sft"}
  assert all(c["n"] == len(config.seeds) for c in measured)
  students = escot.parse_students(config.tokenizers.students)
  assert set(on_disk["table"]) == set(students)
  for s in students:
    assert set(on_disk["table"][s]) == set(escot.METHODS)
    for cell in on_disk["table"][s].values():
      # Bits/byte of an untrained-ish student: finite, between 0 and log2(vocab) + margin.
      assert len(cell["per_seed"]) == len(config.seeds)
      assert all(0.0 < v < 12.0 for v in cell["per_seed"])
    overlap = on_disk["students"][s]["overlap"]
    assert 0.0 < overlap["jaccard"] <= 1.0
  # Paired seeds: SFT differs from E-SCOT only by the distillation term.
  sft, esc = (np.asarray(on_disk["table"]["char"][m]["per_seed"]) for m in ("sft", "escot"))
  assert np.all(sft != esc)
  bench = on_disk["bench"]
  assert len(bench["sparse"]) == len(bench["dense"]) == len(config.bench.lengths)
  # A second run loads every arm, the teacher and the tokenizers from the workdir.
  again = escot.run(config, workdir)
  assert again["table"] == on_disk["table"] and again["bench"] == bench


def _measured(escot_vs_rest: float, noise: float, seeds: int = 3) -> dict:
  """Per-seed bits/byte with E-SCOT ahead of (positive) or behind the others."""
  rng = np.random.default_rng(0)
  base = np.full(seeds, 2.0)
  jitter = lambda: noise * rng.standard_normal(seeds)
  return {
      "escot_not_below_sft": (base - escot_vs_rest + jitter(), base + jitter()),
      "escot_beats_ctkd": (base - escot_vs_rest + jitter(), base + jitter()),
      "uld_below_sft": (base + escot_vs_rest + jitter(), base + jitter()),
      "mined_below_sft": (base + escot_vs_rest + jitter(), base + jitter()),
      "escot_gain_same_vocab": (base - escot_vs_rest + jitter(), base + jitter()),
  }


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


def test_measure_pairs_seeds_and_finds_the_teacher_tokenizer_student_by_spec():
  rng = np.random.default_rng(0)
  table = {s: {m: {"per_seed": rng.uniform(1.5, 3.0, 3).tolist()} for m in escot.METHODS}
           for s in ("own", "char", "marker")}
  seeds = lambda s, m: np.asarray(table[s][m]["per_seed"])
  low_mean = lambda m: (seeds("char", m) + seeds("marker", m)) / 2
  # The teacher-tokenizer student is found by its spec, not by the name "same" (a student
  # named otherwise used to leave escot_gain_same_vocab silently unmeasured).
  m = escot._measure(table, ["char", "marker"], list(escot.METHODS), same="own")
  assert set(m) == {"escot_not_below_sft", "escot_beats_ctkd", "uld_below_sft",
                    "mined_below_sft", "escot_gain_same_vocab"}
  np.testing.assert_allclose(m["escot_gain_same_vocab"], (seeds("own", "escot"),
                                                          seeds("own", "sft")))
  np.testing.assert_allclose(m["escot_not_below_sft"], (low_mean("escot"), low_mean("sft")))
  np.testing.assert_allclose(m["uld_below_sft"], (low_mean("uld"), low_mean("sft")))
  # "the better of ULD and MinED", seed by seed.
  np.testing.assert_allclose(m["escot_beats_ctkd"][1],
                             np.minimum(low_mean("uld"), low_mean("mined")))
  assert "escot_gain_same_vocab" not in escot._measure(table, ["char"], ["sft", "escot"], None)


def test_escot_uses_optimizer_learning_rate(monkeypatch):
  seen = []
  real = escot.lm_lib.make_optimizer

  def spy(cfg, num_steps):
    seen.append(cfg.optimizer.learning_rate)
    if len(seen) == 2:
      raise _Stop
    return real(cfg, num_steps)

  monkeypatch.setattr(escot.lm_lib, "make_optimizer", spy)
  config = load_config("escot", "smoke")
  config.optimizer.learning_rate = 0.0123
  config.optimizer.teacher.learning_rate = 0.0456
  escot.make_student_trainer(config, escot.make_lm(config.model.to_dict(), 8), 8,
                             np.zeros((8, 128), np.float32), 4)
  toks = escot.encode_chunks(escot.tokenize.train_tokenizer("char", "", 0), ["ab cd"] * 2)
  with pytest.raises(_Stop):
    escot.train_teacher(config, toks, "/nonexistent")
  assert seen == [0.0123, 0.0456]


@pytest.mark.parametrize("field,value,match", [
    ("tokenizers.students", "nospec", "name=spec"),
    ("tokenizers.low_overlap", "missing", "low_overlap"),
    ("distill.methods", "sft,kd", "subset"),
    ("distill.coupling", "dense", "coupling"),
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
])
def test_bad_value_raises_before_any_work(field, value, tmp_path, monkeypatch):
  def stop(**kwargs):
    raise _Stop
  monkeypatch.setattr(escot.data, "load_corpus", stop)
  config = load_config("escot", "smoke")
  section, key = field.split(".")
  config[section][key] = value
  with pytest.raises(ValueError, match=field.replace(".", r"\.")):
    escot.run(config, str(tmp_path))


@pytest.mark.slow
def test_marker_copy_reuses_the_arms_that_do_not_read_vocabulary_strings(tmp_path):
  config = load_config("escot", "smoke")
  config.tokenizers.update(students="same=teacher,marker=marker", low_overlap="marker")
  config.distill.methods = "sft,mined"
  results = escot.run(config, str(tmp_path))
  assert results["arms"]["marker.sft"]["same_run_as"] == "same.sft"
  assert results["table"]["marker"]["sft"] == results["table"]["same"]["sft"]
  assert "same_run_as" not in results["arms"]["marker.mined"]  # MinED reads the strings
