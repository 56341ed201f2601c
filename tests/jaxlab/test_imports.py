"""`import jaxlab` stays light: no flax, orbax or gymnax until an area needs them."""

import subprocess
import sys


def test_import_jaxlab_is_light():
  code = ("import sys, jaxlab, jaxlab.presets, jaxlab.experiments; "
          "heavy = [m for m in ('flax', 'orbax', 'gymnax', 'optax') if m in sys.modules]; "
          "print(heavy)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip() == "[]"
