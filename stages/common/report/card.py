"""The model card (README.md of the exported Hugging Face folder): what the model is, the data it saw (the
funnel from `data.read_funnel`), its validation perplexity per tier, the INT8 variant's size and speed and
the CPUs it is exact on, how to load it and generate, samples from both precisions, and its limits. Text in,
text out."""
from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import Any

from stages.common.lm.tiers import TIERS


def _table(header: Sequence[str], align: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |",
            *["| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in row) + " |" for row in rows]]


def data_lines(funnel: dict[str, Any]) -> list[str]:
    langs = funnel["langs"]
    steps = [[s["step"], f"{s['total']:,}", *[f"{s['by_lang'][l]:,}" if l in s["by_lang"] else "" for l in langs]]
             for s in funnel["steps"]]
    splits = [[tier, l, f"{funnel['train'][tier][l]['docs']:,}", f"{funnel['train'][tier][l]['tokens']:,}",
               f"{funnel['val'][tier][l]['docs']:,}"] for tier in TIERS for l in langs]
    train_docs = sum(c["docs"] for t in funnel["train"].values() for c in t.values())
    train_tokens = sum(c["tokens"] for t in funnel["train"].values() for c in t.values())
    return [f"Languages: {', '.join(langs)}. Documents at each step of the pipeline that selected the training "
            f"data (language as detected by the clean stage; records dropped before language identification "
            f"have none):", "",
            *_table(["step", "documents", *langs], ["l", "r", *["r"] * len(langs)], steps), "",
            f"Training split: {train_docs:,} documents, {train_tokens:,} tokens; the validation split, held out by "
            "a hash of each document's id, gives the perplexities below. Tiers are thirds per language by the "
            "perplexity a reference LM gave each document (easy: the most predictable).", "",
            *_table(["tier", "language", "train docs", "train tokens", "validation docs"],
                    ["l", "l", "r", "r", "r"], splits)]


def exactness(metrics: dict[str, Any]) -> str:
    """Which CPUs the INT8 file computes exactly on, from the export stage's check of its int8 weights."""
    return (f"Its integer matmuls are exact on {metrics['int8.exact_on']}: x86 integer kernels without VNNI or AMX "
            "(AVX2, AVX-512 without VNNI) add each pair of uint8 x int8 products (weights w_a, w_b adjacent along "
            "the inner dimension) into a saturating 16-bit integer, exact while 255 x (|w_a| + |w_b|) <= 32,767; "
            f"this model's largest such |w_a| + |w_b| (same signs) is {metrics['int8.max_pair_sum']}.")


def model_card(*, model: dict[str, Any], funnel: dict[str, Any], table: Sequence[dict[str, Any]],
               metrics: dict[str, Any], timing: dict[str, int], samples: dict[str, Any], eos_token: str) -> str:
    """`model`: the final FP32 model's shape (num_params, dim, num_layers, num_heads, kv_heads, hidden_dim,
    vocab_size, max_seq_len); `table`: the export stage's rows; `metrics`: its ratios and parity check;
    `timing`: num_threads, latency_seq_len, throughput_batch_size; `samples`: its samples.json."""
    rows = {r["model"]: r for r in table}
    int8, fp32 = rows["qat_int8"], rows[max((n for n in rows if n.startswith("prune_step_")),
                                            key=lambda n: int(n.rsplit("_", 1)[1]))]
    decoding = samples["decoding"]
    prompt = samples["samples"][0]["prompt"] if samples["samples"] else "The"
    lines = ["---", "library_name: transformers", "pipeline_tag: text-generation",
             f"language: [{', '.join(funnel['langs'])}]", "tags: [llama, refinery, pruned]", "---", "",
             "# Refinery LM (pruned)", "",
             f"A small Llama-style decoder ({model['num_params']:,} parameters: {model['num_layers']} layers, width "
             f"{model['dim']}, {model['num_heads']} attention heads ({model['kv_heads']} key/value), MLP width "
             f"{model['hidden_dim']}, vocabulary {model['vocab_size']:,}, context {model['max_seq_len']} tokens) "
             "trained by the Refinery pipeline, then structurally pruned (MLP channels and attention heads) with "
             "distillation from the trained model. This folder holds the final pruned FP32 model for "
             "`transformers` (`LlamaForCausalLM`); the INT8 model, quantization-aware trained from it, is "
             "`../onnx/model.int8.onnx` (onnxruntime).", "",
             "## Data", "", *data_lines(funnel), "",
             "## Validation perplexity and speed", "",
             f"Every model of the chain, measured with onnxruntime, {timing['num_threads']} threads: latency at "
             f"batch 1 x {timing['latency_seq_len']} tokens (fastest run), throughput at batch "
             f"{timing['throughput_batch_size']}; perplexity per tier on the validation split.", "",
             *_table(["model", "precision", "params", "file MB", "latency ms", "tokens/s", "ppl easy", "ppl medium",
                      "ppl hard", "ppl all"], ["l", "l", *["r"] * 8],
                     [[r["model"], r["precision"], f"{r['num_params']:,}", f"{r['file_mb']:.2f}",
                       f"{r['latency_ms_b1']:.2f}", f"{r['tokens_per_s_b8']:,.0f}",
                       *[f"{r[f'val_ppl_{t}']:.2f}" for t in (*TIERS, "all")]] for r in table]), "",
             f"The INT8 (QAT) model against this folder's FP32 model: {int8['file_mb']:.2f} MB instead of "
             f"{fp32['file_mb']:.2f} ({metrics['ratio.int8_file_vs_fp32']:.2f} of the size), latency "
             f"{metrics['ratio.int8_latency_vs_fp32_b1']:.2f}x, throughput "
             f"{metrics['ratio.int8_throughput_vs_fp32_b8']:.2f}x, validation perplexity "
             f"{metrics['ratio.int8_ppl_vs_fp32']:.3f}x. It was checked against the quantization-aware model it "
             f"was exported from on {metrics['parity.int8_positions']:,} validation positions "
             f"({metrics['parity.int8_kernels']} integer kernels): argmax agreement "
             f"{metrics['parity.int8_argmax_agreement']:.4f}. {exactness(metrics)}", "",
             "## Use", "",
             "Documents start after the end-of-text token, so a prompt is encoded with it in front:", "",
             "```python", "from transformers import AutoTokenizer, LlamaForCausalLM", "",
             'path = "models/export/hf"  # this folder',
             "tok = AutoTokenizer.from_pretrained(path)", "model = LlamaForCausalLM.from_pretrained(path)",
             f"ids = tok(tok.eos_token + {json.dumps(prompt, ensure_ascii=False)}, return_tensors=\"pt\", "
             "add_special_tokens=False).input_ids",
             f"out = model.generate(ids, max_new_tokens={decoding['max_new_tokens']}, do_sample=True, "
             f"temperature={decoding['temperature']}, top_k={decoding['top_k']})",
             "print(tok.decode(out[0], skip_special_tokens=True))", "```", "",
             "The INT8 model, with onnxruntime (from the repository root; `--model models/export/onnx/model.onnx` "
             "for FP32):", "", "```bash", f"python -m stages.export generate --prompt {shlex.quote(prompt)}", "```", "",
             f"What that command prints ({', '.join(f'{k} {v}' for k, v in decoding.items())}):", "",
             *_table(["prompt", "FP32", "INT8"], ["l", "l", "l"],
                     [[repr(s["prompt"]), repr(s["fp32"]), repr(s["int8"])] for s in samples["samples"]]), "",
             "## Limits", "",
             f"- A demonstration of the pipeline, not a useful language model: with {model['num_params']:,} "
             "parameters and a short training run its text is locally fluent at best. No instruction tuning, no "
             "safety filtering beyond the pipeline's quality, language and ad/boilerplate filters.",
             f"- It saw {', '.join(funnel['langs'])} only; its tokenizer was trained on the same documents, so "
             "other languages and scripts fall apart into bytes.",
             f"- Context of {model['max_seq_len']} tokens; `{eos_token}` separates documents.",
             "- The perplexities are on held-out documents of the same corpus, after the same filters: they compare "
             "the models of this chain with each other, not with models trained elsewhere.",
             "- The INT8 model exists as ONNX only; its speed and its agreement with the quantization-aware model "
             "were measured on the CPU that ran the export stage; its integer matmuls are exact on "
             f"{metrics['int8.exact_on']}.", ""]
    return "\n".join(lines)
