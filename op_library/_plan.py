"""Per-signature launch plans: the host work of a small op done once, not per call.

An op's wrapper validates its arguments, works out shapes, dtypes, tilings and kernel constants,
then launches kernels. All of that depends only on a few facts about the call (the op, each
tensor's dtype and shape, the scalar arguments that matter), so it is memoised: a `Plan` made on
the first call with a given key allocates the outputs and launches the kernels on later calls with
nothing but a dict lookup, the output allocation and one native call per kernel.

A plan launches each kernel through a `Launcher`: the kernel's argument block marshalled once from
the first call (`Launch.prepare`), where a later call patches only the GM tensors' addresses. The
key pins everything else the block holds (shapes, scalars, Const values: the specialisation), so a
launcher takes contiguous CPU tensors of exactly the shapes and dtypes it was made with; the
wrappers only look a plan up for such tensors (`tensor_sig`) and take their ordinary path for
anything else. Inside `dsl.record()` and under `VINCI_INTERPRET` launches go through the ordinary
kernel call (traced, recorded, interpreted), so profiles and the interpreter see every kernel; a
kernel that fails is launched again the ordinary way, which raises its `KernelError`.

Caches are bounded (least recently used entries dropped) and keyed by value, never by `id()`. The
hardware config and the compiler knobs that select code (`compiler.CONFIG`) are checked on every
lookup; a change clears the cache.
"""
from __future__ import annotations

import array
import importlib
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from compiler import CONFIG as _CFG
from dsl.kernel import Kernel, Launch
from simulator import launch as _L

# dsl.record's per-thread stack of open recordings, read directly: `dsl.record.active()` costs
# ~1 us per call (getattr on a thread-local that lacks the attribute raises inside), this ~0.05 us
# (`dsl.record` the module: the package's `record` attribute is the context manager)
_REC_MOD = importlib.import_module("dsl.record")
_REC_LOCAL = _REC_MOD._LOCAL
_timing_only, _record_add = _REC_MOD.timing_only, _REC_MOD.add

_PACK_F64 = struct.Struct("=d").pack_into
_CONTIG = torch.contiguous_format
_empty_like = torch.empty_like

__all__ = ["Ref", "Launcher", "Plan", "Builder", "PlanCache", "PLANS", "tensor_sig", "sigs", "scalar_sig", "fast_ok"]


def fast_ok() -> bool:
    """True when launches may take the marshalled fast path (no recording, no interpreter)."""
    return not _CFG.interpret and not _REC_LOCAL.__dict__.get("stack")


def _env() -> tuple[Any, ...]:
    """The settings a compiled specialisation and its launch depend on (compiler.config)."""
    return _CFG.hw, _CFG.stream, _CFG.host_isa, _CFG.cube_isa, _CFG.threads, _CFG.interpret


def tensor_sig(t: torch.Tensor) -> tuple[Any, ...] | None:
    """What a plan keys a tensor argument by: (dtype, shape) of a contiguous CPU tensor; None for
    any other tensor (the wrapper then takes its ordinary path)."""
    if t.is_cpu and t.is_contiguous():
        return t.dtype, t.shape
    return None


def sigs(ts: Sequence[Any]) -> list[Any] | None:
    """The key parts of tensor arguments (None entries allowed: an absent optional tensor): dtype
    and shape of each contiguous CPU tensor; None if any is not one (or is not a tensor)."""
    out: list[Any] = []
    try:
        for t in ts:
            if t is None:
                out.append(None)
            elif t.is_cpu and t.is_contiguous():
                out.append(t.dtype)
                out.append(t.shape)
            else:
                return None
    except AttributeError:   # not a tensor: the ordinary path reports it
        return None
    return out


def scalar_sig(v: Any) -> tuple[Any, ...] | None:
    """A Python number as a key: its type and exact value (-0.0, NaN and each float bit pattern
    apart; 1, 1.0 and True apart); None for anything else."""
    tp = type(v)
    if tp is float:
        return float, v.hex()
    if tp is int or tp is bool:
        return tp, v
    return None


class Ref:
    """A GM argument of a planned launch: the plan's tensor `index` (its inputs, then the tensors it
    allocates, then its constants), viewed as `shape` (None: as it is)."""

    __slots__ = ("index", "shape")

    def __init__(self, index: int, shape: Sequence[int] | None = None):
        self.index = index
        self.shape = None if shape is None else tuple(int(s) for s in shape)

    def resolve(self, env: Sequence[torch.Tensor]) -> torch.Tensor:
        t = env[self.index]
        return t if self.shape is None else t.view(self.shape)


