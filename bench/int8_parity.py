"""How far the INT8 ONNX model is from the fake-quant model it came from, on every validation window, and
what float rounding alone does: the distribution behind export's parity thresholds.

    python -m bench.int8_parity                  # the workspace's models/qat/{qat,ptq} and validation tokens

For the QAT and the PTQ model of the workspace's last `dvc repro`, the INT8 ONNX file is exported as the
export stage does (`stages.export.export_int8`) and run on this CPU's integer kernels against its fake-quant
torch source, batch by batch (export.val_batch_size windows) over every validation window of every tier:
per batch, max |logit difference| / max |logit| and the share of positions with the same argmax. The
yardstick: the torch model against itself with +-1 ulp (2^-23 relative) noise on two thirds of its
embedding values. With frozen activation quantizers, a value that float rounding moves across a rounding
boundary takes the next integer level and the step spreads through the layers; if the INT8 model's gap is
no larger than the yardstick's, float rounding explains it (docs/compress.md, "The parity check").
The thresholds proposed leave 3x headroom over the worst batch of either model: relative difference 3x
the worst, disagreement 3x the worst. Results: bench/results/int8_parity.{json,md}.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench import _provenance
from stages.common.compress.onnx_runtime import int8_kernels, run_logits, session
from stages.common.lm.token_shards import open_tiers
from stages.common.runtime.params import load_section
from stages.export import Params as ExportParams
from stages.export import export_int8, load_quantized

ROOT = Path(__file__).resolve().parents[1]
MEASURES = ("stages/common/compress", "stages/common/lm", "stages/export.py", "stages/qat.py", "params.yaml")
HEADROOM = 3.0
MODELS = ("qat", "ptq")


def compare(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    return {"diff": float(np.abs(a - b).max()), "logit": float(np.abs(b).max()),
            "agree": float((a.argmax(-1) == b.argmax(-1)).mean()), "positions": int(a.shape[0] * a.shape[1])}


def summary(rows: list[dict[str, float]], stage_rows: list[dict[str, float]]) -> dict[str, Any]:
    rel = np.array([r["diff"] / r["logit"] for r in rows])
    agree = np.array([r["agree"] for r in rows])
    positions = sum(r["positions"] for r in rows)

    def pooled(subset: list[dict[str, float]]) -> dict[str, float]:
        n = sum(r["positions"] for r in subset)
        return {"relative_diff": max(r["diff"] for r in subset) / max(r["logit"] for r in subset),
                "argmax_agreement": sum(r["agree"] * r["positions"] for r in subset) / n}

    return {"batches": len(rows), "positions": positions,
            "batch_relative_diff": {"min": float(rel.min()), "median": float(np.median(rel)),
                                    "p90": float(np.quantile(rel, 0.9)), "max": float(rel.max())},
            "batch_argmax_agreement": {"min": float(agree.min()), "median": float(np.median(agree)),
                                       "max": float(agree.max())},
            "all_windows": pooled(rows), "stage_check": pooled(stage_rows)}


def measure(name: str, workspace: Path, scratch: Path, batch_size: int, stage_batches: int) -> dict[str, Any]:
    model = load_quantized(workspace / "models" / "qat" / name)
    sess = session(export_int8(model, scratch / f"{name}.int8.onnx", scratch), 2)
    seq_len = model.model.config.max_seq_len
    embed = model._embed
    generator = torch.Generator().manual_seed(0)

    def noisy(ids: torch.Tensor) -> torch.Tensor:  # +-1 ulp on a random two thirds of the embedding values
        h = embed(ids)
        return h * (1 + torch.randint(-1, 2, h.shape, generator=generator).float() * 2.0 ** -23)

    onnx_rows, ulp_rows, stage_onnx, stage_ulp = [], [], [], []
    for shard in open_tiers(workspace / "data" / "perplexity" / "tokens", "val").values():
        for i, window in enumerate(shard.sequential_windows(seq_len, batch_size)):
            ids = window[:, :-1]
            with torch.inference_mode():
                reference = model(ids).numpy()
                model._embed = noisy
                perturbed = model(ids).numpy()
                model._embed = embed
            onnx_rows.append(compare(run_logits(sess, ids), reference))
            ulp_rows.append(compare(perturbed, reference))
            if i < stage_batches:  # what the stage's check sees: the first batches of each tier
                stage_onnx.append(onnx_rows[-1])
                stage_ulp.append(ulp_rows[-1])
    return {"int8_vs_fake_quant": summary(onnx_rows, stage_onnx), "one_ulp_noise": summary(ulp_rows, stage_ulp)}


def markdown(r: dict[str, Any]) -> list[str]:
    lines = ["# INT8 ONNX against its fake-quant source, every validation window", "", *_provenance.header(r),
             f"Integer kernels on this CPU: {r['kernels']}. Batches of {r['batch_size']} windows; the export stage "
             f"checks the first {r['stage_batches']} of each tier. Models: the workspace's models/qat/{{qat,ptq}}.",
             "", "| model | comparison | batches | positions | batch rel diff min / median / p90 / max | "
             "batch argmax agreement min / median | all windows: rel diff, agreement | stage's check: rel diff, "
             "agreement |", "| --- | --- | ---: | ---: | --- | --- | --- | --- |"]
    for name, m in r["models"].items():
        for label, key in (("INT8 ONNX vs fake-quant torch", "int8_vs_fake_quant"),
                           ("torch, 1-ulp embedding noise vs itself", "one_ulp_noise")):
            s = m[key]
            b, a = s["batch_relative_diff"], s["batch_argmax_agreement"]
            lines.append(f"| {name} | {label} | {s['batches']} | {s['positions']} | {b['min']:.4f} / {b['median']:.4f}"
                         f" / {b['p90']:.4f} / **{b['max']:.4f}** | **{a['min']:.4f}** / {a['median']:.4f} | "
                         f"{s['all_windows']['relative_diff']:.4f}, {s['all_windows']['argmax_agreement']:.4f} | "
                         f"{s['stage_check']['relative_diff']:.4f}, {s['stage_check']['argmax_agreement']:.4f} |")
    t = r["thresholds"]
    lines += ["", f"Worst batch of either model, INT8 vs fake-quant: relative difference {t['worst_relative_diff']:.4f}, "
              f"argmax agreement {t['worst_argmax_agreement']:.4f}. With {HEADROOM:g}x headroom: "
              f"`int8_max_relative_diff` **{t['max_relative_diff']:.3f}**, `int8_min_argmax_agreement` "
              f"**{t['min_argmax_agreement']:.3f}** (params.yaml has {t['params_max_relative_diff']} and "
              f"{t['params_min_argmax_agreement']}).", ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, default=ROOT)
    args = parser.parse_args()
    stamp = _provenance.stamp("int8_parity", MEASURES)
    torch.set_num_threads(2)
    params = load_section("export", ExportParams, args.workspace / "params.yaml")
    result: dict[str, Any] = {**stamp, "kernels": int8_kernels(), "batch_size": params.val_batch_size,
                              "stage_batches": params.int8_parity_batches, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            (Path(tmp) / name).mkdir()
            result["models"][name] = measure(name, args.workspace, Path(tmp) / name, params.val_batch_size,
                                             params.int8_parity_batches)
    worst_rel = max(m["int8_vs_fake_quant"]["batch_relative_diff"]["max"] for m in result["models"].values())
    worst_agree = min(m["int8_vs_fake_quant"]["batch_argmax_agreement"]["min"] for m in result["models"].values())
    result["thresholds"] = {"worst_relative_diff": worst_rel, "worst_argmax_agreement": worst_agree,
                            "max_relative_diff": round(HEADROOM * worst_rel, 3),
                            "min_argmax_agreement": round(1 - HEADROOM * (1 - worst_agree), 3),
                            "params_max_relative_diff": params.int8_max_relative_diff,
                            "params_min_argmax_agreement": params.int8_min_argmax_agreement}
    _provenance.write(result, markdown)
    print("\n".join(markdown(result)))


if __name__ == "__main__":
    main()
