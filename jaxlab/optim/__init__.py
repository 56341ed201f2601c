"""Optimizers for low-precision parameters without master weights (ECO).

Public API:
  eco_adamw, eco_sgdm            ECO (arXiv 2601.22101) as optax transforms
  apply_eco                      lands ECO's float updates on the QParam tree
  check_eco_state                raises if ECO was not the last transform of the chain
  injectable                     optax.inject_hyperparams for ECO (float32, static format)
  naive_adamw, naive_sgdm        master-weight removal without compensation
  exact_ef_adamw, exact_ef_sgdm  exact error feedback (stores e)
  master_adamw, master_sgdm      FP32 master-weight references
  Quantizer, QParam, quantize_params, dequantize_params, fake_quant_params,
  static_bytes                   parameter storage (raw bits; exact apply_updates)

Example:
  >>> import jax.numpy as jnp, optax
  >>> from jaxlab import optim
  >>> q = optim.Quantizer("fp8_e4m3", granularity="row")
  >>> params = optim.quantize_params({"w": jnp.ones((32, 8)), "b": jnp.zeros(8)}, q)
  >>> tx = optax.chain(optax.clip_by_global_norm(1.0), optim.eco_adamw(1e-3, quantizer=q))
  >>> state = tx.init(params)
  >>> grads = {"w": jnp.ones((32, 8)), "b": jnp.ones(8)}
  >>> updates, state = tx.update(grads, state, params)
  >>> params = optim.apply_eco(params, updates)
"""

from jaxlab.optim.baselines import (
    exact_ef_adamw,
    exact_ef_sgdm,
    master_adamw,
    master_sgdm,
    naive_adamw,
    naive_sgdm,
)
from jaxlab.optim.eco import (
    INJECTIONS,
    STATIC_ARGS,
    EcoAdamWState,
    EcoSgdmState,
    apply_eco,
    check_eco_state,
    eco_adamw,
    eco_sgdm,
    injectable,
)
from jaxlab.optim.quantizers import (
    F32,
    QUANTIZERS,
    QParam,
    Quantizer,
    bits_delta,
    check_qparams,
    dequantize_params,
    fake_quant_params,
    is_qparam,
    quantize_params,
    static_bytes,
)

__all__ = [
    "F32", "INJECTIONS", "QUANTIZERS", "STATIC_ARGS", "EcoAdamWState", "EcoSgdmState", "QParam",
    "Quantizer", "apply_eco", "bits_delta", "check_eco_state", "check_qparams", "dequantize_params", "eco_adamw", "eco_sgdm", "exact_ef_adamw",
    "exact_ef_sgdm", "fake_quant_params", "injectable", "is_qparam", "master_adamw", "master_sgdm",
    "naive_adamw", "naive_sgdm", "quantize_params", "static_bytes",
]