class Launcher:
    """One kernel launch with every argument but the GM tensors' addresses fixed.

    Made from a first call (`args` with `Ref`s resolved against `env`); calling it with a new env
    writes the tensors' addresses into a copy of the marshalled argument block and runs the cores.
    `scalars` (optional, per call) replace the values of the kernel's scalar (float / int)
    parameters, in declaration order (they must be passed positionally)."""

    __slots__ = ("kernel", "block_dim", "args", "kwargs", "refs", "slots", "template", "fn", "ctxs", "n",
                 "threads", "fast", "scalar_pos", "scalar_slots", "pairs", "scalar_pack", "runs")

    def __init__(self, kernel: Kernel, block_dim: int | None, args: tuple[Any, ...], kwargs: dict[str, Any],
                 env: Sequence[torch.Tensor]):
        self.kernel, self.block_dim, self.args, self.kwargs = kernel, block_dim, args, kwargs
        gm = [i for i, d in enumerate(kernel.decls) if d.kind == "gm"]
        if any(i >= len(args) or not isinstance(args[i], Ref) for i in gm):
            raise TypeError(f"{kernel.__name__}: a planned launch passes every GM argument positionally as a Ref")
        self.refs = tuple(args[i].index for i in gm)
        self.scalar_pos = tuple(i for i, d in enumerate(kernel.decls) if d.kind == "scalar" and i < len(args))
        real = self._resolve(env)
        prep = Launch(kernel, block_dim).prepare(*real, **kwargs)
        plan = prep.plan
        self.fast = not (plan.strings is not None and getattr(plan, "prints", True))
        self.slots = tuple(p.slot for p in plan.params if p.kind == "gm")
        self.scalar_slots = tuple((plan.params[i].slot, plan.params[i].scalar_ty == "f64") for i in self.scalar_pos)
        # f64 scalars in consecutive words (the usual layout): one pack_into for all of them
        ss = self.scalar_slots
        self.scalar_pack: tuple[Any, int] | None = None
        if ss and all(f for _, f in ss) and [s for s, _ in ss] == list(range(ss[0][0], ss[0][0] + len(ss))):
            self.scalar_pack = (struct.Struct(f"={len(ss)}d").pack_into, 8 * ss[0][0])
        assert len(self.slots) == len(self.refs)
        self.pairs = tuple(zip(self.slots, self.refs))
        self.template = array.array("q", prep.words)
        self.fn = _L.kernel_fn(prep.compiled.address)
        self.ctxs = _L.contexts(prep.cfg, prep.n)
        self.n = prep.n
        nbytes = sum(real[i].numel() * real[i].element_size() for i in gm)
        self.threads = 1 if nbytes < _L.INLINE_BYTES else _CFG.threads
        self.runs: dict[tuple[Any, ...] | None, Any] = {}   # timed Runs by scalar values

    def _resolve(self, env: Sequence[torch.Tensor], scalars: Sequence[Any] | None = None) -> list[Any]:
        args = [a.resolve(env) if isinstance(a, Ref) else a for a in self.args]
        if scalars is not None:
            for i, v in zip(self.scalar_pos, scalars, strict=True):
                args[i] = v
        return args

    def slow(self, env: Sequence[torch.Tensor], scalars: Sequence[Any] | None = None) -> None:
        """The ordinary launch (bound, checked, recorded or interpreted as any kernel call)."""
        Launch(self.kernel, self.block_dim)(*self._resolve(env, scalars), **self.kwargs)

    def timed(self, env: Sequence[torch.Tensor], scalars: Sequence[Any] | None = None) -> None:
        """The launch inside timed recordings only (dsl.record(timed=True)): a plan's shapes are
        fixed, so its Run is kept per scalar values; the first launch is timed on the ordinary path."""
        # integer scalars only: float ones scale data (see dsl.kernel._timing_key)
        key = None if scalars is None else tuple(v for (_, f64), v in zip(self.scalar_slots, scalars) if not f64)
        run = self.runs.get(key)
        if run is None or not self.fast:
            self.slow(env, scalars)   # records the Run (dsl.kernel keeps it for identical launches)
            if len(self.runs) < 64:
                self.runs[key] = _REC_LOCAL.stack[-1].runs[-1][1]
            return
        self(env, scalars)
        _record_add(self.kernel.__name__, run)

    def __call__(self, env: Sequence[torch.Tensor], scalars: Sequence[Any] | None = None) -> None:
        if not self.fast:
            self.slow(env, scalars)
            return
        w = self.template.__copy__()
        for s, r in self.pairs:
            w[s] = env[r].data_ptr()
        if scalars is not None and self.scalar_pack is not None:
            pack, off = self.scalar_pack
            pack(w, off, *scalars)
        elif scalars is not None:
            for (s, f64), v in zip(self.scalar_slots, scalars, strict=True):
                if f64:
                    _PACK_F64(w, 8 * s, v)   # the f64's bits, as the launch words hold them
                else:
                    w[s] = int(v)
        if _L.run_cores(self.fn, w.buffer_info()[0], self.ctxs, self.n, self.threads) is not None:
            self.slow(env, scalars)  # raises the kernel's KernelError with its source location
            raise RuntimeError(f"{self.kernel.__name__}: a kernel check failed on the fast path but not on "
                               f"the ordinary one")


