"""`export` stage: ONNX FP32 + INT8, a Hugging Face folder, parity checks, and the report comparing every
model of the chain (trained FP32, each pruning step, PTQ INT8, QAT INT8, onnxruntime's own dynamic INT8).

Outputs:

    <out_dir>/onnx/model.onnx          FP32, the final pruned model (dynamic batch and sequence axes)
    <out_dir>/onnx/model.int8.onnx     INT8 from QAT, saved after onnxruntime's graph optimisation
                                       (weights stored as int8, matmuls fused to integer kernels)
    <out_dir>/onnx/report/*.onnx       the other models the report measures
    <out_dir>/hf/                      config.json, model.safetensors, tokenizer files, README.md (model card):
                                       loads with transformers as LlamaForCausalLM (the final pruned FP32 model)
    <out_dir>/samples.json             what `generate` prints for each of `sample_prompts`, FP32 and INT8 ONNX
    <metrics_path>                     per model: parameters, file bytes, latency, throughput, perplexity per
                                       tier; parity and the x86 CPUs the INT8 file is exact on (both INT8
                                       checks can fail the stage); ratios between the models (file size,
                                       latency, throughput, perplexity)
    <plot_path>                        the same table as CSV (`dvc plots show`)

`python -m stages.export generate --prompt "..."` samples text from the exported INT8 (or `--model`) ONNX.
"""
from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from tqdm import tqdm

from stages.common.compress.deployable import DeployLM
from stages.common.compress.int8_pairs import PAIR_SUM_LIMIT, RULE, exact_on, int8_weight_pairs
from stages.common.compress.onnx_runtime import (
    export_onnx,
    int8_kernels,
    latency,
    optimize_onnx,
    ort_token_nll,
    quantizer_notes_silenced,
    run_logits,
    session,
)
from stages.common.compress.quant import QUANT_NAME, load_quant_state, read_scheme
from stages.common.compress.sampling import GenerateParams, check_generate_value, generate_main, generate_text
from stages.common.lm import bpe
from stages.common.lm.evaluation import tier_perplexity
from stages.common.lm.hf import write_hf_folder
from stages.common.lm.model import CHECKPOINT_NAME, CONFIG_METADATA_KEY, Transformer, load_checkpoint
from stages.common.lm.token_shards import TIERS, open_tiers
from stages.common.report.card import model_card
from stages.common.report.data import read_funnel
from stages.common.runtime.atomic import atomic_dir, write_csv
from stages.common.runtime.cli import stage_main
from stages.common.runtime.metrics import write_metrics
from stages.common.runtime.ownership import check_owned_paths
from stages.common.runtime.params import param, validate

log = logging.getLogger("refinery.export")
STAGE = "export"
FP32_NAME, INT8_NAME = "model.onnx", "model.int8.onnx"
TABLE_COLUMNS = ["model", "precision", "num_params", "file_mb", "latency_ms_b1", "latency_ms_b1_median",
                 "tokens_per_s_b8",
                 *[f"val_ppl_{t}" for t in (*TIERS, "all")]]


