"""Where inputs are read from: the one place that opens an input file or lists a folder of them.

Readers (the package stages/common/text/readers) never call `open` on an input themselves: they call
`open_input`, which returns a seekable binary file object, and `input_size`. A local path reads the local
file system; a URL (`s3://`, `gs://`, `hf://`, `https://`, any protocol fsspec knows) goes through fsspec,
with the credentials each file system finds itself (AWS_* variables or ~/.aws, with AWS_ENDPOINT_URL /
AWS_ENDPOINT_URL_S3 for an S3-compatible server; GOOGLE_APPLICATION_CREDENTIALS or gcloud's; HF_TOKEN or
the huggingface-cli login). Nothing here takes a credential as an argument.

Every request to an http(s) or S3 store waits at most `connect_s` for the connection and `read_s` for
each answer (`set_timeouts`: the stage's `remote_connect_timeout_s` and `remote_read_timeout_s`, by default
`CONNECT_TIMEOUT_S` and `READ_TIMEOUT_S`; the libraries' own defaults wait minutes). A remote read that fails
(connection reset, 5xx, timeout) is retried `READ_RETRIES` times with backoff, reopening the file at the
byte already reached, so no byte is read twice or skipped; then it raises `InputError` naming the file,
the byte and the error, which says what happened when it can tell: timed out, connection refused,
forbidden, not found. A URL is shown (logs, errors, `source` columns,
fingerprints) only through `redact`, which drops what may hold a secret: user info and query string.
fsspec's own debug lines print whole URLs, so its logger is held at INFO once such a URL is opened.
"""
from __future__ import annotations

import contextlib
import fnmatch
import glob
import io
import logging
import os
import time
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from stages.common.runtime.urls import InputError, is_url, protocol, redact, scrub

log = logging.getLogger("refinery.storage")

READ_RETRIES = 3  # after the first try; the delays double from RETRY_DELAY_S
RETRY_DELAY_S = 0.5
CONNECT_TIMEOUT_S = 10.0  # per request: opening the connection
READ_TIMEOUT_S = 30.0  # per request: the wait for the answer, and between its chunks; a whole download may take longer
_timeout_s = {"connect": CONNECT_TIMEOUT_S, "read": READ_TIMEOUT_S}  # what set_timeouts last set
_GLOBBING = ("s3", "s3a", "gs", "gcs", "hf", "file", "memory")  # protocols whose listings make globs and folders work
# Not worth a retry: the same answer would come again.
_FINAL_REASONS = ("not found", "forbidden")
_FINAL_ERRORS = (IsADirectoryError, NotADirectoryError)


def set_timeouts(connect_s: float = CONNECT_TIMEOUT_S, read_s: float = READ_TIMEOUT_S) -> None:
    """Bound every later request of this process: `connect_s` to open a connection, `read_s` for each answer.
    Remote inputs are opened and listed in the stage's own process, which calls this once from its params."""
    _timeout_s.update(connect=connect_s, read=read_s)


def _timeouts(proto: str) -> dict[str, Any]:
    """The file system options that bound each request of `proto` by the timeouts `set_timeouts` set."""
    connect_s, read_s = _timeout_s["connect"], _timeout_s["read"]
    if proto in ("http", "https"):
        import aiohttp

        # total=None: a large file may take longer than any fixed limit; a silent server does not
        return {"client_kwargs": {"timeout": aiohttp.ClientTimeout(total=None, sock_connect=connect_s,
                                                                   sock_read=read_s)}}
    if proto in ("s3", "s3a"):
        # s3fs already retries a timed-out request 5 times; botocore's own retries (5 attempts by default)
        # would multiply that to 25 waits. Standard mode keeps one retry, for a 5xx or throttling answer.
        return {"config_kwargs": {"connect_timeout": connect_s, "read_timeout": read_s,
                                  "retries": {"mode": "standard", "total_max_attempts": 2}}}
    return {}


def _filesystem(url: str) -> tuple[Any, str]:
    """(fsspec file system, its path for `url`); ValueError naming the package to install if fsspec has
    no implementation for the protocol here."""
    import fsspec  # only remote inputs need it

    if redact(url) != url:  # fsspec's debug lines show whole URLs: keep them off for one that holds a secret
        fsspec_log = logging.getLogger("fsspec")
        fsspec_log.setLevel(max(fsspec_log.getEffectiveLevel(), logging.INFO))
    try:
        return fsspec.core.url_to_fs(url, **_timeouts(protocol(url)))
    except ImportError as e:
        raise ValueError(f"input {redact(url)}: reading {protocol(url)}:// needs a package that is not "
                         f"installed ({scrub(str(e), url)})") from None
    except ValueError as e:  # an unknown protocol
        raise ValueError(f"input {redact(url)}: {scrub(str(e), url)}") from None


