"""The schedule: Tile IR -> Core IR, one pure function per file, run in the order of
`compiler.pipeline.stages`; none changes what the kernel computes.

    split.py    `split_cores`: the outermost tile loops shared out over the cores
    units.py    `assign_units`: every data movement bound to its DMA route and pipe
    place.py    `place_buffers`: every buffer given a memory, an offset and ping-pong slots
    sync.py     `insert_sync`: flags between the pipes
    verify.py   `verify`: each stage's promises, one rule per statement kind (run after every
                pass in tests)
"""
