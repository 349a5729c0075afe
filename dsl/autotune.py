"""`@dsl.autotune`: choose a kernel's Const values by profiling candidates on the timing model.

    @dsl.autotune(BM=[64, 128, 256], BN=[64, 128, 256], BK=[32, 64, 128])
    @dsl.kernel
    def matmul(a: GM, b: GM, c: GM, BM: Const[int] = 128, BN: Const[int] = 128, BK: Const[int] = 64):
        ...

    matmul(a, b, c)                   # the first launch of a shape class tunes it, then runs the winner
    matmul[8](a, b, c)                # each block_dim and hardware config is tuned on its own
    print(matmul.best(a, b, c))       # the choice and its cycles (tuning if needed)
    print(matmul.tune_table(a, b, c)) # every candidate, ranked

Candidates are the cartesian product of the lists, or `configs=[{...}, ...]`. Each one is launched
once through the timing model on scratch copies of the tensors the kernel writes, so tuning leaves
the caller's tensors alone; candidates that do not compile or fit (E3xx capacity errors, ...) are
skipped and listed. The fewest simulated cycles win and ties go to the earlier candidate: the choice
depends neither on host timing nor on the number of host threads. A tuned Const passed explicitly
is used as given (the search runs over the others).

The choice is kept in memory and on disk (`<VINCI_CACHE_DIR>/autotune/`, a JSON file per kernel),
keyed by the kernel's source, the shape class (each tensor's dtype and shape with every dim rounded
up to a power of two, and the Const values passed; or the value of `key=`), the hardware config and
block_dim. An entry is trusted only while the compiler would still build the same code for the
winner (its symbol carries the compiler's own cache key); a missing, stale or corrupt file means a
new tune, never an error. `VINCI_AUTOTUNE=0` ignores choices saved on disk.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from compiler import CONFIG
from dsl import ast as A
from dsl.errors import KernelError
from dsl.kernel import Kernel, Launch, Run, _config, _strip
from dsl.types import DTYPES, DType, from_numpy, from_torch

#: environment variable: 0 ignores autotune choices saved on disk (each shape class is tuned again,
#: once per process, and the new choice saved)
_VERSION = 1
_FILE_LOCK = threading.Lock()

Config = dict[str, Any]
Progress = Callable[["Trial"], None]


# ---------------------------------------------------------------------------------------- results
@dataclass
class Trial:
    """One candidate's outcome on the timing model, or why it was skipped."""

    config: Config
    cycles: int | None = None
    seconds: float = 0.0  # simulated time
    pipes: dict[str, float] = field(default_factory=dict)  # busy fraction per pipe
    efficiency: float = 0.0
    bound_pipe: str = ""
    error: str = ""  # 'error[E301]: tile of ...' when the candidate did not compile, fit or run
    where: str = ""  # file:line:col of that error

    @property
    def ok(self) -> bool:
        return self.cycles is not None

    @property
    def m_busy(self) -> float:
        """Busy fraction of the cube (M pipe)."""
        return self.pipes.get("M", 0.0)


