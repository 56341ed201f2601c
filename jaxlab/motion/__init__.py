"""SATA: topology-agnostic motion autoencoding and zero-shot cross-species retargeting.

Modules: `rotations` (6-D / Euler / geodesic), `kinematics` (forward kinematics),
`bvh` (BVH parse / write), `skeletons` and `generate` (procedural species and
motion with hidden pairs), `model` (the SATA autoencoder), `training` (losses,
metrics and the jitted train / evaluate programs), `text_cache` (MiniLM joint
description embeddings, each description embedded once).
"""