@dataclass(frozen=True)
class Params:
    teacher_dir: str  # the trained FP32 model (the train stage's model_dir)
    pruned_dir: str  # step_<i>/ and the final model.safetensors
    qat_dir: str  # qat/ and ptq/ (model + quant state)
    tokenizer_dir: str
    tokens_dir: str  # val/{easy,medium,hard} shards score every model
    clean_dir: str  # the clean stage's docs/ and quarantine/: the model card's data funnel
    filtered_dir: str  # the semantic_filter stage's docs/ and quarantine/
    docs_dir: str  # the perplexity stage's docs: languages, tiers, splits and tokens of the training data
    out_dir: str
    metrics_path: str  # headline figures (DVC metrics)
    detail_path: str  # every figure: per model, parity, ratios
    plot_path: str
    num_threads: int = param(2, min=1)  # onnxruntime intra-op threads, the same for every model measured
    latency_seq_len: int = param(128, min=1)
    throughput_batch_size: int = param(8, min=1)
    latency_runs: int = param(20, min=1)  # timed runs per model per round
    # rounds over all models, interleaved; the fastest run counts (median kept too)
    latency_rounds: int = param(3, min=1)
    val_batch_size: int = param(8, min=1)
    val_batches: int = param(0, min=0)  # validation batches per tier (0 = every window)
    # max |logit difference| FP32 ONNX vs torch (fails the stage above it)
    parity_tolerance: float = param(1e-4, gt=0.0)
    # validation batches per tier on which INT8 ONNX is checked against its source (fails the stage:)
    int8_parity_batches: int = param(4, min=1)
    # both defaults: ~3x what float rounding alone costs on the demo (docs/compress.md: The parity check)
    int8_min_argmax_agreement: float = param(0.978, min=0.0, max=1.0)  # share of equal argmax, at least
    int8_max_relative_diff: float = param(0.11, gt=0.0)  # max |logit difference| / max |logit|, at most
    # false: the stage fails when a pair of adjacent int8 weights can saturate the 16-bit sums of x86 integer
    # kernels without VNNI (8-bit weights); true: publish such a model, exact on CPUs with VNNI or AMX only
    int8_vnni_only: bool = False
    ort_dynamic_baseline: bool = True  # also measure onnxruntime's quantize_dynamic of the FP32 ONNX
    generate: GenerateParams = field(default_factory=GenerateParams)
    # continued by the FP32 and the INT8 model with `generate`'s settings: samples.json, the card and the report
    sample_prompts: tuple[str, ...] = ("The", "我们")

    def __post_init__(self) -> None:
        validate(self, STAGE)
        for name in ("prompt", "seed"):
            check_generate_value(f"param '{STAGE}.generate.{name}'", name, getattr(self.generate, name))
        for i, prompt in enumerate(self.sample_prompts):
            check_generate_value(f"param '{STAGE}.sample_prompts[{i}]'", "prompt", prompt)


def add_config_metadata(path: Path, model: Transformer) -> None:
    """Carry the model config in the ONNX file (max_seq_len for `generate`, sizes for readers)."""
    proto = onnx.load(str(path))
    onnx.helper.set_model_props(proto, {CONFIG_METADATA_KEY: model.config.to_json()})
    onnx.save(proto, str(path))


def export_fp32(model: Transformer, path: Path) -> Path:
    export_onnx(DeployLM(model.eval()), path, model.config.vocab_size)
    add_config_metadata(path, model)
    return path


def load_quantized(quant_dir: Path) -> DeployLM:
    model = DeployLM(load_checkpoint(quant_dir / CHECKPOINT_NAME).eval(), read_scheme(quant_dir / QUANT_NAME))
    load_quant_state(model, quant_dir / QUANT_NAME)
    return model.eval()


def export_int8(model: DeployLM, path: Path, scratch: Path) -> Path:
    """Fake-quant graph (QDQ) -> onnxruntime-optimised file: weights folded to int8, integer matmuls fused."""
    model.use_int8_tables()
    raw = export_onnx(model, scratch / f"{path.stem}.qdq.onnx", model.model.config.vocab_size)
    optimize_onnx(raw, path, 1)
    add_config_metadata(path, model.model)
    return path


def parity(sess, reference: torch.nn.Module, ids: torch.Tensor) -> tuple[float, float]:
    """(max |logit diff|, share of positions with the same argmax) of an ONNX model against torch."""
    with torch.inference_mode():
        expected = reference(ids).float().numpy()
    got = run_logits(sess, ids)
    return float(np.abs(got - expected).max()), float((got.argmax(-1) == expected.argmax(-1)).mean())


def int8_parity(sess, reference: torch.nn.Module, params: Params, seq_len: int) -> dict[str, Any]:
    """INT8 ONNX logits against the fake-quant torch model they were exported from, on validation windows of
    every tier, with this CPU's integer kernels: max |diff|, max |diff| / max |logit|, argmax agreement."""
    max_diff, max_logit, num_equal, num_positions = 0.0, 0.0, 0, 0
    with torch.inference_mode():
        for shard in open_tiers(params.tokens_dir, "val").values():
            for window in shard.sequential_windows(seq_len, params.val_batch_size, params.int8_parity_batches):
                ids = window[:, :-1]
                expected = reference(ids).float().numpy()
                got = run_logits(sess, ids)
                max_diff = max(max_diff, float(np.abs(got - expected).max()))
                max_logit = max(max_logit, float(np.abs(expected).max()))
                num_equal += int((got.argmax(-1) == expected.argmax(-1)).sum())
                num_positions += got.shape[0] * got.shape[1]
    if not num_positions:
        raise ValueError(f"{params.tokens_dir}: no validation window to check the INT8 model on")
    return {"parity.int8_vs_fake_quant_max_abs_diff": max_diff,
            "parity.int8_relative_diff": round(max_diff / max(max_logit, 1e-12), 6),
            "parity.int8_argmax_agreement": round(num_equal / num_positions, 6),
            "parity.int8_positions": num_positions, "parity.int8_kernels": int8_kernels()}


