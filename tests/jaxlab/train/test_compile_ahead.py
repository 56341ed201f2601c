"""CompileAhead: the program the jitted function would compile, compiled on a worker thread."""

import concurrent.futures
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.train import CompileAhead


def _step(w, x):
  return jnp.tanh(w @ x) * 0.37 + jnp.sin(w).sum()


def test_same_bits_as_the_jitted_function():
  w = jax.random.normal(jax.random.key(0), (16, 16))
  x = jax.random.normal(jax.random.key(1), (16, 8))
  fn = jax.jit(_step)
  with CompileAhead() as ahead:
    fast = ahead.submit(fn, jax.ShapeDtypeStruct(w.shape, w.dtype), x)
    got = fast(w, x)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(fn(w, x)))
  assert isinstance(fast.compiled(), jax.stages.Compiled)


def test_programs_compile_in_submission_order_off_the_calling_thread():
  order = []

  def traced(tag):
    def f(x):
      order.append((tag, threading.current_thread().name))  # runs while tracing
      return x + 1
    return jax.jit(f)

  spec = jax.ShapeDtypeStruct((3,), jnp.float32)
  with CompileAhead() as ahead:
    progs = [ahead.submit(traced(k), spec) for k in range(3)]
    [p.compiled() for p in progs]
  assert [tag for tag, _ in order] == [0, 1, 2]
  assert all(name.startswith("jaxlab-compile-ahead") for _, name in order)


def test_arguments_of_another_shape_are_refused_not_recompiled():
  with CompileAhead() as ahead:
    fast = ahead.submit(jax.jit(lambda x: x * 2), jax.ShapeDtypeStruct((4,), jnp.float32))
    with pytest.raises(TypeError):
      fast(jnp.ones(5))


def test_a_compile_error_is_raised_by_the_call():
  def bad(x):
    return x @ jnp.ones((3, 3))  # (4,) @ (3, 3): a shape error at trace time

  with CompileAhead() as ahead:
    fast = ahead.submit(jax.jit(bad), jax.ShapeDtypeStruct((4,), jnp.float32))
    with pytest.raises(TypeError, match="dot_general"):
      fast(jnp.ones(4))


def test_close_cancels_programs_not_yet_started():
  release = threading.Event()

  def blocking(x):
    release.wait(timeout=60)  # holds the worker while tracing
    return x

  spec = jax.ShapeDtypeStruct((2,), jnp.float32)
  ahead = CompileAhead()
  first = ahead.submit(jax.jit(blocking), spec)
  queued = ahead.submit(jax.jit(lambda x: x + 1), spec)
  ahead.close()
  release.set()
  np.testing.assert_array_equal(np.asarray(first(jnp.ones(2))), np.ones(2))
  with pytest.raises(concurrent.futures.CancelledError):
    queued(jnp.ones(2))


def test_needs_a_jitted_function():
  with CompileAhead() as ahead, pytest.raises(ValueError, match="jax.jit function"):
    ahead.submit(lambda x: x, jnp.ones(2))
