"""What a model evaluation reports, shared by the `python -m stages.evaluate` command that writes it and the
retrain flow that reads it. No torch here: the flows import it."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Evaluation:
    bits_per_byte: float  # the decision metric: summed NLL / ln 2 / UTF-8 bytes of the documents
    token_perplexity: float  # exp(mean NLL per token): comparable only under one tokenizer
    num_docs: int
    num_bytes: int
    num_tokens: int

    @classmethod
    def read(cls, path: Path) -> Evaluation:
        """The JSON the command wrote (exactly these fields)."""
        return cls(**json.loads(path.read_text(encoding="utf-8")))
