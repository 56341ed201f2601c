"""Compiling a study's jitted programs on a worker thread while earlier arms run.

A sweep that trains several arms, each with its own jitted step, spends much of a
2-core CPU run compiling: XLA compiles a program, mostly on one core, then runs it.
`CompileAhead` lowers and compiles the programs one after another on one worker
thread, in the order they were submitted, so that the next arm's program compiles
while the current arm trains. Each program is the executable the jitted
function would compile on its first call (`fn.lower(*args).compile()`, the same
program and options), so results are unchanged; what changes is only when it is
compiled.

A submitted program is called like the function; the first call waits for its
compilation and raises what it raised. Like any AOT-compiled executable it accepts
only arguments of the shapes, dtypes and pytree structure it was compiled for (a
mismatch is a TypeError, never a silent recompile).

Example:
  >>> import jax, jax.numpy as jnp
  >>> step = jax.jit(lambda w, x: w - 0.1 * x)
  >>> with CompileAhead() as ahead:
  ...   fast = ahead.submit(step, jax.ShapeDtypeStruct((4,), jnp.float32),
  ...                       jax.ShapeDtypeStruct((4,), jnp.float32))
  ...   # ... run something else here while it compiles ...
  ...   fast(jnp.ones(4), jnp.ones(4)).tolist()
  [0.8999999761581421, 0.8999999761581421, 0.8999999761581421, 0.8999999761581421]
"""

import concurrent.futures
from collections.abc import Callable
from typing import Any


class AheadCompiled:
  """A program submitted to `CompileAhead`: call it like the jitted function."""

  def __init__(self, future: "concurrent.futures.Future[Any]"):
    self._future = future

  def compiled(self) -> Any:
    """The `jax.stages.Compiled` executable (waits for it; re-raises a compile error)."""
    return self._future.result()

  def __call__(self, *args: Any) -> Any:
    return self.compiled()(*args)


class CompileAhead:
  """Compiles jitted functions on one worker thread, in submission order.

  Use it as a context manager: leaving the block (normally or by an exception)
  cancels the programs not yet started, so a failed run does not compile on.
  """

  def __init__(self):
    self._pool = concurrent.futures.ThreadPoolExecutor(
        max_workers=1, thread_name_prefix="jaxlab-compile-ahead")

  def submit(self, fn: Callable[..., Any], *args: Any) -> AheadCompiled:
    """Queues `fn.lower(*args).compile()`; `fn` is a `jax.jit` function.

    Args:
      fn: the jitted function.
      *args: example arguments: arrays or `jax.ShapeDtypeStruct` pytrees of the
        shapes the program will be called with (e.g. from `jax.eval_shape`).

    Returns:
      A callable that runs the compiled program (its first call waits for it).
    """
    if not hasattr(fn, "lower"):
      raise ValueError(f"CompileAhead.submit needs a jax.jit function, got {fn!r}")
    return AheadCompiled(self._pool.submit(lambda: fn.lower(*args).compile()))

  def close(self) -> None:
    """Cancels the programs not yet started; the one compiling finishes in the background."""
    self._pool.shutdown(wait=False, cancel_futures=True)

  def __enter__(self) -> "CompileAhead":
    return self

  def __exit__(self, *exc: Any) -> None:
    self.close()
