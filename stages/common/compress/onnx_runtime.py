"""ONNX export of a deployable model and the onnxruntime side: sessions, graph optimisation, logits, latency
timing with preallocated outputs, perplexity scoring, and which integer kernels a CPU runs (with an
emulated-CPU check)."""
from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
import torch.nn.functional as F
from torch import nn

from stages.common.compress.deployable import CONTRIB

OPSET = 17
INPUT_NAME, OUTPUT_NAME = "input_ids", "logits"


def export_onnx(module: nn.Module, path: str | Path, vocab_size: int) -> Path:
    """Trace `module` (ids -> logits) to ONNX with dynamic batch and sequence axes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    example = torch.randint(0, vocab_size, (2, 16))
    module.eval()
    with torch.no_grad(), warnings.catch_warnings():
        # The trace takes the model's own branches (e.g. grouped-query attention or not, lm/model.py), which
        # depend on its config, never on the input: the graph is exact for this model, as the parity check
        # against torch confirms.
        warnings.filterwarnings("ignore", "Converting a tensor to a Python boolean", torch.jit.TracerWarning)
        # dynamo=False on purpose: the onnxruntime contrib ops (compress/deployable.py) are emitted by
        # TorchScript `symbolic` functions, which the torch.export-based exporter does not run.
        warnings.filterwarnings("ignore", "You are using the legacy TorchScript-based ONNX export", DeprecationWarning)
        warnings.filterwarnings("ignore", "The feature will be removed", DeprecationWarning, r"torch\.onnx")
        torch.onnx.export(module, (example,), str(path), dynamo=False, opset_version=OPSET,
                          custom_opsets={CONTRIB: 1},
                          input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                          dynamic_axes={INPUT_NAME: {0: "batch", 1: "sequence"},
                                        OUTPUT_NAME: {0: "batch", 1: "sequence"}})
    return path


class _QuantizerNotes(logging.Filter):
    """onnxruntime.quantization's notes, which it logs through the root logger (`logging.info(...)`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.WARNING or "onnxruntime" not in Path(record.pathname).parts


@contextlib.contextmanager
def quantizer_notes_silenced() -> Iterator[None]:
    """Around onnxruntime's `quantize_dynamic`: without it a stage's log gets one INFO line per tensor it
    leaves in float ("Quantization parameters for tensor ... not specified": expected, dynamic quantization
    computes them at run time) and a WARNING suggesting `quant_pre_process` (the baseline it makes is
    onnxruntime's default on purpose). Only records logged on the root logger itself are filtered, so
    our loggers and onnxruntime's errors still show."""
    notes = _QuantizerNotes()
    logging.getLogger().addFilter(notes)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(notes)


def session_options(num_threads: int) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = num_threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    return options


def optimize_onnx(src: str | Path, dst: str | Path, num_threads: int) -> Path:
    """Save onnxruntime's optimised graph (ORT_ENABLE_EXTENDED: portable across CPUs). On a QDQ model
    this folds weight QuantizeLinear into int8 initializers and fuses the integer matmuls."""
    options = session_options(num_threads)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(dst)
    ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
    return Path(dst)


def session(path: str | Path, num_threads: int) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), session_options(num_threads), providers=["CPUExecutionProvider"])


def run_logits(sess: ort.InferenceSession, ids: np.ndarray | torch.Tensor) -> np.ndarray:
    return sess.run([OUTPUT_NAME], {INPUT_NAME: np.asarray(ids, dtype=np.int64)})[0]


