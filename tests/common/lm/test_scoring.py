import csv
import random

import numpy as np
import pytest
import torch

from stages.common.lm import bpe
from stages.common.lm.model import LOSS_CHUNK_ROWS, Transformer, preset
from stages.common.lm.scoring import (
    CUTOFF_COLUMNS,
    HISTOGRAM_COLUMNS,
    NLL_ROWS_STEP,
    POOLED,
    WIDTH_STEP,
    _pieces,
    assign_tiers,
    compute_cutoffs,
    cutoff_rows,
    histogram_rows,
    read_cutoffs,
    score_documents,
)
from stages.common.lm.token_shards import TokenShard, TokenShardWriter, WindowSampler
from stages.common.runtime.atomic import write_csv
from stages.common.training.optim import OptimParams
from stages.common.training.trainer import DynamicClip, TrainConfig, in_process
from tests.fixtures.lm_corpus import one_torch_thread, synthetic_docs  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DEVICE = torch.device("cpu")
EOS = 0


def direct_nll(model: Transformer, doc: np.ndarray) -> float:
    """Summed NLL of a document that fits the context, computed the plain way."""
    seq = torch.tensor(np.concatenate([[EOS], doc]), dtype=torch.long)[None]
    logits = model(seq[:, :-1])
    return torch.nn.functional.cross_entropy(logits[0], seq[0, 1:], reduction="sum").item()


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(preset("debug", 60)).eval()


def test_pieces_cover_each_document_once():
    doc, start, length = _pieces(np.array([5, 64, 65, 200]), seq_len=64, max_tokens=0)
    assert doc.tolist() == [0, 1, 2, 2, 3, 3, 3, 3]
    assert start.tolist() == [0, 0, 0, 64, 0, 64, 128, 192] and length.tolist() == [5, 64, 64, 1, 64, 64, 64, 8]
    doc, _, length = _pieces(np.array([5, 200]), seq_len=64, max_tokens=100)
    assert doc.tolist() == [0, 1, 1] and length.tolist() == [5, 64, 36]


def test_scores_match_a_direct_computation_whatever_the_batching(model):
    rng = np.random.default_rng(0)
    docs = [rng.integers(1, 60, size=n) for n in (3, 64, 10, 1, 40)]
    expected = [direct_nll(model, d) for d in docs]
    for batch_tokens in (64, 256, 100_000):
        nll, scored = score_documents(model, docs, EOS, 0, batch_tokens, "fp32", DEVICE)
        np.testing.assert_allclose(nll, expected, rtol=1e-4)
        assert scored.tolist() == [3, 64, 10, 1, 40]


def test_shapes_come_from_a_small_fixed_set_whatever_the_lengths(model):
    """oneDNN keeps compiled kernels per input shape and never frees them: scoring must not meet a new shape
    for every new length, or its memory grows with the corpus."""
    shapes = set()
    hidden, nll = model.hidden_states, model.token_nll
    model.hidden_states = lambda x: shapes.add(("layers", *x.shape)) or hidden(x)
    model.token_nll = lambda h, t: shapes.add(("projection", h.shape[0] % LOSS_CHUNK_ROWS)) or nll(h, t)
    try:
        rng = np.random.default_rng(2)
        for _ in range(4):  # 4 shards of documents of every length from 1 to 300 tokens
            score_documents(model, [rng.integers(1, 60, size=n) for n in rng.permutation(np.arange(1, 301))], EOS,
                            0, 256, "fp32", DEVICE)
    finally:
        del model.hidden_states, model.token_nll
    seq_len = model.config.max_seq_len
    widths = {s[2] for s in shapes if s[0] == "layers"}
    assert widths <= set(range(WIDTH_STEP, seq_len + 1, WIDTH_STEP)) | {seq_len}
    assert len([s for s in shapes if s[0] == "layers"]) <= len(widths) * 6  # rows: powers of two or a full batch
    assert {s[1] for s in shapes if s[0] == "projection"} <= set(range(0, LOSS_CHUNK_ROWS, NLL_ROWS_STEP))


