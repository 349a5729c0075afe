"""User custom ops: turn your own DSL kernels into real `torch.library` ops with autograd.

    @dsl.kernel
    def swish_fwd(x: GM[f32], y: GM[f32]): ...
    @dsl.kernel
    def swish_bwd(x: GM[f32], dy: GM[f32], dx: GM[f32]): ...

    swish = torch_bridge.custom_op("mylib::swish", forward=swish_fwd, backward=swish_bwd)
    y = swish(x); y.sum().backward()          # also torch.ops.mylib.swish(x)

How a kernel's signature becomes the op's schema (docs/custom_ops.md has the walk-through):

- **Outputs** are the *last N* GM parameters of the forward kernel, N the number of outputs
  (`outputs=` below); every other GM parameter is a `Tensor` input. `outputs={"y": ..., "s": ...}`
  names the output parameters instead, wherever they are.
- Runtime scalars (`alpha: float`, `n: int`) become `float` / `int` schema arguments (their
  defaults too). `Const` parameters stay compile-time: bound at definition with `consts={...}`
  (or left to their defaults); `expose=("mode",)` makes a Const with a default a schema argument
  (`int`/`float`/`str`/`bool`, by the default's type), each value its own specialisation.
  Schema arguments keep the kernel's parameter order.
- A GM parameter's dtype decides what the op accepts: `GM[f32]` takes torch.float32 only, a bare
  `GM` takes float32, float16, bfloat16, int32 and int8 (`dtypes=` narrows that); `GM[f32, 2]`
  also fixes the rank. Anything else is a RuntimeError naming the argument.
- **Output shapes and dtypes** (`outputs=`): by default one output shaped like the first tensor
  input, of the dtype its GM parameter declares (or, for a bare `GM`, that input's). An int N: N
  such outputs. A string of comma-separated items, one per output: `"x"` (x's shape), `"x:f32"`
  (x's shape, f32), `"[x.0, w.1]"` (dims of inputs; `x.-1` counts from the end; integer literals
  allowed) with an optional `:dtype` (a DSL dtype name or an input name; when none is written, the
  output's declared dtype, else the dtype of the first input named). A callable taking the op's arguments (real or
  fake tensors, and scalars) returning `(shape, dtype)` (or a list of them, with `num_outputs=`).
  A list mixes strings and callables, one per output.
- **Backward kernel** GM parameters, in order: the saved tensors (`save="inputs"`, the default:
  the forward's tensor inputs; `"outputs"`: its outputs; `"both"`: inputs then outputs), then the
  gradient of each differentiable output, then the gradient of each differentiable input, which
  it writes (allocated like that input). Differentiable inputs: every tensor input not declared
  integer (`grad_inputs=("x",)` picks them); differentiable outputs: every output not of an integer
  dtype (`grad_outputs=` picks them; the others are marked non-differentiable). Its scalar and
  Const parameters are matched by name with the forward's.
  The backward is its own op, `<name>_backward`, with a fake kernel, so aot_autograd and
  torch.compile trace through it.
- `backward=None`: the op still records itself in the autograd graph, and backpropagating
  through it raises an error saying it has no backward (never a silent zero or None gradient).
- `flatten=True` hands every tensor to the kernels as a 1-D view (elementwise kernels that tile
  over `x.shape[0]`); 0-d tensors always reach a kernel as shape (1,).
- Cores: `forward=kernel[8]` (and `backward=kernel[8]`) or `cores=8`; default the config's.
- Registering a name twice raises (naming where the first was made) unless `replace=True`, which
  removes the old op and defines the new one.

A kernel failure (out of bounds, ...) raises the kernel's `dsl.KernelError`, carrying the DSL
file:line:col, before any output is returned: inputs are never written.
"""
from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import torch

from dsl.kernel import Kernel, Launch
from dsl.types import DType, bf16, f16, f32, i8, i32

__all__ = ["custom_op", "CustomOp", "REGISTERED"]

TORCH_DTYPE: dict[DType, torch.dtype] = {f32: torch.float32, f16: torch.float16, bf16: torch.bfloat16,
                                         i32: torch.int32, i8: torch.int8}
_BY_NAME = {d.name: d for d in TORCH_DTYPE}
#: what a bare `GM` parameter accepts
ANY_DTYPE = frozenset(TORCH_DTYPE.values())

OutputRule = Callable[..., Any]
OutputsArg = Union[None, int, str, OutputRule, Sequence[Union[str, OutputRule]], Mapping[str, Union[str, OutputRule]]]


@dataclass(frozen=True)
class _Param:
    """One forward-kernel parameter and its role in the op: in | out | scalar | const | expose."""

    name: str
    role: str
    dtypes: frozenset[torch.dtype] = ANY_DTYPE
    declared: DType | None = None
    rank: int | None = None
    default: Any = None
    has_default: bool = False
    scalar_ty: str = ""


