"""Refinery pipeline stages: one module per DVC stage, shared code in `stages.common`."""
