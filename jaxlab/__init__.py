"""jaxlab: ICML 2026 methods as composable JAX building blocks.

Importing `jaxlab` is light on purpose: it does not import flax, orbax or
gymnax. Import the area you need, e.g. `jaxlab.nn`, `jaxlab.train`.
"""

__version__ = "0.1.0"
