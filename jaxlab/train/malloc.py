"""glibc's malloc keeps the memory XLA:CPU frees, so the next call reuses it.

XLA:CPU allocates an executable's temporaries as one block per call (hundreds of MiB for
a small LM's training step) and frees it when the call ends. glibc serves a block that
large with mmap and gives it back with munmap, so every step page-faults all of it in
again, 4 KiB at a time: for a small model that can be half the step's time. `reuse_freed_memory` sets
three malloc options (mallopt) before XLA starts its threads:

  * one arena: XLA's worker threads allocate from the main heap, which grows with brk
    (a thread arena's heaps are 64 MiB at most, too small for the block);
  * no mmap for large blocks, so the block comes from that heap;
  * no trimming of the heap's top, so a freed block stays mapped for the next call.

Steps then take no page faults once the heap has grown to hold them (it may grow a few
more times while freed and new blocks settle). The costs: the process keeps its peak heap
until it exits, and every thread allocates from the one arena under its lock. That lock
is what a process which compiles while it trains pays for: LLVM allocates at a high rate
and contends with XLA's threads (eco's quick preset, which compiles its next programs on a
worker thread while an arm trains, took 211-214 s with one arena and 140-156 s without;
see the README).

So it suits a process that runs one large step over and over: `launch.bench` applies it
(`use_for_launch("reuse")`), `launch.main` and `launch.reproduce` only when
JAXLAB_MALLOC=reuse (`use_for_launch("default")`). It does nothing off glibc, when
`GLIBC_TUNABLES` sets a `glibc.malloc.` option (the user chose malloc's behaviour) or
when JAXLAB_MALLOC=default. Huge pages (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`, which
`make test` and `make demo` set) take most of the faults away without the shared arena.
"""

import ctypes
import os
import platform

# mallopt parameters, from glibc's <malloc.h>.
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
M_ARENA_MAX = -8

# (parameter, value) in the order they are set; -1 turns trimming off (mallopt(3)).
OPTIONS = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1))

# What the last `reuse_freed_memory` or `use_for_launch` call did (None: neither was
# called); `launch.bench` writes it into each benchmark's results.
applied: bool | None = None


def _choice(value: str) -> str:
  if value not in ("reuse", "default"):
    raise ValueError(f"JAXLAB_MALLOC={value!r}: use 'reuse' (this policy) or 'default' "
                     "(glibc's own malloc behaviour)")
  return value


def reuse_freed_memory() -> bool:
  """Sets `OPTIONS` with glibc's mallopt; True when all were set.

  False (nothing set) off glibc, with JAXLAB_MALLOC=default, or when GLIBC_TUNABLES
  already sets a `glibc.malloc.` option. JAXLAB_MALLOC may be unset, "reuse" (the
  default) or "default"; another value raises ValueError. Call it before XLA starts
  its threads (before the first computation): an arena a thread already holds stays
  its own.

  Example (first thing in a script's main, before its first computation):
    >>> from jaxlab import train
    >>> train.reuse_freed_memory()  # doctest: +SKIP
    True
  """
  global applied
  applied = False
  choice = _choice(os.environ.get("JAXLAB_MALLOC", "reuse"))
  if platform.libc_ver()[0] != "glibc" or choice == "default":
    return False
  if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
    return False
  mallopt = ctypes.CDLL(None).mallopt
  mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
  applied = all([mallopt(param, value) == 1 for param, value in OPTIONS])
  return applied


def use_for_launch(default: str) -> bool:
  """A launch script's choice: `reuse_freed_memory()` when JAXLAB_MALLOC says "reuse", or
  is unset and `default` is "reuse"; otherwise glibc's own behaviour.

  Call it first thing in main, before the first computation. Returns `applied`.
  """
  global applied
  if _choice(os.environ.get("JAXLAB_MALLOC", default)) == "reuse":
    return reuse_freed_memory()
  applied = False
  return False
