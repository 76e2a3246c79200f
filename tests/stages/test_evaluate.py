"""`python -m stages.evaluate`: bits per byte of one model on a frozen evaluation set, as the JSON the
`retrain` flow reads."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from flows.registry import Evaluation as FlowEvaluation
from stages import evaluate
from stages.common.lm import bpe
from stages.common.lm.model import Transformer, preset, save_checkpoint
from tests.fixtures.lm_corpus import one_torch_thread, synthetic_docs  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

EOS, PAD = "<|endoftext|>", "<|pad|>"


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tokenizer, an untrained debug model sized to it, a too-small one, and a frozen evaluation set."""
    out = tmp_path_factory.mktemp("evaluate")
    texts = [d["text"] for d in synthetic_docs(60, seed=1)]
    tokenizer = bpe.train_bpe(texts, vocab_size=300, min_frequency=2, eos_token=EOS, pad_token=PAD)
    bpe.save(tokenizer, out / "tokenizer", EOS, PAD)
    torch.manual_seed(0)
    save_checkpoint(Transformer(preset("debug", tokenizer.get_vocab_size())), out / "model.safetensors")
    save_checkpoint(Transformer(preset("debug", 64)), out / "small.safetensors")
    docs = synthetic_docs(6, seed=2) + [{"id": "long", "text": "河流 " * 200}]  # longer than the context
    (out / "eval_set.jsonl").write_text("".join(json.dumps({"id": d["id"], "text": d["text"]}, ensure_ascii=False)
                                                + "\n" for d in docs), encoding="utf-8")
    return out


def test_writes_the_evaluation_the_flow_reads(model_files: Path, tmp_path: Path):
    out = tmp_path / "score.json"
    evaluate.main(["--model", str(model_files / "model.safetensors"), "--tokenizer", str(model_files / "tokenizer"),
                   "--eval-set", str(model_files / "eval_set.jsonl"), "--out", str(out), "--num-threads", "1"])
    texts = evaluate.read_eval_set(model_files / "eval_set.jsonl")
    tokenizer = bpe.load(model_files / "tokenizer")
    result = FlowEvaluation.read(out)  # the flow's reader takes exactly these fields
    assert result.num_docs == 7
    assert result.num_bytes == sum(len(t.encode("utf-8")) for t in texts)
    assert result.num_tokens == sum(len(ids) for ids in bpe.encode(tokenizer, texts))  # every token scored
    # one summed NLL behind both numbers
    assert result.bits_per_byte * result.num_bytes * math.log(2) == pytest.approx(
        math.log(result.token_perplexity) * result.num_tokens, rel=1e-9)
    # an untrained model is close to uniform over its vocabulary
    assert math.log(result.token_perplexity) == pytest.approx(math.log(tokenizer.get_vocab_size()), rel=0.1)


def test_a_model_smaller_than_its_tokenizer_is_refused(model_files: Path, tmp_path: Path):
    with pytest.raises(ValueError, match="vocabulary of 64 tokens, but its tokenizer .* has 300"):
        evaluate.run(model_files / "small.safetensors", model_files / "tokenizer", model_files / "eval_set.jsonl",
                     tmp_path / "score.json")
    assert not (tmp_path / "score.json").exists()


def test_command_line_errors_are_one_line(model_files: Path, tmp_path: Path, capsys: pytest.CaptureFixture):
    args = ["--tokenizer", str(model_files / "tokenizer"), "--eval-set", str(model_files / "eval_set.jsonl"),
            "--out", str(tmp_path / "score.json")]
    with pytest.raises(SystemExit) as exited:
        evaluate.main(["--model", str(tmp_path / "missing.safetensors"), *args])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith("--model " + str(tmp_path / "missing.safetensors")
                                                             + ": no such file")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="empty.jsonl: the evaluation set has no documents"):
        evaluate.read_eval_set(tmp_path / "empty.jsonl")