@dataclass
class Tuning:
    """The autotuner's answer for one shape class: every candidate's trial and the winner."""

    kernel: str
    shape_class: str
    hw: str
    block_dim: int
    trials: list[Trial]
    best: int  # index of the winner in `trials` (candidate order)
    seconds: float  # wall time the tune took
    symbol: str = ""  # the winner's compiled symbol (validates a cached entry)
    source: str = "tuned"  # tuned | disk | memory

    @property
    def config(self) -> Config:
        return self.trials[self.best].config

    @property
    def cycles(self) -> int:
        c = self.trials[self.best].cycles
        assert c is not None  # the winner ran
        return c

    @property
    def failed(self) -> list[Trial]:
        return [t for t in self.trials if not t.ok]

    def ranked(self) -> list[Trial]:
        """Candidates that ran, fewest cycles first (ties in candidate order), then the failures."""
        ok = sorted((i for i, t in enumerate(self.trials) if t.ok), key=lambda i: (self.trials[i].cycles, i))
        return [self.trials[i] for i in ok] + self.failed

    def table(self, top: int | None = None) -> str:
        """The ranked candidates as text: cycles, time, M busy, efficiency, the bounding pipe, config."""
        ranked = self.ranked()
        ok = [t for t in ranked if t.ok]
        out = [self._title(),
               f"  {'rank':>4}  {'cycles':>10}  {'us':>9}  {'M busy':>6}  {'effic.':>6}  {'bound':<5}  config"]
        for i, t in enumerate(ok[:top] if top else ok):
            out.append(f"  {i + 1:>4}  {t.cycles:>10}  {t.seconds * 1e6:>9.2f}  {t.m_busy:>6.1%}  {t.efficiency:>6.1%}"
                       f"  {t.bound_pipe:<5}  {format_config(t.config)}")
        if top and len(ok) > top:
            out.append(f"  ... {len(ok) - top} more")
        for t in self.failed:
            out.append(f"  {'-':>4}  {'failed':>10}  {'':>9}  {'':>6}  {'':>6}  {'':<5}  {format_config(t.config)}: "
                       f"{t.error}")
        return "\n".join(out)

    def _title(self) -> str:
        how = f"tuned in {self.seconds:.1f} s" if self.source == "tuned" else \
            f"from the {self.source} cache (tuned in {self.seconds:.1f} s)"
        fails = f", {len(self.failed)} failed" if self.failed else ""
        return (f"{self.kernel}[{self.block_dim}] on {self.hw} for {self.shape_class}: "
                f"{len(self.trials)} candidates{fails}, {how}")

    def __str__(self) -> str:
        t = self.trials[self.best]
        return (f"{self.kernel}[{self.block_dim}] on {self.hw} for {self.shape_class}: {format_config(t.config)}, "
                f"{t.cycles} cycles ({t.seconds * 1e6:.2f} us), M busy {t.m_busy:.1%}, efficiency "
                f"{t.efficiency:.1%}; best of {len(self.trials)}"
                + (f" ({len(self.failed)} failed)" if self.failed else "")
                + ("" if self.source == "tuned" else f", from the {self.source} cache"))

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "shape_class": self.shape_class, "hw": self.hw, "block_dim": self.block_dim,
                "best": self.best, "seconds": self.seconds, "symbol": self.symbol,
                "trials": [{**t.__dict__, "config": _config_json(t.config)} for t in self.trials]}

    @staticmethod
    def from_json(d: dict[str, Any], source: str) -> "Tuning":
        trials = [Trial(**{**t, "config": _config_from_json(t["config"])}) for t in d["trials"]]
        t = Tuning(d["kernel"], d["shape_class"], d["hw"], int(d["block_dim"]), trials, int(d["best"]),
                   float(d["seconds"]), d["symbol"], source)
        if not (0 <= t.best < len(trials) and trials[t.best].ok):
            raise ValueError("the recorded winner did not run")
        return t


def format_config(c: Config) -> str:
    return " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in c.items())


def _config_json(c: Config) -> list[list[Any]]:
    """A config as JSON: dtypes become {"dtype": name}; the order of the entries is kept."""
    return [[k, {"dtype": v.name} if isinstance(v, DType) else v] for k, v in c.items()]


def _config_from_json(items: list[list[Any]]) -> Config:
    return {k: DTYPES[v["dtype"]] if isinstance(v, dict) else v for k, v in items}


# ------------------------------------------------------------------------------- the decorator
def autotune(configs: Sequence[Config] | None = None, key: Callable[..., Any] | None = None,
             **space: Sequence[Any]) -> Callable[[Kernel], "Autotuned"]:
    """Decorator above `@dsl.kernel`: tune the named Const parameters on the timing model.

    `@dsl.autotune(BM=[64, 128], BK=[32, 64])` tries every combination (in that order);
    `@dsl.autotune(configs=[{"BM": 128, "BK": 64}, ...])` tries the listed ones. `key(*args, **kwargs)`,
    called with a launch's arguments, replaces the default shape class (each tensor's dtype and
    shape rounded up to powers of two); its repr names the class, so it must tell dtypes apart.
    """
    def wrap(k: Kernel) -> Autotuned:
        if isinstance(k, Autotuned) or not isinstance(k, Kernel):
            raise TypeError("@dsl.autotune(...) goes directly above @dsl.kernel, once")
        return Autotuned(k, candidates(k, space, configs), key)

    return wrap


