"""Reinforcement learning: SAC, PPO, the AES entropy scheduler, drift, GRPO and UCPO.

Modules: `aes_scheduler` (AES: TD-error quantile -> drift proxy -> lambda_t),
`sac` (SAC with fixed / auto / AES temperature), `ppo` (PPO with fixed or AES
entropy coefficient), `drift` (abrupt / ramp / periodic / random-walk
environment-parameter drift), `envs` (pure-JAX Pendulum-v1, CartPole-v1 with
gymnax dynamics and params, and a 2-D multi-goal point env), `metrics`
(degradation, recovery time, normalised AUC), `grpo` (group-relative advantages,
DAPO clipped surrogate, dynamic sampling), `ucpo` (UCPO's TAD, DURA, NTF), and
`knowledge_task` (the toy knowledge-boundary task and its RL loop; imports flax),
`gymnax_adapter` (`GymnaxEnv`: a gymnax env + params in the `envs` interface,
so SAC/PPO train on gymnax environments; imports no gymnax).
"""

from jaxlab.rl import (
    aes_scheduler,
    drift,
    envs,
    grpo,
    gymnax_adapter,
    knowledge_task,
    metrics,
    ppo,
    sac,
    ucpo,
)

__all__ = ["aes_scheduler", "drift", "envs", "grpo", "gymnax_adapter", "knowledge_task", "metrics",
           "ppo", "sac", "ucpo"]
