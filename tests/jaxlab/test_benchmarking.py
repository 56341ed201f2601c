"""`jaxlab.benchmarking`: call order, what is timed, and bad arguments."""

import time

import pytest

from jaxlab.benchmarking import ratio, time_back_to_back, time_interleaved

SWITCH_S = 0.02  # what a call costs right after the other candidate ran


def _switching_candidates(log: list):
  """Two callables that are slow only on the first call after the other one ran."""

  def make(name):
    def fn():
      if log and log[-1] != name:
        time.sleep(SWITCH_S)
      log.append(name)
      return name
    return fn

  return {"a": make("a"), "b": make("b")}


def test_interleaved_alternates_every_call():
  log = []
  t = time_interleaved(_switching_candidates(log), repeats=3, warmup=1)
  assert log == ["a", "b"] * 4
  # Every timed call follows the other candidate's, so every one pays the switch.
  assert t["a"]["min_s"] >= SWITCH_S and t["b"]["min_s"] >= SWITCH_S


def test_back_to_back_times_all_but_the_first_call_of_each_block():
  log = []
  t = time_back_to_back(_switching_candidates(log), repeats=2, warmup=1, block=3)
  assert log == ["a", "b"] + (["a"] * 3 + ["b"] * 3) * 2
  # The switch lands on each block's untimed first call; the timed ones are fast.
  assert t["a"]["max_s"] < SWITCH_S / 2 and t["b"]["max_s"] < SWITCH_S / 2


def test_ratio_is_a_ratio_of_medians():
  t = {"ours": {"median_s": 2.0}, "base": {"median_s": 6.0}}
  assert ratio(t, "base", "ours") == 3.0


@pytest.mark.parametrize("kwargs, match", [
    (dict(repeats=0), "repeats must be >= 1"),
    (dict(warmup=-1), "warmup >= 0"),
    (dict(block=1), "block must be >= 2"),
])
def test_bad_arguments_raise(kwargs, match):
  with pytest.raises(ValueError, match=match):
    time_back_to_back({"a": lambda: None}, **kwargs)
