"""`TimingEvaluator`: real medians of XLA-level blocked equivalents of a kernel config.

Pallas interpret mode times nothing meaningful, so on CPU a config is timed as
the same tiling written in jnp and compiled by XLA: matmul as a
[m/tm, tm, k/tk, tk] x [k/tk, tk, n/tn, tn] blocked contraction (summing the
k chunks in grid order), rmsnorm as [m/tm, tm, d] row blocks. Correctness is
`allclose` to the op's jnp reference. h and phi are estimated from the measured
time with nominal CPU peaks (jaxlab interpretation: no hardware counters here).
"""

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.autotune import space
from jaxlab.autotune.cost_model import Measurement
from pallas_kernels.tuning import KernelConfig

TIMED_OPS = ("matmul", "rmsnorm")
_CPU_FLOPS, _CPU_BW, _CPU_CACHE = 5e10, 2e10, 2**20


def _blocked_matmul(x, w, *, tm, tn, tk, n_inner):
  m, k = x.shape
  n = w.shape[1]
  xb = x.reshape(m // tm, tm, k // tk, tk)
  wb = w.reshape(k // tk, tk, n // tn, tn)
  spec = "iakc,kcjb->iajb" if n_inner else "iakc,kcjb->jbia"
  out = jnp.einsum(spec, xb, wb, preferred_element_type=jnp.float32)
  if not n_inner:
    out = out.transpose(2, 3, 0, 1)
  return out.reshape(m, n)


def _blocked_rmsnorm(x, g, *, tm):
  m, d = x.shape
  xb = x.reshape(m // tm, tm, d).astype(jnp.float32)
  y = xb * jax.lax.rsqrt(jnp.mean(xb * xb, -1, keepdims=True) + 1e-6) * g
  return y.reshape(m, d)


class TimingEvaluator:
  """Median wall time over `repeats` runs after one warm-up (and compile).

  Args:
    repeats: timed runs per candidate.
    rtol, atol: the allclose tolerance of the correctness check.
  """

  def __init__(self, repeats: int = 5, rtol: float = 2e-2, atol: float = 2e-2):
    if repeats < 1:
      raise ValueError(f"repeats must be >= 1, got {repeats}")
    self.repeats, self.rtol, self.atol = int(repeats), rtol, atol
    self._data = {}

  def device_kind(self, task: space.Task) -> str:
    return "cpu"

  def _inputs(self, task):
    if task.name not in self._data:
      if task.op not in TIMED_OPS:
        raise ValueError(f"TimingEvaluator times {TIMED_OPS}, not {task.op!r}")
      k1, k2 = jax.random.split(jax.random.key(0))
      dt = jnp.dtype(task.dtype)
      d = task.dims
      if task.op == "matmul":
        x = jax.random.normal(k1, (d["m"], d["k"]), dt)
        w = jax.random.normal(k2, (d["k"], d["n"]), dt) / np.sqrt(d["k"])
        ref = jnp.dot(x, w, preferred_element_type=jnp.float32)
      else:
        x = jax.random.normal(k1, (d["m"], d["d"]), dt)
        w = 1.0 + 0.1 * jax.random.normal(k2, (d["d"],), jnp.float32)
        xf = x.astype(jnp.float32)
        ref = xf * jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + 1e-6) * w
      self._data[task.name] = (x, w, np.asarray(ref))
    return self._data[task.name]

  def evaluate(self, task: space.Task, config: KernelConfig,
               rng: np.random.Generator) -> Measurement:
    del rng  # real timings carry their own noise
    x, w, ref = self._inputs(task)
    d = task.dims
    s = space.DTYPE_BYTES[task.dtype]
    if task.op == "matmul":
      tm, tn, tk = config.block_m, config.block_n, config.block_k
      if d["m"] % tm or d["n"] % tn or d["k"] % tk:
        return Measurement(False, float("inf"), np.zeros(3), np.zeros(5),
                           "blocks must divide the shape")
      fn = jax.jit(functools.partial(_blocked_matmul, tm=tm, tn=tn, tk=tk,
                                     n_inner=config.grid_order == "mn"))
      flops, bytes_ = 2.0 * d["m"] * d["k"] * d["n"], s * (d["m"] * d["k"] + d["k"] * d["n"])
      footprint = s * (tm * tk + tk * tn) + 4 * tm * tn
    else:
      tm = config.block_m
      if d["m"] % tm:
        return Measurement(False, float("inf"), np.zeros(3), np.zeros(5),
                           "block_m must divide m")
      fn = jax.jit(functools.partial(_blocked_rmsnorm, tm=tm))
      flops, bytes_ = 4.0 * d["m"] * d["d"], 2.0 * s * d["m"] * d["d"]
      footprint = (s + 4) * tm * d["d"]
    out = np.asarray(jax.block_until_ready(fn(x, w)))  # warm-up and compile
    if not np.allclose(out, ref, rtol=self.rtol, atol=self.atol):
      return Measurement(False, float("inf"), np.zeros(3), np.zeros(5), "wrong result")
    times = []
    for _ in range(self.repeats):
      t0 = time.perf_counter()
      jax.block_until_ready(fn(x, w))
      times.append(time.perf_counter() - t0)
    t = float(np.median(times))
    h = np.minimum(100.0, 100 * np.array([flops / (t * _CPU_FLOPS), bytes_ / (t * _CPU_BW),
                                          footprint / _CPU_CACHE]))
    phi = np.array([np.log1p(t * 1e3), tm * config.block_n / 1024.0, footprint / 1024.0,
                    np.log2(config.num_warps * 32.0), 100.0])
    return Measurement(True, t, h, phi)
