"""absl entry points: `launch.main`, `launch.reproduce`, `launch.bench`, `launch.notebooks`.

`python -m launch.<entry>` imports this package before anything else, so it sets the
process-wide thread policy here, before NumPy or SciPy load: OpenBLAS gets one thread
(unless OPENBLAS_NUM_THREADS is already set). jaxlib's CPU linear algebra (QR,
triangular solves, Cholesky, ...) calls SciPy's OpenBLAS from inside XLA's own thread
pool, which already uses every core; OpenBLAS threads on top of it compete for the same
cores. Measured on 2 cores: the opl quick preset, a QR and two triangular solves per
step, ran in 208 s with OpenBLAS's default threads and 103 s with one, every result
identical.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
