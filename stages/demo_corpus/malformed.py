"""Malformed records: bad JSON, bad UTF-8, not an object, missing or non-string text, empty text,
binary junk and oversized text, each written as its exact line."""
from __future__ import annotations

from typing import Any

from stages.demo_corpus.base import BuilderBase
from stages.demo_corpus.records import LOCALES, Doc, _dumps

BAD_BYTES = (b"\xff\xfe", b"\xc3\x28", b"\xe4\xb8", b"\x80\x81", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80")


class Malformed(BuilderBase):
    def malformed(self, kind: str) -> Doc:
        rng = self.rng
        loc = rng.choice(list(LOCALES))
        doc_id = self.new_id(optional=False)
        text = self.paragraph(loc)
        rec: dict[str, Any] = {"id": doc_id, "text": text, "source": "demo", "url": self.url(loc)}
        raw = None
        if kind == "bad_json":
            s = _dumps(rec)
            raw = s[:rng.randint(30, len(s) - 2)].encode()
        elif kind == "bad_utf8":  # right after the opening quote, so it never completes a valid sequence
            b = _dumps(rec).encode()
            i = b.index(b'"text": "') + 9
            raw = b[:i] + rng.choice(BAD_BYTES) + b[i:]
        elif kind == "not_object":
            raw, doc_id = _dumps(rng.choice(([rec], [text, text], 42, 3.5, text, None, True))).encode(), None
        elif kind == "missing_text":
            body = rec.pop("text")
            if rng.random() < 0.5:
                rec["body"] = body
        elif kind == "non_string_text":
            rec["text"] = rng.choice((12345, 3.5, [text], None, {"value": text}, True))
        elif kind == "empty":
            rec["text"] = rng.choice(("", " ", "\n\n", "\t \r\n ", "\u3000\u00a0 "))
        elif kind == "binary":
            junk = bytearray(rng.randbytes(rng.randint(200, 3000)))
            step = rng.randint(2, 5)
            junk[::step] = bytes(len(range(0, len(junk), step)))  # a NUL every few bytes
            rec["text"] = junk.decode("latin-1")
        else:  # oversized
            block = "\n\n".join(self.paragraph(loc) for _ in range(20))
            rec["text"] = "\n\n".join([block] * (2_000_000 // len(block.encode()) + 2))
        return Doc("malformed", None, "", doc_id, raw=raw or _dumps(rec).encode(), malformed=kind)