def _chain(error: BaseException) -> list[BaseException]:
    """`error` and what it wraps: its causes and contexts, and botocore's `error` argument."""
    found: list[BaseException] = []
    todo: list[BaseException | None] = [error]
    while todo:
        e = todo.pop(0)
        if e is None or any(e is f for f in found):
            continue
        found.append(e)
        wrapped = getattr(e, "kwargs", None)
        todo += [e.__cause__, e.__context__, wrapped.get("error") if isinstance(wrapped, dict) else None]
    return found


def _not_found(e: BaseException) -> bool:
    """A 404, or a FileNotFoundError that wraps nothing else: fsspec's http file system raises one for
    any failed lookup, a timeout included, `from` the real error."""
    if getattr(e, "status", None) == 404:
        return True
    return isinstance(e, FileNotFoundError) and (e.__cause__ is None or _not_found(e.__cause__))


_REASONS = (  # in this order: a timeout that ends as fsspec's FileNotFoundError is a timeout
    ("timed out", lambda e: isinstance(e, TimeoutError)),  # asyncio's, aiohttp's, fsspec's and sockets' alike
    ("connection refused", lambda e: isinstance(e, ConnectionRefusedError)),
    ("forbidden", lambda e: isinstance(e, PermissionError) or getattr(e, "status", None) == 403),
    ("not found", _not_found),
)


def _describe(error: BaseException, url: str) -> tuple[str | None, str]:
    """(what happened: "timed out", "connection refused", "forbidden", "not found" or None when it cannot
    be told, one line for the user naming it and the library's own error), with `url`'s secrets scrubbed."""
    chain = _chain(error)
    reason = next((reason for reason, test in _REASONS if any(test(e) for e in chain)), None)
    shown = error.__cause__ if isinstance(error, FileNotFoundError) and error.__cause__ else error
    message = scrub(f"{type(shown).__name__}: {shown}", url).replace("\n", " ")
    return reason, f"{reason}: {message}" if reason else message


def _ask(url: str, call: Any) -> Any:
    """`call()`'s answer from the file system of `url`: None if what it asks about does not exist; an
    `InputError` naming the URL (redacted) and what happened if the store cannot be reached, times out or
    refuses. Asking through `info` and `find` rather than `exists`/`isdir`, which answer False to a network
    error as to a missing file."""
    try:
        return call()
    except Exception as e:  # noqa: BLE001 - any library's network or auth error, reported in one line
        reason, message = _describe(e, url)
        if reason == "not found":
            return None
        raise InputError(f"{redact(url)}: cannot be looked up: {message}") from None


def exists(path: str) -> bool:
    """Whether a URL names an existing file or folder (prefix); for a glob, the folder before its first
    wildcard."""
    fs, root = _filesystem(path)
    if protocol(path) in _GLOBBING and glob.has_magic(root):
        root = root[:_magic_start(root)].rstrip("/")
        if not root:
            return True
    return _ask(path, lambda: fs.info(root)) is not None


def _magic_start(path: str) -> int:
    """Where the first path component holding a wildcard begins."""
    parts = path.split("/")
    i = next(i for i, p in enumerate(parts) if glob.has_magic(p))
    return len("/".join(parts[:i])) + (1 if i else 0)


def match_parts(parts: list[str], patterns: list[str]) -> bool:
    """glob's rules on path components: `**` spans folders, and wildcards skip dot-files unless spelled."""
    if not patterns:
        return not parts
    head, rest = patterns[0], patterns[1:]
    if head == "**":
        return any(match_parts(parts[i:], rest) for i in range(len(parts) + 1)
                   if not any(p.startswith(".") for p in parts[:i]))
    if not parts or (parts[0].startswith(".") and not head.startswith(".")):
        return False
    return fnmatch.fnmatchcase(parts[0], head) and match_parts(parts[1:], rest)