#: qualname -> the live CustomOp (its Library must stay referenced, or torch unregisters it)
REGISTERED: dict[str, CustomOp] = {}


class CustomOp:
    """A registered custom op. Call it like the op (`swish(x)`); `.op` is the `torch.ops` overload,
    `.backward_op` the registered backward, `.schema` / `.backward_schema` their schemas."""

    def __init__(self, qualname: str, schema: str, backward_schema: str | None, lib: torch.library.Library,
                 where: str):
        ns, name = qualname.split("::")
        self.qualname, self.schema, self.backward_schema, self.where = qualname, schema, backward_schema, where
        self._lib = lib
        packet = getattr(getattr(torch.ops, ns), name)
        self.op: torch._ops.OpOverload = packet.default
        self.backward_op: torch._ops.OpOverload | None = (
            getattr(getattr(torch.ops, ns), name + "_backward").default if backward_schema else None)
        self.__name__ = name
        self.__doc__ = f"{qualname}{schema}"
        #: op name -> its CPU kernel (forward, and backward if any), to re-register for other keys
        self.impls: dict[str, Callable[..., Any]] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.op(*args, **kwargs)

    def register_for(self, dispatch_key: str) -> None:
        """Register the same kernels for another dispatch key (e.g. "PrivateUse1" for the npu device,
        whose tensors are host memory the kernels read as they read CPU tensors)."""
        for name, fn in self.impls.items():
            self._lib.impl(name, fn, dispatch_key)

    def remove(self) -> None:
        """Unregister the op (and its backward) from torch."""
        self._lib._destroy()
        if REGISTERED.get(self.qualname) is self:
            del REGISTERED[self.qualname]

    def __repr__(self) -> str:
        return f"<custom op {self.qualname}{self.schema}>"


# ---------------------------------------------------------------------------------------------- helpers
def _kernel_of(k: Any, cores: int | None, what: str) -> tuple[Kernel, Any]:
    """The Kernel and what launches it: `k[cores]` (a Launch, kept), `k` with `cores=`, or `k`."""
    if isinstance(k, Kernel):
        if cores is not None:
            return k, k[cores]
        return k, (Launch(k, None) if type(k) is Kernel else k)
    kern = getattr(k, "kernel", None)
    if isinstance(kern, Kernel) and hasattr(k, "block_dim"):
        if cores is not None and k.block_dim is not None and cores != k.block_dim:
            raise ValueError(f"custom_op: {what} is launched on {k.block_dim} cores but cores={cores}")
        return kern, k
    raise TypeError(f"custom_op: {what} must be a @dsl.kernel (or kernel[cores]), got {type(k).__name__}")


def _schema_default(v: Any) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, str):
        return repr(v)
    return repr(v)


def _schema_type(v: Any, name: str) -> str:
    for t, s in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str")):
        if isinstance(v, t):
            return s
    raise TypeError(f"custom_op: exposed Const '{name}' needs an int, float, bool or str default, got {v!r}")


def _dims(shape: Any) -> list[Any]:
    return list(shape) if isinstance(shape, (list, tuple, torch.Size)) else [shape]


def _as_torch_dtype(dt: Any, what: str) -> torch.dtype:
    if isinstance(dt, torch.dtype):
        return dt
    if isinstance(dt, DType) and dt in TORCH_DTYPE:
        return TORCH_DTYPE[dt]
    if isinstance(dt, str) and dt in _BY_NAME:
        return TORCH_DTYPE[_BY_NAME[dt]]
    raise TypeError(f"{what}: dtype must be a torch.dtype or one of f32, f16, bf16, i32, i8, got {dt!r}")


_ITEM = re.compile(r"\s*(?:(?P<name>[A-Za-z_]\w*)|\[(?P<dims>[^\]]*)\])\s*(?::\s*(?P<dtype>[A-Za-z_]\w*))?\s*$")
_DIM = re.compile(r"\s*(?:(?P<name>[A-Za-z_]\w*)\.(?P<idx>-?\d+)|(?P<lit>\d+))\s*$")


def _split_items(text: str) -> list[str]:
    items, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    return items


