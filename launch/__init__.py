"""absl entry points: `launch.main`, `launch.reproduce`, `launch.bench`, `launch.notebooks`, and
the `jaxlab` command (`launch.cli`) that runs the first three.

`python -m launch.<entry>` (and `jaxlab`) imports this package before anything else, so it sets the
process-wide thread policy here, before NumPy or SciPy load: OpenBLAS gets one thread
(unless OPENBLAS_NUM_THREADS is already set). jaxlib's CPU linear algebra (QR,
triangular solves, Cholesky, ...) calls SciPy's OpenBLAS from inside XLA's own thread
pool, which already uses every core; OpenBLAS threads on top of it compete for the same
cores (a row with a QR and triangular solves in every step, such as opl, runs about
twice as fast with one OpenBLAS thread on 2 cores), and every result is the same.

It also turns on JAX's persistent compilation cache (unless JAX_COMPILATION_CACHE_DIR is
already set; set it empty to turn the cache off) in
`${XDG_CACHE_HOME:-~/.cache}/jaxlab/jax-compilation-cache`, the directory CI's test runs
use, keeping every program however fast it compiles. Compilation is a large part of a
quick preset's time on a 2-core CPU, so a second run is much faster. Launched subprocesses (multi-process runs, notebook kernels)
inherit the setting.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "jaxlab",
    "jax-compilation-cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
