"""The `lm` experiment's declared criterion, judged on failing and noisy numbers.

(The smoke run itself is exercised by tests/launch: run twice, resume, report.)
"""

import numpy as np
import pytest

from configs import lm as lm_config
from jaxlab import data, report
from jaxlab.experiments import lm

CRITERIA = lm_config.get_config("quick").criteria
UNIGRAM = [4.70, 4.67, 4.65]  # unigram bits/byte on each evaluation seed's windows


def test_criteria_declared():
  cfg = lm_config.get_config("quick")
  assert [k for k, v in CRITERIA.items() if v.primary] == ["beats_unigram"]
  assert CRITERIA.beats_unigram.threshold == 0.5 and len(cfg.seeds) >= 3


def test_judge_fails_when_the_lm_is_barely_better_than_unigram():
  # 0.1-0.2 bits/byte below unigram: better, but clearly short of the declared 0.5.
  verdict, results = report.judge_all(CRITERIA, {"beats_unigram": ([4.55, 4.55, 4.50], UNIGRAM)})
  assert verdict == "did not hold"
  assert results[0].effect == pytest.approx(np.mean(UNIGRAM) - np.mean([4.55, 4.55, 4.50]))


def test_judge_inconclusive_inside_the_noise():
  # Margins 0.3 / 0.75 / 0.45 bits/byte straddle the 0.5 threshold.
  verdict, _ = report.judge_all(CRITERIA, {"beats_unigram": ([4.40, 3.92, 4.20], UNIGRAM)})
  assert verdict == "inconclusive"


def test_judge_diverged_seed_is_never_a_success():
  verdict, results = report.judge_all(
      CRITERIA, {"beats_unigram": ([2.10, float("nan"), 2.07], UNIGRAM)})
  assert verdict == "inconclusive" and results[0].n_missing == 1


def test_unigram_is_scored_on_the_lm_windows():
  rng = np.random.default_rng(0)
  train_tokens = rng.integers(0, 256, 5000)
  val = np.concatenate([np.full(500, 7), rng.integers(0, 256, 500)])  # not stationary
  kw = dict(batch_size=4, seq_len=16, num_batches=3)
  a = lm.unigram_on_windows(train_tokens, val, seed=lm.eval_seed(lm_config.get_config(), 0), **kw)
  b = lm.unigram_on_windows(train_tokens, val, seed=lm.eval_seed(lm_config.get_config(), 1), **kw)
  assert a != b  # each evaluation seed has its own windows
  targets = np.concatenate([data.lm_batch(val, i, batch_size=4, seq_len=16,
                                          seed=lm.eval_seed(lm_config.get_config(), 0))[:, 1:].ravel()
                            for i in range(3)])
  counts = np.bincount(train_tokens, minlength=256) + 1.0
  assert a == pytest.approx(-np.log2(counts / counts.sum())[targets].mean())