def test_long_documents_are_scored_in_pieces_and_capped(model):
    rng = np.random.default_rng(1)
    long_doc = rng.integers(1, 60, size=150)
    nll, scored = score_documents(model, [long_doc], EOS, 0, 1000, "fp32", DEVICE)
    # piece 1: after eos; pieces 2 and 3 restart their context at the token before them
    pieces = [direct_nll(model, long_doc[:64])]
    for s in (64, 128):
        seq = torch.tensor(long_doc[s - 1:s + 64], dtype=torch.long)[None]
        pieces.append(torch.nn.functional.cross_entropy(model(seq[:, :-1])[0], seq[0, 1:], reduction="sum").item())
    assert scored[0] == 150 and nll[0] == pytest.approx(sum(pieces), rel=1e-4)
    capped, scored = score_documents(model, [long_doc], EOS, 70, 1000, "fp32", DEVICE)
    assert scored[0] == 70 and capped[0] == pytest.approx(pieces[0] + nll_prefix(model, long_doc, 64, 6), rel=1e-4)


def nll_prefix(model, doc, start, n):
    seq = torch.tensor(doc[start - 1:start + n], dtype=torch.long)[None]
    return torch.nn.functional.cross_entropy(model(seq[:, :-1])[0], seq[0, 1:], reduction="sum").item()


def test_trained_model_finds_its_own_kind_of_text_easier_than_shuffled_text(tmp_path):
    docs = [d["text"] for d in synthetic_docs(400, seed=1, noisy_share=0.0)]
    tokenizer = bpe.train_bpe(docs, 300, 2, "<|endoftext|>", "<|pad|>")
    train, held_out = bpe.encode(tokenizer, docs[:350]), bpe.encode(tokenizer, docs[350:])
    writer = TokenShardWriter(tmp_path / "train", 300, EOS)
    for ids in train:
        writer.add(ids)
    writer.close()
    sampler = WindowSampler(TokenShard(tmp_path / "train"), seq_len=64, batch_size=16, seed=0)

    torch.manual_seed(0)
    model = Transformer(preset("debug", 300))
    cfg = TrainConfig(max_steps=80, micro_batch_size=16, gradient_accumulation_steps=1, seq_len=64, precision="fp32",
                      optim=OptimParams(lr=1e-2, warmup_steps=10), dynamic_clip=DynamicClip(enabled=False),
                      eval_windows=0)
    in_process(model, sampler, cfg, DEVICE).fit({}, 0, 0, lambda: None, progress_bar=False, log_every=80)
    model.eval()
    rng = random.Random(0)
    shuffled = [np.array(rng.sample(list(ids), len(ids))) for ids in held_out]
    nll, n = score_documents(model, held_out, EOS, 0, 4096, "fp32", DEVICE)
    nll_shuffled, n_shuffled = score_documents(model, shuffled, EOS, 0, 4096, "fp32", DEVICE)
    ppl, ppl_shuffled = np.exp(nll / n), np.exp(nll_shuffled / n_shuffled)
    assert np.median(ppl) * 2 < np.median(ppl_shuffled)
    assert (ppl < ppl_shuffled).mean() > 0.9


def test_cutoffs_split_each_language_into_thirds_on_its_own_scale():
    rng = np.random.default_rng(0)
    # Chinese perplexities on a ~4x higher scale than English (as in CCNet); a rare language too.
    ppl = np.concatenate([rng.lognormal(3, 0.5, 3000), rng.lognormal(4.4, 0.5, 2400), rng.lognormal(5, 1, 30)])
    langs = np.array(["en"] * 3000 + ["zh"] * 2400 + ["ja"] * 30, dtype=object)
    cutoffs = compute_cutoffs(ppl, langs, (33.3, 66.7), min_docs=100)
    tiers = assign_tiers(ppl, langs, cutoffs)
    for lang in ("en", "zh"):
        shares = np.bincount(tiers[langs == lang], minlength=3) / (langs == lang).sum()
        np.testing.assert_allclose(shares, [1 / 3] * 3, atol=0.01)
        assert cutoffs[lang].source == "lang"
    assert cutoffs["zh"].easy_max > 3 * cutoffs["en"].easy_max
    assert cutoffs["ja"].source == "pooled" and cutoffs["ja"].easy_max == cutoffs[POOLED].easy_max
    assert cutoffs["ja"].num_docs == 30
    # Boundaries: at or below a cutoff is the easier tier.
    assert assign_tiers(np.array([cutoffs["en"].easy_max, cutoffs["en"].medium_max]), np.array(["en", "en"]),
                        cutoffs).tolist() == [0, 1]


