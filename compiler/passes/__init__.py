"""The schedule: Tile IR -> Core IR, one pure function per file, run in `compiler.pipeline.STAGES` order."""
