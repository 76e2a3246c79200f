"""Champion / challenger: the evaluation set, the scoring command, the decision, the registry, promotion.

The score is bits per byte of UTF-8 text, computed by `python -m stages.evaluate` (one run per model, an
argument list, its JSON read back here): each model reads the evaluation documents with its own
tokenizer, so a candidate whose tokenizer was retrained on new data is still compared fairly. The
evaluation set is frozen text (`eval_set`, JSON lines), written once from the validation split and reused
for every candidate: new data never moves the yardstick.

Registry: `models/registry.json` holds one entry per evaluated candidate (git revision, dvc.lock digest,
metrics, decision and reason); `models/champion/` holds the champion's model, its tokenizer and its
registry entry (`champion.json`), swapped in atomically.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from stages.common.lm.eval_result import Evaluation
from stages.common.runtime.atomic import atomic_dir, atomic_path, is_complete, write_json
from stages.common.runtime.parquet import read_table

MODEL_FILE = "model.safetensors"
TOKENIZER_DIR = "tokenizer"
CHAMPION_FILE = "champion.json"
EVALUATE_MODULE = "stages.evaluate"


def evaluate_command(model_path: Path, tokenizer_dir: Path, eval_set: Path, out_path: Path, device: str,
                     num_threads: int) -> list[str]:
    """The scoring command for one model, as an argument list (no shell), run by this interpreter."""
    return [sys.executable, "-m", EVALUATE_MODULE, "--model", str(model_path), "--tokenizer", str(tokenizer_dir),
            "--eval-set", str(eval_set), "--out", str(out_path), "--device", device,
            "--num-threads", str(num_threads)]


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