def check_int8_pairs(path: Path, params: Params) -> dict[str, Any]:
    """Which x86 CPUs the INT8 file is exact on, from its weights (stages.common.compress.int8_pairs): a model
    whose weight pairs can saturate the int16 sums of kernels without VNNI fails the export (nothing is
    published) unless `int8_vnni_only` says it is meant for VNNI / AMX CPUs only."""
    pairs = int8_weight_pairs(path)
    over = sorted((p for p in pairs if not p.fits_int16), key=lambda p: -p.max_pair_sum)
    if over and not params.int8_vnni_only:
        named = ", ".join(f"{p.initializer} ({p.op_type} {p.node}: {p.max_pair_sum})" for p in over[:3])
        raise RuntimeError(
            f"INT8 ONNX model is exact only on CPUs with VNNI or AMX integer kernels: {len(over)} of {len(pairs)} "
            f"int8 weight matrices hold adjacent weights of one sign with |w_a| + |w_b| > {PAIR_SUM_LIMIT}, e.g. "
            f"{named}; AVX2 and AVX-512 kernels without VNNI need {RULE}. Quantize with "
            "qat.scheme.weight_bits: 7, or set export.int8_vnni_only: true to publish a model that is exact only on "
            "CPUs with VNNI or AMX")
    if over:
        log.warning("export: int8_vnni_only: the INT8 model is exact only on CPUs with VNNI or AMX integer kernels "
                    "(largest adjacent weight pair %d > %d)", over[0].max_pair_sum, PAIR_SUM_LIMIT)
    return {"int8.max_pair_sum": max((p.max_pair_sum for p in pairs), default=0), "int8.exact_on": exact_on(pairs)}


def check_int8_parity(parity: dict[str, Any], params: Params) -> None:
    """Fail the export (nothing is published) when the INT8 model does not compute what it was trained as."""
    agree, rel = parity["parity.int8_argmax_agreement"], parity["parity.int8_relative_diff"]
    if agree < params.int8_min_argmax_agreement or rel > params.int8_max_relative_diff:
        raise RuntimeError(
            f"INT8 ONNX model disagrees with its fake-quant source on this CPU ({parity['parity.int8_kernels']} "
            f"integer kernels): argmax agreement {agree:.4f} (export.int8_min_argmax_agreement "
            f"{params.int8_min_argmax_agreement}), max logit difference {rel:.4f} of the largest logit "
            f"(export.int8_max_relative_diff {params.int8_max_relative_diff})")