def _parse_rule(text: str, pos: dict[str, int], qualname: str, declared: torch.dtype | None) -> OutputRule:
    """One shorthand output item (`x`, `x:f32`, `[x.0, w.1]:x`) -> a rule args -> (shape, dtype)."""
    m = _ITEM.match(text)
    if m is None:
        raise ValueError(f"custom_op {qualname}: cannot read output rule {text.strip()!r}: write 'x', 'x:f32' or "
                         f"'[x.0, w.1]:f32' (x, w the op's tensor inputs: {', '.join(pos)})")

    def arg(name: str) -> int:
        if name not in pos:
            raise ValueError(f"custom_op {qualname}: output rule {text.strip()!r} names '{name}', which is not a "
                             f"tensor input (inputs: {', '.join(pos) or 'none'})")
        return pos[name]

    dims: list[tuple[int, int] | int] = []
    first: int | None = None
    if m.group("name"):
        like = arg(m.group("name"))
        first = like
    else:
        like = None
        for d in m.group("dims").split(",") if m.group("dims").strip() else []:
            dm = _DIM.match(d)
            if dm is None:
                raise ValueError(f"custom_op {qualname}: cannot read dimension {d.strip()!r} in output rule "
                                 f"{text.strip()!r}: write name.index (x.0, x.-1) or an integer")
            if dm.group("lit") is not None:
                dims.append(int(dm.group("lit")))
            else:
                dims.append((arg(dm.group("name")), int(dm.group("idx"))))
                first = dims[-1][0] if first is None else first  # type: ignore[index]
    dt_name = m.group("dtype")
    fixed: torch.dtype | None = None
    dt_from = first if first is not None else next(iter(pos.values()), None)
    if dt_name in _BY_NAME:
        fixed = TORCH_DTYPE[_BY_NAME[dt_name]]
    elif dt_name is not None:
        dt_from = arg(dt_name)
    else:
        fixed = declared  # no dtype written: the kernel's declared one, else the first input named
    if fixed is None and dt_from is None:
        raise ValueError(f"custom_op {qualname}: output rule {text.strip()!r} needs a dtype (the op has no tensor "
                         f"inputs), e.g. '[4]:f32'")

    if like is not None and (fixed is not None or dt_from == like):
        return _like_rule(like, fixed)

    def rule(*args: Any) -> tuple[list[Any], torch.dtype]:
        dtype = fixed if fixed is not None else args[dt_from].dtype  # type: ignore[index]
        if like is not None:
            return list(args[like].shape), dtype
        return [d if isinstance(d, int) else args[d[0]].shape[d[1]] for d in dims], dtype
    return rule


# ---------------------------------------------------------------------------------------------- custom_op
def _outputs_of(qualname: str, fwd: Kernel, outputs: OutputsArg, num_outputs: int | None
                ) -> tuple[list[str], list[str | OutputRule | None]]:
    """Which GM parameters of the forward kernel are outputs, and each one's rule as given (None: the
    default rule)."""
    gm = [d for d in fwd.decls if d.kind == "gm"]
    rules_in: list[str | OutputRule | None]
    out_names: list[str]
    if isinstance(outputs, Mapping):
        out_names = list(outputs)
        unknown = [n for n in out_names if n not in {d.name for d in gm}]
        if unknown:
            raise ValueError(f"custom_op {qualname}: outputs names {unknown}, which are not GM parameters of "
                             f"{fwd.__name__} ({', '.join(d.name for d in gm)})")
        rules_in = list(outputs.values())
    else:
        if outputs is None or isinstance(outputs, int):
            n = 1 if outputs is None else outputs
            rules_in = [None] * n
        elif isinstance(outputs, str):
            rules_in = list(_split_items(outputs))
        elif callable(outputs):
            n = num_outputs or 1
            rules_in = [outputs] * n  # one callable for all: split its list below
        else:
            rules_in = list(outputs)
        if not 1 <= len(rules_in) < len(gm) + 1:
            raise ValueError(f"custom_op {qualname}: {len(rules_in)} outputs but {fwd.__name__} has "
                             f"{len(gm)} GM parameters ({', '.join(d.name for d in gm)})")
        out_names = [d.name for d in gm[len(gm) - len(rules_in):]]
    if num_outputs is not None and num_outputs != len(out_names):
        raise ValueError(f"custom_op {qualname}: num_outputs={num_outputs} but outputs gives {len(out_names)}")

    return out_names, rules_in


