"""Test-wide setup: CPU, absl flags parsed, runtime shape checking.

Public jaxlab functions carry jaxtyping annotations; here they are checked at
call time (jaxtyping import hook + beartype) for every module imported by the
tests, so a wrong shape in a test fails loudly instead of broadcasting.
"""

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from jaxtyping import install_import_hook  # noqa: E402

# Installed for the whole session (the context manager is never exited).
install_import_hook(["jaxlab", "pallas_kernels"], "beartype.beartype")

import jax  # noqa: E402
from absl import flags  # noqa: E402

jax.config.update("jax_enable_x64", False)

# absl flags must be parsed before any FLAGS access (launch tests, configs).
if not flags.FLAGS.is_parsed():
  flags.FLAGS(sys.argv[:1])

# Repository root on sys.path, so tests import `launch` and read `configs/`.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)
