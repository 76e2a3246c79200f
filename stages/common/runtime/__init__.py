"""The base every stage stands on: typed params, the stage CLI, atomic writes, Parquet shard IO, the local /
Ray executor, device and precision, content digests, the dataset cards of published documents. Imports
nothing else of `stages`.
"""
