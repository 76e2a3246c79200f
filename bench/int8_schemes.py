"""INT8 schemes side by side, on this CPU and on an emulated AVX2 CPU without VNNI.

    python -m bench.int8_schemes                          # the demo's pruned model + a cpu_wide model (~15 min)
    python -m bench.int8_schemes --wide-steps 0           # the demo's model only
    python -m bench.int8_schemes --work-dir /tmp/schemes  # keeps the cpu_wide teacher; a rerun only measures

Why: onnxruntime's x86 integer kernels differ by CPU. With VNNI (AVX512-VNNI, AVX-VNNI) or AMX, u8 x s8
products are summed in int32; without (AVX2, AVX-512 without VNNI) `vpmaddubsw` adds pairs of products
into a saturating int16, so full-range int8 weights (|q| <= 127, activations up to 255) overflow and the
INT8 model drifts from the model it was trained as. The candidates, each PTQ-calibrated the way the `qat`
stage does it (same calibration batches) from the same FP32 model:

    u8s8_w8  uint8 activations (zero point), int8 weights -127..127  (the former default)
    s8s8_w8  int8 activations (zero point 0), int8 weights -127..127
    u8s8_w7  uint8 activations, 7-bit weights -63..63                (the default: onnxruntime's reduce_range)
    s8s8_w7  int8 activations, 7-bit weights -63..63

For each, on this CPU: INT8 vs its fake-quant torch source, argmax agreement and max |logit diff| / max
|logit| on validation windows; validation perplexity (onnxruntime) / FP32; latency batch 1 x 128 and
batch 8 x 128 (2 onnxruntime threads, models timed in turns, medians). The same numbers checks run
under `qemu-x86_64 -cpu Haswell` (AVX2, no VNNI: onnxruntime picks its AVX2 kernels there); emulated
timings mean nothing and are not taken; a few sequences per tier (qemu runs the demo model at a few ms
per token), with the largest |emulated - native| logit difference. Targets (any x86 machine): agreement >= 0.99, INT8 perplexity <=
1.03x FP32.

Results: bench/results/int8_schemes.{json,md}.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch
import torch.nn.functional as F

from bench import _provenance
from bench.export import round_robin, train_teacher
from stages import export, qat
from stages.common.compress.deployable import DeployLM
from stages.common.compress.distill import even_sampler
from stages.common.compress.onnx_runtime import emulated_logits, int8_kernels, run_logits, session
from stages.common.compress.quant import QuantScheme
from stages.common.lm.model import CHECKPOINT_NAME, load_checkpoint
from stages.common.lm.token_shards import open_tiers
from stages.common.runtime.params import load_section

ROOT = Path(__file__).resolve().parents[1]
SCHEMES = {"u8s8_w8": QuantScheme(weight_bits=8), "s8s8_w8": QuantScheme(weight_bits=8, activation_symmetric=True),
           "u8s8_w7": QuantScheme(weight_bits=7), "s8s8_w7": QuantScheme(weight_bits=7, activation_symmetric=True)}
TARGETS = {"argmax_agreement": 0.99, "ppl_ratio": 1.03}
# qat's calibration, export's ONNX writers, the cpu_wide teacher (bench/export.py's timing and training), and the
# stages that make the demo's pruned model and the token shards it is measured on
MEASURES = ("bench/export.py", "stages/qat.py", "stages/export.py", "stages/train.py", "stages/prune.py",
            "stages/common/compress", "stages/common/lm", "stages/common/training", "stages/common/runtime",
            "stages/perplexity.py", "stages/tokenizer.py", "stages/semantic_embed.py", "stages/semantic_head.py",
            "stages/semantic_filter.py", "stages/common/semantic", "stages/clean.py", "stages/common/text",
            "stages/demo_corpus", "params.yaml")


def val_windows(tokens_dir: str, seq_len: int, batch_size: int, max_batches: int) -> list[torch.Tensor]:
    return [w for shard in open_tiers(tokens_dir, "val").values()
            for w in shard.sequential_windows(seq_len, batch_size, max_batches)]


def compare(logits_of, reference: torch.nn.Module | None, windows: list[torch.Tensor]) -> dict[str, float]:
    """Perplexity of `logits_of` on windows; with a reference, its argmax agreement and relative max diff."""
    nll, count, equal, max_diff, max_logit = 0.0, 0, 0, 0.0, 0.0
    for window in windows:
        ids, targets = window[:, :-1], window[:, 1:]
        got = logits_of(ids)
        nll += F.cross_entropy(torch.from_numpy(got).reshape(-1, got.shape[-1]), targets.reshape(-1),
                               reduction="sum").item()
        count += targets.numel()
        if reference is not None:
            with torch.inference_mode():
                expected = reference(ids).float().numpy()
            equal += int((got.argmax(-1) == expected.argmax(-1)).sum())
            max_diff = max(max_diff, float(np.abs(got - expected).max()))
            max_logit = max(max_logit, float(np.abs(expected).max()))
    out = {"ppl": round(math.exp(nll / count), 4), "positions": count}
    if reference is not None:
        out.update({"argmax_agreement": round(equal / count, 5), "relative_diff": round(max_diff / max_logit, 5)})
    return out


def calibrated(fp32: torch.nn.Module, scheme: QuantScheme, tokens_dir: str, batch_size: int, num_batches: int,
               seed: int) -> DeployLM:
    """PTQ as the `qat` stage calibrates it (same sampler, seed and batches)."""
    cfg = fp32.config
    calibration = even_sampler(tokens_dir, cfg.max_seq_len, batch_size, 1, seed + 1)
    model = DeployLM(copy.deepcopy(fp32), scheme).eval()
    qat.calibrate(model, [calibration.batch(i).inputs for i in range(num_batches)])
    return model


def measure_model(name: str, model_file: Path, work: Path, args: argparse.Namespace) -> dict:
    q = load_section("qat", qat.Params, ROOT / "params.yaml")
    tokens_dir = str(ROOT / q.tokens_dir)
    fp32 = load_checkpoint(model_file).eval()
    cfg = fp32.config
    out = work / name
    out.mkdir(parents=True, exist_ok=True)
    windows = val_windows(tokens_dir, cfg.max_seq_len, 8, args.val_batches)
    # qemu emulates AVX2 at a few ms per token of the demo model (30x that for cpu_wide): a few sequences,
    # one from each tier, with their native logits beside them
    per_tier = len(windows) // 3
    emulated = [windows[i * per_tier][:args.emulated_rows, :args.emulated_len + 1] for i in range(3)]
    paths = {"fp32": export.export_fp32(fp32, out / "fp32.onnx")}
    fp32_sess = session(paths["fp32"], args.threads)
    rows: dict[str, dict] = {"fp32": {"native": compare(lambda ids: run_logits(fp32_sess, ids), None, windows),
                                      # FP32 has no integer kernels: the emulated windows' reference, run here
                                      "avx2_emulated": compare(lambda ids: run_logits(fp32_sess, ids), None, emulated)}}
    for scheme_name, scheme in SCHEMES.items():
        t0 = time.perf_counter()
        model = calibrated(fp32, scheme, tokens_dir, q.distill.batch_size, q.calibration_batches, q.seed)
        paths[scheme_name] = export.export_int8(copy.deepcopy(model), out / f"{scheme_name}.onnx", out)
        sess = session(paths[scheme_name], args.threads)
        row = {"native": compare(lambda ids, s=sess: run_logits(s, ids), model, windows)}
        if args.emulate:
            gaps = []

            def on_avx2(ids, p=paths[scheme_name], s=sess):
                got = emulated_logits(p, ids, "Haswell")
                gaps.append(float(np.abs(got - run_logits(s, ids)).max()))
                return got
            row["avx2_emulated"] = compare(on_avx2, model, emulated)
            row["avx2_emulated"]["max_diff_vs_native"] = max(gaps)
        rows[scheme_name] = row
        print(f"{name} {scheme_name}: {json.dumps(row)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    seq_len = min(128, cfg.max_seq_len)
    for batch, key in ((1, "b1"), (8, "b8")):
        timing = round_robin(paths, args.threads, batch, seq_len, cfg.vocab_size, args.rounds)
        for scheme_name, t in timing.items():
            rows[scheme_name][f"latency_ms_{key}"] = t["median_ms"]
    for scheme_name in SCHEMES:
        for where in ("native", "avx2_emulated"):
            if where in rows[scheme_name]:
                r = rows[scheme_name][where]
                r["ppl_ratio"] = round(r["ppl"] / rows["fp32"][where]["ppl"], 4)
                r["pass"] = bool(r["argmax_agreement"] >= TARGETS["argmax_agreement"]
                                 and r["ppl_ratio"] <= TARGETS["ppl_ratio"])
        rows[scheme_name]["latency_ratio_b1"] = round(rows[scheme_name]["latency_ms_b1"] / rows["fp32"]["latency_ms_b1"],
                                                      4)
    return {"model": str(model_file), "preset_dim": cfg.dim, "num_params": fp32.num_params(),
            "val_windows": len(windows), "emulated_positions": sum(w[:, 1:].numel() for w in emulated), "seq_len": seq_len, "rows": rows}


def markdown(result: dict[str, Any]) -> list[str]:
    m = result["machine"]
    lines = ["# INT8 schemes: this CPU and an emulated AVX2 CPU without VNNI", "", *_provenance.header(result),
             f"torch {m['torch']}, onnxruntime {m['onnxruntime']} with {result['threads']} threads; onnxruntime's "
             f"integer kernels here: **{result['int8_kernels']}**; emulated: `qemu-x86_64 -cpu Haswell` (AVX2, no "
             "VNNI)", "",
             f"targets (any x86 CPU): INT8 vs fake-quant argmax agreement >= {TARGETS['argmax_agreement']}, INT8 "
             f"validation perplexity <= {TARGETS['ppl_ratio']}x FP32", ""]
    for name, m in result["models"].items():
        lines += [f"## {name} ({m['num_params']:,} parameters, dim {m['preset_dim']}; {m['val_windows']} validation "
                  f"batches here; emulated: {m['emulated_positions']} positions; PTQ)", "",
                  "| scheme | b1x128 ms | b8x128 ms | INT8/FP32 b1 | agreement here | rel. diff here | ppl ratio here "
                  "| agreement AVX2 | rel. diff AVX2 | ppl ratio AVX2 | max AVX2 - here | targets |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        fp = m["rows"]["fp32"]
        lines.append(f"| fp32 | {fp['latency_ms_b1']:.3f} | {fp['latency_ms_b8']:.2f} | 1 | | | ppl "
                     f"{fp['native']['ppl']:.2f} | | | | | |")
        for scheme in SCHEMES:
            r = m["rows"][scheme]
            n, e = r["native"], r.get("avx2_emulated", {})
            ok = n["pass"] and e.get("pass", False)
            lines.append(f"| {scheme} | {r['latency_ms_b1']:.3f} | {r['latency_ms_b8']:.2f} | {r['latency_ratio_b1']:.3f} "
                         f"| {n['argmax_agreement']:.4f} | {n['relative_diff']:.4f} | {n['ppl_ratio']:.4f} "
                         f"| {e.get('argmax_agreement', float('nan')):.4f} | {e.get('relative_diff', float('nan')):.4f} "
                         f"| {e.get('ppl_ratio', float('nan')):.4f} | {e.get('max_diff_vs_native', float('nan')):.3g} "
                         f"| {'PASS' if ok else 'FAIL'} |")
        lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo-model", type=Path, default=ROOT / "models" / "pruned" / CHECKPOINT_NAME)
    parser.add_argument("--wide-steps", type=int, default=150, help="cpu_wide training steps (0: skip cpu_wide)")
    parser.add_argument("--work-dir", type=Path)
    parser.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--val-batches", type=int, default=4, help="validation batches per tier (8 windows each)")
    parser.add_argument("--emulated-rows", type=int, default=2, help="sequences per tier run under qemu")
    parser.add_argument("--emulated-len", type=int, default=128, help="tokens per sequence run under qemu")
    parser.add_argument("--no-emulate", dest="emulate", action="store_false")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    stamp = _provenance.stamp("int8_schemes", MEASURES)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="refinery-int8-"))
    models = {}
    if args.demo_model.is_file():
        models["demo (models/pruned)"] = measure_model("demo", args.demo_model, work, args)
    if args.wide_steps:
        teacher = work / "train" / CHECKPOINT_NAME
        if not teacher.is_file():
            train_teacher("cpu_wide", args.wide_steps, work, args.threads)
        models[f"cpu_wide ({args.wide_steps} training steps)"] = measure_model("cpu_wide", teacher, work, args)
    result = {**stamp, "machine": {**stamp["machine"], "torch": torch.__version__, "onnxruntime": ort.__version__},
              "threads": args.threads, "int8_kernels": int8_kernels(), "targets": TARGETS, "models": models}
    _provenance.write(result, markdown)
    print("\n".join(markdown(result)))


if __name__ == "__main__":
    main()
