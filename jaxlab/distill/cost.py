"""The time of a span-coupled distillation loss against a dense (Sinkhorn) coupling.

E-SCOT's span constraint makes the coupling sparse: each token pairs only with the
tokens of its synchronisation span, so the loss grows about linearly in the sequence
length, where a dense coupling of all token pairs grows quadratically
(`bench_coupling` measures both and fits their growth exponents).

Example:
  >>> out = bench_coupling((4, 8), repeats=1, epsilon=0.1, num_iters=2)
  >>> sorted(out)
  ['dense', 'dense_exponent', 'lengths', 'sparse', 'sparse_exponent']
"""

import functools
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.distill import losses, tokenize
from jaxlab.distill import spans as spans_lib


def bench_coupling(lengths: Sequence[int], *, repeats: int, epsilon: float, num_iters: int,
                   seed: int = 0) -> dict:
  """Seconds per call of the sparse span-coupled loss and of a dense Sinkhorn-coupled loss.

  Teacher n tokens and student 2n tokens over 4n characters (random partitions), with
  next-character distributions over 128 characters; both losses are jitted and timed
  after one warm-up call, and each time is the least-disturbed call (the minimum over
  `repeats`, timeit's rule).

  Args:
    lengths: the teacher lengths n (at least two, each >= 2).
    repeats: timed calls per length.
    epsilon, num_iters: the dense coupling's Sinkhorn regularisation and iterations.
    seed: the random partitions' and distributions' seed.

  Returns:
    {"lengths", "sparse", "dense": seconds per length, "sparse_exponent",
    "dense_exponent": the log-log slope over the upper half of the lengths (>= 2
    points), where the fixed per-call overhead no longer dominates}.

  Raises:
    ValueError: fewer than two lengths, or a length below 2.

  Example:
    >>> out = bench_coupling((4, 8), repeats=1, epsilon=0.1, num_iters=2)
    >>> out["lengths"], len(out["sparse"]), len(out["dense"])
    ([4, 8], 2, 2)
  """
  if len(lengths) < 2 or min(lengths) < 2:
    raise ValueError(f"bench lengths must be >= 2 values >= 2, got {tuple(lengths)}")
  rng = np.random.default_rng(seed)
  chars = tokenize.NUM_CHARS
  out = dict(lengths=list(lengths), sparse=[], dense=[])
  for n in lengths:
    m, length = 2 * n, 4 * n

    def partition(k, length=length):
      cuts = np.sort(rng.choice(np.arange(1, length), k - 1, replace=False))
      ends = np.concatenate([cuts, [length]])
      return np.stack([np.concatenate([[0], cuts]), ends], 1)
    off_t, off_s = partition(n), partition(m)
    sp = spans_lib.spans_from_offsets(off_t, off_s)
    c = spans_lib.overlap_coupling(off_t, off_s, sp)
    probs = lambda k: rng.dirichlet(np.full(chars, 0.3), k).astype(np.float32)
    char_t, char_s = jnp.asarray(probs(n)), jnp.asarray(probs(m))
    ent_t = losses.renyi_entropy(char_t, 2.0)
    sparse = jax.jit(functools.partial(losses.escot_loss, num_spans=sp.num_spans,
                                       rank_weight=0.0))
    sparse_args = (char_t, jnp.zeros((n, 1)), ent_t, jnp.asarray(sp.teacher),
                   jnp.log(jnp.maximum(char_s, 1e-9)), jnp.eye(chars), jnp.asarray(sp.student),
                   jnp.asarray(c.teacher), jnp.asarray(c.student), jnp.asarray(c.span),
                   jnp.asarray(c.mass, jnp.float32))
    dense = jax.jit(functools.partial(losses.dense_ot_loss, epsilon=epsilon,
                                      num_iters=num_iters))
    for name, fn, args in (("sparse", sparse, sparse_args), ("dense", dense, (char_t, char_s))):
      jax.block_until_ready(fn(*args))
      times = []
      for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
      out[name].append(float(np.min(times)))
  upper = slice(min(len(lengths) // 2, len(lengths) - 2), None)
  for name in ("sparse", "dense"):
    out[f"{name}_exponent"] = float(np.polyfit(np.log(lengths)[upper],
                                               np.log(out[name])[upper], 1)[0])
  return out


def cost_line(bench: dict) -> str:
  """One sentence on `bench_coupling`'s result: both growth exponents, the largest n's times.

  Example:
    >>> cost_line(dict(lengths=[8, 16], sparse=[1e-4, 2e-4], dense=[1e-4, 4e-4],
    ...                sparse_exponent=1.0, dense_exponent=2.0))[-28:]
    'at n=16: 0.20 ms vs 0.40 ms.'
  """
  return (f"Coupling cost (n = {bench['lengths']} teacher tokens): sparse span coupling grows as "
          f"n^{bench['sparse_exponent']:.2f}, dense Sinkhorn coupling as "
          f"n^{bench['dense_exponent']:.2f}; at n={bench['lengths'][-1]}: "
          f"{1e3 * bench['sparse'][-1]:.2f} ms vs {1e3 * bench['dense'][-1]:.2f} ms.")


def draw_cost(ax, bench: dict) -> None:
  """Log-log seconds per loss call against n, sparse and dense (`bench_coupling`'s result).

  Example:
    >>> import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
    >>> draw_cost(plt.figure().gca(), dict(lengths=[8, 16], sparse=[1e-4, 2e-4],
    ...           dense=[1e-4, 4e-4], sparse_exponent=1.0, dense_exponent=2.0))
  """
  for name in ("sparse", "dense"):
    ax.loglog(np.asarray(bench["lengths"]), bench[name], "o-",
              label=f"{name} (slope {bench[name + '_exponent']:.2f})")
  ax.set_xlabel("teacher tokens n (student 2n)")
  ax.set_ylabel("seconds per loss call")
  ax.set_title("Span-sparse vs dense (Sinkhorn) coupling")
  ax.legend(fontsize=7)
