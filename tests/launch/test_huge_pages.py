"""The README's malloc tunable (`make demo` and `make test` set it): XLA:CPU's temporaries on
transparent huge pages.

Checked in a fresh process: a jitted function whose temporaries (128 MiB, one block on
jax 0.10.2) takes under 1000 page faults per call with `glibc.malloc.hugetlb=1`; without
it, ~32.8k faults of 4 KiB per call on jax 0.10.2 (jax 0.12.0.1 fuses this function
without the block: 64-132 faults either way, while issue 18's training step still faults
174k times per step there without the tunable).
"""

import json
import os
import pathlib
import platform
import shutil
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


TUNABLES = "glibc.malloc.hugetlb=1"  # as the README and the Makefile give it


def _faults_per_call(tunables: str) -> list[int]:
  env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
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
def test_with_the_tunable_xla_temporaries_take_few_page_faults():
  faults = _faults_per_call(TUNABLES)
  assert max(faults) < 1_000, faults


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("target", ["demo", "test"])
def test_make_sets_the_tunable_unless_one_is_set(target):
  recipe = subprocess.run(["make", "-n", target], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout
  assert f"GLIBC_TUNABLES=${{GLIBC_TUNABLES:-{TUNABLES}}}" in recipe, recipe
