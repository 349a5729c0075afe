"""CodeLibrary: the one owner of llvmlite. LLVM IR text -> verified, O3-optimised machine code.

Compiled objects are cached in memory and on disk (`VINCI_CACHE_DIR`, default ~/.cache/vinci).
Writes are atomic (temp file + os.replace); an entry that fails to load is recompiled.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import pickle
import struct
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import llvmlite
import llvmlite.binding as llvm

from compiler.host import HostTarget, target

_LOCK = threading.RLock()
_MACHINES: dict[str, Any] = {}  # target name -> llvmlite TargetMachine (for optimising and emitting)
_SRC: dict[str, str] = {}
_ENGINES: list[object] = []  # kept alive: their code is in use
MAGIC = b"VINCI-OBJ-1\n"


def _machine(t: HostTarget | None = None) -> Any:  # an llvmlite TargetMachine
    t = t or target()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(
        cpu=t.cpu, features=t.features, opt=3, reloc="pic", codemodel="jitdefault")


def _tm() -> Any:
    t = target()
    tm = _MACHINES.get(t.name)
    if tm is None:
        tm = _MACHINES[t.name] = _machine(t)
    return tm


def host_fingerprint() -> str:
    """CPU name and features the JIT compiles for (capped by VINCI_HOST_ISA), and llvmlite's version."""
    return f"{target().fingerprint}|llvmlite {llvmlite.__version__}"


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


class JITLinkError(RuntimeError):
    """A compiled object needs a symbol this process cannot provide: it is refused, never run."""


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
    """Parse, verify, optimise at O3 for the target CPU, emit an object file. Returns (object, optimised IR)."""
    with _LOCK:
        tm = _tm()
        mod = llvm.parse_assembly(ir_text)
        mod.verify()
        pb = llvm.create_pass_builder(tm, _tuning())
        pb.getModulePassManager().run(mod, pb)  # a fresh manager per module (reuse aborts)
        return tm.emit_object(mod), str(mod)


def assembly(ir_text: str) -> str:
    with _LOCK:
        tm = _tm()
        mod = llvm.parse_assembly(ir_text)
        mod.verify()
        pb = llvm.create_pass_builder(tm, _tuning())
        pb.getModulePassManager().run(mod, pb)
        return tm.emit_assembly(mod)


def undefined_symbols(obj: bytes) -> list[str]:
    """Names an ELF64 object refers to but does not define (from its symbol table)."""
    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        raise JITLinkError("compiled object is not a little-endian ELF64 file")
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    out: list[str] = []
    for i in range(shnum):
        sh_type, = struct.unpack_from("<I", obj, shoff + i * shentsize + 4)
        if sh_type != 2:  # SHT_SYMTAB
            continue
        off, size, link = struct.unpack_from("<QQI", obj, shoff + i * shentsize + 24)
        entsize, = struct.unpack_from("<Q", obj, shoff + i * shentsize + 56)
        str_off, = struct.unpack_from("<Q", obj, shoff + link * shentsize + 24)
        for e in range(off + entsize, off + size, entsize):  # entry 0 is the null symbol
            name_at, = struct.unpack_from("<I", obj, e)
            shndx, = struct.unpack_from("<H", obj, e + 6)
            if shndx == 0 and name_at:
                end = obj.index(b"\0", str_off + name_at)
                out.append(obj[str_off + name_at:end].decode())
    return out


def _in_process(name: str) -> bool:
    """Whether MCJIT can resolve `name`: from LLVM's own table or the process's (dlsym), as RuntimeDyld does."""
    if llvm.address_of_symbol(name):
        return True
    try:
        getattr(ctypes.CDLL(None), name)
        return True
    except AttributeError:
        return False


def check_symbols(obj: bytes, symbol: str) -> None:
    """Refuse an object that calls into something this process does not have (LLVM lowers some
    operations to compiler-rt helpers such as __truncsfbf2 on hosts without the instruction):
    MCJIT would leave such a call pointing at address 0."""
    missing = [s for s in undefined_symbols(obj) if s != "_GLOBAL_OFFSET_TABLE_" and not _in_process(s)]
    if missing:
        raise JITLinkError(f"kernel {symbol} needs {', '.join(sorted(set(missing)))}, which this process does not "
                           f"provide (target {target().name}: {target().level}); it was not loaded. This is a "
                           f"compiler bug: please report it with the kernel and VINCI_HOST_ISA")


def load_object(obj: bytes, symbol: str) -> int:
    with _LOCK:
        check_symbols(obj, symbol)
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
