"""`@dsl.kernel`: a Python function becomes a kernel for the simulated core.

    k = dsl.kernel(fn)          # parse now (errors show at import), compile on first launch
    k[8](x, y, z)               # 8 cores; k(x, y, z) uses the config's core count
    run = k[8].profile(x, y, z) # the same launch, timed on the model of the core

Arguments are numpy arrays or torch CPU tensors, passed zero-copy (their memory is GM).
One compiled specialisation exists per (dtypes, ranks, Const values, options, hardware config);
shapes are runtime values.
"""
from __future__ import annotations

import array
import ctypes
import inspect
import math
import struct
import sys
import textwrap
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from compiler import CONFIG as _CFG
from dsl import record as _record
from dsl.errors import KernelError, SourceLoc
from dsl.record import TIMES as _TIMES
from dsl.record import timing_key as _timing_key
from dsl.types import BY_CODE, DType, from_numpy, from_torch

if TYPE_CHECKING:
    from dsl import ast as A


def _strip(e: KernelError) -> KernelError:
    """Hide compiler frames: the traceback starts at the user's call."""
    from compiler import CONFIG

    if not CONFIG.debug:
        e.__traceback__ = None
        e.__cause__ = None
        e.__suppress_context__ = True
    return e


@dataclass
class _Arg:
    ptr: int
    shape: tuple[int, ...]
    dtype: DType
    nbytes: int


def _tensor_info(v: Any, name: str, loc: SourceLoc) -> _Arg | None:
    if isinstance(v, np.ndarray):
        dt = from_numpy(v.dtype)
        if dt is None:
            raise KernelError("E402", f"argument '{name}' has dtype {v.dtype}, which kernels do not support", loc,
                              "use float32, float16, bfloat16, int32 or int8")
        if not v.flags.c_contiguous:
            raise KernelError("E403", f"argument '{name}' is not contiguous", loc,
                              "pass np.ascontiguousarray(x); kernels read GM in row-major order")
        return _Arg(v.__array_interface__["data"][0], v.shape, dt, v.nbytes)
    mod = type(v).__module__
    if mod.startswith("torch"):
        dt = from_torch(v.dtype)
        if dt is None:
            raise KernelError("E402", f"argument '{name}' has dtype {v.dtype}, which kernels do not support", loc,
                              "use float32, float16, bfloat16, int32 or int8")
        if v.device.type not in ("cpu", "npu"):
            raise KernelError("E402", f"argument '{name}' is on {v.device}", loc, "kernels take CPU or npu tensors")
        if not v.is_contiguous():
            raise KernelError("E403", f"argument '{name}' is not contiguous", loc, "pass x.contiguous()")
        return _Arg(v.data_ptr(), tuple(v.shape), dt, v.numel() * v.element_size())
    return None


