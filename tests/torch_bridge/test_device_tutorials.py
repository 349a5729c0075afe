"""The torch_npu tutorial walkthroughs (examples/npu/*.py) run unchanged but for the device string.

Each example runs in its own process, as a user would run it, and must print what the walkthrough
is about. A new example needs an entry in EXPECT (so none runs unchecked).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "npu"

#: per example: lines (fragments) its output must contain
EXPECT: dict[str, tuple[str, ...]] = {
    "device_queries.py": ("available: True", "device count: 1", "AI cores", "same draws after set_rng_state: True"),
    "tensors.py": ("computed on npu:0 -> [[0.0, 4.0, 8.0], [12.0, 16.0, 20.0]]", "weights on npu:0",
                   "loaded: npu:0 cpu True", "device='npu:0'"),
    "memory_stats.py": ("after two tensors", "after empty_cache()", "NPU memory summary",
                        "OutOfMemoryError: NPU out of memory. Tried to allocate", "y is intact"),
    "streams_events.py": ("8 small ops, two streams", "4 matmuls, two streams", "query: True"),
    "amp_training.py": ("Mixed precision:", "torch.float16 output, torch.float32 loss", "resumed scaler state:",
                        "eval loss:"),
    "profile_step.py": ("Self NPU time total:", "Chrome trace written to", "Bound pipe", "recorded step:"),
    "traced_cnn.py": ("traced output on npu:0 (4, 10)", "max |traced - eager| on npu: 0.0",
                      "ran on the CPU fallback: none", "loaded onto npu:0 same output: True"),
    "train_gpt.py": ("step   7  loss", "device ", "ops on the CPU fallback: none", "0 OOMs"),
}


def _examples() -> list[str]:
    return sorted(p.name for p in EXAMPLES.glob("*.py"))


def test_every_example_is_checked():
    assert set(_examples()) <= set(EXPECT), f"add the new examples to EXPECT: {set(_examples()) - set(EXPECT)}"


@pytest.mark.parametrize("name", _examples())
def test_example_runs(name: str, tmp_path: Path):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(EXAMPLES / name)], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, f"{name} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    for fragment in EXPECT[name]:
        assert fragment in r.stdout, f"{name}: {fragment!r} not in its output:\n{r.stdout[-3000:]}"
