"""Experiment and benchmark configs: `get_config(preset)` per file.

A package so that configs can share pieces (`from configs import lm`); load
them with `launch.configs.load_config` or `--config=configs/<name>.py:<preset>`
(`jaxlab run <name> --preset=<preset>`), from any directory: the package ships
in the wheel beside `launch`, which binds `configs` to it.
"""
