"""The shared backend dispatch of every kernel (`pallas_kernels._common.resolve`)."""

import warnings

import pytest

from pallas_kernels import _common as c

ALL = (c.MOSAIC_TPU, c.MOSAIC_GPU, c.TRITON)


@pytest.mark.parametrize("impl,interpret,platform,variants,expected", [
    (None, None, "cpu", ALL, c.Backend(c.XLA)),                   # CPU users get XLA
    (None, False, "cpu", ALL, c.Backend(c.XLA)),
    (None, True, "cpu", ALL, c.Backend(c.MOSAIC_TPU, True)),      # interpret only when asked
    ("pallas", None, "cpu", ALL, c.Backend(c.MOSAIC_TPU, True)),
    # Naming an accelerator platform never turns interpret mode on (from a CPU host too).
    (None, None, "tpu", ALL, c.Backend(c.MOSAIC_TPU, False)),
    (None, None, "cuda", ALL, c.Backend(c.MOSAIC_GPU, False)),
    ("pallas", None, "tpu", ALL, c.Backend(c.MOSAIC_TPU, False)),
    ("mosaic_gpu", None, "gpu", ALL, c.Backend(c.MOSAIC_GPU, False)),
    ("mosaic_gpu", None, "cpu", ALL, c.Backend(c.MOSAIC_GPU, True)),  # runs on the host: interpret
    (None, True, "tpu", ALL, c.Backend(c.MOSAIC_TPU, True)),      # unless asked for
    (None, False, "tpu", ALL, c.Backend(c.MOSAIC_TPU, False)),
    (None, False, "cuda", ALL, c.Backend(c.MOSAIC_GPU, False)),   # Mosaic GPU is the GPU default
    # No Mosaic GPU variant: the GPU default is XLA, never the deprecated Triton.
    (None, None, "gpu", (c.MOSAIC_TPU, c.TRITON), c.Backend(c.XLA)),
    (None, True, "cuda", (c.MOSAIC_TPU, c.TRITON), c.Backend(c.XLA)),
    ("xla", True, "tpu", ALL, c.Backend(c.XLA)),
    ("scaled_matmul", True, "cuda", (*ALL, c.SCALED_MATMUL), c.Backend(c.SCALED_MATMUL)),
])
def test_resolve(impl, interpret, platform, variants, expected):
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # only Triton warns
    assert c.resolve("k", impl, interpret=interpret, platform=platform,
                     variants=variants) == expected


def test_triton_only_by_name_and_with_a_visible_warning():
  with pytest.warns(FutureWarning, match="deprecates") as record:
    backend = c.resolve("k", "triton", interpret=None, platform="cuda", variants=ALL)
  assert backend == c.Backend(c.TRITON, False)
  assert record[0].filename == __file__  # attributed to the caller, as Python's filters expect


def test_interpret_env_variable_still_wins(monkeypatch):
  monkeypatch.setenv("JAXLAB_PALLAS_INTERPRET", "1")
  assert c.resolve("k", None, interpret=None, platform="tpu",
                   variants=ALL) == c.Backend(c.MOSAIC_TPU, True)


@pytest.mark.parametrize("impl,platform,match", [
    ("cuda", "cpu", "implementation must be one of"),
    ("mosaic_gpu", "cuda", "not available"),
    ("pallas", "metal", "platform must be one of"),
    ("pallas", "cuda", "never picks the deprecated Triton"),
    ("scaled_matmul", "cuda", "not available for this kernel"),
])
def test_resolve_errors(impl, platform, match):
  with pytest.raises(ValueError, match=match):
    c.resolve("k", impl, interpret=False, platform=platform, variants=(c.MOSAIC_TPU, c.TRITON))


def test_mosaic_gpu_params_translate_tpu_semantics():
  params = c.compiler_params(c.Backend(c.MOSAIC_GPU), ("parallel", "parallel", "arbitrary"))
  assert tuple(params.dimension_semantics) == ("parallel", "parallel", "sequential")
