"""Names of inputs: whether one is a URL, how a URL may be shown (`redact`, `scrub`: never a secret it
holds), the part that names the file, and `InputError`, the error of an input that cannot be read.

Apart from the file system code (stages.common.runtime.storage, which opens and lists inputs, and imports
fsspec for URLs), so that a stage that only names or shows its inputs does not depend on it. Imports only the
standard library.
"""
from __future__ import annotations

import os
import re
from urllib.parse import quote, unquote, urlsplit, urlunsplit

_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class InputError(ValueError):
    """An input file that cannot be read whole (corrupt, truncated, unreachable); the message names the
    file and where."""


def is_url(path: str | os.PathLike) -> bool:
    """Whether `path` is a URL (`scheme://...`) rather than a local path; `file://` counts as a URL."""
    return bool(_URL_RE.match(str(path)))


def redact(path: str | os.PathLike) -> str:
    """`path` as it may be shown: a URL without user info (`user:password@`), query string or fragment
    (a presigned URL's signature); a local path as it is."""
    path = str(path)
    if not is_url(path):
        return path
    parts = urlsplit(path)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def scrub(text: str, path: str) -> str:
    """`text` (an error message) with every spelling of URL `path` that holds a secret replaced by `redact(path)`."""
    if not is_url(path):
        return text
    parts = urlsplit(path)
    text = text.replace(path, redact(path))
    secrets = [s for s in (parts.query, parts.fragment, parts.netloc.rpartition("@")[0]) if s]
    secrets += [spelling for s in secrets for spelling in (unquote(s), quote(unquote(s), safe="=&:"))]
    for secret in sorted(set(secrets), key=len, reverse=True):  # longest first: a part inside another
        text = text.replace(secret, "<redacted>")
    return text


def url_path(path: str) -> str:
    """The part of `path` that names the file (a URL without its query), for telling formats by suffix."""
    return urlsplit(path).path if is_url(path) else path


def protocol(url: str) -> str:
    return url.split("://", 1)[0].lower()
