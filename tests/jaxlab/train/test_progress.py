"""Progress of training loops and sweeps: a bar with the loss, or periodic log lines."""

import io
import logging
import sys

import jax
import jax.numpy as jnp
import optax
import pytest

from jaxlab import train
from jaxlab.train import progress_display as progress_lib


class FakeClock:
  def __init__(self):
    self.t = 1000.0

  def __call__(self):
    return self.t


def _lines(caplog) -> list[str]:
  return [r.getMessage() for r in caplog.records if r.name == "jaxlab.progress"]


def test_log_mode_logs_at_start_every_interval_and_at_the_end(caplog):
  caplog.set_level(logging.INFO, logger="jaxlab.progress")
  clock = FakeClock()
  with progress_lib.Progress(100, desc="train", mode="log", clock=clock, log_every_s=30.0) as p:
    for step in range(100):
      clock.t += 1.0  # one second per step
      p.set_postfix(loss=5.0 - step / 50)
      p.update()
  lines = _lines(caplog)
  assert lines[0] == "train: 0/100 steps (0%), 0 s elapsed"
  assert lines[1] == "train: 30/100 steps (30%), loss 4.42, 30 s elapsed, ETA 1 min 10 s"
  assert lines[-1] == "train: 100/100 steps (100%), loss 3.02, 1 min 40 s elapsed"
  assert len(lines) == 5  # 0, 30, 60, 90, 100: periodic, not one per step


def test_progress_mode_follows_the_terminal_the_kernel_and_the_override(monkeypatch):
  monkeypatch.delenv("JAXLAB_PROGRESS", raising=False)
  monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal
  monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
  assert progress_lib.progress_mode() == "log"
  monkeypatch.setitem(sys.modules, "ipykernel", object())  # a notebook kernel: someone watches
  assert progress_lib.progress_mode() == "bar"
  monkeypatch.setenv("JAXLAB_PROGRESS", "off")
  assert progress_lib.progress_mode() == "off"
  monkeypatch.setenv("JAXLAB_PROGRESS", "loud")
  with pytest.raises(ValueError, match="JAXLAB_PROGRESS"):
    progress_lib.progress_mode()


def test_a_sweep_shows_arm_i_of_n_elapsed_and_eta(tmp_path, caplog, monkeypatch):
  caplog.set_level(logging.INFO, logger="jaxlab.progress")
  monkeypatch.setenv("JAXLAB_PROGRESS", "log")
  clock = FakeClock()
  monkeypatch.setattr(progress_lib.time, "monotonic", clock)
  monkeypatch.setattr(train.arm_cache.time, "perf_counter", clock)
  train.ArmCache(str(tmp_path)).store("a0", "k", 0)  # one arm finished by an earlier run

  def arm(i):
    clock.t += 40.0  # each arm takes 40 s: every arm is a log line
    return i

  cache = train.ArmCache(str(tmp_path), total=4)
  for i in range(4):
    assert cache.get_or_run(f"a{i}", "k", lambda i=i: arm(i)) == i
  assert _lines(caplog) == [
      "arms: 0/4 arms (0%), 0 s elapsed",
      "arms: 2/4 arms (50%), last a1 (40.0 s), 40 s elapsed, ETA 1 min 20 s",
      "arms: 3/4 arms (75%), last a2 (40.0 s), 1 min 20 s elapsed, ETA 40 s",
      "arms: 4/4 arms (100%), last a3 (40.0 s), 2 min 00 s elapsed"]
  assert cache.computed == ["a1", "a2", "a3"]


def test_a_sweep_without_a_declared_total_counts_its_arms(tmp_path, caplog, monkeypatch):
  caplog.set_level(logging.INFO, logger="jaxlab.progress")
  clock = FakeClock()
  monkeypatch.setattr(progress_lib.time, "monotonic", clock)
  monkeypatch.setattr(train.arm_cache.time, "perf_counter", clock)
  cache = train.ArmCache(str(tmp_path), progress_mode="log")
  for i in range(3):
    cache.get_or_run(f"a{i}", "k", lambda: clock.__setattr__("t", clock.t + 31.0))
  cache.close()
  assert _lines(caplog)[1:] == [f"arms: {i} arms, last a{i - 1} (31.0 s), {31 * i} s elapsed"
                                if i == 1 else
                                f"arms: {i} arms, last a{i - 1} (31.0 s), 1 min "
                                f"{31 * i - 60:02d} s elapsed" for i in (1, 2, 3)]


def _toy_run(workdir, num_steps):
  tx = optax.sgd(0.1)
  state = train.create_train_state({"w": jnp.ones(3)}, tx, seed=0)

  @jax.jit
  def step(state, batch):
    loss, g = jax.value_and_grad(lambda w: jnp.sum((w["w"] - batch) ** 2))(state.params)
    updates, opt_state = tx.update(g, state.opt_state, state.params)
    return state._replace(step=state.step + 1, params=optax.apply_updates(state.params, updates),
                          opt_state=opt_state), {"loss": loss}

  return train.train_loop(state, step, lambda i: jnp.zeros(3), num_steps=num_steps,
                          workdir=workdir, checkpoint_every=num_steps, log_every=2, desc="toy")


def test_train_loop_bar_shows_the_logged_loss_and_stays(tmp_path, monkeypatch):
  monkeypatch.setenv("JAXLAB_PROGRESS", "bar")
  monkeypatch.delenv("TQDM_DISABLE", raising=False)
  err = io.StringIO()
  monkeypatch.setattr(sys, "stderr", err)
  _toy_run(str(tmp_path), 4)
  frames = [f for f in err.getvalue().split("\r") if f.strip()]
  # The loss of step 4 (log step): 3 * (0.8 ** 3) ** 2 = 0.786; the bar stays (ends in a newline).
  assert frames[-1].startswith("toy: 100%") and "4/4" in frames[-1]
  assert "loss=0.7864" in frames[-1] and frames[-1].endswith("\n")


def test_train_loop_logs_progress_with_the_loss_off_a_terminal(tmp_path, caplog, monkeypatch):
  caplog.set_level(logging.INFO, logger="jaxlab.progress")
  monkeypatch.setenv("JAXLAB_PROGRESS", "log")
  _toy_run(str(tmp_path), 4)
  lines = _lines(caplog)
  assert lines[0].startswith("toy: 0/4 steps (0%)")
  assert lines[-1].startswith("toy: 4/4 steps (100%), loss 0.7864, ")