def candidates(k: Kernel, space: Mapping[str, Sequence[Any]], configs: Sequence[Config] | None) -> list[Config]:
    """The search space as a list of configs, in order, without repeats; E601 if it is malformed."""
    consts = [d.name for d in k.decls if d.kind == "const"]

    def bad(msg: str, hint: str | None = None) -> KernelError:
        return _strip(KernelError("E601", msg, k.fdef.loc,
                                  hint or f"the Const parameters of {k.__name__} are: {', '.join(consts) or 'none'}"))

    if configs is not None and space:
        raise bad("autotune takes configs=[...] or one list per parameter, not both",
                  "put every combination into configs=[{...}, ...]")
    if configs is None:
        if not space:
            raise bad(f"autotune of '{k.__name__}' has nothing to try", "e.g. @dsl.autotune(TILE=[1024, 2048, 4096])")
        for name, vals in space.items():
            if not isinstance(vals, (list, tuple)) or not vals:
                raise bad(f"autotune {name}=... must be a non-empty list of values, got {vals!r}",
                          f"e.g. {name}=[64, 128, 256]")
        cands = [dict(zip(space, combo)) for combo in itertools.product(*space.values())]
    else:
        if isinstance(configs, dict) or not all(isinstance(c, dict) for c in configs) or not configs:
            raise bad("autotune configs= must be a non-empty list of dicts", 'e.g. configs=[{"BM": 128, "BK": 64}]')
        cands = [dict(c) for c in configs]
    for c in cands:
        for name in c:
            if name not in consts:
                raise bad(f"autotune names '{name}', which is not a Const parameter of {k.__name__}")
    return _unique(cands)


def _unique(cands: list[Config]) -> list[Config]:
    seen: set[tuple] = set()
    out = []
    for c in cands:
        sig = tuple(sorted((n, repr(v)) for n, v in c.items()))
        if sig not in seen:
            seen.add(sig)
            out.append(c)
    return out


_META = ("shape", "dtype", "ndim")


def written_params(fdef: A.FunctionDef, names: set[str]) -> set[str]:
    """The GM parameters (of `names`) a kernel may write: roots of assignment targets and of
    `dsl.copy` destinations, and, to be safe, any parameter used otherwise than by reading a window
    of it (`x[t]`, `x.T[m, k]`) or its metadata (`x.shape`, `x.dtype`)."""
    written: set[str] = set()
    for node, parents in _walk(fdef.body, ()):
        if not (isinstance(node, A.Name) and node.id in names):
            continue
        top: A.Expr = node
        i = len(parents)
        meta = False
        while i > 0:  # climb the access path: x -> x.T -> x.T[m, k]
            p = parents[i - 1]
            if isinstance(p, A.Attribute) and p.value is top and p.attr in _META:
                meta = True
                break
            if not ((isinstance(p, A.Subscript) or isinstance(p, A.Attribute) and p.attr == "T") and p.value is top):
                break
            top, i = p, i - 1
        if meta:
            continue
        if not isinstance(top, A.Subscript) or _is_target(top, parents[:i]):
            written.add(node.id)
    return written


def _is_target(e: A.Expr, parents: tuple) -> bool:
    """Whether `e` (with these ancestors) is written: an assignment target, or dsl.copy's destination."""
    p = parents[-1] if parents else None
    if isinstance(p, A.Tuple) and len(parents) > 1:  # a, b[t] = ...
        e, p = p, parents[-2]
    if isinstance(p, A.Assign):
        return any(t is e for t in p.targets)
    if isinstance(p, A.AugAssign):
        return p.target is e
    if isinstance(p, A.Keyword):
        return p.name == "dst" and len(parents) > 1 and _call_name(parents[-2]) == "copy"
    if isinstance(p, A.Call):
        return _call_name(p) == "copy" and bool(p.args) and p.args[0] is e
    return False


def _call_name(c: Any) -> str:
    fn = c.func if isinstance(c, A.Call) else None
    return fn.attr if isinstance(fn, A.Attribute) else fn.id if isinstance(fn, A.Name) else ""