def _params_of(qualname: str, fwd: Kernel, bwd: Kernel | None, out_names: list[str], consts: dict[str, Any],
               expose: Sequence[str], allowed: frozenset[torch.dtype]) -> list[_Param]:
    """Each forward-kernel parameter's role in the op, in the kernel's order."""
    unknown_consts = [c for c in consts if c not in fwd.names and (bwd is None or c not in bwd.names)]
    if unknown_consts:
        raise ValueError(f"custom_op {qualname}: consts {unknown_consts} are not parameters of the kernels")
    params: list[_Param] = []
    for d in fwd.decls:
        if d.kind == "gm":
            accepts = frozenset({TORCH_DTYPE[d.dtype]}) if d.dtype is not None else allowed
            params.append(_Param(d.name, "out" if d.name in out_names else "in", accepts, d.dtype, d.rank))
        elif d.kind == "scalar":
            if d.name in consts:
                raise ValueError(f"custom_op {qualname}: '{d.name}' is a runtime scalar, not a Const: it is an "
                                 f"argument of the op, not something consts= binds")
            params.append(_Param(d.name, "scalar", default=d.default, has_default=d.has_default,
                                 scalar_ty=d.scalar_ty))
        elif d.name in expose:
            if not d.has_default:
                raise ValueError(f"custom_op {qualname}: exposed Const '{d.name}' needs a default in {fwd.__name__}")
            params.append(_Param(d.name, "expose", default=d.default, has_default=True))
        else:
            if d.name not in consts and not d.has_default:
                raise ValueError(f"custom_op {qualname}: Const '{d.name}' of {fwd.__name__} has no default: bind it "
                                 f"with consts={{'{d.name}': ...}} or expose=('{d.name}',)")
            params.append(_Param(d.name, "const", default=consts.get(d.name, d.default), has_default=True))
    missing = [e for e in expose if e not in {p.name for p in params if p.role == "expose"}]
    if missing:
        raise ValueError(f"custom_op {qualname}: expose names {missing}, which are not Const parameters of "
                         f"{fwd.__name__}")
    return params


