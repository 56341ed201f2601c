"""Baselines for ECO, in the same family of optax transforms.

  * master weights: FP32 master parameters and a quantized forward
    (`optax.adamw` / `optax.sgd` on float params + `fake_quant_params` in the
    loss): the reference; 12 B/param static for AdamW.
  * naive removal: parameters stored low precision, W <- Q(W~) and the
    residual dropped (`injection="none"`), RTN or SR (DQT-style).
  * exact error feedback: stores e (one more FP32 buffer; an upper bound).
"""

from typing import Any

import optax

from jaxlab.optim.eco import ScalarOrSchedule, eco_adamw, eco_sgdm


def master_adamw(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999,
                 eps: float = 1e-8, weight_decay: float = 1e-4) -> optax.GradientTransformation:
  """AdamW on FP32 master weights (pair with `fake_quant_params` in the forward)."""
  return optax.adamw(learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)


def master_sgdm(learning_rate: ScalarOrSchedule, momentum: float = 0.9
                ) -> optax.GradientTransformation:
  """SGD with momentum on FP32 master weights."""
  return optax.sgd(learning_rate, momentum=momentum)


def naive_adamw(learning_rate: ScalarOrSchedule, *args: Any, **kwargs: Any
                ) -> optax.GradientTransformationExtraArgs:
  """`eco_adamw` without injection: the residual of each requantization is lost."""
  return eco_adamw(learning_rate, *args, injection="none", **kwargs)


def naive_sgdm(learning_rate: ScalarOrSchedule, *args: Any, **kwargs: Any
               ) -> optax.GradientTransformationExtraArgs:
  """`eco_sgdm` without injection."""
  return eco_sgdm(learning_rate, *args, injection="none", **kwargs)


def exact_ef_adamw(learning_rate: ScalarOrSchedule, *args: Any, **kwargs: Any
                   ) -> optax.GradientTransformationExtraArgs:
  """`eco_adamw` with the residual stored and fed back exactly (state.err)."""
  return eco_adamw(learning_rate, *args, injection="exact", **kwargs)


def exact_ef_sgdm(learning_rate: ScalarOrSchedule, *args: Any, **kwargs: Any
                  ) -> optax.GradientTransformationExtraArgs:
  """`eco_sgdm` with the residual stored and fed back exactly (state.err)."""
  return eco_sgdm(learning_rate, *args, injection="exact", **kwargs)


__all__ = ["exact_ef_adamw", "exact_ef_sgdm", "master_adamw", "master_sgdm", "naive_adamw",
           "naive_sgdm"]