def _walk(node: Any, parents: tuple) -> Iterator[tuple[Any, tuple]]:
    if isinstance(node, tuple):
        for x in node:
            yield from _walk(x, parents)
        return
    if not hasattr(node, "__dataclass_fields__"):
        return
    yield node, parents
    for f in node.__dataclass_fields__:
        if f != "loc":
            yield from _walk(getattr(node, f), parents + (node,))


# ------------------------------------------------------------------------------ the kernel object
class Autotuned(Kernel):
    """A kernel whose tuned Const values are chosen per shape class by `@dsl.autotune`.
    Launch it like any kernel (`k(...)`, `k[8](...)`, `k[8].profile(...)`); `k.best(...)` and
    `k.tune_table(...)` show the choice."""

    def __init__(self, base: Kernel, cands: list[Config], key: Callable[..., Any] | None):
        self.__dict__.update(base.__dict__)  # the same parsed kernel and compile caches
        self.base = base
        self.candidates = cands
        self.tuned = list(dict.fromkeys(n for c in cands for n in c))
        self.key = key
        gm = {d.name for d in base.decls if d.kind == "gm"}
        self.written = written_params(base.fdef, gm)
        self._params = [(d.name, d.kind) for d in base.decls]
        self._pos = {d.name: i for i, d in enumerate(base.decls)}
        # launch key -> the config that runs, its tuning, and per positional argument count the
        # values that complete such a call
        self._chosen: dict[tuple, tuple[Config, Tuning | None, dict[int, tuple]]] = {}
        self._tunings: dict[tuple, Tuning] = {}
        self._tune_lock = threading.Lock()

    def __getitem__(self, block_dim: int) -> "AutoLaunch":
        if not isinstance(block_dim, int) or block_dim < 1:
            raise ValueError(f"block_dim must be a positive int, got {block_dim!r}")
        return AutoLaunch(self, block_dim)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        AutoLaunch(self, None)(*args, **kwargs)

    def profile(self, *args: Any, **kwargs: Any) -> "TunedRun":
        return AutoLaunch(self, None).profile(*args, **kwargs)

    def with_options(self, **options: Any) -> "Autotuned":
        return Autotuned(self.base.with_options(**options), self.candidates, self.key)

    def best(self, *args: Any, **kwargs: Any) -> Tuning:
        """The chosen config for these arguments and its cycles (tuning if needed)."""
        return AutoLaunch(self, None).best(*args, **kwargs)

    def tune_table(self, *args: Any, **kwargs: Any) -> str:
        """Every candidate for these arguments, ranked by cycles (tuning if needed)."""
        return AutoLaunch(self, None).tune_table(*args, **kwargs)

    def tune(self, args: tuple = (), kwargs: dict | None = None, *, force: bool = False,
             progress: Progress | None = None, threads: int | None = None) -> Tuning:
        """Tune for these arguments on all cores of the config; see `AutoLaunch.tune`."""
        return AutoLaunch(self, None).tune(args, kwargs, force=force, progress=progress, threads=threads)

    def __repr__(self) -> str:
        return (f"<dsl.autotune {self.__name__} over {len(self.candidates)} configs of "
                f"{', '.join(self.tuned)} at {self.filename}:{self.first_line}>")

    # -------------------------------------------------------------- choosing
    def _class(self, args: tuple, kwargs: dict) -> tuple:
        """The shape class of a launch's arguments (Const values given are part of it)."""
        parts: list[tuple] = []
        if self.key is not None:
            parts.append(("key", repr(self.key(*args, **kwargs))))
        given: Iterable[tuple[tuple[str, str], Any]] = zip(self._params, args)
        if kwargs:
            given = itertools.chain(given, ((self._params[self._pos[n]], kwargs[n]) for n in sorted(kwargs)
                                            if n in self._pos))
        for (name, kind), v in given:
            if kind == "gm":
                if self.key is None:
                    parts.append((name, _tensor_class(v)))
            elif kind == "const":
                parts.append((name, "=", repr(v)))
        return tuple(parts)

    def _with(self, args: tuple, kwargs: dict, choice: Config) -> tuple[tuple, dict]:
        """The launch's arguments with a config's values for the parameters the caller left out;
        positional when possible, so that repeated launches take the kernel's fast path."""
        extra = {n: v for n, v in choice.items() if n not in kwargs and self._pos[n] >= len(args)}
        if not extra:
            return args, kwargs
        if not kwargs:
            rest = self.base.decls[len(args):]
            if all(d.name in extra or d.has_default for d in rest):
                return args + tuple(extra[d.name] if d.name in extra else d.default for d in rest), kwargs
        return args, {**kwargs, **extra}

    def candidates_for(self, args: tuple, kwargs: dict) -> list[Config]:
        """The configs a launch with these arguments chooses from: tuned values the caller gave
        are used as given."""
        pinned = {n: args[self._pos[n]] for n in self.tuned if self._pos[n] < len(args)}
        pinned.update((n, kwargs[n]) for n in self.tuned if n in kwargs)
        return _unique([{**c, **pinned} for c in self.candidates]) if pinned else self.candidates


