"""Reinforcement learning: SAC, PPO, the AES entropy scheduler and drift.

Modules: `aes_scheduler` (AES: TD-error quantile -> drift proxy -> lambda_t),
`sac` (SAC with fixed / auto / AES temperature), `ppo` (PPO with fixed or AES
entropy coefficient), `drift` (abrupt / ramp / periodic / random-walk
environment-parameter drift), `envs` (pure-JAX Pendulum-v1, CartPole-v1 with
gymnax dynamics and params, and a 2-D multi-goal point env), `metrics`
(degradation, recovery time, normalised AUC).
"""

from jaxlab.rl import aes_scheduler, drift, envs, metrics, ppo, sac

__all__ = ["aes_scheduler", "drift", "envs", "metrics", "ppo", "sac"]
