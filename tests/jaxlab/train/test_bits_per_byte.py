"""`jaxlab.train.lm.bits_per_byte`: the one held-out bits/byte evaluator."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import data
from jaxlab.nn import Transformer, TransformerConfig
from jaxlab.train import lm as train_lm


def test_byte_model_mean_and_token_model_total_per_byte():
  means = [1.0, 2.0, 3.0]
  got = train_lm.bits_per_byte(lambda p, b: np.float32(means[b]), None, [0, 1, 2])
  assert got == pytest.approx(2.0 / math.log(2))
  # A token model: each batch's total nats over the bytes its tokens cover.
  totals = [10.0, 20.0]
  got = train_lm.bits_per_byte(lambda p, b: np.float32(totals[b]), None, [0, 1], num_bytes=15)
  assert got == pytest.approx(30.0 / 15 / math.log(2))
  # S models at once (e.g. vmapped over seeds): one value each.
  got = train_lm.bits_per_byte(lambda p, b: np.array([1.0, 2.0], np.float32), None, [0, 1])
  np.testing.assert_allclose(got, np.array([1.0, 2.0]) / math.log(2))


def test_diverged_model_is_nan_and_bad_input_names_the_argument():
  for bad in (np.inf, np.nan):
    assert math.isnan(train_lm.bits_per_byte(lambda p, b, bad=bad: np.float32(bad), None, [0]))
  got = train_lm.bits_per_byte(lambda p, b: np.array([1.0, np.inf], np.float32), None, [0])
  assert got[0] == pytest.approx(1 / math.log(2)) and math.isnan(got[1])
  with pytest.raises(ValueError, match="batches"):
    train_lm.bits_per_byte(lambda p, b: 1.0, None, [])
  with pytest.raises(ValueError, match="num_bytes"):
    train_lm.bits_per_byte(lambda p, b: 1.0, None, [0], num_bytes=0)


def test_eval_bits_per_byte_is_the_mean_next_byte_loss_in_bits():
  model = Transformer(TransformerConfig(d_model=16, num_layers=1, num_heads=2, num_kv_heads=1,
                                        d_ff=32))
  params = model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
  tokens = np.random.default_rng(0).integers(0, 256, 4096).astype(np.int32)
  got = train_lm.eval_bits_per_byte(model, params, tokens, batch_size=2, seq_len=8,
                                    num_batches=3, seed=7)
  loss = train_lm.next_byte_loss(model)
  want = np.mean([float(loss(params, data.lm_batch(tokens, i, batch_size=2, seq_len=8, seed=7),
                             None)[0]) for i in range(3)]) / math.log(2)
  assert got == pytest.approx(want, rel=1e-6)