def test_cutoffs_csv_round_trip_and_frozen_use(tmp_path):
    cutoffs = compute_cutoffs(np.array([1.0, 2, 3, 4, 5, 6]), np.array(["en"] * 3 + ["zh"] * 3), (33.3, 66.7), 3)
    write_csv(tmp_path / "cutoffs.csv", CUTOFF_COLUMNS, cutoff_rows(cutoffs))
    frozen = read_cutoffs(tmp_path / "cutoffs.csv")
    assert set(frozen) == {"*", "en", "zh"} and frozen["zh"].easy_max == pytest.approx(cutoffs["zh"].easy_max)
    # A language the file does not list falls back to the pooled row.
    assert assign_tiers(np.array([1.0, 100.0]), np.array(["de", "de"]), frozen).tolist() == [0, 2]
    with open(tmp_path / "bad.csv", "w", newline="") as f:
        csv.writer(f).writerows([CUTOFF_COLUMNS, ["en", 1, 2, 3, "lang"]])
    with pytest.raises(ValueError, match="pooled row"):
        read_cutoffs(tmp_path / "bad.csv")


def test_histogram_counts_every_document_and_marks_cutoffs():
    rng = np.random.default_rng(0)
    ppl = np.concatenate([rng.lognormal(3, 0.5, 500), rng.lognormal(4, 0.5, 300)])
    langs = np.array(["en"] * 500 + ["zh"] * 300, dtype=object)
    cutoffs = compute_cutoffs(ppl, langs, (33.3, 66.7), 10)
    rows = [dict(zip(HISTOGRAM_COLUMNS, r)) for r in histogram_rows(ppl, langs, cutoffs)]
    for lang, n in (("en", 500), ("zh", 300)):
        assert sum(r["docs"] for r in rows if r["lang"] == lang and r["kind"] == "bin") == n
        marks = [r["log10_perplexity"] for r in rows if r["lang"] == lang and r["kind"] == "cutoff"]
        assert marks == pytest.approx(np.log10([cutoffs[lang].easy_max, cutoffs[lang].medium_max]), abs=1e-4)
    bins = [r for r in rows if r["lang"] == "en" and r["kind"] == "bin"]
    assert [r["tier"] for r in bins] == sorted((r["tier"] for r in bins), key=["easy", "medium", "hard"].index)


def test_a_small_language_gets_the_pooled_cutoffs_and_says_so(caplog):
    """Any language code works; one with fewer than `min_docs` documents is tiered by the pooled cutoffs."""
    rng = np.random.default_rng(0)
    ppl = np.concatenate([rng.lognormal(3, 0.5, 300), rng.lognormal(4, 0.5, 200), [5.0, 500.0, 50.0]])
    langs = np.array(["en"] * 300 + ["ru"] * 200 + ["th"] * 3, dtype=object)
    with caplog.at_level("INFO", logger="refinery.perplexity"):
        cutoffs = compute_cutoffs(ppl, langs, (33.3, 66.7), min_docs=100)
    assert cutoffs["ru"].source == "lang" and cutoffs["ru"].num_docs == 200
    assert cutoffs["th"].source == "pooled" and cutoffs["th"].num_docs == 3
    assert (cutoffs["th"].easy_max, cutoffs["th"].medium_max) == (cutoffs["*"].easy_max, cutoffs["*"].medium_max)
    assert [r.getMessage() for r in caplog.records if "pooled" in r.getMessage()] == [
        "perplexity: 3 document(s) in 'th', fewer than min_docs_per_lang (100): it gets the pooled cutoffs"]
    assert assign_tiers(np.array([5.0, 500.0]), np.array(["th", "th"], dtype=object), cutoffs).tolist() == [0, 2]
