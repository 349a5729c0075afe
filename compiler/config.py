"""Every environment variable Vinci reads, with its default, in one typed place."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def _flag(name: str, default: bool = False) -> bool:
    v = os.environ.get(name)
    return default if v is None else v not in ("", "0", "false", "no")


@dataclass
class Config:
    #: where compiled kernels are cached on disk
    cache_dir: str = os.environ.get("VINCI_CACHE_DIR", str(Path.home() / ".cache" / "vinci"))
    #: 0 disables the disk cache (memory cache stays)
    disk_cache: bool = _flag("VINCI_DISK_CACHE", True)
    #: 0 makes autotuned kernels ignore choices saved on disk (they tune again)
    autotune_cache: bool = _flag("VINCI_AUTOTUNE", True)
    #: run kernels in the numpy reference interpreter instead of native code
    interpret: bool = _flag("VINCI_INTERPRET")
    #: host threads that run simulated cores (default: all host cores)
    threads: int = int(os.environ.get("VINCI_THREADS", "0") or 0) or (os.cpu_count() or 1)
    #: host codegen streams a window's UB loads, vector instructions and store in one pass (0: off)
    stream: bool = _flag("VINCI_STREAM", True)
    #: show compiler frames in KernelError tracebacks
    debug: bool = _flag("VINCI_DEBUG")
    #: hardware config name or path (default: ascend910b1)
    hw: str = os.environ.get("VINCI_CONFIG", "ascend910b1")
    #: caps the CPU the JIT compiles for: x86-64-v2 | x86-64-v3 | x86-64-v4 | native (compiler/host.py)
    host_isa: str = os.environ.get("VINCI_HOST_ISA", "native") or "native"
    #: Mmad code path within that target: amx | avx512 | generic (default: the best the target has)
    cube_isa: str = os.environ.get("VINCI_CUBE_ISA", "")


CONFIG = Config()
