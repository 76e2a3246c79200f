"""Where inputs are read from: the one place that opens an input file or lists a folder of them.

Readers (stages/common/text/readers.py) never call `open` on an input themselves: they call
`open_input`, which returns a seekable binary file object, and `input_size`. Today these read the local
file system; remote URLs (s3://, gs://, hf://, https://) go through fsspec behind the same two calls.
"""
from __future__ import annotations

import os
from typing import BinaryIO


def open_input(path: str) -> BinaryIO:
    """A seekable binary file object over the input file `path`."""
    return open(path, "rb")


def input_size(path: str) -> int:
    """The size in bytes of the input file `path`."""
    return os.path.getsize(path)