class AutoLaunch(Launch):
    """An autotuned kernel bound to a core count (None: the config's) and a hardware config."""

    def __init__(self, tuned: Autotuned, block_dim: int | None, config: str | None = None):
        super().__init__(tuned.base, block_dim, config)
        self.tuned = tuned

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        args, kwargs, _, _ = self._resolve(args, kwargs)
        Launch.__call__(self, *args, **kwargs)

    def profile(self, *args: Any, **kwargs: Any) -> "TunedRun":
        args, kwargs, choice, tuning = self._resolve(args, kwargs)
        return TunedRun(Launch.profile(self, *args, **kwargs), choice, tuning)

    def prepare(self, *args: Any, **kwargs: Any) -> Any:
        args, kwargs, _, _ = self._resolve(args, kwargs)
        return Launch(self.kernel, self.block_dim, self.config).prepare(*args, **kwargs)

    def on(self, config: str) -> "AutoLaunch":
        return AutoLaunch(self.tuned, self.block_dim, config)

    def best(self, *args: Any, **kwargs: Any) -> Tuning:
        """The chosen config for these arguments and its cycles (tuning if needed)."""
        return self.tune(args, kwargs)

    def tune_table(self, *args: Any, **kwargs: Any) -> str:
        """Every candidate for these arguments, ranked by cycles (tuning if needed)."""
        return self.tune(args, kwargs).table()

    def _where(self) -> tuple[Any, int]:
        cfg = _config(self.config or CONFIG.hw)
        return cfg, self.block_dim or cfg.cores

    def _resolve(self, args: tuple, kwargs: dict) -> tuple[tuple, dict, Config, Tuning | None]:
        """The arguments to launch with: the caller's, completed by the chosen config."""
        t = self.tuned
        cfg, n = self._where()
        mkey = (t._class(args, kwargs), n, cfg.name, cfg.digest)
        hit = t._chosen.get(mkey)
        if hit is None:
            cands = t.candidates_for(args, kwargs)
            if len(cands) == 1:  # nothing left to choose
                hit = (cands[0], None, {})
            else:
                tuned = self.tune(args, kwargs)
                hit = (tuned.config, tuned, {})
            t._chosen[mkey] = hit
        choice, tuning, tails = hit
        if not kwargs:  # the common call: positional arguments, completed by a tail made once
            tail = tails.get(len(args))
            if tail is not None:
                return args + tail, kwargs, choice, tuning
        a, kw = t._with(args, kwargs, choice)
        if not kwargs and not kw:
            tails[len(args)] = a[len(args):]
        return a, kw, choice, tuning

    def tune(self, args: tuple = (), kwargs: dict | None = None, *, force: bool = False,
             progress: Progress | None = None, threads: int | None = None) -> Tuning:
        """Tune for these arguments: from memory, else the disk cache, else by profiling every
        candidate (`force=True`: always profile). `progress(trial)` is called as each candidate
        finishes; `threads` host threads profile candidates side by side (default: VINCI_THREADS)."""
        t = self.tuned
        kwargs = dict(kwargs or {})
        cfg, n = self._where()
        cls = t._class(args, kwargs)
        mkey = (cls, n, cfg.name, cfg.digest)
        with t._tune_lock:
            hit = None if force else t._tunings.get(mkey)
            if hit is not None:
                return _as(hit, "memory")
            cands = t.candidates_for(args, kwargs)
            entry = f"{_class_text(cls)} | {cfg.name} {cfg.fingerprint()[:16]} | block_dim {n}"
            disk = CONFIG.disk_cache
            if not force and disk and CONFIG.autotune_cache:
                hit = self._load(entry, cands, args, kwargs)
            if hit is None:
                hit = self._run(args, kwargs, cands, _class_text(cls), cfg, n, progress,
                                threads or CONFIG.threads)
                if disk:
                    _store(t, entry, cands, hit)
            t._tunings[mkey] = hit
            t._chosen.pop(mkey, None)
            return hit

    def _load(self, entry: str, cands: list[Config], args: tuple, kwargs: dict) -> Tuning | None:
        """A saved tuning, if it is for this kernel source and these candidates, and the compiler
        would still build the same code for its winner."""
        t = self.tuned
        data = _read(_cache_file(t.base))
        saved = data["entries"].get(entry) if data.get("source") == _source_hash(t.base) else None
        if not isinstance(saved, dict) or saved.get("candidates") != [_config_json(c) for c in cands]:
            return None
        try:
            tuning = Tuning.from_json(saved["tuning"], "disk")
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        a, kw = t._with(args, kwargs, tuning.config)
        try:
            prepared = Launch(self.kernel, self.block_dim, self.config).prepare(*a, **kw)
        except KernelError:
            return None
        return tuning if prepared.plan.symbol == tuning.symbol else None

    def _run(self, args: tuple, kwargs: dict, cands: list[Config], cls: str, cfg: Any, n: int,
             progress: Progress | None, threads: int) -> Tuning:
        """Profile every candidate (on scratch copies of the tensors the kernel writes) and pick the
        fewest cycles, ties to the earlier candidate."""
        t, base = self.tuned, self.tuned.base
        start = time.perf_counter()
        try:  # the caller's own mistakes (a wrong dtype, a missing argument) are reported as such
            base.bind(*t._with(args, kwargs, cands[0]))
        except KernelError as e:
            raise _strip(e) from None
        launch = Launch(base, self.block_dim, self.config)

        def one(c: Config) -> tuple[Trial, str]:
            try:
                values, _ = base.bind(*t._with(args, kwargs, c))
                values = [_scratch(v) if d.kind == "gm" and d.name in t.written else v
                          for d, v in zip(base.decls, values)]
                run = launch.profile(*values)
            except KernelError as e:
                return Trial(c, error=f"error[{e.code}]: {e.message}", where=str(e.loc) if e.loc else ""), ""
            prof = run.profile
            return Trial(c, int(run.cycles), float(run.seconds), {p: float(v) for p, v in run.pipes.items()},
                         float(run.efficiency), str(getattr(prof, "bound_pipe", ""))), run.plan.symbol

        results: dict[int, tuple[Trial, str]] = {}
        workers = max(1, min(threads, len(cands)))
        if workers == 1:
            for i, c in enumerate(cands):
                results[i] = one(c)
                if progress is not None:
                    progress(results[i][0])
        else:
            from concurrent.futures import ThreadPoolExecutor, as_completed

            ex = ThreadPoolExecutor(workers, thread_name_prefix="vinci-tune")
            try:
                futures = {ex.submit(one, c): i for i, c in enumerate(cands)}
                for f in as_completed(futures):
                    results[futures[f]] = f.result()
                    if progress is not None:
                        progress(results[futures[f]][0])
            finally:  # an error or Ctrl-C drops the candidates not started yet
                ex.shutdown(wait=True, cancel_futures=True)
        trials = [results[i][0] for i in range(len(cands))]
        ok = [i for i, tr in enumerate(trials) if tr.ok]
        if not ok:
            raise _strip(_all_failed(t, trials, cls, cfg.name, n))
        best = min(ok, key=lambda i: (trials[i].cycles, i))
        symbol = results[best][1]
        return Tuning(t.__name__, cls, cfg.name, n, trials, best, time.perf_counter() - start, symbol)


