"""Test-wide setup: CPU, absl flags parsed, runtime shape checking.

Public jaxlab functions carry jaxtyping annotations; here they are checked at
call time (jaxtyping import hook + beartype) for every module imported by the
tests (but the serving simulator's per-step code, see `UNCHECKED`), so a wrong
shape in a test fails loudly instead of broadcasting.
"""

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One OpenBLAS thread, as the launch scripts set it (see launch/__init__.py): the variable
# reaches SciPy's OpenBLAS (jaxlib's CPU LAPACK) and the pytest-xdist workers; NumPy's,
# loaded by the pytest plugins before this file, is limited through threadpoolctl.
if "OPENBLAS_NUM_THREADS" not in os.environ:
  os.environ["OPENBLAS_NUM_THREADS"] = "1"
  from threadpoolctl import threadpool_limits
  threadpool_limits(1, user_api="blas")

from jaxtyping import install_import_hook  # noqa: E402

# Repository root on sys.path, so tests import `launch` and read `configs/`.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The serving simulator's per-step code: no array annotations, and ~10^5 calls of its
# methods per simulated run, where beartype's per-call checks made the ebplus smoke test
# ~4x slower (43 s vs 10 s).
UNCHECKED = {"jaxlab.serving.cost", "jaxlab.serving.schedulers", "jaxlab.serving.simulator"}


def _checked_modules() -> list[str]:
  """Every module under jaxlab/ and pallas_kernels/ but `UNCHECKED` (names read from disk).

  The hook also instruments the submodules of a listed package, so the packages above an
  unchecked module (jaxlab and jaxlab.serving, whose __init__ only re-export) stay off the
  list; their other subpackages and modules are on it.
  """
  names = []
  for package in ("jaxlab", "pallas_kernels"):
    for folder, _, files in os.walk(os.path.join(ROOT, package)):
      prefix = os.path.relpath(folder, ROOT).replace(os.sep, ".")
      names += [prefix if f == "__init__.py" else f"{prefix}.{f[:-3]}"
                for f in files if f.endswith(".py")]
  ancestors = {u.rsplit(".", k)[0] for u in UNCHECKED for k in range(1, u.count(".") + 1)}
  return sorted(n for n in names if n not in UNCHECKED and n not in ancestors)


# Installed for the whole session (the context manager is never exited).
install_import_hook(_checked_modules(), "beartype.beartype")

import jax  # noqa: E402
from absl import flags  # noqa: E402

jax.config.update("jax_enable_x64", False)

# absl flags must be parsed before any FLAGS access (launch tests, configs).
if not flags.FLAGS.is_parsed():
  flags.FLAGS(sys.argv[:1])

if ROOT not in sys.path:
  sys.path.insert(0, ROOT)
