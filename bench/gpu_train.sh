#!/usr/bin/env bash
# One-GPU throughput check of the train stage (the GPU target: >= 35% MFU for the ~125M preset at
# sequence length 1024 in bf16). Runs the real stage (`python -m stages.train`, torchrun, 1 process) on
# synthetic token shards with the gpu_125m preset, bf16 autocast and torch.compile per block, then prints
# tokens/s and MFU (the stage's metrics: median per-step, first 10% of steps left out; the device peak
# comes from stages/common/training/trainer.py PEAK_FLOPS, e.g. 989 TFLOP/s dense bf16 for H100/H200).
#
#   bash bench/gpu_train.sh [steps]      # default 150 steps; about 2-4 minutes on one H100/H200
#
# Needs a CUDA build of torch 2.13 (on Linux, `pip install torch==2.13.0` from PyPI is one), plus
# requirements.lock's other packages. Writes bench/results/gpu_train.json.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
STEPS=${1:-150}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

"$PYTHON" - "$WORK" "$STEPS" <<'EOF'
import json, sys
from pathlib import Path
import numpy as np
import torch
import yaml
sys.path.insert(0, ".")
from stages.common.lm.token_shards import TIERS, TokenShardWriter

work, steps = Path(sys.argv[1]), int(sys.argv[2])
assert torch.cuda.is_available(), "no CUDA device: this script measures GPU throughput"
vocab = 32000
rng = np.random.default_rng(0)
for split, num_docs in (("train", 4000), ("val", 8)):  # 3 x 4M training tokens: random data, throughput only
    for tier in TIERS:
        writer = TokenShardWriter(work / "tokens" / split / tier, vocab, 0)
        for _ in range(num_docs):
            writer.add(rng.integers(1, vocab, size=1000))
        writer.close()
(work / "tokens" / "manifest.json").write_text(json.dumps({"vocab_size": vocab, "eos_id": 0}))
params = yaml.safe_load(open("params.yaml"))["train"]
params.update(tokens_dir=str(work / "tokens"), model_dir=str(work / "model"), checkpoint_dir=str(work / "ckpt"),
              metrics_path=str(work / "train.json"), steps_path=str(work / "steps.csv"), val_path=str(work / "val.csv"),
              preset="gpu_125m", seq_len=1024, max_steps=steps, micro_batch_size=16, gradient_accumulation_steps=1,
              precision="bf16", device="cuda", progress_bar=False, log_every=25)
params["parallel"].update(data_parallel_size=1, compile=True)
params["optim"].update(lr=3e-4, warmup_steps=20)
params["checkpoint"].update(every=0)
params["eval"].update(every=0, windows=0)
yaml.safe_dump({"train": params}, open(work / "params.yaml", "w"))
EOF

"$PYTHON" -m stages.train --params "$WORK/params.yaml"
mkdir -p bench/results
"$PYTHON" - "$WORK/train.json" <<'EOF'
import json, sys
import torch
m = json.load(open(sys.argv[1]))
result = {"device": torch.cuda.get_device_name(0), "preset": "gpu_125m", "seq_len": 1024, "precision": "bf16",
          "compile": True, "micro_batch_size": 16, "steps": m["steps"], "num_params": m["num_params"],
          "tokens_per_s": m["tokens_per_s"], "mfu": m.get("mfu"), "peak_memory_mb": m["peak_memory_mb"],
          "target_mfu": 0.35}
result["pass"] = result["mfu"] is not None and result["mfu"] >= 0.35
json.dump(result, open("bench/results/gpu_train.json", "w"), indent=2)
print(json.dumps(result, indent=2))
EOF
