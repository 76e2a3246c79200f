"""The base every stage stands on: typed params, the stage CLI, atomic writes and which paths a stage owns,
dvc.yaml as a map of the pipeline, input names (URLs, redaction) and the file system code that reads them
(fsspec, retries: `storage`, which only `clean` imports), Parquet shard IO, the local / Ray executor, device
and precision, content digests. Imports nothing else of `stages`.
"""

IMPORTS = ()  # the packages of stages.common it may import (tests/test_floor_plan.py)