def _as(t: Tuning, source: str) -> Tuning:
    return Tuning(t.kernel, t.shape_class, t.hw, t.block_dim, t.trials, t.best, t.seconds, t.symbol,
                  source if t.source == "tuned" else t.source)


def _all_failed(t: Autotuned, trials: list[Trial], cls: str, hw: str, n: int) -> KernelError:
    first = trials[0].config
    example = ", ".join(f"{k}={v!r}" for k, v in first.items())
    return KernelError(
        "E602", f"none of the {len(trials)} autotune candidates of '{t.__name__}' compiled and fit "
        f"({cls} on {hw}, block_dim {n})", t.fdef.loc,
        f"add smaller values to the search space (each note says what did not fit), or launch one candidate "
        f"directly for its full error, e.g. {t.__name__}[{n}](..., {example})",
        notes=[f"{format_config(tr.config)}: " + (f"{tr.where}: " if tr.where else "") + tr.error for tr in trials])


_DTYPE_NAMES: dict[Any, str] = {}  # numpy / torch dtype -> Vinci's name


def _tensor_class(v: Any) -> tuple:
    """A tensor's part of the shape class: its dtype and its shape rounded up to powers of two."""
    try:
        shape, dt = v.shape, v.dtype
    except AttributeError:
        return (type(v).__name__,)  # not a tensor: binding will say so
    name = _DTYPE_NAMES.get(dt)
    if name is None:
        d = from_numpy(dt) if isinstance(v, np.ndarray) else from_torch(dt)
        name = _DTYPE_NAMES[dt] = d.name if d is not None else str(dt)
    return (name, tuple([1 << (s - 1).bit_length() if s > 1 else s for s in shape]))


