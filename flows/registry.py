"""Champion / challenger: score models on a frozen evaluation set, decide, record, promote.

The score is bits per byte of UTF-8 text: each model reads the evaluation documents with its own
tokenizer, so a candidate whose tokenizer was retrained on new data is still compared fairly (token
perplexity, also recorded, is only comparable between models sharing a tokenizer). The evaluation set is
frozen text (`eval_set`, JSON lines), written once from the validation split and reused for every
candidate: new data never moves the yardstick.

Registry: `models/registry.json` holds one entry per evaluated candidate (git revision, dvc.lock digest,
metrics, decision and reason); `models/champion/` holds the champion's model, its tokenizer and its
registry entry (`champion.json`), swapped in atomically.
"""
from __future__ import annotations

import hashlib
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from stages.common.lm import bpe
from stages.common.lm.model import load_checkpoint
from stages.common.lm.scoring import score_documents
from stages.common.runtime.atomic import atomic_dir, atomic_path, is_complete, write_json
from stages.common.runtime.parquet import read_table

MODEL_FILE = "model.safetensors"
TOKENIZER_DIR = "tokenizer"
CHAMPION_FILE = "champion.json"
SCORE_BATCH_TOKENS = 8192


@dataclass(frozen=True)
class Evaluation:
    bits_per_byte: float  # the decision metric: summed NLL / ln 2 / UTF-8 bytes of the documents
    token_perplexity: float  # exp(mean NLL per token): comparable only under one tokenizer
    num_docs: int
    num_bytes: int
    num_tokens: int


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def freeze_eval_set(docs_dir: Path, out_path: Path, max_docs: int, max_chars: int) -> int:
    """Write the first `max_docs` validation documents (by id), cut to `max_chars`, as JSON lines."""
    table = read_table(docs_dir, columns=["id", "text", "split"])
    rows = sorted((i, t[:max_chars]) for i, t, s in zip(*(table.column(c).to_pylist() for c in ("id", "text", "split")))
                  if s == "val" and t)
    if not rows:
        raise ValueError(f"{docs_dir}: no validation documents (split == 'val') to freeze an evaluation set from")
    with atomic_path(out_path) as tmp:
        tmp.write_text("".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n"
                               for i, t in rows[:max_docs]), encoding="utf-8")
    return min(len(rows), max_docs)


def read_eval_set(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line]


def evaluate_model(model_path: Path, tokenizer_dir: Path, texts: list[str], device: torch.device) -> Evaluation:
    """Score every token of every text (fp32, so the numbers do not depend on the hardware's bf16)."""
    tokenizer = bpe.load(tokenizer_dir)
    eos_id = bpe.special_token_id(tokenizer, bpe.eos_token_of(tokenizer_dir))
    model = load_checkpoint(model_path, device)
    if model.config.vocab_size < tokenizer.get_vocab_size():
        raise ValueError(f"{model_path}: vocabulary of {model.config.vocab_size} tokens, but its tokenizer "
                         f"{tokenizer_dir} has {tokenizer.get_vocab_size()}: not the model's tokenizer")
    docs = bpe.encode(tokenizer, texts)
    nll, num_tokens = score_documents(model, docs, eos_id, max_tokens=0, batch_tokens=SCORE_BATCH_TOKENS,
                                      precision="fp32", device=device)
    total_nll, total_tokens = float(nll.sum()), int(num_tokens.sum())
    num_bytes = sum(len(t.encode("utf-8")) for t in texts)
    return Evaluation(bits_per_byte=total_nll / math.log(2) / num_bytes,
                      token_perplexity=math.exp(total_nll / total_tokens),
                      num_docs=len(texts), num_bytes=num_bytes, num_tokens=total_tokens)


def decide(candidate: Evaluation, champion: Evaluation | None, min_improvement: float) -> tuple[bool, str]:
    """Promote only when the candidate's bits per byte are below the champion's by the margin."""
    if champion is None:
        return True, f"no champion yet: the candidate ({candidate.bits_per_byte:.4f} bits/byte) becomes the first"
    needed = champion.bits_per_byte * (1 - min_improvement)
    comparison = (f"candidate {candidate.bits_per_byte:.4f} bits/byte vs champion {champion.bits_per_byte:.4f}; "
                  f"promotion needs < {needed:.4f} ({min_improvement:.1%} better)")
    if candidate.bits_per_byte < needed:
        return True, f"better: {comparison}"
    return False, f"not better by the margin: {comparison}"


def champion_exists(champion_dir: Path) -> bool:
    return is_complete(champion_dir) and (champion_dir / MODEL_FILE).is_file()


def read_registry(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text(encoding="utf-8"))["entries"] if path.is_file() else []


def append_entry(path: Path, entry: dict[str, Any]) -> None:
    write_json(path, {"entries": read_registry(path) + [entry]})


def promote(model_path: Path, tokenizer_dir: Path, champion_dir: Path, entry: dict[str, Any]) -> None:
    """Copy the candidate and its tokenizer into the champion folder, swapped in whole."""
    with atomic_dir(champion_dir) as tmp:
        shutil.copy2(model_path, tmp / MODEL_FILE)
        shutil.copytree(tokenizer_dir, tmp / TOKENIZER_DIR)
        write_json(tmp / CHAMPION_FILE, entry)