def custom_op(name: str, forward: Any, backward: Any = None, *, outputs: OutputsArg = None,
              num_outputs: int | None = None, save: str = "inputs", grad_inputs: Sequence[str] | None = None,
              grad_outputs: Sequence[str] | None = None, consts: Mapping[str, Any] | None = None,
              expose: Sequence[str] = (), dtypes: Sequence[torch.dtype] | None = None, flatten: bool = False,
              cores: int | None = None, replace: bool = False) -> CustomOp:
    """Register DSL kernels as the torch op `name` ("namespace::op"); see the module docstring for
    how the schema, outputs and backward are derived. Returns a callable `CustomOp`; the op is also
    `torch.ops.<namespace>.<op>`."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_]\w*::[A-Za-z_]\w*", name):
        raise ValueError(f"custom_op: name must look like 'namespace::op', got {name!r}")
    qualname = name
    ns, opname = name.split("::")
    fwd, fwd_launch = _kernel_of(forward, cores, "forward")
    bwd, bwd_launch = _kernel_of(backward, cores, "backward") if backward is not None else (None, None)
    if save not in ("inputs", "outputs", "both"):
        raise ValueError(f"custom_op {qualname}: save must be 'inputs', 'outputs' or 'both', got {save!r}")
    consts = dict(consts or {})
    allowed = ANY_DTYPE if dtypes is None else frozenset(dtypes)
    if not allowed <= ANY_DTYPE:
        raise ValueError(f"custom_op {qualname}: dtypes must be among {sorted(map(str, ANY_DTYPE))}")

    out_names, rules_in = _outputs_of(qualname, fwd, outputs, num_outputs)

    params = _params_of(qualname, fwd, bwd, out_names, consts, expose, allowed)
    args = [p for p in params if p.role in ("in", "scalar", "expose")]  # schema order = kernel order
    tensor_pos = {p.name: i for i, p in enumerate(args) if p.role == "in"}
    outs = [next(p for p in params if p.name == n) for n in out_names]
    if not tensor_pos and any(r is None for r in rules_in):
        raise ValueError(f"custom_op {qualname}: the op has no tensor inputs, so outputs= must give shapes")

    rules = _output_rules(rules_in, tensor_pos, outs, qualname)
    sig = ", ".join(_arg_schema(p) for p in args)
    ret = "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
    schema = f"({sig}) -> {ret}"

    # -- the backward's layout
    int_decl = {i32, i8}
    gin = list(grad_inputs) if grad_inputs is not None else [p.name for p in args if p.role == "in"
                                                             and p.declared not in int_decl]
    gout = list(grad_outputs) if grad_outputs is not None else [p.name for p in outs if p.declared not in int_decl]
    for what, names, among in (("grad_inputs", gin, tensor_pos), ("grad_outputs", gout, out_names)):
        bad = [n for n in names if n not in among]
        if bad:
            raise ValueError(f"custom_op {qualname}: {what} names {bad}, which are not tensor "
                             f"{'inputs' if what == 'grad_inputs' else 'outputs'} ({', '.join(among)})")
    tin = [p.name for p in args if p.role == "in"]
    saved_names = (tin if save in ("inputs", "both") else []) + (out_names if save in ("outputs", "both") else [])
    bschema = None
    if bwd is not None:
        layout = saved_names + [f"grad_{n}" for n in gout] + [f"grad_{n}" for n in gin]
        bgm = [d for d in bwd.decls if d.kind == "gm"]
        if len(bgm) != len(layout):
            raise ValueError(f"custom_op {qualname}: backward kernel {bwd.__name__} has {len(bgm)} GM parameters "
                             f"({', '.join(d.name for d in bgm)}) but the layout is {len(layout)}: "
                             f"{', '.join(layout)} (saved tensors (save={save!r}), output grads, input grads)")
        fwd_rt = {p.name for p in args if p.role != "in"}
        for d in bwd.decls:
            if d.kind == "scalar" and d.name not in fwd_rt and not d.has_default:
                raise ValueError(f"custom_op {qualname}: backward scalar '{d.name}' is not an argument of the op "
                                 f"and has no default")
            if d.kind == "const" and d.name not in consts and d.name not in fwd_rt and not d.has_default:
                raise ValueError(f"custom_op {qualname}: backward Const '{d.name}' has no default: bind it with "
                                 f"consts={{'{d.name}': ...}}")
        bargs = [f"Tensor {n}" for n in tin] + [f"Tensor {n}" for n in out_names if save != "inputs"] + \
            [f"Tensor grad_{n}" for n in gout] + [_arg_schema(p, defaults=False) for p in args if p.role != "in"]
        bret = "Tensor" if len(gin) == 1 else "(" + ", ".join("Tensor" for _ in gin) + ")"
        bschema = f"({', '.join(bargs)}) -> {bret}"

    # -- registration
    if qualname in REGISTERED:
        if not replace:
            raise RuntimeError(f"custom_op: {qualname} is already registered (at {REGISTERED[qualname].where}); "
                               f"pick another name, or pass replace=True to redefine it")
        REGISTERED[qualname].remove()
    caller = sys._getframe(1)
    where = f"{caller.f_code.co_filename}:{caller.f_lineno}"
    lib = torch.library.Library(ns, "FRAGMENT")
    try:
        lib.define(opname + schema)
        if bschema is not None:
            lib.define(opname + "_backward" + bschema)
    except RuntimeError as e:
        lib._destroy()
        raise RuntimeError(f"custom_op: cannot define {qualname}{schema}: {str(e).splitlines()[0]}") from None

    check = _Checker(qualname, fwd.__name__, args)
    impl = _forward_impl(fwd_launch, params, args, outs, rules, check, flatten)
    torch.library.register_fake(qualname, _forward_fake(args, outs, rules, check), lib=lib)
    op = CustomOp(qualname, schema, bschema, lib, where)
    op.impls[opname] = impl
    lay = _BwdLayout(tin, out_names, save, gout, gin, [p.name for p in args if p.role != "in"])
    if bwd is not None:
        op.impls[opname + "_backward"] = _backward_impl(bwd, bwd_launch, lay, consts, flatten)
        torch.library.register_fake(qualname + "_backward", _backward_fake(lay), lib=lib)
    op.register_for("CPU")
    _register_autograd(lib, opname, op.op, impl, op.backward_op, args, lay)
    REGISTERED[qualname] = op
    return op


def _arg_schema(p: _Param, defaults: bool = True) -> str:
    if p.role == "in":
        return f"Tensor {p.name}"
    ty = ("float" if p.scalar_ty == "f64" else "int") if p.role == "scalar" else _schema_type(p.default, p.name)
    d = f"={_schema_default(p.default)}" if defaults and p.has_default else ""
    return f"{ty} {p.name}{d}"


def _output_rules(rules_in: list[Any], tensor_pos: dict[str, int], outs: list[_Param], qualname: str
                  ) -> list[OutputRule]:
    """One rule per output: args -> (shape, dtype). A callable given once for several outputs returns
    a list, split here."""
    first = next(iter(tensor_pos.values()), 0)
    rules: list[OutputRule] = []
    for j, r in enumerate(rules_in):
        if r is None:
            rules.append(_like_rule(first, _declared(outs[j])))
        elif isinstance(r, str):
            rules.append(_parse_rule(r, tensor_pos, qualname, _declared(outs[j])))
        elif callable(r):
            shared = sum(1 for x in rules_in if x is r) > 1
            rules.append(_callable_rule(r, j if shared else None, qualname))
        else:
            raise TypeError(f"custom_op {qualname}: an output rule must be a string or a callable, got {r!r}")
    return rules


def _declared(p: _Param) -> torch.dtype | None:
    return TORCH_DTYPE[p.declared] if p.declared is not None else None


def _like_rule(i: int, dtype: torch.dtype | None) -> OutputRule:
    """Input i's shape; `dtype`, or input i's dtype if None."""
    def rule(*args: Any) -> tuple[list[Any], torch.dtype]:
        return list(args[i].shape), dtype if dtype is not None else args[i].dtype
    rule.like, rule.dtype = i, dtype  # type: ignore[attr-defined]  # the generated kernel allocates it inline
    return rule


def _callable_rule(fn: OutputRule, index: int | None, qualname: str) -> OutputRule:
    def rule(*args: Any) -> tuple[list[Any], torch.dtype]:
        got = fn(*args)
        if index is not None:
            got = got[index]
        try:
            shape, dtype = got
        except (TypeError, ValueError):
            raise TypeError(f"{qualname}: the output rule must return (shape, dtype) per output, got {got!r}") from None
        return _dims(shape), _as_torch_dtype(dtype, qualname)
    return rule


class _Checker:
    """Validates the op's tensor arguments with torch-style errors naming them (dtype, rank)."""

    def __init__(self, qualname: str, kname: str, args: list[_Param]):
        self.qualname, self.kname = qualname, kname
        self.items = [(i, p) for i, p in enumerate(args) if p.role == "in"]

    def __call__(self, args: tuple) -> None:
        for i, p in self.items:
            t = args[i]
            if t.dtype not in p.dtypes:
                decl = f"GM[{p.declared}]" if p.declared is not None else "GM"
                want = ", ".join(str(d) for d in sorted(p.dtypes, key=str))
                raise RuntimeError(f"{self.qualname}: expected argument '{p.name}' to have dtype {want} "
                                   f"({self.kname} declares '{p.name}: {decl}'), but got {t.dtype}")
            if p.rank is not None and t.dim() != p.rank:
                raise RuntimeError(f"{self.qualname}: expected argument '{p.name}' to be a {p.rank}-D tensor "
                                   f"({self.kname} declares '{p.name}: GM[{p.declared or 'any'}, {p.rank}]'), "
                                   f"but got a {t.dim()}-D tensor of shape {list(t.shape)}")

    def output(self, j: int, p: _Param, dtype: torch.dtype) -> None:
        if dtype not in p.dtypes:
            raise RuntimeError(f"{self.qualname}: output {j} ('{p.name}') would be {dtype} by the output rule, but "
                               f"{self.kname} declares '{p.name}: GM[{p.declared}]'")


