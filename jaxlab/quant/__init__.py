"""Quantization-aware training: fake quantization, `QDense`, and the QAT scaling law.

Public API:
  fake_quant(x, *, bits, group_size, fmt="int", absmax_m="paper", clip_logit=None)
  fake_quant_dynamic(x, *, bits, group_size, group_sizes)  (traced bits and G)
  kurtosis(x), grid_bounds(bits, fmt, absmax_m), resolve_group_size(k, group_size)
  QuantSpec, QuantPolicy (per-module overrides by path), QDense, qdense_factory(policy),
  runtime_knobs(policy, qat) (bits and G as run-time values: one program, many cells)
  scaling_law: qat_error, chinchilla_loss, qat_loss, effective_param_multiplier,
    fit_qat_law, QATLaw, Chinchilla, TABLE1, CHINCHILLA

Example:
  >>> from jaxlab.quant import QuantPolicy, qdense_factory
  >>> from jaxlab.nn import Transformer, TransformerConfig
  >>> policy = QuantPolicy(w_bits=4, a_bits=4, group_size=16, overrides={"mlp/down": {"a_bits": 8}})
  >>> model = Transformer(TransformerConfig(d_model=32, num_layers=1, num_heads=4, num_kv_heads=2,
  ...                                       d_ff=64, dense=qdense_factory(policy)))
"""

from jaxlab.quant import scaling_law
from jaxlab.quant.fake_quant import (
                                     ABSMAX_M,
                                     FORMATS,
                                     FULL_PRECISION_BITS,
                                     fake_quant,
                                     fake_quant_dynamic,
                                     grid_bounds,
                                     kurtosis,
                                     lac_init_logit,
                                     resolve_group_size,
)
from jaxlab.quant.qdense import (
                                     ACT_QUANTIZERS,
                                     QDense,
                                     QuantPolicy,
                                     QuantSpec,
                                     qdense_factory,
                                     runtime_knobs,
)
from jaxlab.quant.scaling_law import (
                                     CHINCHILLA,
                                     TABLE1,
                                     Chinchilla,
                                     QATLaw,
                                     chinchilla_loss,
                                     effective_param_multiplier,
                                     fit_qat_law,
                                     qat_error,
                                     qat_loss,
)

__all__ = [
    "ABSMAX_M", "ACT_QUANTIZERS", "CHINCHILLA", "Chinchilla", "FORMATS", "FULL_PRECISION_BITS",
    "QATLaw", "QDense", "QuantPolicy", "QuantSpec", "TABLE1", "chinchilla_loss",
    "effective_param_multiplier", "fake_quant", "fake_quant_dynamic", "fit_qat_law",
    "grid_bounds", "kurtosis", "lac_init_logit", "qat_error", "qat_loss", "qdense_factory",
    "resolve_group_size", "runtime_knobs", "scaling_law",
]
