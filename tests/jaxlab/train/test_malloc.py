"""malloc and XLA:CPU's temporaries: `jaxlab.train.reuse_freed_memory` (launch.bench's
policy, an opt-in for the other launch scripts) and the huge-page tunable `make test` and
`make demo` set.

Checked in fresh processes on a jitted gradient with a 64 MiB temporary: ~16.4k faults of
4 KiB on every call with glibc's default behaviour (jax 0.10.2 and 0.12.0.1); none on most
calls with the policy (the heap still grows now and then while freed blocks and new ones
settle, a call that faults the growth once: hence the median call); a few dozen huge-page
faults per call with `glibc.malloc.hugetlb=1`.
"""

import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys

import pytest

from jaxlab.train import malloc

ROOT = pathlib.Path(__file__).resolve().parents[3]
_THP = pathlib.Path("/sys/kernel/mm/transparent_hugepage/enabled")
HUGE_PAGES = "glibc.malloc.hugetlb=1"  # as the README and the Makefile give it

_PROBE = """
import json, resource
from jaxlab.train import malloc
malloc.reuse_freed_memory()  # first thing, as launch.bench's main() does
import jax, jax.numpy as jnp
f = jax.jit(jax.grad(lambda v: jnp.sum(jnp.tanh(jnp.outer(v, v)) ** 2)))
x = jnp.linspace(0.0, 1.0, 4096)
faults = []
for _ in range(20):
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  f(x).block_until_ready()
  faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"applied": malloc.applied, "faults": faults[4:]}))
"""


def _probe(**env_vars: str) -> dict:
  env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "JAXLAB_MALLOC")}
  env.update(env_vars)
  out = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, env=env, check=True,
                       capture_output=True, text=True).stdout
  return json.loads(out.strip().splitlines()[-1])


def _huge_pages_matter() -> bool:
  """glibc >= 2.35 and THP on request ("madvise"): with "always" every large block gets
  huge pages anyway, with "never" none does."""
  libc, version = platform.libc_ver()
  return (libc == "glibc" and tuple(map(int, version.split(".")[:2])) >= (2, 35)
          and _THP.exists() and "[madvise]" in _THP.read_text())


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_the_policy_keeps_freed_memory_so_temporaries_take_no_page_faults():
  tuned = _probe()
  assert tuned["applied"] is True and statistics.median(tuned["faults"]) < 1_000, tuned
  default = _probe(JAXLAB_MALLOC="default")  # the probe does see the faults without it
  assert default["applied"] is False and statistics.median(default["faults"]) > 10_000, default


@pytest.mark.skipif(not _huge_pages_matter(),
                    reason="needs glibc >= 2.35 and transparent huge pages on madvise")
def test_with_the_huge_page_tunable_temporaries_take_few_page_faults():
  res = _probe(GLIBC_TUNABLES=HUGE_PAGES)  # a user's malloc option: the policy stays off
  assert res["applied"] is False and max(res["faults"]) < 1_000, res


def test_a_users_malloc_settings_are_kept(monkeypatch):
  monkeypatch.setattr(malloc, "applied", malloc.applied)  # restored afterwards
  monkeypatch.delenv("JAXLAB_MALLOC", raising=False)
  monkeypatch.setenv("GLIBC_TUNABLES", HUGE_PAGES)
  assert malloc.reuse_freed_memory() is False and malloc.applied is False
  monkeypatch.setenv("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=2048")
  monkeypatch.setenv("JAXLAB_MALLOC", "default")
  assert malloc.reuse_freed_memory() is False
  monkeypatch.setenv("JAXLAB_MALLOC", "off")
  with pytest.raises(ValueError, match="JAXLAB_MALLOC='off'"):
    malloc.reuse_freed_memory()
  monkeypatch.setenv("JAXLAB_MALLOC", "reuse")
  monkeypatch.setattr(platform, "libc_ver", lambda: ("", ""))
  assert malloc.reuse_freed_memory() is False


def test_launch_scripts_choose_the_policy_from_the_environment(monkeypatch):
  monkeypatch.setattr(malloc, "applied", malloc.applied)  # restored afterwards
  calls = []
  monkeypatch.setattr(malloc, "reuse_freed_memory", lambda: calls.append(1) or True)
  monkeypatch.delenv("JAXLAB_MALLOC", raising=False)
  # launch.main / launch.reproduce: glibc's own malloc unless JAXLAB_MALLOC=reuse.
  assert malloc.use_for_launch("default") is False and malloc.applied is False and not calls
  assert malloc.use_for_launch("reuse") is True and calls == [1]  # launch.bench
  monkeypatch.setenv("JAXLAB_MALLOC", "reuse")
  assert malloc.use_for_launch("default") is True and calls == [1, 1]
  monkeypatch.setenv("JAXLAB_MALLOC", "default")
  assert malloc.use_for_launch("reuse") is False and calls == [1, 1]
  monkeypatch.setenv("JAXLAB_MALLOC", "on")
  with pytest.raises(ValueError, match="JAXLAB_MALLOC='on'"):
    malloc.use_for_launch("default")


def _recipe(target: str) -> str:
  return subprocess.run(["make", "-n", target], cwd=ROOT, check=True, capture_output=True,
                        text=True).stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_recipes_set_huge_pages_for_test_and_demo_not_bench():
  for target in ("test", "demo"):
    assert f"GLIBC_TUNABLES=${{GLIBC_TUNABLES:-{HUGE_PAGES}}}" in _recipe(target), target
  # A GLIBC_TUNABLES malloc option here would switch launch.bench's policy off.
  assert "GLIBC_TUNABLES" not in _recipe("bench")
