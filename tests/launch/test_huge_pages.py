"""The README's malloc tunable: XLA:CPU's temporaries on transparent huge pages.

Checked in fresh processes: a jitted function whose temporaries (128 MiB, one block that
glibc maps and unmaps on every call) page-faults ~32k times per call with 4 KiB pages,
and under a tenth of that with `glibc.malloc.hugetlb=1`.
"""

import json
import os
import pathlib
import platform
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
_THP = pathlib.Path("/sys/kernel/mm/transparent_hugepage/enabled")

_PROBE = """
import json, resource
import jax, jax.numpy as jnp
f = jax.jit(lambda x: jnp.sum(jnp.sin(jnp.outer(x, x)) * jnp.cos(jnp.outer(x, x))))
x = jnp.linspace(0.0, 1.0, 4096)
faults = []
for _ in range(5):
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  f(x).block_until_ready()
  faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps(faults[2:]))
"""


TUNABLES = "glibc.malloc.hugetlb=1"  # as the README gives it


def _faults_per_call(tunables: str | None) -> list[int]:
  env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
  if tunables:
    env["GLIBC_TUNABLES"] = tunables
  out = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, env=env, check=True,
                       capture_output=True, text=True).stdout
  return json.loads(out.strip().splitlines()[-1])


def _tunable_matters() -> bool:
  """glibc >= 2.35 and THP on request ("madvise"): with "always" every large block gets
  huge pages anyway, with "never" none does."""
  libc, version = platform.libc_ver()
  return (libc == "glibc" and tuple(map(int, version.split(".")[:2])) >= (2, 35)
          and _THP.exists() and "[madvise]" in _THP.read_text())


@pytest.mark.skipif(not _tunable_matters(),
                    reason="needs glibc >= 2.35 and transparent huge pages on madvise")
def test_huge_pages_remove_most_page_faults_of_xla_temporaries():
  plain = _faults_per_call(None)
  huge = _faults_per_call(TUNABLES)
  assert min(plain) > 16_000, plain
  assert max(huge) * 10 < min(plain), (huge, plain)
