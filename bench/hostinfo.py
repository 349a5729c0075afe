"""What every benchmark prints first: the host's class, the target Vinci compiles for, and the ISA
torch runs at, capped alike when VINCI_HOST_ISA caps Vinci so the comparison stays fair.

Import this module before torch: `cap_torch()` sets torch's own caps from VINCI_HOST_ISA
(MKL for f32 matmul, oneDNN for low-precision matmul and conv, ATen's kernels for elementwise ops),
and `header()` checks in a subprocess that each cap took effect.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# VINCI_HOST_ISA level -> torch's environment caps (each read once, when torch loads)
TORCH_CAPS = {
    "x86-64-v2": {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41", "ATEN_CPU_CAPABILITY": "default"},
    "x86-64-v3": {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
    "x86-64-v4": {"MKL_ENABLE_INSTRUCTIONS": "AVX512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
                  "ATEN_CPU_CAPABILITY": "avx512"},
}
_EXPECT_ATEN = {"default": "DEFAULT", "avx2": "AVX2", "avx512": "AVX512"}


def cap_torch() -> dict[str, str]:
    """Set torch's ISA caps to match VINCI_HOST_ISA (nothing for native). Call before importing torch."""
    if "torch" in sys.modules:
        raise RuntimeError("bench.hostinfo.cap_torch() must run before torch is imported")
    caps = TORCH_CAPS.get(os.environ.get("VINCI_HOST_ISA", "native"), {})
    os.environ.update(caps)
    return caps


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


_PROBE = """
import torch
print("aten", torch.backends.cpu.get_cpu_capability(), flush=True)
x = torch.randn(8, 64, 56, 56)  # large enough for torch to hand it to oneDNN
torch.nn.functional.conv2d(x, torch.randn(64, 64, 3, 3), padding=1)
a = torch.randn(64, 64)
a @ a
"""


def torch_isa() -> dict[str, str]:
    """The ISA each of torch's CPU back ends runs at in this environment, read back from torch itself."""
    p = subprocess.run([sys.executable, "-c", _PROBE], env=dict(os.environ, MKL_VERBOSE="1", ONEDNN_VERBOSE="1"), capture_output=True,
                       text=True, timeout=300)
    out = p.stdout + p.stderr
    aten = re.search(r"^aten (\S+)", out, re.M)
    dnnl = re.search(r"onednn_verbose,(?:v1,)?info,cpu,isa:([^\n]+)", out)
    mkl = re.search(r"enabled processors|(Intel\(R\) [^\n]*?enabled processors)", out)
    return {"aten": aten.group(1) if aten else "?", "onednn": dnnl.group(1).strip() if dnnl else "?",
            "mkl": mkl.group(0) if mkl else "not reported on this CPU"}


def header(what: str) -> str:
    """One block naming the host class, Vinci's target and torch's ISA; raises if a cap did not take."""
    from compiler.host import target

    t = target()
    caps = TORCH_CAPS.get(t.name, {})
    isa = torch_isa()
    lines = [f"== {what}",
             f"host: {cpu_model()} ({target_native_cpu()}), class {native_level()}",
             f"vinci target: VINCI_HOST_ISA={t.name} -> {t.level}, {t.vector_bits}-bit vectors",
             f"torch ISA: ATen {isa['aten']}, oneDNN {isa['onednn']}, MKL {isa['mkl']}"
             + (f" (capped: {', '.join(f'{k}={v}' for k, v in caps.items())})" if caps else " (uncapped)")]
    if caps:
        want = _EXPECT_ATEN[caps["ATEN_CPU_CAPABILITY"]]
        if isa["aten"] != want:
            raise RuntimeError(f"ATEN_CPU_CAPABILITY did not take effect: torch reports {isa['aten']}, not {want}")
        above = {"SSE41": ("AVX",), "AVX2": ("AVX-512", "AVX512", "AMX"), "AVX512_CORE": ("AMX",)}
        if any(w in isa["onednn"] for w in above[caps["ONEDNN_MAX_CPU_ISA"]]):
            raise RuntimeError(f"ONEDNN_MAX_CPU_ISA did not take effect: oneDNN reports {isa['onednn']}")
    return "\n".join(lines)


def target_native_cpu() -> str:
    from compiler.host import make_target

    return make_target("native").cpu


def native_level() -> str:
    from compiler.host import make_target

    return make_target("native").level


def verdict(ratio: float, limit: float) -> str:
    """'met' when vinci_time / torch_time <= limit, else 'MISSED'."""
    return "met" if ratio <= limit else "MISSED"


if __name__ == "__main__":
    cap_torch()
    print(header("host"))