class Plan:
    """The host work of one op signature: tensors to allocate, kernels to launch, what to return.

    `env` during a call is the op's input tensors, then one tensor per item in `items` order: a
    fresh allocation (a tuple holding a prototype: one element expanded to the shape and dtype, which
    `torch.empty_like(proto, memory_format=torch.contiguous_format)` copies, torch.empty's exact
    result at ~2/3 of its cost) or a constant tensor the plan keeps (a placeholder or a read-only
    table); `ret(env)` makes the result."""

    __slots__ = ("items", "launches", "ret", "nin", "scalars_of")

    def __init__(self, inputs: Sequence[torch.Tensor | None], ret: Callable[[list[torch.Tensor]], Any]):
        self.nin = len(inputs)
        self.items: list[Any] = []
        self.launches: list[Launcher] = []
        self.ret = ret
        #: for a plan keyed by its Python-number arguments' types, not values: maps those values to
        #: the one launch's scalar arguments (`call_scalars`)
        self.scalars_of: Callable[..., tuple[Any, ...]] | None = None

    def alloc(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """Add an allocation; returns this call's tensor."""
        return torch.empty_like(self.adopt(shape, dtype), memory_format=_CONTIG)

    def adopt(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """Add an allocation (whose tensor for this call the caller may have made already); returns
        its prototype."""
        shp = tuple(int(s) for s in shape)
        proto = torch.empty(1, dtype=dtype).expand(shp) if shp else torch.empty((), dtype=dtype)
        self.items.append((proto,))
        return proto

    def const(self, t: torch.Tensor) -> None:
        self.items.append(t)

    def env(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The inputs, then the plan's allocations (fresh) and constants."""
        env = list(inputs)
        for it in self.items:
            env.append(torch.empty_like(it[0], memory_format=_CONTIG) if type(it) is tuple else it)
        return env

    def launch(self, env: list[torch.Tensor], kernel: Any, *args: Any, block_dim: int | None = None,
               **kwargs: Any) -> None:
        """While building: run `kernel(*args, **kwargs)` on this first call's env and keep its launcher."""
        ln = Launcher(kernel, block_dim, args, kwargs, env)
        if fast_ok():
            ln(env)
        else:
            ln.slow(env)
        self.launches.append(ln)

    def call_scalars(self, inputs: Sequence[torch.Tensor], scalars: Sequence[Any]) -> Any:
        """A call of a one-launch plan with this call's values of the kernel's scalar parameters."""
        env = self.env(inputs)
        ln = self.launches[0]
        stack = _REC_LOCAL.__dict__.get("stack")
        if not _CFG.interpret and not stack:
            ln(env, scalars)
        elif not _CFG.interpret and _timing_only(stack):
            ln.timed(env, scalars)
        else:
            ln.slow(env, scalars)
        return self.ret(env)

    def __call__(self, *inputs: torch.Tensor) -> Any:
        # the hot path: env() and fast_ok() inlined (a Python call costs ~0.1-0.2 us here)
        env = list(inputs)
        for it in self.items:
            env.append(_empty_like(it[0], memory_format=_CONTIG) if type(it) is tuple else it)
        stack = _REC_LOCAL.__dict__.get("stack")
        if not _CFG.interpret and not stack:
            for ln in self.launches:
                ln(env)
        elif not _CFG.interpret and _timing_only(stack):
            for ln in self.launches:
                ln.timed(env)
        else:
            for ln in self.launches:
                ln.slow(env)
        return self.ret(env)


class Builder:
    """One code path for an op's host work, run either directly or into a plan.

    With a key, kernels launch through a new `Plan` (GM arguments as `Ref`s) that `finish` stores
    under the key; without one (a non-contiguous or non-CPU input, the interpreter) the same calls
    launch the kernels on the tensors. The env holds `inputs` (tensors, or None for an absent
    optional one; made contiguous when there is no key) at 0.., then each `alloc` / `const` in the
    order made."""

    def __init__(self, key: Hashable | None, inputs: Sequence[torch.Tensor | None],
                 ret: Callable[[list[torch.Tensor]], Any]):
        self.key, self.ret = key, ret
        self.env: list[Any]   # tensors (None for an absent optional input)
        if key is not None:
            self.plan: Plan | None = Plan(inputs, ret)
            self.env = list(inputs)
        else:
            self.plan = None
            self.env = [t.contiguous() if t is not None else None for t in inputs]

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.env[i]

    def alloc(self, shape: Sequence[int], dtype: torch.dtype) -> int:
        """A tensor allocated on every call; its env index."""
        if self.plan is not None:
            self.env.append(self.plan.alloc(shape, dtype))
        else:
            self.env.append(torch.empty(tuple(shape), dtype=dtype))
        return len(self.env) - 1

    def const(self, t: torch.Tensor) -> int:
        """A tensor the plan keeps (a placeholder no kernel writes, or a read-only table); its env index."""
        if self.plan is not None:
            self.plan.const(t)
        self.env.append(t)
        return len(self.env) - 1

    def v(self, i: int, shape: Sequence[int]) -> Any:
        """env[i] viewed as shape, as a kernel argument."""
        return Ref(i, shape) if self.plan is not None else self.env[i].view(tuple(shape))

    def run(self, kernel: Any, *args: Any, block_dim: int | None = None, **kwargs: Any) -> None:
        """kernel[block_dim](*args, **kwargs) (block_dim None: the config's core count)."""
        if self.plan is not None:
            self.plan.launch(self.env, kernel, *args, block_dim=block_dim, **kwargs)
        else:
            Launch(kernel, block_dim)(*args, **kwargs)

    def finish(self) -> Any:
        """Store the plan (if any) and return this call's result."""
        if self.plan is not None:
            PLANS.put(self.key, self.plan)
        return self.ret(self.env)


class PlanCache:
    """A bounded LRU map key -> Plan, cleared when compiler.CONFIG changes what a launch means."""

    def __init__(self, maxsize: int = 512):
        self.maxsize = maxsize
        self._d: OrderedDict[Hashable, Any] = OrderedDict()
        self._env = _env()
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        self.off = 0   # > 0 inside `disabled()`

    def enabled(self) -> bool:
        """Plans are made and used unless kernels run in the interpreter (or inside `disabled()`)."""
        return not _CFG.interpret and not self.off

    @contextmanager
    def disabled(self) -> Iterator[None]:
        """Every op takes its ordinary (unplanned) path inside the block: the yardstick of the tests."""
        self.off += 1
        try:
            yield
        finally:
            self.off -= 1

    def get(self, key: Hashable) -> Any:
        if _CFG.interpret or self.off:
            return None
        if _env() != self._env:
            with self._lock:
                self._d.clear()
                self._env = _env()
            return None
        p = self._d.get(key)
        if p is None:
            self.misses += 1
            return None
        self.hits += 1
        try:
            self._d.move_to_end(key)
        except KeyError:  # dropped by another thread in between: still a valid plan
            pass
        return p

    def put(self, key: Hashable, plan: Any) -> None:
        with self._lock:
            self._d[key] = plan
            self._d.move_to_end(key)
            while len(self._d) > self.maxsize:
                self._d.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()

    def __len__(self) -> int:
        return len(self._d)


#: the one cache every op_library wrapper shares (keys start with the op's name)
PLANS = PlanCache()
