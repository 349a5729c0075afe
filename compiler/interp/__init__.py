"""The reference interpreter: Core IR run statement by statement in numpy, on the same memory,
with the same checks and trace events as the native code (`VINCI_INTERPRET=1`).

    interpret.py        `interpret` (a launch), `interpret_core` (Core IR built by hand or by
                        `pipeline.to_core`), `Core` (one core's state; break in `Core.exec`)
    interpret_rules.py  the rules: scalars, vector elements, the cube's mmad and FIX, each
                        mirroring the back end's code rule for rule
    interpret_atomic.py atomic stores: GM += values (`dsl.atomic_add`)
    interpret_gather.py scalar reads of GM, `dsl.arange`, `dsl.gather`
"""
