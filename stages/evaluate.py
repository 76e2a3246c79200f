"""`evaluate`: one model's bits per byte on a frozen evaluation set, written as JSON.

    python -m stages.evaluate --model <model.safetensors> --tokenizer <dir> --eval-set <jsonl> --out <json>
                              [--device cpu|cuda|auto] [--num-threads N]

writes `{"bits_per_byte", "token_perplexity", "num_docs", "num_bytes", "num_tokens"}` to `--out`.

The `retrain` flow (flows/retrain.py) runs it for the candidate and for the champion, then decides. It is a
command, not a DVC stage: the champion it compares against is promoted by the flow, outside DVC's graph,
and the evaluation set is frozen once by the flow, so neither is a DVC dependency.

Bits per byte of UTF-8 text: the model reads each document with its own tokenizer, so a candidate whose
tokenizer was retrained on new data still compares fairly with the champion (token perplexity, also
written, is only comparable between models sharing a tokenizer). Scored in fp32, so the numbers do not
depend on the hardware's bf16.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
from dataclasses import asdict
from pathlib import Path

import torch

from stages.common.lm import bpe
from stages.common.lm.eval_result import Evaluation
from stages.common.lm.model import load_checkpoint
from stages.common.lm.scoring import score_documents
from stages.common.runtime.atomic import write_json
from stages.common.runtime.device import resolve_device

log = logging.getLogger("refinery.evaluate")

BATCH_TOKENS = 8192


def read_eval_set(path: Path) -> list[str]:
    """The texts of a frozen evaluation set (JSON lines with `text`)."""
    texts = [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line]
    if not texts:
        raise ValueError(f"{path}: the evaluation set has no documents")
    return texts


def evaluate(model_path: Path, tokenizer_dir: Path, texts: list[str], device: torch.device) -> Evaluation:
    """Score every token of every text with the model and its tokenizer."""
    tokenizer = bpe.load(tokenizer_dir)
    eos_id = bpe.special_token_id(tokenizer, bpe.eos_token_of(tokenizer_dir))
    model = load_checkpoint(model_path, device)
    if model.config.vocab_size < tokenizer.get_vocab_size():
        raise ValueError(f"{model_path}: vocabulary of {model.config.vocab_size} tokens, but its tokenizer "
                         f"{tokenizer_dir} has {tokenizer.get_vocab_size()}: not the model's tokenizer")
    nll, num_tokens = score_documents(model, bpe.encode(tokenizer, texts), eos_id, max_tokens=0,
                                      batch_tokens=BATCH_TOKENS, precision="fp32", device=device)
    total_nll, total_tokens = float(nll.sum()), int(num_tokens.sum())
    num_bytes = sum(len(t.encode("utf-8")) for t in texts)
    return Evaluation(bits_per_byte=total_nll / math.log(2) / num_bytes,
                      token_perplexity=math.exp(total_nll / total_tokens),
                      num_docs=len(texts), num_bytes=num_bytes, num_tokens=total_tokens)


def run(model_path: Path, tokenizer_dir: Path, eval_set: Path, out_path: Path, device: str = "cpu",
        num_threads: int = 0) -> Evaluation:
    """Score the model on the evaluation set and write the evaluation to `out_path`."""
    if num_threads:
        torch.set_num_threads(num_threads)
    result = evaluate(model_path, tokenizer_dir, read_eval_set(eval_set), resolve_device(device))
    write_json(out_path, asdict(result))
    log.info("%s: %.4f bits/byte, token perplexity %.2f over %d documents (%d tokens)", model_path,
             result.bits_per_byte, result.token_perplexity, result.num_docs, result.num_tokens)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m stages.evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="refinery checkpoint (model.safetensors)")
    parser.add_argument("--tokenizer", type=Path, required=True, help="the model's tokenizer folder")
    parser.add_argument("--eval-set", type=Path, required=True, help="frozen evaluation set: JSON lines with `text`")
    parser.add_argument("--out", type=Path, required=True, help="where the evaluation is written (JSON)")
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu")
    parser.add_argument("--num-threads", type=int, default=0, help="torch CPU threads; 0 = torch's default")
    args = parser.parse_args(argv)
    if args.num_threads < 0:
        parser.error(f"--num-threads must be >= 0, got {args.num_threads}")
    for flag, path, kind in (("--model", args.model, "file"), ("--tokenizer", args.tokenizer, "folder"),
                             ("--eval-set", args.eval_set, "file")):
        if not (path.is_file() if kind == "file" else path.is_dir()):
            parser.error(f"{flag} {path}: no such {kind}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    run(args.model, args.tokenizer, args.eval_set, args.out, args.device, args.num_threads)


if __name__ == "__main__":
    main()