# ---------------------------------------------------------------------------------------------- kernels
# The CPU kernels are generated per op as straight-line Python (no loops over argument tables):
# a call costs the dtype checks, one torch.empty per output and the kernel launch.
def _compile(src: str, env: dict[str, Any], name: str) -> Callable[..., Any]:
    code = compile(src, f"<torch_bridge.custom_op {name}>", "exec")
    exec(code, env)
    fn: Callable[..., Any] = env["impl"]
    return fn


def _tensor_lines(i: int, flatten: bool, fresh: bool = False) -> list[str]:
    """Make argument a{i} what a kernel takes as k{i}: contiguous, 1-D when flattening, never 0-d."""
    out = [] if fresh else [f"    if not a{i}.is_contiguous(): a{i} = a{i}.contiguous()"]
    # a view is a dispatcher call (~1 us): only made when the kernel needs another shape
    out.append(f"    k{i} = a{i} if a{i}.dim() == 1 else a{i}.view(-1)" if flatten else
               f"    k{i} = a{i} if a{i}.dim() else a{i}.view(1)")
    return out


def _forward_impl(launch: Any, params: list[_Param], args: list[_Param], outs: list[_Param],
                  rules: list[OutputRule], check: _Checker, flatten: bool) -> Callable[..., Any]:
    """The forward op's CPU kernel: check the inputs, allocate the outputs by the rules, launch."""
    env: dict[str, Any] = {"_empty": torch.empty, "_empty_like": torch.empty_like, "_L": launch, "_check": check,
                           "_rules": rules, "_outs": outs}
    names = [f"a{i}" for i in range(len(args))]
    call = ", ".join(names)
    # the dispatcher drops trailing arguments equal to their schema defaults: put them back
    sig = []
    for i, p in enumerate(args):
        if p.has_default:
            env[f"_default{i}"] = p.default
            sig.append(f"a{i}=_default{i}")
        else:
            sig.append(f"a{i}")
    lines = [f"def impl({', '.join(sig)}):"]
    for i, p in enumerate(args):
        if p.role != "in":
            continue
        if len(p.dtypes) == 1:
            env[f"_d{i}"] = next(iter(p.dtypes))
            cond = f"a{i}.dtype is not _d{i}"
        else:
            env[f"_s{i}"] = p.dtypes
            cond = f"a{i}.dtype not in _s{i}"
        if p.rank is not None:
            cond += f" or a{i}.dim() != {p.rank}"
        lines.append(f"    if {cond}: _check(({call},))")
    for i, p in enumerate(args):
        if p.role == "in":
            lines.append(f"    if not a{i}.is_contiguous(): a{i} = a{i}.contiguous()")
    n_in = len(args)
    for j, rule in enumerate(rules):
        o = n_in + j  # outputs are a{n_in + j} after allocation
        like = getattr(rule, "like", None)
        if like is not None and rule.dtype is not None:  # type: ignore[attr-defined]
            env[f"_fx{j}"] = rule.dtype  # type: ignore[attr-defined]
            lines.append(f"    a{o} = _empty_like(a{like}, dtype=_fx{j})")  # a{like} is contiguous here
        elif like is not None:
            lines.append(f"    a{o} = _empty_like(a{like})")  # (empty_like is 2x cheaper than empty(shape))
        else:
            lines.append(f"    s, d = _rules[{j}]({call})")
            lines.append(f"    a{o} = _empty(s, dtype=d)")
        declared = _declared(outs[j])
        if declared is not None and getattr(rule, "dtype", None) is not declared:
            env[f"_od{j}"] = declared
            lines.append(f"    if a{o}.dtype is not _od{j}: _check.output({j}, _outs[{j}], a{o}.dtype)")
    results = [f"a{n_in + j}" for j in range(len(outs))]
    for i, p in enumerate(args):
        if p.role == "in":
            lines += _tensor_lines(i, flatten, fresh=True)  # made contiguous above
    for j in range(len(outs)):
        lines += _tensor_lines(n_in + j, flatten, fresh=True)
    pos = {p.name: i for i, p in enumerate(args)}
    onum = {p.name: n_in + j for j, p in enumerate(outs)}
    kargs = []
    for p in params:
        if p.name in onum:
            kargs.append(f"k{onum[p.name]}")
        elif p.role == "in":
            kargs.append(f"k{pos[p.name]}")
        elif p.name in pos:
            kargs.append(f"a{pos[p.name]}")
        else:
            env[f"_c_{p.name}"] = p.default
            kargs.append(f"_c_{p.name}")
    lines.append(f"    _L({', '.join(kargs)})")
    lines.append(f"    return {results[0] if len(results) == 1 else '(' + ', '.join(results) + ')'}")
    return _compile("\n".join(lines) + "\n", env, "forward")


