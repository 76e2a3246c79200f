"""Training: optimizer and schedule, the `Trainer` loop (distributed, resumable), parallelism (DDP / FSDP2 / TP
/ PP) and checkpoints. Imports `runtime` and `lm`.
"""
