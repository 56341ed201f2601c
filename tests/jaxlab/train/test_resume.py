"""A run interrupted after N steps and resumed ends bitwise equal to an uninterrupted one."""

import os

import jax
import numpy as np
import optax
import pytest

from jaxlab import data, train
from jaxlab.nn import Transformer, TransformerConfig
from jaxlab.train.lm import next_byte_loss

NUM_STEPS, CKPT_EVERY, CRASH_AT = 12, 5, 8


class Preempted(Exception):
  pass


@pytest.fixture(scope="module")
def setup():
  corpus = data.load_corpus(max_bytes=100_000)
  model = Transformer(TransformerConfig(d_model=32, num_layers=1, num_heads=4, num_kv_heads=2,
                                        d_ff=32))
  tx = optax.adamw(optax.cosine_decay_schedule(3e-3, NUM_STEPS))
  params = model.init(jax.random.key(0), np.zeros((1, 16), np.int32))["params"]
  step = train.make_train_step(next_byte_loss(model), tx)
  batches = lambda i: data.lm_batch(corpus.train, i, batch_size=4, seq_len=16, seed=0)
  return params, tx, step, batches


def _fresh_state(params, tx):
  # A new copy each time: the jitted step donates the state it is given.
  return train.create_train_state(jax.tree.map(np.array, params), tx, seed=0)


def _run(workdir, setup, batch_fn=None):
  params, tx, step, batches = setup
  return train.train_loop(_fresh_state(params, tx), step, batch_fn or batches,
                          num_steps=NUM_STEPS, workdir=workdir, checkpoint_every=CKPT_EVERY,
                          log_every=1)


def test_interrupted_run_resumes_bitwise(tmp_path, setup):
  _, _, _, batches = setup
  straight = _run(str(tmp_path / "straight"), setup)

  def crashing(i):
    if i == CRASH_AT:
      raise Preempted()
    return batches(i)

  resumed_dir = str(tmp_path / "resumed")
  with pytest.raises(Preempted):
    _run(resumed_dir, setup, crashing)
  # The crash came after the step-5 checkpoint and before any later one.
  assert train.Checkpointer(resumed_dir, every=CKPT_EVERY).latest_step() == 5
  resumed = _run(resumed_dir, setup)

  assert int(resumed.step) == NUM_STEPS
  for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  # The optimizer state kept its NamedTuple types through orbax.
  assert jax.tree.structure(straight.opt_state) == jax.tree.structure(resumed.opt_state)
  # metrics.jsonl reads as one run: rows 1..12 once each, equal to the straight run's.
  rows = train.read_metrics(os.path.join(resumed_dir, "metrics.jsonl"))
  assert [r["step"] for r in rows] == list(range(1, NUM_STEPS + 1))
  assert rows == train.read_metrics(str(tmp_path / "straight" / "metrics.jsonl"))


def test_finished_run_trains_nothing(tmp_path, setup):
  workdir = str(tmp_path / "w")
  first = _run(workdir, setup)
  calls = []
  again = _run(workdir, setup, lambda i: calls.append(i))
  assert calls == []
  np.testing.assert_array_equal(jax.tree.leaves(first.params)[0],
                                jax.tree.leaves(again.params)[0])
  # A shorter run on the same workdir would return the later state as "after num_steps".
  params, tx, step, batches = setup
  with pytest.raises(ValueError, match=f"at step {NUM_STEPS}, past num_steps=5"):
    train.train_loop(_fresh_state(params, tx), step, batches, num_steps=5, workdir=workdir,
                     checkpoint_every=CKPT_EVERY)


def test_checkpointer_bad_arguments(tmp_path):
  with pytest.raises(ValueError, match="every"):
    train.Checkpointer(str(tmp_path), every=0)