def bound_forward(sess: ort.InferenceSession, ids: np.ndarray, vocab_size: int) -> Callable[[], None]:
    """A forward on fixed ids (B, T) whose logits land in a preallocated buffer (onnxruntime IOBinding), as
    latency-critical callers run it. Timings of `sess.run` also count the allocation of a fresh logits
    array each call: 2 MB at batch 1 x 128 x 4096, whose page faults cost 0-4 ms a call here, by the
    state of the process heap, the same for every model, which blurs any ratio of latencies."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    logits = np.empty((*ids.shape, vocab_size), dtype=np.float32)
    binding = sess.io_binding()
    binding.bind_cpu_input(INPUT_NAME, ids)
    binding.bind_output(OUTPUT_NAME, "cpu", 0, np.float32, list(logits.shape), logits.ctypes.data)

    def forward() -> None:
        sess.run_with_iobinding(binding)
    forward.buffers = (ids, logits)  # the binding points into these: keep them alive with the closure
    return forward


def latency(sess: ort.InferenceSession, batch_size: int, seq_len: int, vocab_size: int, num_runs: int,
            warmup: int = 3, seed: int = 0) -> list[float]:
    """Seconds of each of `num_runs` forwards on (batch_size, seq_len) random ids, after `warmup` runs
    (`bound_forward`: the model's time, not the logits allocation's)."""
    ids = np.random.default_rng(seed).integers(0, vocab_size, (batch_size, seq_len))
    forward = bound_forward(sess, ids, vocab_size)
    for _ in range(warmup):
        forward()
    times = []
    for _ in range(num_runs):
        t0 = time.perf_counter()
        forward()
        times.append(time.perf_counter() - t0)
    return times


def ort_token_nll(sess: ort.InferenceSession, windows: Iterable[torch.Tensor]) -> tuple[float, int]:
    """(sum of next-token NLL, token count) of an onnxruntime LM over windows (B, T + 1)."""
    total, count = 0.0, 0
    for window in windows:
        logits = torch.from_numpy(run_logits(sess, window[:, :-1]))
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), window[:, 1:].reshape(-1), reduction="sum")
        total += nll.item()
        count += window[:, 1:].numel()
    return total, count


# onnxruntime's x86 integer GEMM kernels by CPU feature, best first (MLAS picks the first the CPU has). Only
# the VNNI and AMX ones accumulate u8 x s8 products in 32 bits; the others add pairs of products in a
# saturating int16 (`vpmaddubsw`), which 7-bit weights keep from overflowing (see stages.common.compress.quant).
INT8_KERNELS = (("amx_int8", "AMX"), ("avx512_vnni", "AVX512-VNNI"), ("avx_vnni", "AVX-VNNI"),
                ("avx512bw", "AVX512BW (int16 pair sums)"), ("avx2", "AVX2 (int16 pair sums)"))


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return {flag for line in f if line.startswith("flags") for flag in line.split(":", 1)[1].split()}
    except OSError:
        return set()


def int8_kernels(flags: set[str] | None = None) -> str:
    """The family of integer matmul kernels onnxruntime runs an INT8 model with on this CPU."""
    flags = cpu_flags() if flags is None else flags
    return next((name for flag, name in INT8_KERNELS if flag in flags), "SSE / other")


_EMULATED_LOGITS = """
import sys, numpy as np, onnxruntime as ort
from stages.common.compress.deployable import CONTRIB
options = ort.SessionOptions(); options.intra_op_num_threads = 1; options.log_severity_level = 3
sess = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
np.save(sys.argv[3], sess.run(["%s"], {"%s": np.load(sys.argv[2])})[0])
""" % (OUTPUT_NAME, INPUT_NAME)


def emulated_logits(path: str | Path, ids: np.ndarray | torch.Tensor, cpu_model: str = "Haswell",
                    timeout_s: float = 600) -> np.ndarray:
    """Logits of an ONNX LM as onnxruntime computes them on another x86 CPU: the model runs under
    `qemu-x86_64 -cpu <cpu_model>` (qemu-user), whose CPUID shows only that CPU's features, so onnxruntime
    picks that CPU's kernels. "Haswell" is an AVX2 CPU without VNNI. Slow (instruction emulation): for
    checking numbers, never timings."""
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        raise FileNotFoundError("qemu-x86_64 not found (Debian: apt-get install qemu-user)")
    with tempfile.TemporaryDirectory(prefix="refinery-emu-") as tmp:
        ids_path, out_path = Path(tmp) / "ids.npy", Path(tmp) / "logits.npy"
        np.save(ids_path, np.asarray(ids, dtype=np.int64))
        done = subprocess.run([qemu, "-cpu", cpu_model, sys.executable, "-c", _EMULATED_LOGITS, str(path),
                               str(ids_path), str(out_path)], timeout=timeout_s, capture_output=True, text=True)
        if done.returncode:
            errors = [line for line in done.stderr.splitlines() if "TCG doesn't support" not in line]
            raise RuntimeError(f"onnxruntime under qemu-x86_64 -cpu {cpu_model} exited with {done.returncode}: "
                               f"{errors[-1] if errors else ''}")
        return np.load(out_path)
