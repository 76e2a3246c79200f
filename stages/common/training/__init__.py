"""Training: optimizer and schedule, the `Trainer` loop (distributed, resumable), parallelism (DDP / FSDP2 / TP
/ PP) and checkpoints. Imports `runtime` and `lm`.
"""

IMPORTS = ("runtime", "lm")  # the packages of stages.common it may import (tests/test_floor_plan.py)
