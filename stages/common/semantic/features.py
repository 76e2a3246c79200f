"""What the semantic head reads besides the encoder's embedding: hashed word / character n-grams and a few layout statistics (line lengths, format specifiers, digits, punctuation) that mark software messages, menus and ads in any language."""
from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import xxhash

from stages.common.runtime.params import param
from stages.common.text.quality import script_chars

_WORD_RE = re.compile(r"[^\W_]+")


# possessive quantifiers: the same matches, without the cubic backtracking of overlapping `0` runs
_FORMAT_SPEC_RE = re.compile(r"%(?:\d++\$)?[-+ #0]*+\d*+(?:\.\d++)?[sdifuxXcpgeE]|\{\d*\}|%\(\w+\)[sd]")


_OPTION_LINE_RE = re.compile(r"^\s*-{1,2}[A-Za-z]")


_SENTENCE_END_RE = re.compile(r"[.!?。！？…:;：；]\s*$")


_DIGIT_RE = re.compile(r"\d")


_PUNCT_RE = re.compile(r"[^\w\s]")


_UPPER_RE = re.compile(r"[A-Z]")


_EXCLAIM_RE = re.compile(r"[!！]")


_CURRENCY_RE = re.compile(r"[$€£¥￥]|元")


_PIPE_RE = re.compile(r"[|｜]")


LAYOUT_FEATURES = ("log_chars", "log_lines", "log_mean_line", "short_line_share", "format_spec_per_line",
                   "format_spec_line_share", "option_line_share", "sentence_end_share", "digit_share",
                   "punct_share", "upper_share", "exclaim_per_line", "currency_per_line", "pipe_per_line")


def layout_features(text: str) -> np.ndarray:
    lines = [line for line in text.split("\n") if line.strip()] or [""]
    num_chars = max(1, len(text))
    num_lines = len(lines)
    specs_per_line = [len(_FORMAT_SPEC_RE.findall(line)) for line in lines]
    return np.array([
        math.log1p(num_chars),
        math.log1p(num_lines),
        math.log1p(num_chars / num_lines),
        sum(len(line) < 40 for line in lines) / num_lines,
        sum(specs_per_line) / num_lines,
        sum(n > 0 for n in specs_per_line) / num_lines,
        sum(bool(_OPTION_LINE_RE.match(line)) for line in lines) / num_lines,
        sum(bool(_SENTENCE_END_RE.search(line)) for line in lines) / num_lines,
        len(_DIGIT_RE.findall(text)) / num_chars,
        len(_PUNCT_RE.findall(text)) / num_chars,
        len(_UPPER_RE.findall(text)) / num_chars,
        len(_EXCLAIM_RE.findall(text)) / num_lines,
        len(_CURRENCY_RE.findall(text)) / num_lines,
        len(_PIPE_RE.findall(text)) / num_lines,
    ], dtype=np.float32)


@dataclass(frozen=True)
class NgramParams:
    num_buckets: int = param(1 << 18, min=1)
    word_ngrams: tuple[int, ...] = param((1, 2), min=1)  # languages written with spaces
    cjk_char_ngrams: tuple[int, ...] = param((1, 2, 3), min=1)
    max_chars: int = param(4000, min=1)  # n-grams are taken from the first characters only


def hashed_ngrams(text: str, lang: str, params: NgramParams) -> tuple[np.ndarray, np.ndarray]:
    """(bucket ids, weights): log-scaled counts of hashed n-grams, L2-normalised."""
    text = text[: params.max_chars]
    chars = script_chars(lang)  # a language written without spaces: n-grams of its script's characters
    if chars:
        tokens, sizes, sep = chars.findall(text), params.cjk_char_ngrams, ""
    else:
        tokens, sizes, sep = _WORD_RE.findall(text.lower()), params.word_ngrams, " "
    counts: Counter[int] = Counter()
    for n in sizes:
        for i in range(len(tokens) - n + 1):
            counts[xxhash.xxh32_intdigest(f"{n}{sep.join(tokens[i:i + n])}".encode()) % params.num_buckets] += 1
    if not counts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    ids = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
    weights = np.log1p(np.fromiter(counts.values(), dtype=np.float32, count=len(counts)))
    return ids, weights / np.linalg.norm(weights)


@dataclass
class Features:
    """A batch of documents as the head consumes them."""
    bag_ids: torch.Tensor  # (total n-grams,) int64
    bag_offsets: torch.Tensor  # (batch,) int64
    bag_weights: torch.Tensor  # (total n-grams,) float32
    dense: torch.Tensor  # (batch, embed_dim + num_layout) float32, layout part standardised by the head

    @classmethod
    def build(cls, texts: Sequence[str], langs: Sequence[str], embeddings: np.ndarray,
              params: NgramParams) -> Features:
        bags = [hashed_ngrams(t, lang, params) for t, lang in zip(texts, langs)]
        lengths = np.array([len(ids) for ids, _ in bags], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(bags) else np.zeros(0, dtype=np.int64)
        ids = np.concatenate([ids for ids, _ in bags]) if len(bags) else np.zeros(0, dtype=np.int64)
        weights = np.concatenate([w for _, w in bags]) if len(bags) else np.zeros(0, dtype=np.float32)
        layout = np.stack([layout_features(t) for t in texts]) if len(texts) else np.zeros((0, len(LAYOUT_FEATURES)))
        dense = np.concatenate([embeddings.astype(np.float32), layout.astype(np.float32)], axis=1)
        return cls(torch.from_numpy(ids), torch.from_numpy(offsets), torch.from_numpy(weights.astype(np.float32)),
                   torch.from_numpy(dense))

    def subset(self, rows: np.ndarray) -> Features:
        offsets = self.bag_offsets.numpy()
        ends = np.append(offsets[1:], len(self.bag_ids))
        pieces = [np.arange(offsets[r], ends[r]) for r in rows]
        index = torch.from_numpy(np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64))
        lengths = np.array([len(p) for p in pieces], dtype=np.int64)
        new_offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(rows) else np.zeros(0, dtype=np.int64)
        return Features(self.bag_ids[index], torch.from_numpy(new_offsets), self.bag_weights[index],
                        self.dense[torch.from_numpy(np.asarray(rows, dtype=np.int64))])