def _forward_fake(args: list[_Param], outs: list[_Param], rules: list[OutputRule], check: _Checker
                  ) -> Callable[..., Any]:
    single = len(outs) == 1
    defaults = [p.default for p in args]

    def fake(*a: Any) -> Any:
        a = a + tuple(defaults[len(a):])  # arguments the dispatcher dropped as equal to their defaults
        check(a)
        dev = next((x.device for x in a if isinstance(x, torch.Tensor)), torch.device("cpu"))
        results = []
        for j, rule in enumerate(rules):
            shape, dtype = rule(*a)
            if outs[j].declared is not None:
                check.output(j, outs[j], dtype)
            results.append(torch.empty(shape, dtype=dtype, device=dev))
        return results[0] if single else tuple(results)
    return fake


@dataclass(frozen=True)
class _BwdLayout:
    """The backward op's arguments: the forward's tensor inputs (nin), its outputs if saved (nout_saved),
    the differentiable outputs' grads (ngrad), then the forward's scalars / exposed Consts (rt)."""

    tin: list[str]
    out_names: list[str]
    save: str
    gout: list[str]
    gin: list[str]
    rt: list[str]

    @property
    def nout_saved(self) -> int:
        return len(self.out_names) if self.save != "inputs" else 0

    @property
    def ntensors(self) -> int:
        return len(self.tin) + self.nout_saved + len(self.gout)


def _backward_impl(bwd: Kernel, launch: Any, lay: _BwdLayout, consts: dict[str, Any], flatten: bool
                   ) -> Callable[..., Any]:
    """The backward op's CPU kernel: allocate the input grads (like their inputs, zeroed: a backward
    kernel may accumulate into them, e.g. a scatter-add with dsl.atomic_add), launch."""
    nin, nt = len(lay.tin), lay.ntensors
    nargs = nt + len(lay.rt)
    env: dict[str, Any] = {"_zeros_like": torch.zeros_like, "_L": launch}
    lines = [f"def impl({', '.join(f'a{i}' for i in range(nargs))}):"]
    for i in range(nt):
        lines += _tensor_lines(i, flatten)
    grads = []
    for j, n in enumerate(lay.gin):
        i, g = lay.tin.index(n), nargs + j
        lines.append(f"    a{g} = _zeros_like(a{i})")  # a{i} is contiguous here
        lines += _tensor_lines(g, flatten, fresh=True)
        grads.append(f"a{g}")
    # the kernel's GM parameters: saved tensors, output grads, input grads
    saved = (list(range(nin)) if lay.save != "outputs" else []) + list(range(nin, nin + lay.nout_saved))
    gm = saved + list(range(nin + lay.nout_saved, nt)) + list(range(nargs, nargs + len(lay.gin)))
    kargs, k = [], 0
    for d in bwd.decls:
        if d.kind == "gm":
            kargs.append(f"k{gm[k]}")
            k += 1
        elif d.name in lay.rt:
            kargs.append(f"a{nt + lay.rt.index(d.name)}")
        else:
            env[f"_c_{d.name}"] = consts.get(d.name, d.default)
            kargs.append(f"_c_{d.name}")
    lines.append(f"    _L({', '.join(kargs)})")
    lines.append(f"    return {grads[0] if len(grads) == 1 else '(' + ', '.join(grads) + ')'}")
    return _compile("\n".join(lines) + "\n", env, "backward")


