"""Code shared by every stage: params, IO, metrics, text rules."""
