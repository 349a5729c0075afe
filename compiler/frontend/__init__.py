"""The front end: a kernel's AST -> Tile IR (what the kernel computes, on tiles), checking names,
types and shapes on the way; every error points at the user's source.

    lower.py          `lower` (the entry: `Lowerer` walks the AST), `declare_params` (a kernel's
                      parameters, read from its signature)
    lower_calls.py    calls: the dsl builtins and the Python builtins kernels may use
    lower_windows.py  GM windows: subscripts of GM tensors, their loads and stores
    lower_cube.py     the cube: `a @ b`, L0C accumulators, FIX-pipe epilogues
    lower_atomic.py   `dsl.atomic_add(y[window], tile)`: an atomic Store from UB or L0C
    lower_transpose.py  `t.T`, `dsl.transpose`, windows of `x.T` outside a matmul, stores into `y.T`
    lower_gather.py   `i = idx[r]` (one GM element into a scalar), `dsl.arange`, `dsl.gather`
    values.py         what a name or expression denotes while lowering (compile-time values)

The last three are mixins of `Lowerer`; each declares what it uses of it under TYPE_CHECKING.
"""
