"""Random small kernels over every dtype pair and tail shape, in a subprocess per host ISA level this
machine can run: a kernel that kills the process (a jump to an unresolved helper, a misaligned
vector access) fails the test with its signal and the kernel it was running, instead of taking the
test run down with it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.host import runnable_levels

WORKER = Path(__file__).resolve().parent.parent / "stress_worker.py"
COUNT = int(os.environ.get("VINCI_STRESS_COUNT", "40"))


@pytest.mark.parametrize("level", runnable_levels())
def test_random_kernels_never_kill_the_process(level: str) -> None:
    env = dict(os.environ, VINCI_HOST_ISA=level)
    seed = 1000 + runnable_levels().index(level)
    p = subprocess.run([sys.executable, str(WORKER), str(seed), str(COUNT)], env=env, capture_output=True, text=True,
                       timeout=600)
    last = (p.stdout.strip().splitlines() or ["(nothing)"])[-1]
    if p.returncode < 0:
        pytest.fail(f"VINCI_HOST_ISA={level}: killed by {signal.Signals(-p.returncode).name} while running "
                    f"{last!r}\n{p.stderr[-3000:]}")
    assert p.returncode == 0, f"VINCI_HOST_ISA={level}: {last!r}\n{p.stderr[-3000:]}"
    assert last == f"ok {COUNT}"