def measure(rows: dict[str, dict[str, Any]], params: Params, vocab_size: int, seq_len: int) -> None:
    """Latency (batch 1) and throughput (batch `throughput_batch_size`) of every model on `seq_len` tokens, in
    interleaved rounds with the same thread count. The fastest run counts (the closest to an idle machine:
    on a loaded one FP32's threaded matmuls lose far more than the INT8 kernels); medians are kept too."""
    sessions = {name: session(row["path"], params.num_threads) for name, row in rows.items()}
    b1: dict[str, list[float]] = {name: [] for name in rows}
    b8: dict[str, list[float]] = {name: [] for name in rows}
    with tqdm(total=params.latency_rounds * len(sessions), desc="export: latency", unit="model") as bar:
        for _ in range(params.latency_rounds):
            for name, sess in sessions.items():
                b1[name] += latency(sess, 1, seq_len, vocab_size, params.latency_runs)
                b8[name] += latency(sess, params.throughput_batch_size, seq_len, vocab_size,
                                    max(3, params.latency_runs // 4))
                bar.update()
    for name, row in rows.items():
        row["latency_ms_b1"] = round(min(b1[name]) * 1e3, 4)
        row["latency_ms_b1_median"] = round(float(np.median(b1[name])) * 1e3, 4)
        row["tokens_per_s_b8"] = round(params.throughput_batch_size * seq_len / min(b8[name]), 1)


def run(params: Params) -> dict[str, Any]:
    check_owned_paths(STAGE, {k: getattr(params, k) for k in ("teacher_dir", "pruned_dir", "qat_dir", "tokenizer_dir",
                                                         "tokens_dir", "clean_dir", "filtered_dir", "docs_dir")},
                      {"out_dir": params.out_dir})
    start = time.perf_counter()
    torch.set_num_threads(params.num_threads)
    final = load_checkpoint(Path(params.pruned_dir) / CHECKPOINT_NAME).eval()
    special_ids = tokenizer_ids(params.tokenizer_dir)
    metrics: dict[str, Any] = {}
    with atomic_dir(params.out_dir, stage=STAGE) as out:
        onnx_dir, scratch = out / "onnx", out / "_scratch"
        (onnx_dir / "report").mkdir(parents=True)
        scratch.mkdir()
        qat = load_quantized(Path(params.qat_dir) / "qat")
        fp32_path, int8_path = export_deliverables(final, qat, params, onnx_dir, scratch, metrics)
        rows = chain_rows(final, qat, fp32_path, int8_path, params, onnx_dir / "report", scratch)
        score_files(rows, params, final.config.max_seq_len)
        seq_len = metrics["latency_seq_len"] = min(params.latency_seq_len, final.config.max_seq_len)
        measure(rows, params, final.config.vocab_size, seq_len)
        write_hf_model(final, out / "hf", params.tokenizer_dir, *special_ids)
        shutil.rmtree(scratch)

        table = [{"model": name, **{k: row[k] for k in TABLE_COLUMNS if k != "model"}} for name, row in rows.items()]
        metrics.update({f"{row['model']}.{key}": value for row in table for key, value in row.items()
                        if key not in ("model", "precision")})
        metrics.update(ratios(rows))
        log.info("export: generating the FP32 and INT8 samples")
        samples = generate_samples(fp32_path, int8_path, params)
        (out / "samples.json").write_text(json.dumps(samples, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        write_card(out / "hf" / "README.md", final, params, table, metrics, samples, seq_len)
    metrics["seconds"] = round(time.perf_counter() - start, 3)
    write_metrics(metrics, headline(metrics), params.metrics_path, params.detail_path)
    write_csv(params.plot_path, TABLE_COLUMNS, [[row[c] for c in TABLE_COLUMNS] for row in table])
    log.info("export: %s", {k: v for k, v in metrics.items() if k.startswith(("ratio.", "half_mlp."))})
    return metrics


def tokenizer_ids(tokenizer_dir: str) -> tuple[int, int | None]:
    """The tokenizer's end-of-text and padding ids (the Hugging Face config names them)."""
    tokenizer = bpe.load(tokenizer_dir)
    return bpe.special_token_id(tokenizer, bpe.eos_token_of(tokenizer_dir)), tokenizer.token_to_id("<|pad|>")


def chain_rows(final: Transformer, qat: DeployLM, fp32_path: Path, int8_path: Path, params: Params,
               report_dir: Path, scratch: Path) -> dict[str, dict[str, Any]]:
    """Every model of the compression chain as an ONNX file, for the comparison: the trained model, each
    prune step (the last is the delivered FP32 file), PTQ and QAT INT8, and onnxruntime's own dynamic INT8
    of the final model when `ort_dynamic_baseline` is set. One row per model: path, precision, parameters."""
    teacher = load_checkpoint(Path(params.teacher_dir) / CHECKPOINT_NAME).eval()
    pruned_dir = Path(params.pruned_dir)
    steps = sorted((p for p in pruned_dir.glob("step_*") if p.is_dir()), key=lambda p: int(p.name.split("_")[1]))
    log.info("export: exporting the other %d models of the chain for the comparison", len(steps) + 1)
    rows: dict[str, dict[str, Any]] = {
        "trained": {"path": export_fp32(teacher, report_dir / "trained.onnx"), "precision": "fp32",
                    "num_params": teacher.num_params(), "config": teacher.config}}
    for step in steps:
        model = final if step == steps[-1] else load_checkpoint(step / CHECKPOINT_NAME).eval()
        path = fp32_path if step == steps[-1] else export_fp32(model, report_dir / f"prune_{step.name}.onnx")
        rows[f"prune_{step.name}"] = {"path": path, "precision": "fp32", "num_params": model.num_params(),
                                      "config": model.config}
    ptq = load_quantized(Path(params.qat_dir) / "ptq")
    rows["ptq_int8"] = {"path": export_int8(ptq, report_dir / "ptq.int8.onnx", scratch), "precision": "int8",
                        "num_params": ptq.model.num_params()}
    rows["qat_int8"] = {"path": int8_path, "precision": "int8", "num_params": qat.model.num_params()}
    if params.ort_dynamic_baseline:
        dynamic = report_dir / "ort_dynamic.int8.onnx"
        with quantizer_notes_silenced():
            quantize_dynamic(str(fp32_path), str(dynamic), weight_type=QuantType.QInt8, per_channel=True)
        rows["ort_dynamic_int8"] = {"path": dynamic, "precision": "int8", "num_params": final.num_params()}
    return rows


def write_hf_model(final: Transformer, hf_dir: Path, tokenizer_dir: str, eos_id: int, pad_id: int | None) -> None:
    """The Hugging Face-style folder: config and safetensors weights of the final FP32 model, the tokenizer."""
    write_hf_folder(final, hf_dir, eos_id, pad_id)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy2(Path(tokenizer_dir) / name, hf_dir / name)


def export_deliverables(final: Transformer, qat: DeployLM, params: Params, onnx_dir: Path, scratch: Path,
                        metrics: dict[str, Any]) -> tuple[Path, Path]:
    """The two files the stage delivers, each checked: the FP32 ONNX of the final pruned model against torch
    (`parity_tolerance`), the INT8 ONNX of the QAT model for saturating weight pairs and against its fake-quant
    model (RuntimeError when a check fails). Their figures go into `metrics`; returns (FP32 path, INT8 path)."""
    fp32_path = export_fp32(final, onnx_dir / FP32_NAME)
    ids = torch.randint(0, final.config.vocab_size, (2, final.config.max_seq_len),
                        generator=torch.Generator().manual_seed(0))
    diff, agree = parity(session(fp32_path, params.num_threads), final, ids)
    metrics.update({"parity.fp32_max_abs_diff": diff, "parity.fp32_argmax_agreement": agree})
    if diff > params.parity_tolerance:
        raise RuntimeError(f"FP32 ONNX differs from torch by {diff:.3g} > {params.parity_tolerance}")
    log.info("export: FP32 ONNX written, max |logit difference| from torch %.2g", diff)
    int8_path = export_int8(qat, onnx_dir / INT8_NAME, scratch)
    metrics.update(check_int8_pairs(int8_path, params))
    metrics.update(int8_parity(session(int8_path, params.num_threads), qat, params, final.config.max_seq_len))
    check_int8_parity(metrics, params)
    log.info("export: INT8 ONNX written (exact on %s) and checked against its fake-quant model",
             metrics["int8.exact_on"])
    return fp32_path, int8_path


def score_files(rows: dict[str, dict[str, Any]], params: Params, seq_len: int) -> None:
    """Each model file's size and validation perplexity per tier in onnxruntime, into its row."""
    for row in tqdm(rows.values(), desc="export: validation perplexity", unit="model"):
        row["file_mb"] = round(Path(row["path"]).stat().st_size / 2**20, 4)
        sess = session(row["path"], params.num_threads)
        ppl = tier_perplexity(lambda w, s=sess: ort_token_nll(s, w), params.tokens_dir, seq_len,
                              params.val_batch_size, params.val_batches)
        row.update({f"val_ppl_{t}": v for t, v in ppl.items()})


def write_card(path: Path, final: Transformer, params: Params, table: list[dict[str, Any]],
               metrics: dict[str, Any], samples: dict[str, Any], seq_len: int) -> None:
    """The Hugging Face folder's model card: the model's shape, the data funnel, the comparison table, the
    INT8 checks, how latency was measured, the samples."""
    cfg = final.config
    shape = {"num_params": final.num_params(), "dim": cfg.dim, "num_layers": cfg.num_layers,
             "num_heads": cfg.num_heads, "kv_heads": cfg.kv_heads, "hidden_dim": cfg.hidden_dim,
             "vocab_size": cfg.vocab_size, "max_seq_len": cfg.max_seq_len}
    timing = {"num_threads": params.num_threads, "latency_seq_len": seq_len,
              "throughput_batch_size": params.throughput_batch_size}
    card = model_card(model=shape, funnel=read_funnel(params.clean_dir, params.filtered_dir, params.docs_dir),
                      table=table, metrics=metrics, timing=timing, samples=samples,
                      eos_token=bpe.eos_token_of(params.tokenizer_dir))
    path.write_text(card, encoding="utf-8")


def half_mlp_step(rows: dict[str, dict[str, Any]]) -> str | None:
    """The pruning step whose model has half the trained MLP width and all its heads, when there is one."""
    trained = rows["trained"]["config"]
    for name, row in rows.items():
        cfg = row.get("config")
        if (name.startswith("prune_") and 2 * cfg.hidden_dim == trained.hidden_dim
                and cfg.num_heads == trained.num_heads):
            return name
    return None


def step_number(name: str) -> int:
    return int(name.rsplit("_", 1)[1])


def ratios(rows: dict[str, dict[str, Any]]) -> dict[str, float | int]:
    """Ratios between the models of the chain, as measurements: the INT8 (QAT) model against the final pruned
    FP32 model it came from (file size, batch-1 latency, batch-8 throughput, validation perplexity), QAT
    against PTQ perplexity and, when a pruning step kept half the trained MLP width and every head, that
    step's speed-up over the trained model and its perplexity ratio. A row holds file_mb, latency_ms_b1,
    tokens_per_s_b8 and val_ppl_all (FP32 rows: their config too); bench/export.py passes its own timings in
    rows of the same shape, so both compute each ratio the same way."""
    final = rows[max((n for n in rows if n.startswith("prune_step_")), key=step_number)]
    qat, ptq, trained = rows["qat_int8"], rows["ptq_int8"], rows["trained"]
    out: dict[str, float | int] = {
        "ratio.int8_file_vs_fp32": round(qat["file_mb"] / final["file_mb"], 4),
        "ratio.int8_latency_vs_fp32_b1": round(qat["latency_ms_b1"] / final["latency_ms_b1"], 4),
        "ratio.int8_throughput_vs_fp32_b8": round(qat["tokens_per_s_b8"] / final["tokens_per_s_b8"], 4),
        "ratio.int8_ppl_vs_fp32": round(qat["val_ppl_all"] / final["val_ppl_all"], 4),
        "ratio.qat_ppl_vs_ptq": round(qat["val_ppl_all"] / ptq["val_ppl_all"], 4),
    }
    half = half_mlp_step(rows)
    if half:
        out["half_mlp.step"] = step_number(half)
        out["ratio.half_mlp_speedup"] = round(trained["latency_ms_b1"] / rows[half]["latency_ms_b1"], 4)
        out["ratio.half_mlp_throughput_b8"] = round(rows[half]["tokens_per_s_b8"] / trained["tokens_per_s_b8"], 4)
        out["ratio.half_mlp_ppl"] = round(rows[half]["val_ppl_all"] / trained["val_ppl_all"], 4)
    return out


def generate_samples(fp32_path: Path, int8_path: Path, params: Params) -> dict[str, Any]:
    """What `generate` prints for each sample prompt from the FP32 and the INT8 model (same seed)."""
    decoding = {k: v for k, v in asdict(params.generate).items() if k != "prompt"}
    samples = []
    for prompt in params.sample_prompts:
        g = replace(params.generate, prompt=prompt)
        samples.append({"prompt": prompt, **{name: generate_text(path, params.tokenizer_dir, g, params.num_threads)
                                             for name, path in (("fp32", fp32_path), ("int8", int8_path))}})
    return {"decoding": decoding, "samples": samples}


def headline(metrics: dict[str, Any]) -> dict[str, Any]:
    """What `dvc metrics show` lists: the INT8 model's file size and latency (batch 1), and INT8 against
    FP32 in file size, latency and perplexity."""
    return {"file_mb": metrics["qat_int8.file_mb"], "latency_ms": metrics["qat_int8.latency_ms_b1"],
            "ratio.int8_file_vs_fp32": metrics["ratio.int8_file_vs_fp32"],
            "ratio.int8_latency_vs_fp32_b1": metrics["ratio.int8_latency_vs_fp32_b1"],
            "ratio.int8_ppl_vs_fp32": metrics["ratio.int8_ppl_vs_fp32"]}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["generate"]:
        generate_main(argv[1:], STAGE, Params, "python -m stages.export generate", INT8_NAME, FP32_NAME)
        return
    stage_main(STAGE, Params, run, __doc__, argv,
               epilog="`python -m stages.export generate --help`: sample text from the exported model.")


if __name__ == "__main__":
    main()