def list_remote(url: str, pattern: str = "*") -> list[str]:
    """The files a URL names, as URLs, sorted: the file itself, the files matching a glob, or the files
    under a folder (prefix) whose path below it matches `**/<pattern>`, as for a local folder. ValueError
    when nothing is there."""
    fs, root = _filesystem(url)
    fs.invalidate_cache()  # a long-lived process must see what was written since its last listing
    proto = protocol(url)
    listable = proto in _GLOBBING
    if glob.has_magic(root if listable else urlsplit(url).path):  # http(s): `?` starts the query
        if not listable:
            raise ValueError(f"input {redact(url)}: {proto}:// cannot list files, so it takes no wildcards; "
                             "name each file")
        base, wild = root[:_magic_start(root)], root[_magic_start(root):].split("/")
        found = _ask(url, lambda: fs.find(base.rstrip("/") or base, withdirs=False)) or []
        files = [p for p in found if p.startswith(base) and match_parts(p[len(base):].split("/"), wild)]
        return sorted(fs.unstrip_protocol(p) for p in files)
    info = _ask(url, lambda: fs.info(root))
    if info is None:
        raise ValueError(f"input {redact(url)} does not exist (the store answered: not found)")
    if info.get("type") != "directory":
        return [url]  # as given: an https URL keeps its query
    if not listable:
        raise ValueError(f"input {redact(url)}: {proto}:// cannot list a folder; name each file")
    base = root.rstrip("/") + "/"
    found = _ask(url, lambda: fs.find(root, withdirs=False)) or []
    files = [p for p in found if match_parts(p[len(base):].split("/"), ["**", *pattern.split("/")])]
    return sorted(fs.unstrip_protocol(p) for p in files)


def fingerprint_of(path: str) -> str:
    """What tells versions of an input file apart, cheaply: for a local file its size and modification
    time; for a URL its redacted name, size, and whichever of ETag, version id, modification time and
    checksum its file system reports."""
    if not is_url(path):
        st = os.stat(path)
        return f"{path}\0{st.st_size}\0{st.st_mtime_ns}"
    fs, root = _filesystem(path)
    info = _ask(path, lambda: fs.info(root))
    if info is None:
        raise InputError(f"{redact(path)}: does not exist")
    keys = ("size", "ETag", "etag", "VersionId", "version_id", "LastModified", "mtime", "last_modified",
            "updated", "generation", "md5Hash", "crc32c", "lfs", "blob_id")
    return "\0".join([redact(path), *(f"{k}={info[k]}" for k in keys if info.get(k) is not None)])


def open_input(path: str) -> BinaryIO:
    """A seekable binary file object over the input file `path` (a local path or a URL)."""
    if not is_url(path):
        return open(path, "rb")
    return _RetryingFile(path)


def input_size(path: str) -> int:
    """The size in bytes of the input file `path`."""
    if not is_url(path):
        return os.path.getsize(path)
    with _RetryingFile(path) as f:
        return f.size


class _RetryingFile(io.RawIOBase):
    """A remote file whose failed opens and reads are retried at the byte reached, then reported as
    `InputError`."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.name = redact(url)
        self.pos = 0
        self.inner: Any = None  # the fsspec file; None until (re)opened
        self._retrying(lambda: None, "opening")

    def _open(self) -> None:
        fs, root = _filesystem(self.url)
        self.inner = fs.open(root, "rb")
        if self.pos:
            self.inner.seek(self.pos)

    def _drop(self) -> None:
        """Close the failed file; its own close may fail the same way, and it is being replaced."""
        if self.inner is not None:
            with contextlib.suppress(Exception):
                self.inner.close()
            self.inner = None

    def _retrying(self, action: Any, what: str) -> Any:
        for attempt in range(READ_RETRIES + 1):
            try:
                if self.inner is None:
                    self._open()
                return action()
            except Exception as e:  # noqa: BLE001 - a network error of any library: retried, then reported
                reason, error = _describe(e, self.url)
                if reason in _FINAL_REASONS or isinstance(e, _FINAL_ERRORS):
                    raise InputError(f"{self.name}: {what} at byte {self.pos} failed: {error}") from None
                self._drop()
                if attempt == READ_RETRIES:
                    raise InputError(f"{self.name}: {what} at byte {self.pos} failed after {READ_RETRIES + 1} "
                                     f"tries: {error}") from None
                delay = RETRY_DELAY_S * 2 ** attempt
                log.warning("%s: %s at byte %d failed (%s); retry %d/%d in %.1fs", self.name, what, self.pos,
                            error, attempt + 1, READ_RETRIES, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")

    def read(self, size: int = -1) -> bytes:
        data = self._retrying(lambda: self.inner.read(size), "reading")
        self.pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        return self.read(-1)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self.pos
        elif whence == io.SEEK_END:
            offset += self._retrying(lambda: self.inner.size, "sizing")
        self.pos = self._retrying(lambda: self.inner.seek(offset), "seeking")
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    @property
    def size(self) -> int:
        return int(self._retrying(lambda: self.inner.size, "sizing"))

    def close(self) -> None:
        if not self.closed:
            self._drop()
        super().close()

    def __repr__(self) -> str:
        return f"<remote input {self.name}>"