class Kernel:
    """A parsed kernel. Index it with a core count to launch: `k[8](...)`, `k[8].profile(...)`."""

    def __init__(self, fn: Any, options: dict | None = None):
        from dsl.parser import parse_function

        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.options = dict(options or {})
        try:
            lines, first = inspect.getsourcelines(fn)
        except (OSError, TypeError) as e:
            raise KernelError("E100", f"cannot read the source of '{fn.__name__}': {e}", None,
                              "kernels must be defined in a file (or registered with dsl.errors.register_source)")
        # decorators are Python that has run already (`@dsl.autotune(BM=[64, 128])`), not kernel code
        skip = _def_index(lines)
        lines, first = lines[skip:], first + skip
        raw = "".join(lines)
        text = textwrap.dedent(raw)
        indent = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
        self.filename = inspect.getsourcefile(fn) or fn.__code__.co_filename
        self.source = text
        self.first_line = first
        try:
            self.fdef = parse_function(text, self.filename, line_offset=first - 1, col_offset=indent)
        except KernelError as e:
            raise _strip(e) from None
        env = dict(fn.__globals__)
        if fn.__closure__:
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
                try:
                    env[name] = cell.cell_contents
                except ValueError:
                    pass
        self.env = env
        # module-level constants the kernel reads are part of what it computes: key the cache on them
        used = sorted({n.id for n in _names(self.fdef)})
        self.env_key = "|".join(f"{n}={env[n]!r}" for n in used
                                if n in env and isinstance(env[n], (int, float, str, bool, DType)))
        from compiler import declare_params

        try:
            self.decls = declare_params(self.fdef, env)
        except KernelError as e:
            raise _strip(e) from None
        self.names = [d.name for d in self.decls]
        self._compiled: dict[tuple, tuple[Any, Any]] = {}
        self._fast: dict[tuple, tuple[Any, Any]] = {}
        self._binders: dict[tuple, list[_Binder]] = {}  # prepared positional launches (see Launch.__call__)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ launching
    def __getitem__(self, block_dim: int) -> "Launch":
        if not isinstance(block_dim, int) or block_dim < 1:
            raise ValueError(f"block_dim must be a positive int, got {block_dim!r}")
        return Launch(self, block_dim)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        Launch(self, None)(*args, **kwargs)

    def with_options(self, **options: Any) -> "Kernel":
        """The same kernel compiled with other options, e.g. `k.with_options(buffers=1)`."""
        k = object.__new__(Kernel)
        k.__dict__.update(self.__dict__)
        k.options = {**self.options, **options}
        k._compiled = {}
        k._fast = {}
        k._binders = {}
        k._lock = threading.Lock()
        return k

    def profile(self, *args: Any, **kwargs: Any) -> "Run":
        return Launch(self, None).profile(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<dsl.kernel {self.__name__} at {self.filename}:{self.first_line}>"

    # ------------------------------------------------------------------ binding
    def bind(self, args: tuple, kwargs: dict) -> tuple[list[Any], list[_Arg | None]]:
        loc = self.fdef.loc
        if len(args) > len(self.decls):
            raise KernelError("E401", f"{self.__name__}() takes {len(self.decls)} arguments, {len(args)} given", loc,
                              f"signature: {self.signature()}")
        values: list[Any] = list(args) + [_MISSING] * (len(self.decls) - len(args))
        for name, v in kwargs.items():
            if name not in self.names:
                raise KernelError("E401", f"{self.__name__}() has no parameter '{name}'", loc,
                                  f"signature: {self.signature()}")
            i = self.names.index(name)
            if values[i] is not _MISSING:
                raise KernelError("E401", f"{self.__name__}() got two values for '{name}'", loc)
            values[i] = v
        infos: list[_Arg | None] = []
        for i, d in enumerate(self.decls):
            if values[i] is _MISSING:
                if d.has_default:
                    values[i] = d.default
                else:
                    raise KernelError("E401", f"{self.__name__}() missing argument '{d.name}'", loc,
                                      f"signature: {self.signature()}")
            v = values[i]
            if d.kind == "gm":
                info = _tensor_info(v, d.name, d.loc)
                if info is None:
                    raise KernelError("E402", f"argument '{d.name}' must be a tensor (numpy array or torch tensor), "
                                      f"got {type(v).__name__}", d.loc)
                if d.dtype is not None and info.dtype != d.dtype:
                    raise KernelError("E402", f"argument '{d.name}' has dtype {info.dtype} but the kernel declares "
                                      f"GM[{d.dtype}]", d.loc, f"convert it, e.g. x.astype({d.dtype.np})")
                if d.rank is not None and len(info.shape) != d.rank:
                    raise KernelError("E402", f"argument '{d.name}' has rank {len(info.shape)} but the kernel declares"
                                      f" rank {d.rank}", d.loc)
                if len(info.shape) == 0:
                    raise KernelError("E402", f"argument '{d.name}' is a 0-d tensor", d.loc, "reshape it to (1,)")
                infos.append(info)
            else:
                if d.kind == "scalar":
                    if hasattr(v, "item") and getattr(v, "ndim", 1) == 0:
                        v = v.item()
                    if not isinstance(v, (int, float, bool, np.integer, np.floating)):
                        raise KernelError("E402", f"argument '{d.name}' must be a number, got {type(v).__name__}",
                                          d.loc)
                    if d.scalar_ty == "i64" and isinstance(v, (float, np.floating)):
                        raise KernelError("E402", f"argument '{d.name}' is declared int but got a float {v!r}", d.loc)
                    values[i] = v
                elif d.kind == "const" and not isinstance(v, (int, float, bool, str, type(None), DType)):
                    raise KernelError("E406", f"Const '{d.name}' must be an int, float, bool or dtype, got "
                                      f"{type(v).__name__}", d.loc)
                infos.append(None)
        return values, infos

    def signature(self) -> str:
        parts = []
        for d in self.decls:
            ann = {"gm": f"GM[{d.dtype or 'any'}]", "const": "Const", "scalar": "float" if d.scalar_ty == "f64" else "int"}
            parts.append(f"{d.name}: {ann[d.kind]}" + (f" = {d.default!r}" if d.has_default else ""))
        return f"{self.__name__}({', '.join(parts)})"

    def params_for(self, values: list[Any], infos: list[_Arg | None]) -> tuple[list[Any], tuple]:
        """The compiler's parameter specs and the specialisation key for bound arguments."""
        from compiler import ParamSpec

        spec: list[tuple[str | int, ...]] = []
        params: list[Any] = []
        slot = 0
        for d, v, info in zip(self.decls, values, infos):
            if d.kind == "gm":
                assert info is not None
                spec.append(("gm", info.dtype.name, len(info.shape)))
                params.append(ParamSpec(d.name, "gm", info.dtype, len(info.shape), slot))
                slot += 2 + len(info.shape)
            elif d.kind == "const":
                spec.append(("const", repr(v)))
                params.append(ParamSpec(d.name, "const", value=v))
            else:
                spec.append(("scalar", d.scalar_ty))
                params.append(ParamSpec(d.name, "scalar", slot=slot, scalar_ty=d.scalar_ty))
                slot += 1
        return params, tuple(spec)

    def specialize(self, values: list[Any], infos: list[_Arg | None], cfg: Any) -> tuple[Any, Any]:
        # the hot path: one dict lookup on what selects a specialisation (dtypes, ranks, Const values)
        sig = tuple((i.dtype.code, len(i.shape)) if i is not None else
                    (repr(v) if d.kind == "const" else d.scalar_ty) for d, v, i in zip(self.decls, values, infos))
        fast = (sig, cfg.digest, _knobs())
        hit = self._fast.get(fast)
        if hit is not None:
            return hit
        hit = self._specialize(values, infos, cfg)
        self._fast[fast] = hit
        return hit

    def _specialize(self, values: list[Any], infos: list[_Arg | None], cfg: Any) -> tuple[Any, Any]:
        from compiler import compile_kernel

        params, spec = self.params_for(values, infos)
        key = (spec, tuple(sorted(self.options.items())), cfg.name, cfg.fingerprint(), _knobs())
        hit = self._compiled.get(key)
        if hit is not None:
            return hit
        with self._lock:
            hit = self._compiled.get(key)
            if hit is not None:
                return hit
            try:
                # the file and line are part of the key: locations are baked into checks and traces
                where = f"{self.filename}:{self.first_line}\n{self.env_key}\n"
                compiled, plan = compile_kernel(self.fdef, where + self.source, self.env, params, spec, self.options,
                                                cfg)
            except KernelError as e:
                raise _strip(e) from None
            self._compiled[key] = (compiled, plan)
            return compiled, plan

    def emit(self, stage: str, *args: Any, config: str | None = None, **kwargs: Any) -> str:
        """Text of one compiler stage (ast, tile, core, llvm, asm) for these example arguments (the
        tile and core dumps print sizes for their shapes)."""
        from compiler import CONFIG, emit
        from simulator.config import load_config

        try:
            values, infos = self.bind(args, kwargs)
            params, _ = self.params_for(values, infos)
            shapes = {d.name: tuple(i.shape) for d, i in zip(self.decls, infos) if i is not None}
            return emit(stage, self.fdef, self.env, params, self.options, load_config(config or CONFIG.hw), shapes)
        except KernelError as e:
            raise _strip(e) from None


_MISSING = object()


def _def_index(lines: list[str]) -> int:
    """Index of the `def` line among a decorated function's source lines."""
    import ast

    try:
        node = ast.parse(textwrap.dedent("".join(lines))).body[0]
    except (SyntaxError, IndexError):
        return 0
    return node.lineno - 1 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else 0


def _knobs() -> tuple[bool, str, str]:
    """The compiler settings that change generated code (compiler.config): part of every in-memory
    specialisation key, as they are of the compiler's cache key (changing VINCI_HOST_ISA in a running
    process must not reuse code compiled for another target)."""
    return _CFG.stream, _CFG.host_isa, _CFG.cube_isa


def _names(node: Any) -> Iterator[A.Name]:
    """Every `Name` node in an AST."""
    from dsl import ast as A

    if isinstance(node, A.Name):
        yield node
    if isinstance(node, tuple):
        for x in node:
            yield from _names(x)
    elif hasattr(node, "__dataclass_fields__"):
        for f in node.__dataclass_fields__:
            if f != "loc":
                yield from _names(getattr(node, f))


class Launch:
    """A kernel bound to a core count (None: the config's)."""

    def __init__(self, kernel: Kernel, block_dim: int | None, config: str | None = None):
        self.kernel, self.block_dim, self.config = kernel, block_dim, config

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        stack = _record.active()
        if stack:
            if _record.timing_only(stack):
                _record.add(self.kernel.__name__, self._timed(args, kwargs))
            else:
                _record.add(self.kernel.__name__, self.profile(*args, **kwargs))
            return
        if not _CFG.interpret:
            # the hot path: a recipe made by an earlier launch of the same specialisation (keyword
            # arguments given by the same names in the same order)
            for b in self.kernel._binders.get((len(args), tuple(kwargs), self.block_dim, self.config or _CFG.hw,
                                               (_CFG.stream, _CFG.host_isa, _CFG.cube_isa)), ()):
                if b.launch(args + tuple(kwargs.values()) if kwargs else args):
                    return
        self._launch(args, kwargs, trace=False)

    def profile(self, *args: Any, **kwargs: Any) -> "Run":
        run = self._launch(args, kwargs, trace=True)
        assert run is not None  # a traced launch always returns its Run
        return run

    def prepare(self, *args: Any, **kwargs: Any) -> "Prepared":
        """Bind, specialise and marshal the arguments once; the result relaunches with no Python
        work but the call itself (the tensors must stay alive and keep their storage)."""
        from compiler import CONFIG

        k = self.kernel
        cfg = _config(self.config or CONFIG.hw)
        try:
            values, infos = k.bind(args, kwargs)
        except KernelError as e:
            raise _strip(e) from None
        compiled, plan = k.specialize(values, infos, cfg)
        return Prepared(self, compiled, plan, _words(plan, values, infos), cfg, self.block_dim or cfg.cores,
                        (args, kwargs))

    def on(self, config: str) -> "Launch":
        """The same launch on another hardware config (name or path)."""
        return Launch(self.kernel, self.block_dim, config)

    def _timed(self, args: tuple, kwargs: dict) -> "Run":
        """Run the kernel for a timed recording (dsl.record(timed=True)): the Run of an identical
        earlier launch when there is one (the binder's fast path runs the kernel), else a traced
        launch whose Run is kept for the next ones."""
        if not _CFG.interpret:
            for b in self.kernel._binders.get((len(args), tuple(kwargs), self.block_dim, self.config or _CFG.hw,
                                               (_CFG.stream, _CFG.host_isa, _CFG.cube_isa)), ()):
                filled = b.fill(args + tuple(kwargs.values()) if kwargs else args)
                if filled is not None:
                    run = _TIMES.get(_timing_key(b.plan, b.n, filled[0]))
                    if run is None:
                        break   # not timed yet: the full path below traces it
                    b.run(*filled)
                    return run
        run = self._launch(args, kwargs, trace=False, timed=True)
        assert run is not None  # a timed launch always returns a Run
        return run

    def _launch(self, args: tuple, kwargs: dict, trace: bool, timed: bool = False) -> "Run | None":
        from compiler import CONFIG

        k = self.kernel
        cfg = _config(self.config or CONFIG.hw)
        n = self.block_dim or cfg.cores
        try:
            values, infos = k.bind(args, kwargs)
        except KernelError as e:
            raise _strip(e) from None
        compiled, plan = k.specialize(values, infos, cfg)
        words = _words(plan, values, infos)
        known: Run | None = None
        if timed:   # a timed recording: trace only a launch not timed before
            tkey = _timing_key(plan, n, words)
            known = _TIMES.get(tkey)
            trace = known is None
        if CONFIG.interpret:
            from compiler import interpret

            try:
                events = interpret(_core_ir(k, plan, cfg), plan, values, infos, cfg, n, trace)
            except KernelError as e:
                raise _strip(e) from None
            if events is None:
                return known
            run = _run(events, plan, cfg, n, infos, keep_timeline=not timed)
            if timed:
                _TIMES.put(tkey, run)
            return run
        printer = _Printer(plan) if plan.strings is not None and getattr(plan, "prints", True) else None
        from simulator import launch as L

        nbytes = sum(info.nbytes for info in infos if info is not None)
        error, events = L.run(compiled.address, words, cfg, n, CONFIG.threads, printer, trace, nbytes)
        if printer is not None:
            printer.flush()
        if error is not None:
            raise _strip(_launch_error(plan, error))
        if not trace:
            if printer is None:
                key = (len(args), tuple(kwargs), self.block_dim, self.config or CONFIG.hw, _knobs())
                b = _Binder.make(k, args, kwargs, values, infos, plan, compiled, cfg, n)
                if b is not None:
                    k._binders[key] = [b] + k._binders.get(key, [])[:3]  # the newest first, a few kept
            return known
        assert events is not None  # a traced run returns its events
        run = _run(events, plan, cfg, n, infos, keep_timeline=not timed)
        if timed:
            _TIMES.put(tkey, run)
        return run


def _run(events: Any, plan: Any, cfg: Any, n: int, infos: list[_Arg | None], keep_timeline: bool = True) -> Run:
    """A traced launch's events (native or interpreted) timed on the model of the core."""
    from simulator.timing import simulate

    locs = [(loc.file, loc.line, loc.col, _line(loc)) for loc in plan.locs]
    gm = [info.nbytes for info in infos if info is not None]
    return Run(simulate(events, cfg, locs, gm, keep_timeline=keep_timeline), cfg, n, plan)




_CORE_IR: weakref.WeakKeyDictionary[Kernel, dict[tuple, Any]] = weakref.WeakKeyDictionary()


def _core_ir(k: Kernel, plan: Any, cfg: Any) -> Any:
    """The Core IR of `k` for the specialisation `plan` was compiled for: what the interpreter runs
    (made once per kernel and specialisation)."""
    from compiler import to_core

    key = (tuple(plan.params), tuple(sorted(k.options.items())), cfg.name, cfg.fingerprint())
    per = _CORE_IR.setdefault(k, {})
    kir = per.get(key)
    if kir is None:
        kir = per[key] = to_core(k.fdef, k.env, plan.params, k.options, cfg)
    return kir


def _words(plan: Any, values: list[Any], infos: list[_Arg | None]) -> ctypes.Array:
    """The launch's argument block: per GM tensor its address, numel and shape; scalars' values."""
    words = (ctypes.c_int64 * max(plan.nwords, 1))()
    for p, v, info in zip(plan.params, values, infos):
        if p.kind == "gm":
            assert info is not None  # bound for every GM parameter
            words[p.slot] = info.ptr
            words[p.slot + 1] = math.prod(info.shape)
            for j, s in enumerate(info.shape):
                words[p.slot + 2 + j] = s
        elif p.kind == "scalar":
            words[p.slot] = np.float64(v).view(np.int64).item() if p.scalar_ty == "f64" else int(v)
    return words


def _np_data_offset() -> int | None:
    """Where an ndarray object keeps its data pointer (numpy's `PyArrayObject_fields.data`, right
    after the object header), if this interpreter and numpy agree, checked on live arrays; else None
    (`__array_interface__`, ten times slower)."""
    off = object.__basicsize__  # the object header: refcount and type
    probes: list[np.ndarray] = [np.zeros(3, np.float32), np.zeros((2, 5), np.int8)[1:], np.arange(6.0)[::2].copy()]
    if all(ctypes.c_void_p.from_address(id(a) + off).value == a.__array_interface__["data"][0] for a in probes):
        return off
    return None


_NP_DATA = _np_data_offset()
_from_address = ctypes.c_void_p.from_address
_GM, _I64, _F64, _CONST = range(4)


def _np_ptr(a: np.ndarray) -> int:
    if _NP_DATA is None:
        return int(a.__array_interface__["data"][0])
    return _from_address(id(a) + _NP_DATA).value or 0


class _Binder:
    """One specialisation's positional launch, marshalled by a recipe made once: per argument the
    checks that keep a call in this specialisation (type, dtype, rank, contiguity, device) and the
    argument words it fills. A call that does not fit is refused (`launch` returns False) and takes
    the full path, which binds, checks and reports errors; nothing here is cached per tensor."""

    def __init__(self, steps: list[tuple], template: list[int], plan: Any, fn: Any, ctxs: Any, n: int):
        from simulator import launch as L

        self.steps, self.plan, self.fn, self.ctxs, self.n = steps, plan, fn, ctxs, n
        self.template = array.array("q", template)   # copied per call (array.__copy__: a memcpy)
        self.run_cores, self.inline = L.run_cores, L.INLINE_BYTES

    @staticmethod
    def make(k: Kernel, args: tuple, kwargs: dict, values: list[Any], infos: list[_Arg | None], plan: Any,
             compiled: Any, cfg: Any, n: int) -> "_Binder | None":
        """The recipe for calls like this one: the positional arguments, then the keyword ones in the
        order given (the binder's key holds their names); parameters left to their defaults are
        Consts or scalars whose words are in the template."""
        from simulator import launch as L

        given = list(range(len(args))) + [k.names.index(name) for name in kwargs]
        if any(d.kind == "gm" and i not in given for i, d in enumerate(k.decls)):
            return None
        steps: list[tuple] = []
        for v, i in zip(list(args) + list(kwargs.values()), given):
            d, p, info = k.decls[i], plan.params[i], infos[i]
            if d.kind == "gm":
                assert info is not None
                tp = type(v)
                if tp is not np.ndarray and not tp.__module__.startswith("torch"):
                    return None
                steps.append((_GM, p.slot, len(info.shape), v.dtype, info.dtype.itemsize, tp))
            elif d.kind == "scalar":
                steps.append((_F64 if d.scalar_ty == "f64" else _I64, p.slot))
            else:
                steps.append((_CONST, values[i], type(values[i])))
        return _Binder(steps, list(_words(plan, values, infos)), plan, L.kernel_fn(compiled.address), L.contexts(cfg, n),
                       n)

    def launch(self, args: tuple) -> bool:
        """Run the kernel on `args` if they fit this recipe; False (nothing done) if they do not."""
        filled = self.fill(args)
        if filled is None:
            return False
        self.run(*filled)
        return True

    def run(self, w: array.array, nbytes: int) -> None:
        """Run the kernel on argument words `w` (from `fill`) covering `nbytes` of tensors."""
        threads = 1 if nbytes < self.inline else _CFG.threads
        error = self.run_cores(self.fn, w.buffer_info()[0], self.ctxs, self.n, threads)
        if error is not None:
            raise _strip(_launch_error(self.plan, error))

    def fill(self, args: tuple) -> tuple[array.array, int] | None:
        """The argument words for `args` and the bytes of their tensors, if they fit this recipe;
        None if they do not."""
        if len(args) != len(self.steps):
            return None
        w = self.template.__copy__()
        nbytes = 0
        for st, v in zip(self.steps, args):
            kind = st[0]
            if kind == _GM:
                _, slot, rank, dt, es, tp = st
                if type(v) is not tp:
                    return None
                if tp is np.ndarray:
                    if v.dtype != dt or not v.flags.c_contiguous:
                        return None
                    ptr = _np_ptr(v)
                else:
                    if v.dtype is not dt or not (v.is_cpu or v.device.type == "npu") or not v.is_contiguous():
                        return None
                    ptr = v.data_ptr()
                shape = v.shape
                if len(shape) != rank:
                    return None
                w[slot] = ptr
                if rank == 1:
                    numel = w[slot + 2] = shape[0]
                else:
                    numel = math.prod(shape)
                    for j in range(rank):
                        w[slot + 2 + j] = shape[j]
                w[slot + 1] = numel
                nbytes += numel * es
            elif kind == _I64:
                if type(v) is not int:
                    return None
                w[st[1]] = v
            elif kind == _F64:
                if type(v) is not float and type(v) is not int:
                    return None
                w[st[1]] = _f64_bits(v)
            elif v is not st[1] and (type(v) is not st[2] or v != st[1]):
                return None
        return w, nbytes


def _f64_bits(v: float) -> int:
    """The IEEE-754 bits of float(v) as a signed 64-bit word (struct: ~5x cheaper than numpy here)."""
    return _I64_WORD.unpack(_F64_WORD.pack(v))[0]


_F64_WORD, _I64_WORD = struct.Struct("<d"), struct.Struct("<q")


class Prepared:
    """A launch with its arguments marshalled (`kernel[n].prepare(...)`): calling it runs the kernel
    again on the same tensors; `.profile()` times it."""

    def __init__(self, launch: "Launch", compiled: Any, plan: Any, words: ctypes.Array, cfg: Any, n: int,
                 bound: tuple):
        from simulator import launch as L

        self.launch, self.compiled, self.plan, self.words, self.cfg, self.n = launch, compiled, plan, words, cfg, n
        self._bound = bound  # keeps the tensors alive
        self._fn = L.kernel_fn(compiled.address)
        self._ctxs = L.contexts(cfg, n)
        self._argp = ctypes.addressof(words)
        self._run_cores = L.run_cores
        self._print = getattr(plan, "prints", True)
        nbytes = sum(math.prod(a.shape) * a.dtype.itemsize for a in self._tensors())
        self._threads = 1 if nbytes < L.INLINE_BYTES else _CFG.threads

    def _tensors(self) -> list[Any]:
        args, kwargs = self._bound
        return [v for v in (*args, *kwargs.values()) if hasattr(v, "shape") and hasattr(v, "dtype")]

    def __call__(self) -> None:
        stack = _record.active()
        if stack:
            if _record.timing_only(stack):
                run = _TIMES.get(_timing_key(self.plan, self.n, self.words))
                if run is None:
                    args, kwargs = self._bound
                    run = self.launch._launch(args, kwargs, trace=False, timed=True)
                    assert run is not None  # a timed launch always returns a Run
                    _record.add(self.launch.kernel.__name__, run)
                    return
                _record.add(self.launch.kernel.__name__, run)
            else:
                _record.add(self.launch.kernel.__name__, self.profile())
                return
        if self._print:
            from simulator import launch as L

            printer = _Printer(self.plan)
            error, _ = L.run(self.compiled.address, self.words, self.cfg, self.n, self._threads, printer, False)
        else:
            error = self._run_cores(self._fn, self._argp, self._ctxs, self.n, self._threads)
        if error is not None:
            raise _strip(_launch_error(self.plan, error))

    def profile(self) -> "Run":
        args, kwargs = self._bound
        return self.launch.profile(*args, **kwargs)


_CONFIGS: dict[str, Any] = {}


def _config(name: str) -> Any:
    """The hardware config, loaded once per process (launches must not read files)."""
    cfg = _CONFIGS.get(name)
    if cfg is None:
        from simulator.config import load_config

        cfg = _CONFIGS[name] = load_config(name)
    return cfg


def _line(loc: SourceLoc) -> str:
    from dsl.errors import source_line

    return (source_line(loc.file, loc.line) or "").strip()


def _launch_error(plan: Any, error: Any) -> KernelError:
    info = plan.checks[error.check]
    n = info.message.count("%d")
    try:
        msg = info.message % tuple(error.values[:n])
    except (TypeError, ValueError):
        msg = info.message
    return KernelError(info.code, f"{msg} (core {error.core})", info.loc, info.hint or None)


class _Printer:
    """Collects dsl.print items from the kernel and prints one line per call, prefixed by core."""

    def __init__(self, plan: Any):
        self.plan = plan
        self.parts: dict[int, list[str]] = {}
        self.lines: list[str] = []

    def __call__(self, core: int, vals: list[int]) -> None:
        from simulator import abi

        loc, item, kind, a, b, c, d, e = vals
        parts = self.parts.setdefault(core, [])
        if kind == abi.PRINT_END:
            sys.stdout.write(f"[core {core}] " + " ".join(parts) + "\n")
            self.parts[core] = []
        elif kind == abi.PRINT_INT:
            parts.append(str(a))
        elif kind == abi.PRINT_FLOAT:
            parts.append(repr(float(np.int64(a).view(np.float64))))
        elif kind == abi.PRINT_STR:
            parts.append(str(self._str(loc, item)))
        elif kind == abi.PRINT_TILE:
            dt = BY_CODE[b]
            rows, cols, stride = c, d, e
            buf = (ctypes.c_char * max(rows * stride * dt.itemsize, 1)).from_address(a)
            # ctypes arrays are buffers, but typeshed only says so (__buffer__) for Python >= 3.12
            arr = np.frombuffer(buf, dtype=dt.np, count=rows * stride).reshape(rows, stride)[:, :cols]  # type: ignore[call-overload]
            parts.append(np.array2string(arr.copy(), precision=4, threshold=64))

    def _str(self, loc: int, item: int) -> str:
        return self.plan.strings.get((loc, item), "?")

    def flush(self) -> None:
        sys.stdout.flush()


class Run:
    """A profiled launch: cycles and per-pipe figures from the timing model, and the trace."""

    def __init__(self, profile: Any, cfg: Any, n: int, plan: Any):
        self.profile, self.cfg, self.block_dim, self.plan = profile, cfg, n, plan

    @property
    def cycles(self) -> int:
        return self.profile.cycles

    @property
    def pipes(self) -> dict[str, float]:
        """Busy fraction of each pipe over the kernel's cycles (averaged over cores)."""
        return dict(self.profile.utilization)

    @property
    def bound(self) -> int:
        return self.profile.bound

    @property
    def efficiency(self) -> float:
        return self.profile.efficiency

    @property
    def seconds(self) -> float:
        return self.profile.seconds

    @property
    def cube_flops(self) -> int:
        """FLOPs the cube did (2 per MAC of every issued mmad, unpadded m x n x k)."""
        return self.profile.cube_flops

    def report(self) -> str:
        """The profile's summary; its cube line compares against the peak of the dtype that ran."""
        return self.profile.report()

    def save_trace(self, path: str) -> None:
        self.profile.save_trace(path)

    def __repr__(self) -> str:
        return (f"<Run {self.plan.name}[{self.block_dim}]: {self.cycles} cycles, bound {self.bound}, "
                f"efficiency {self.efficiency:.1%}, {self.profile.active_cores} of {self.profile.n_cores} "
                f"cores had work>")


def kernel(fn: Any = None, **options: Any) -> Any:
    """Decorator: `@dsl.kernel` or `@dsl.kernel(buffers=1)`."""
    if fn is None:
        return lambda f: Kernel(f, options)
    return Kernel(fn, options)
