"""The tuning-JSON hook: a table round-trips through a file into the kernels' block sizes."""

import jax
import numpy as np
import pytest

from jaxlab import formats
from pallas_kernels import fp4, moe, tuning
from pallas_kernels.fp4 import ops as fp4_ops
from pallas_kernels.fp4 import reference as fp4_ref
from pallas_kernels.moe import ops as moe_ops
from pallas_kernels.moe import reference as moe_ref


def _dev():
  return jax.devices()[0].device_kind


def test_table_round_trips_through_json(tmp_path):
  t = tuning.TuningTable()
  cfg = tuning.KernelConfig(block_m=8, block_n=32, block_k=64, grid_order="nm", num_stages=3)
  t.add("fp4_dequant_matmul", (16, 64, 32), "float32", "NVIDIA H200", cfg)
  t.add("gmm", (16, 64, 32, 2), "bfloat16", "*", tuning.KernelConfig())
  path = str(tmp_path / "tuning.json")
  t.save(path)
  back = tuning.TuningTable.load(path)
  assert back.lookup("fp4_dequant_matmul", (16, 64, 32), np.float32, "nvidia h200") == cfg
  assert back.lookup("fp4_dequant_matmul", (16, 64, 32), np.float32, "cpu") is None
  assert back.lookup("gmm", (16, 64, 32, 2), "bfloat16", "anything") == tuning.KernelConfig()
  with pytest.raises(ValueError, match="entries"):
    tuning.TuningTable.from_json({"version": 1})
  with pytest.raises(ValueError, match="grid_order"):
    tuning.KernelConfig(grid_order="km")


def test_dequant_matmul_reads_the_tuned_block(tmp_path, monkeypatch):
  w = jax.random.normal(jax.random.key(0), (64, 32))
  x = jax.random.normal(jax.random.key(1), (16, 64))
  wq = formats.quantize(w, "nvfp4", axis=0)
  table = tuning.TuningTable()
  table.add(fp4_ops.TUNING_OP, (16, 64, 32), "float32", _dev(),
            tuning.KernelConfig(block_m=8, block_n=24, block_k=64))
  path = str(tmp_path / "t.json")
  table.save(path)
  monkeypatch.setenv(tuning.ENV_VAR, path)
  # The tuned (bad) block reaches the kernel: it is used, not ignored.
  with pytest.raises(ValueError, match="block 24"):
    fp4.dequant_matmul(x, wq, implementation="pallas", interpret=True)
  good = tuning.TuningTable()
  good.add(fp4_ops.TUNING_OP, (16, 64, 32), "float32", _dev(),
           tuning.KernelConfig(block_m=8, block_n=32, block_k=64))
  with tuning.use(good):
    out = fp4.dequant_matmul(x, wq, implementation="pallas", interpret=True)
  np.testing.assert_allclose(out, fp4_ref.dequant_matmul_reference(x, wq), rtol=1e-5, atol=1e-5)
  # An explicit block wins over the table.
  out = fp4.dequant_matmul(x, wq, block=fp4.MatmulBlockSizes(m=16, n=32, k=64),
                           implementation="pallas", interpret=True)
  np.testing.assert_allclose(out, fp4_ref.dequant_matmul_reference(x, wq), rtol=1e-5, atol=1e-5)


def test_gmm_reads_the_tuned_block():
  lhs = jax.random.normal(jax.random.key(0), (32, 64))
  rhs = jax.random.normal(jax.random.key(1), (2, 64, 32))
  gs = jax.numpy.array([12, 20], jax.numpy.int32)
  table = tuning.TuningTable()
  table.add(moe_ops.TUNING_OP, (32, 64, 32, 2), "float32", "*",
            tuning.KernelConfig(block_m=16, block_n=16, block_k=48))
  with tuning.use(table):  # K = 64 is padded to two 48-wide chunks
    jaxpr = str(jax.make_jaxpr(lambda: moe.gmm(lhs, rhs, gs, implementation="pallas",
                                               interpret=True))())
  assert "f32[32,96]" in jaxpr
  table.add(moe_ops.TUNING_OP, (32, 64, 32, 2), "float32", "*",
            tuning.KernelConfig(block_m=16, block_n=16, block_k=32))
  with tuning.use(table):
    out = moe.gmm(lhs, rhs, gs, implementation="pallas", interpret=True)
  np.testing.assert_allclose(out, moe_ref.gmm_reference(lhs, rhs, gs), rtol=1e-5, atol=1e-5)
