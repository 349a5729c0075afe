"""host: the CPU the JIT compiles for, capped by `VINCI_HOST_ISA`.

`VINCI_HOST_ISA=x86-64-v2 | x86-64-v3 | x86-64-v4 | native` (default `native`). A level compiles
for LLVM's CPU of that name (its exact feature set, generic tuning), so an AVX-512 or AMX machine
produces the code an SSE4.2 or AVX2 machine would, and the test suite can run it on purpose. A
level above what the host can execute is refused. Code generators ask `target().has("f16c")`
rather than reading features anywhere else; the target's `fingerprint` is part of every cache key.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

LEVELS = ("x86-64-v2", "x86-64-v3", "x86-64-v4")

# The features of each microarchitecture level that code generation asks about (LLVM names). Each
# level has those of the level before it. Source: the x86-64 psABI levels, as LLVM defines them.
_V2 = frozenset({"cx16", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3", "crc32"})
_V3 = _V2 | {"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"}
_V4 = _V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "evex512"}
LEVEL_FEATURES = {"x86-64-v2": _V2, "x86-64-v3": _V3, "x86-64-v4": _V4}


@dataclass(frozen=True)
class HostTarget:
    """What the JIT compiles for. `cpu` and `features` go to llvmlite's target machine as they are."""

    name: str  # "native" or one of LEVELS
    cpu: str  # LLVM CPU name
    features: str  # LLVM feature string ("" for a level: the CPU name implies them)
    enabled: frozenset[str]  # feature names without '+'

    def has(self, *features: str) -> bool:
        return all(f in self.enabled for f in features)

    @property
    def vector_bits(self) -> int:
        """Widest vector registers: 512 (AVX-512), 256 (AVX) or 128 (SSE)."""
        return 512 if self.has("avx512f") else 256 if self.has("avx") else 128

    @property
    def vregs(self) -> int:
        """Architectural vector registers."""
        return 32 if self.has("avx512f") else 16

    @property
    def level(self) -> str:
        """The highest x86-64 level this target reaches (for reports)."""
        best = "x86-64"
        for lv in LEVELS:
            if LEVEL_FEATURES[lv] - {"evex512"} <= self.enabled:
                best = lv
        extras = [f for f in ("avx512bf16", "avx512fp16", "amx-bf16") if f in self.enabled]
        return best + ("+" + "+".join(extras) if extras else "")

    @property
    def fingerprint(self) -> str:
        return f"{self.name}|{self.cpu}|{self.features}"


class HostISAError(ValueError):
    """VINCI_HOST_ISA names an unknown level, or one this host cannot run."""


def native_features() -> frozenset[str]:
    import llvmlite.binding as llvm

    return frozenset(k for k, on in llvm.get_host_cpu_features().items() if on)


@functools.lru_cache(maxsize=None)
def make_target(name: str) -> HostTarget:
    """The target for a `VINCI_HOST_ISA` value (checked against this host)."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    host = native_features()
    if name in ("", "native"):
        return HostTarget("native", llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten(), host)
    if name not in LEVELS:
        raise HostISAError(f"VINCI_HOST_ISA={name!r}: expected one of native, {', '.join(LEVELS)}")
    missing = sorted(LEVEL_FEATURES[name] - host - {"evex512", "crc32"})
    if missing:
        raise HostISAError(f"VINCI_HOST_ISA={name!r}: this host lacks {', '.join(missing)} "
                           f"(it reaches {make_target('native').level})")
    return HostTarget(name, name, "", LEVEL_FEATURES[name] & (host | {"evex512", "crc32"}))


def target() -> HostTarget:
    """The target of this process's `VINCI_HOST_ISA` (CONFIG.host_isa)."""
    from compiler.config import CONFIG

    return make_target(CONFIG.host_isa)


def runnable_levels() -> list[str]:
    """The VINCI_HOST_ISA values this host can run, lowest first, then "native"."""
    out = []
    for lv in LEVELS:
        try:
            make_target(lv)
        except HostISAError:
            continue
        out.append(lv)
    return out + ["native"]


__all__ = ["HostTarget", "HostISAError", "LEVELS", "LEVEL_FEATURES", "make_target", "target", "runnable_levels"]


def _main(argv: list[str]) -> int:
    """`python -m compiler.host [--at-most LEVEL]`: print the target (or the highest level this host
    can run that is not above LEVEL: what `make test` uses for its capped second run)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m compiler.host", description=_main.__doc__)
    ap.add_argument("--at-most", choices=LEVELS)
    ap.add_argument("--above", choices=LEVELS, help="exit 0 if this host runs a level above LEVEL, else 1")
    args = ap.parse_args(argv)
    if args.above:
        return 0 if any(LEVELS.index(lv) > LEVELS.index(args.above) for lv in runnable_levels() if lv in LEVELS) else 1
    if args.at_most:
        ok = [lv for lv in runnable_levels()[:-1] if LEVELS.index(lv) <= LEVELS.index(args.at_most)]
        print(ok[-1] if ok else "native")
        return 0
    t = target()
    print(f"{t.name}: cpu {t.cpu}, {t.level}, {t.vector_bits}-bit vectors x {t.vregs}; runnable: "
          f"{', '.join(runnable_levels())}")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(_main(sys.argv[1:]))
