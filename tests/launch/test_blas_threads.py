"""The launch package's thread policy: OpenBLAS gets one thread unless the user set it."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Imports the launch package first, as `python -m launch.<entry>` does, then the BLAS users.
_PROBE = ("import launch, numpy, scipy.linalg, threadpoolctl, json; print(json.dumps(sorted("
          "{i['num_threads'] for i in threadpoolctl.threadpool_info() "
          "if i['internal_api'] == 'openblas'})))")


def _openblas_threads(**env_vars: str) -> list[int]:
  env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
  env.update(env_vars)
  out = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, env=env, check=True,
                       capture_output=True, text=True).stdout
  return json.loads(out)


def test_launch_gives_openblas_one_thread_and_keeps_a_users_setting():
  threads = _openblas_threads()
  if not threads:
    pytest.skip("NumPy/SciPy do not use OpenBLAS here")
  assert threads == [1]
  assert _openblas_threads(OPENBLAS_NUM_THREADS="2") == [2]
