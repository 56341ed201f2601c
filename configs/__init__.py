"""Experiment and benchmark configs: `get_config(preset)` per file.

A package so that configs can share pieces (`from configs import lm`); load
them with `launch.configs.load_config` or `--config=configs/<name>.py:<preset>`,
both from the repository root.
"""
