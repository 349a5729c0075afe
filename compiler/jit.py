"""CodeLibrary: the one owner of llvmlite. LLVM IR text -> verified, O3-optimised machine code.

Compiled objects are cached in memory and on disk (`VINCI_CACHE_DIR`, default ~/.cache/vinci).
Writes are atomic (temp file + os.replace); an entry that fails to load is recompiled.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import llvmlite
import llvmlite.binding as llvm

_LOCK = threading.RLock()
_STATE: dict[str, Any] = {}  # llvmlite's target, target machine, ...
_SRC: dict[str, str] = {}
_ENGINES: list[object] = []  # kept alive: their code is in use
MAGIC = b"VINCI-OBJ-1\n"


def _init() -> None:
    if _STATE:
        return
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    _STATE["target"] = target
    _STATE["cpu"] = llvm.get_host_cpu_name()
    _STATE["features"] = llvm.get_host_cpu_features().flatten()
    _STATE["tm"] = _machine()


def _machine() -> Any:  # an llvmlite TargetMachine
    return _STATE["target"].create_target_machine(
        cpu=_STATE["cpu"], features=_STATE["features"], opt=3, reloc="pic", codemodel="jitdefault")


def host_fingerprint() -> str:
    with _LOCK:
        _init()
        return f"{_STATE['cpu']}|{_STATE['features']}|llvmlite {llvmlite.__version__}"


def cache_dir() -> Path:
    from compiler.config import CONFIG

    return Path(CONFIG.cache_dir)


@dataclass
class Compiled:
    """A loaded kernel: the address of its exported function and what compiling it cost."""

    symbol: str
    address: int
    compile_ms: float
    from_cache: str  # "memory" | "disk" | "" (compiled now)


def _tuning() -> Any:  # an llvmlite PipelineTuningOptions
    """O3 with the loop and SLP vectorisers, without generic unrolling or interleaving: the hot
    loops are memory-bound copies and vector ops, the cube micro-kernels unroll themselves, and
    both cost ~30% of the compile time for no host speed we could measure (vadd, matmul)."""
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_interleaving = False
    pto.loop_unrolling = False
    return pto


def optimize_to_object(ir_text: str) -> tuple[bytes, str]:
    """Parse, verify, optimise at O3 for the host CPU, emit an object file. Returns (object, optimised IR)."""
    with _LOCK:
        _init()
        mod = llvm.parse_assembly(ir_text)
        mod.verify()
        tm = _STATE["tm"]
        pb = llvm.create_pass_builder(tm, _tuning())
        pb.getModulePassManager().run(mod, pb)  # a fresh manager per module (reuse aborts)
        return tm.emit_object(mod), str(mod)


def assembly(ir_text: str) -> str:
    with _LOCK:
        _init()
        mod = llvm.parse_assembly(ir_text)
        mod.verify()
        pb = llvm.create_pass_builder(_STATE["tm"], _tuning())
        pb.getModulePassManager().run(mod, pb)
        return _STATE["tm"].emit_assembly(mod)


def load_object(obj: bytes, symbol: str) -> int:
    with _LOCK:
        _init()
        # one engine per object: several objects in one MCJIT engine mis-resolve local symbols
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _machine())
        _ENGINES.append(engine)
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        addr = engine.get_function_address(symbol)
        if not addr:
            raise RuntimeError(f"symbol {symbol} missing from compiled object")
        return addr


_MEMORY: dict[str, tuple[Compiled, object]] = {}


def disk_path(key: str) -> Path:
    return cache_dir() / key[:2] / f"{key}.bin"


def read_entry(key: str) -> tuple[bytes, object] | None:
    path = disk_path(key)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        if not data.startswith(MAGIC):
            raise ValueError("bad magic")
        body = data[len(MAGIC):]
        digest, payload = body[:32], body[32:]
        if hashlib.sha256(payload).digest() != digest:
            raise ValueError("checksum")
        entry = pickle.loads(payload)
        if entry.get("key") != key:
            raise ValueError("foreign entry")
        return entry["object"], entry["meta"]
    except Exception:  # corrupted or foreign: drop it and recompile
        try:
            path.unlink()
        except OSError:
            pass
        return None


def write_entry(key: str, obj: bytes, meta: object) -> None:
    path = disk_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = pickle.dumps({"key": key, "object": obj, "meta": meta}, protocol=pickle.HIGHEST_PROTOCOL)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + hashlib.sha256(payload).digest() + payload)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs a recompile


def get_or_compile(key: str, symbol: str, build: Callable[[], tuple[str, object]]) -> tuple[Compiled, object]:
    """Load kernel `key` from memory, then disk, else `build() -> (ir_text, meta)` and compile it."""
    hit = _MEMORY.get(key)
    if hit is not None:
        c, meta = hit
        return Compiled(c.symbol, c.address, c.compile_ms, "memory"), meta
    t0 = time.perf_counter()
    from compiler.config import CONFIG

    entry = read_entry(key) if CONFIG.disk_cache else None
    if entry is not None:
        obj, meta = entry
        addr = load_object(obj, symbol)
        c = Compiled(symbol, addr, (time.perf_counter() - t0) * 1e3, "disk")
    else:
        ir_text, meta = build()
        obj, _ = optimize_to_object(ir_text)
        addr = load_object(obj, symbol)
        if CONFIG.disk_cache:
            write_entry(key, obj, meta)
        c = Compiled(symbol, addr, (time.perf_counter() - t0) * 1e3, "")
    _MEMORY[key] = (c, meta)
    return c, meta


def source_hash() -> str:
    """Hash of the compiler's own sources (and the DSL front end): part of every cache key."""
    h = _SRC.get("srchash")
    if h is None:
        root = Path(__file__).resolve().parent.parent
        d = hashlib.sha256()
        for sub in ("compiler", "dsl", "simulator"):
            for p in sorted((root / sub).rglob("*")):
                if p.suffix in (".py", ".lark", ".toml") and "__pycache__" not in p.parts:
                    d.update(str(p.relative_to(root)).encode())
                    d.update(p.read_bytes())
        h = _SRC["srchash"] = d.hexdigest()
    return h