def _backward_fake(lay: _BwdLayout) -> Callable[..., Any]:
    like = [lay.tin.index(n) for n in lay.gin]
    single = len(like) == 1

    def fake(*a: Any) -> Any:
        grads = [torch.empty(a[i].shape, dtype=a[i].dtype, device=a[i].device) for i in like]
        return grads[0] if single else tuple(grads)
    return fake


# ---------------------------------------------------------------------------------------------- autograd
def _register_autograd(lib: torch.library.Library, opname: str, op: Any, impl: Callable[..., Any], bop: Any,
                       args: list[_Param], lay: _BwdLayout) -> None:
    """An Autograd kernel like torch.library.register_autograd's, with a shortcut: when the only key
    left below autograd is CPU (plain CPU tensors, no fake / functional / dispatch modes), the CPU
    kernel is called directly instead of being redispatched."""
    tensor_idx = [i for i, p in enumerate(args) if p.role == "in"]
    rt_idx = [i for i, p in enumerate(args) if p.role != "in"]
    nout = len(lay.out_names)
    gout_idx = [lay.out_names.index(n) for n in lay.gout]
    nondiff = [j for j in range(nout) if j not in gout_idx]
    gin_pos = [next(i for i, p in enumerate(args) if p.name == n) for n in lay.gin]
    keep_out, single_out, single_in = lay.save != "inputs", nout == 1, len(lay.gin) == 1
    after, cpu = torch._C._after_autograd_keyset, torch.DispatchKey.CPU
    below_autograd = torch._C._AutoDispatchBelowAutograd

    direct: dict[int, bool] = {}  # keyset (raw) -> is CPU the only key left below autograd?

    def run(keyset: Any, a: tuple) -> Any:
        below = keyset & after
        raw = below.raw_repr()
        fast = direct.get(raw)
        if fast is None:
            fast = direct[raw] = below.highestPriorityTypeId() == cpu
        if fast:
            return impl(*a)
        with below_autograd():
            return op.redispatch(below, *a)

    def forward(ctx: Any, keyset: Any, *a: Any) -> Any:
        output = run(keyset, a)
        outs = (output,) if single_out else output
        ctx.save_for_backward(*[a[i] for i in tensor_idx], *(outs if keep_out else ()))
        ctx.rt = [a[i] for i in rt_idx]
        if nondiff:
            ctx.mark_non_differentiable(*[outs[j] for j in nondiff])
        return output

    def backward(ctx: Any, *grads: Any) -> Any:
        if bop is None:
            raise RuntimeError(f"{lib.ns}::{opname} has no backward: register it with "
                               f"custom_op(..., backward=<a backward kernel>) to differentiate through it")
        g = bop(*ctx.saved_tensors, *[grads[j] for j in gout_idx], *ctx.rt)
        g = (g,) if single_in else g
        res: list[Any] = [None] * (len(args) + 1)  # + the keyset
        for k, i in enumerate(gin_pos):
            res[i + 1] = g[k]
        return tuple(res)

    # made with type() so the graph node is named after the op: grad_fn=<mylib_swishBackward>
    function: Any = type(f"{lib.ns}_{opname}", (torch.autograd.Function,),
                    {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    is_grad_enabled, any_requires_grad, apply = torch._C.is_grad_enabled, torch._C._any_requires_grad, function.apply

    defaults = tuple(p.default for p in args)
    nargs = len(args)

    def autograd_kernel(keyset: Any, *a: Any) -> Any:
        if len(a) < nargs:  # the dispatcher dropped trailing arguments equal to their defaults
            a = a + defaults[len(a):]
        if is_grad_enabled() and any_requires_grad(*a):
            return apply(keyset, *a)
        if direct.get((keyset & after).raw_repr()):  # run() inlined: the no-grad call is the hot one
            return impl(*a)
        return run(keyset, a)

    lib.impl(opname, autograd_kernel, "Autograd", with_keyset=True)
