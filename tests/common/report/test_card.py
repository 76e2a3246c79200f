import re

from stages.common.report.card import model_card
from stages.common.report.data import read_funnel
from tests.fixtures.report import SAMPLES, export_metrics, export_table, write_datasets

MODEL = {"num_params": 800, "dim": 32, "num_layers": 2, "num_heads": 3, "kv_heads": 3, "hidden_dim": 32,
         "vocab_size": 320, "max_seq_len": 64}


def test_the_card_says_what_the_model_is_what_it_saw_how_good_and_how_to_use_it(tmp_path):
    paths = write_datasets(tmp_path)
    funnel = read_funnel(paths["clean"], paths["filtered"], paths["docs"])
    card = model_card(model=MODEL, funnel=funnel, table=export_table(), metrics=export_metrics(),
                      timing={"num_threads": 1, "latency_seq_len": 16, "throughput_batch_size": 8}, samples=SAMPLES,
                      eos_token="<|endoftext|>")
    assert card.startswith("---\nlibrary_name: transformers") and "language: [en, zh]" in card
    assert "800 parameters: 2 layers" in card and "context 64 tokens" in card
    # the data: every step of the funnel, per language, and the training split
    assert "| read | 46 |" in card and "| kept by clean | 27 | 15 | 12 |" in card
    assert "| kept by semantic_filter | 21 | 12 | 9 |" in card
    train = sum(c["docs"] for t in funnel["train"].values() for c in t.values())
    assert f"Training split: {train:,} documents" in card
    # perplexity per tier of every model, the INT8 model's size and speed against FP32
    assert "| qat_int8 | int8 | 800 | 0.90 | 1.10 | 950 | 15.75 | 31.50 | 47.25 | 31.50 |" in card
    assert "0.90 MB instead of 3.20 (0.28 of the size), latency 0.61x" in card and "AVX2 integer kernels" in card
    # use: transformers and the INT8 command, with the samples it prints
    assert "LlamaForCausalLM.from_pretrained(path)" in card and "tok.eos_token + \"The\"" in card
    assert "temperature=0.8, top_k=40" in card and "python -m stages.export generate --prompt The\n" in card
    assert "| '我们' | '我们的小镇' | '我们的河流' |" in card
    assert "## Limits" in card and "ONNX only" in card
    # which CPUs the INT8 file is exact on, from the export stage's check of its weights
    assert "Its integer matmuls are exact on every x86 CPU with AVX2 or later: " in card
    assert "255 x (|w_a| + |w_b|) <= 32,767; this model's largest such |w_a| + |w_b| (same signs) is 126." in card
    vnni_only = model_card(model=MODEL, funnel=funnel, table=export_table(),
                           metrics={**export_metrics(), "int8.max_pair_sum": 254,
                                    "int8.exact_on": "x86 CPUs with VNNI or AMX only"},
                           timing={"num_threads": 1, "latency_seq_len": 16, "throughput_batch_size": 8},
                           samples=SAMPLES, eos_token="<|endoftext|>")
    assert "exact on x86 CPUs with VNNI or AMX only: " in vnni_only and "(same signs) is 254." in vnni_only
    assert "floor" not in card.lower() and not re.search(r"#\d|issue", card, re.IGNORECASE)
