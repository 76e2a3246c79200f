"""WARC and WET files with every kind of record the readers must handle, written with warcio (a second WARC
implementation: the readers use FastWARC); the test fixtures and bench/warc.py both write them."""
from __future__ import annotations

import gzip
import io
from pathlib import Path

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

EN_PAGE = ("<!DOCTYPE html><html><head><title>River</title></head><body><nav>Home | About</nav><p>The river runs "
           "through the old town and the people who live there have fished in it for generations. In the spring the "
           "water rises with the melting snow, and the fishermen mend their nets on the bank.</p></body></html>")
LATIN1_PAGE = ("<html><head><meta http-equiv='Content-Type' content='text/html; charset=iso-8859-1'></head><body><p>"
               "A small caf\xe9 on the corner of the square opens before dawn, and the smell of bread fills the "
               "street while the first buses arrive with workers who stop to buy rolls on their way.</p></body></html>")
ZH_PAGE = ("<html><head><title>河</title></head><body><p>这条河流经古老的小镇，住在那里的人们世世代代在河里捕鱼。"
           "春天，随着积雪融化，河水上涨，渔民们便在岸边修补渔网。</p></body></html>")


def response(writer: WARCWriter, url: str, body: bytes, status: str = "200 OK", content_type: str = "text/html",
             extra_http: list[tuple[str, str]] | None = None, warc_headers: dict[str, str] | None = None,
             content_length: int | None = None) -> None:
    headers = [("Content-Type", content_type), ("Content-Length", str(len(body) if content_length is None
                                                                       else content_length))]
    http = StatusAndHeaders(status, headers + (extra_http or []), protocol="HTTP/1.1")
    record = writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http,
                                       warc_headers_dict=warc_headers or {})
    writer.write_record(record)


def chunked(data: bytes, size: int = 50) -> bytes:
    parts = [b"%x\r\n%s\r\n" % (len(data[i:i + size]), data[i:i + size]) for i in range(0, len(data), size)]
    return b"".join(parts) + b"0\r\n\r\n"


def write_warc(path: Path, gzipped: bool = True) -> dict[str, str]:
    """A WARC with documents and every kind of record the reader must quarantine or skip; returns
    {url: expected reason ("" = a document)}."""
    buf = io.BytesIO()
    w = WARCWriter(buf, gzip=gzipped)
    w.write_record(w.create_warcinfo_record("test.warc", {"software": "warcio"}))
    w.write_record(w.create_warc_record("http://a.example/en", "request", payload=io.BytesIO(b"GET /en HTTP/1.1\r\n\r\n")))
    response(w, "http://a.example/en", EN_PAGE.encode())
    response(w, "http://a.example/latin1", LATIN1_PAGE.encode("latin-1"))  # charset from the meta tag
    response(w, "http://a.example/zh", ZH_PAGE.encode("gb18030"), content_type="text/html; charset=GB2312")
    response(w, "http://a.example/gz", chunked(gzip.compress(EN_PAGE.replace("river", "brook").encode(), mtime=0)),
             extra_http=[("Transfer-Encoding", "chunked"), ("Content-Encoding", "gzip")])
    response(w, "http://a.example/img.png", b"\x89PNG\r\n\x1a\n" + bytes(100), content_type="image/png")
    response(w, "http://a.example/missing", b"<html><body>Not found</body></html>", status="404 Not Found")
    response(w, "http://a.example/cut", EN_PAGE.encode()[:120], warc_headers={"WARC-Truncated": "length"})
    response(w, "http://a.example/short", EN_PAGE.encode()[:100], content_length=len(EN_PAGE))
    w.write_record(w.create_warc_record("http://a.example/en", "metadata", payload=io.BytesIO(b"fetchTimeMs: 12\r\n"),
                                        warc_content_type="application/warc-fields"))
    path.write_bytes(buf.getvalue())
    return {"http://a.example/en": "", "http://a.example/latin1": "", "http://a.example/zh": "",
            "http://a.example/gz": "", "http://a.example/img.png": "invalid:warc_not_html",
            "http://a.example/missing": "invalid:http_status_4xx", "http://a.example/cut": "invalid:warc_truncated",
            "http://a.example/short": "invalid:warc_truncated"}


def write_wet(path: Path, texts: dict[str, str]) -> None:
    """A WET file as Common Crawl writes it: a warcinfo record, then one conversion record per page."""
    buf = io.BytesIO()
    w = WARCWriter(buf, gzip=str(path).endswith(".gz"))
    w.write_record(w.create_warcinfo_record(path.name, {"software": "warcio"}))
    for url, text in texts.items():
        w.write_record(w.create_warc_record(url, "conversion", payload=io.BytesIO(text.encode()),
                                            warc_content_type="text/plain"))
    path.write_bytes(buf.getvalue())
