"""Quantization-aware training and FP4 serving: fake quantization, `QDense`, `FP4Dense`,
and the QAT scaling law.

Formats are named by `jaxlab.formats` presets ("nvfp4", "mxfp4", "int4_g32", ...) or
are one of the parametric QAT grid families `GRID_FAMILIES` ("int" INT-b, "fp4" E2M1,
bits and group size free). NaN / +-Inf elements pass through fake quantization
unchanged and never change the other elements (see `fake_quant`'s module doc).

Public API::

  fake_quant(x, *, bits, group_size, fmt="int", absmax_m="paper", clip_logit=None)
  fake_quant(x, fmt="nvfp4")  (a jaxlab.formats preset: bits/block fixed by the format)
  fake_quant_dynamic(x, *, bits, group_size, group_sizes)  (traced bits and G)
  kurtosis(x), grid_bounds(bits, fmt, absmax_m), resolve_group_size(k, group_size),
  resolve_format(fmt)
  QuantSpec, QuantPolicy (per-module overrides by path; fmt / w_fmt / a_fmt take preset
    names), QDense, qdense_factory(policy), check_overrides(policy, params),
  runtime_knobs(policy, qat) (bits and G as run-time values: one program, many cells)
  FP4Dense (FP4 codes + scales as parameters, the product by the FP4 kernels),
    fp4_dense_factory(fmt), quantize_dense_params(params, fmt), quantize_weight,
    fp4_weight_bytes
  scaling_law: qat_error, chinchilla_loss, qat_loss, effective_param_multiplier,
    fit_qat_law, QATLaw, Chinchilla, TABLE1, CHINCHILLA

Example:
  >>> from jaxlab.quant import QuantPolicy, qdense_factory
  >>> from jaxlab.nn import Transformer, TransformerConfig
  >>> policy = QuantPolicy(w_bits=4, a_bits=4, group_size=16, overrides={"mlp/down": {"a_bits": 8}})
  >>> model = Transformer(TransformerConfig(d_model=32, num_layers=1, num_heads=4, num_kv_heads=2,
  ...                                       d_ff=64, dense=qdense_factory(policy)))
  >>> QuantPolicy(w_fmt="nvfp4", a_fmt="int4_g32").name
  'W[nvfp4]A[int4_g32]'
"""

from jaxlab.quant import scaling_law
from jaxlab.quant.fake_quant import (
                                     ABSMAX_M,
                                     FULL_PRECISION_BITS,
                                     GRID_FAMILIES,
                                     fake_quant,
                                     fake_quant_dynamic,
                                     grid_bounds,
                                     kurtosis,
                                     lac_init_logit,
                                     resolve_format,
                                     resolve_group_size,
)
from jaxlab.quant.fp4dense import (
                                     FP4Dense,
                                     fp4_dense_factory,
                                     fp4_weight_bytes,
                                     quantize_dense_params,
                                     quantize_weight,
)
from jaxlab.quant.qdense import (
                                     ACT_QUANTIZERS,
                                     QDense,
                                     QuantPolicy,
                                     QuantSpec,
                                     check_overrides,
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
    "ABSMAX_M", "ACT_QUANTIZERS", "CHINCHILLA", "Chinchilla", "FP4Dense", "FULL_PRECISION_BITS",
    "GRID_FAMILIES", "QATLaw", "QDense", "QuantPolicy", "QuantSpec", "TABLE1", "check_overrides",
    "chinchilla_loss", "effective_param_multiplier", "fake_quant", "fake_quant_dynamic",
    "fit_qat_law", "fp4_dense_factory", "fp4_weight_bytes", "grid_bounds", "kurtosis",
    "lac_init_logit", "qat_error", "qat_loss", "qdense_factory", "quantize_dense_params",
    "quantize_weight", "resolve_format", "resolve_group_size", "runtime_knobs", "scaling_law",
]
