"""Prefect flows over the DVC pipeline: `pipeline` (one task per stage), `retrain` (scheduled, gated), and
`python -m flows.serve` (local server + deployments). Nothing here imports Prefect at package import, so
`flows.serve` can set Prefect's environment first."""
