"""The launch package turns on JAX's persistent compilation cache unless the user set it."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Imports the launch package first, as `python -m launch.<entry>` does, then compiles one
# tiny program: it reaches the cache only through launch's minimum compile time of 0 s.
_PROBE = ("import launch, jax, jax.numpy as jnp, json; jax.jit(lambda x: x * 3)(jnp.ones(5)); "
          "print(json.dumps(jax.config.jax_compilation_cache_dir))")


def _cache_dir(tmp_path, **env_vars: str) -> str:
  env = {k: v for k, v in os.environ.items()
         if k not in ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")}
  env.update(XDG_CACHE_HOME=str(tmp_path / "xdg"), **env_vars)
  out = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, env=env, check=True,
                       capture_output=True, text=True).stdout
  return json.loads(out.strip().splitlines()[-1])


def test_launch_caches_compiled_programs_under_the_user_cache_dir(tmp_path):
  expected = tmp_path / "xdg" / "jaxlab" / "jax-compilation-cache"
  assert _cache_dir(tmp_path) == str(expected)
  assert any(expected.iterdir())  # the probe's program was written


def test_a_users_cache_setting_is_kept_and_empty_turns_it_off(tmp_path):
  mine = tmp_path / "mine"
  assert _cache_dir(tmp_path, JAX_COMPILATION_CACHE_DIR=str(mine)) == str(mine)
  assert _cache_dir(tmp_path, JAX_COMPILATION_CACHE_DIR="") == ""
  assert not (tmp_path / "xdg").exists()
