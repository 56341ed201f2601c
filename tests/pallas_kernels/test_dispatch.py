"""The shared backend dispatch of every kernel (`pallas_kernels._common.resolve`)."""

import pytest

from pallas_kernels import _common as c

ALL = (c.MOSAIC_TPU, c.MOSAIC_GPU, c.TRITON)


@pytest.mark.parametrize("impl,interpret,platform,variants,expected", [
    (None, None, "cpu", ALL, c.Backend(c.XLA)),                   # CPU users get XLA
    (None, False, "cpu", ALL, c.Backend(c.XLA)),
    (None, True, "cpu", ALL, c.Backend(c.MOSAIC_TPU, True)),      # interpret only when asked
    ("pallas", None, "cpu", ALL, c.Backend(c.MOSAIC_TPU, True)),
    (None, None, "tpu", ALL, c.Backend(c.MOSAIC_TPU, True)),      # lowering from CPU: interpret
    (None, False, "tpu", ALL, c.Backend(c.MOSAIC_TPU, False)),    # defaults to the host's CPU
    (None, False, "cuda", ALL, c.Backend(c.MOSAIC_GPU, False)),   # first GPU variant wins
    (None, False, "gpu", (c.MOSAIC_TPU, c.TRITON), c.Backend(c.TRITON, False)),
    ("triton", False, "cuda", ALL, c.Backend(c.TRITON, False)),
    ("xla", True, "tpu", ALL, c.Backend(c.XLA)),
])
def test_resolve(impl, interpret, platform, variants, expected):
  assert c.resolve("k", impl, interpret=interpret, platform=platform,
                   variants=variants) == expected


@pytest.mark.parametrize("impl,platform,match", [
    ("cuda", "cpu", "implementation must be one of"),
    ("mosaic_gpu", "cuda", "not available"),
    ("pallas", "metal", "platform must be one of"),
])
def test_resolve_errors(impl, platform, match):
  with pytest.raises(ValueError, match=match):
    c.resolve("k", impl, interpret=False, platform=platform, variants=(c.MOSAIC_TPU, c.TRITON))


def test_mosaic_gpu_params_translate_tpu_semantics():
  params = c.compiler_params(c.Backend(c.MOSAIC_GPU), ("parallel", "parallel", "arbitrary"))
  assert tuple(params.dimension_semantics) == ("parallel", "parallel", "sequential")