def _class_text(cls: tuple) -> str:
    out = []
    for p in cls:
        if p[0] == "key":
            out.append(f"key={p[1]}")
        elif len(p) == 3:
            out.append(f"{p[0]}={p[2]}")
        else:
            out.append(f"{p[0]}:" + (f"{p[1][0]}[{','.join(map(str, p[1][1]))}]" if len(p[1]) == 2 else p[1][0]))
    return " ".join(out)


def _scratch(v: Any) -> Any:
    """A copy of a tensor for a candidate to write (the caller's stays as it was)."""
    if isinstance(v, np.ndarray):
        return v.copy()
    return v.detach().clone()  # torch


class TunedRun(Run):
    """A profiled launch of an autotuned kernel: a `Run` that also says which config ran."""

    def __init__(self, run: Run, config: Config, tuning: Tuning | None):
        self.__dict__.update(run.__dict__)
        self.tuned = config  # the tuned Const values that ran
        self.tuning = tuning  # None when nothing was left to choose (every tuned value given)

    def report(self) -> str:
        why = f"best of {len(self.tuning.trials)} candidates" if self.tuning else "given by the caller"
        return super().report() + f"\n  autotuned: {format_config(self.tuned)} ({why})"

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", autotuned {format_config(self.tuned)}>"


# ------------------------------------------------------------------------------ the disk cache
def _cache_file(k: Kernel) -> Path:
    """One JSON file per kernel (its file, name and options); its entries are the shape classes."""
    h = hashlib.sha256(f"{k.filename}\0{k.__name__}\0{sorted(k.options.items())!r}".encode()).hexdigest()[:16]
    return Path(CONFIG.cache_dir) / "autotune" / f"{k.__name__}-{h}.json"


def _source_hash(k: Kernel) -> str:
    """What the kernel computes: its source and where it sits, the module constants it reads, options."""
    text = f"{k.filename}:{k.first_line}\n{k.env_key}\n{sorted(k.options.items())!r}\n{k.source}"
    return hashlib.sha256(text.encode()).hexdigest()


def _read(path: Path) -> dict[str, Any]:
    """The file's contents, or {} when it is missing, unreadable or not ours."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != _VERSION or not isinstance(data.get("entries"), dict):
        return {}
    return data


def _store(t: Autotuned, entry: str, cands: list[Config], tuning: Tuning) -> None:
    """Add one shape class's tuning to the kernel's file (atomically; a read-only cache costs a re-tune)."""
    import tempfile

    path = _cache_file(t.base)
    src = _source_hash(t.base)
    with _FILE_LOCK:
        data = _read(path)
        if data.get("source") != src:  # the kernel changed: its old choices are void
            data = {"version": _VERSION, "kernel": t.__name__, "file": t.filename, "source": src, "entries": {}}
        data["entries"][entry] = {"candidates": [_config_json(c) for c in cands], "tuning": tuning.to_json()}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, path)
        except OSError:
            pass
