"""The core count the op library's host code sizes blocks for: the default config's AI cores
(ascend910b1: 24). A schedule choice only: a launch on any core count or config computes the same
result, and ops that take `cores=` size for that count instead."""
from __future__ import annotations

from simulator.config import DEFAULT_CONFIG, load_config

CORES = load_config(DEFAULT_CONFIG).cores
