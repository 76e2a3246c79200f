"""Sampling text from an exported ONNX LM: `generate_text` (no KV cache: each token re-reads the window),
`GenerateParams` (the decoding settings, `export.generate` in params.yaml) with the checks its `param` rules
cannot state, and the `generate` command (`python -m stages.export generate`, `refinery generate`), which
reads its defaults from the export stage's params.
"""
from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from stages.common.compress.onnx_runtime import run_logits, session
from stages.common.lm import bpe
from stages.common.lm.model import CONFIG_METADATA_KEY
from stages.common.runtime.cli import config_error
from stages.common.runtime.ownership import check_owned_paths, missing_input
from stages.common.runtime.params import ConfigError, from_dict, load_section, param

log = logging.getLogger("refinery.export")


# Each new token reruns the model on the whole window (no KV cache): the cap keeps a mistyped count from
# running for hours. Past the model's context length (max_seq_len) the window slides.
MAX_NEW_TOKENS = 1024
MAX_SEED = 2**32 - 1  # 32 bits, as np.random.seed and most tools take a seed


@dataclass(frozen=True)
class GenerateParams:
    prompt: str = "The"
    max_new_tokens: int = param(40, min=1, max=MAX_NEW_TOKENS)
    temperature: float = param(0.8, min=0.0)  # 0 = greedy
    top_k: int = param(40, min=0)  # 0, or at least the vocabulary size = the whole vocabulary
    seed: int = param(0, min=0)  # at most MAX_SEED: check_generate_value


# `generate`'s command-line options: option -> (GenerateParams field, how its text is read)
GENERATE_OPTIONS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--prompt": ("prompt", str), "--max-new-tokens": ("max_new_tokens", int),
    "--temperature": ("temperature", float), "--top-k": ("top_k", int), "--seed": ("seed", int)}


def check_generate_value(key: str, name: str, value: Any) -> None:
    """What a GenerateParams field's `param` rules cannot say, as a ConfigError naming `key`: a prompt is
    text the tokenizer can encode (a lone surrogate is what Python makes of command-line bytes that are not
    UTF-8); a seed is at most MAX_SEED (a `max` rule would print it rounded, 4.29497e+09)."""
    if name == "prompt":
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ConfigError(f"{key}: must be UTF-8 text, got {value[e.start:e.end]!r} at character {e.start} "
                              "(bytes that are not UTF-8, or a lone surrogate)") from None
    if name == "seed" and value > MAX_SEED:
        raise ConfigError(f"{key}: must be in [0, {MAX_SEED}], got {value}")


def generate_text(model_path: str | Path, tokenizer_dir: str, g: GenerateParams, num_threads: int) -> str:
    """Sample a continuation of `g.prompt` from an ONNX LM (no KV cache: each token re-reads the window)."""
    sess = session(model_path, num_threads)
    meta = sess.get_modelmeta().custom_metadata_map
    config = json.loads(meta[CONFIG_METADATA_KEY])
    max_seq_len = config["max_seq_len"]
    tokenizer = bpe.load(tokenizer_dir)
    eos_id = bpe.special_token_id(tokenizer, bpe.eos_token_of(tokenizer_dir))
    ids = [eos_id] + tokenizer.encode(g.prompt, add_special_tokens=False).ids  # eos starts every document
    rng = np.random.default_rng(g.seed)
    top_k = whole_vocabulary_top_k(g.top_k, config["vocab_size"])
    new: list[int] = []
    for _ in range(g.max_new_tokens):
        logits = run_logits(sess, np.array([(ids + new)[-max_seq_len:]]))[0, -1].astype(np.float64)
        if g.temperature <= 0:
            token = int(logits.argmax())
        else:
            if top_k:
                logits[logits < np.sort(logits)[-top_k]] = -np.inf
            with np.errstate(over="ignore"):  # a tiny temperature sends all but the top logit to -inf: p = 0
                probs = np.exp((logits - logits.max()) / g.temperature)
            token = int(rng.choice(len(probs), p=probs / probs.sum()))
        if token == eos_id:
            break
        new.append(token)
    return g.prompt + tokenizer.decode(new)


def whole_vocabulary_top_k(top_k: int, vocab_size: int) -> int:
    """`top_k`, or 0 (the whole vocabulary) when it is at least the vocabulary size, with a note."""
    if top_k < vocab_size:
        return top_k
    log.warning("note: top_k %d is at least the vocabulary size (%d tokens): sampling from the whole vocabulary",
                top_k, vocab_size)
    return 0


def generate_overrides(args: dict[str, Any]) -> dict[str, Any]:
    """The GenerateParams values given on the command line (`args`: argparse's, keyed by field name), each
    checked against its field's rules: a one-line ConfigError naming the option and what it allows."""
    overrides = {}
    for option, (name, read) in GENERATE_OPTIONS.items():
        text = args.get(name)
        if text is None:
            continue
        try:
            value = read(text)
        except ValueError:
            value = text  # from_dict names the type expected
        try:
            from_dict(GenerateParams, {name: value})
        except ValueError as e:  # "param 'top_k': must be >= 0, got -1"
            raise ConfigError(f"{option}: {str(e).split(': ', 1)[1]}") from None
        check_generate_value(option, name, value)
        overrides[name] = value
    return overrides


def generate_main(argv: list[str], stage: str, params_cls: type, prog: str, model_name: str, fp32_name: str) -> None:
    """The `generate` command of stage `stage`, whose `params_cls` holds out_dir, tokenizer_dir, num_threads
    and `generate` (GenerateParams); the model is `<out_dir>/onnx/<model_name>` unless `--model` names one."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Sample a continuation of a prompt from the exported ONNX model (the INT8 one by default), "
                    f"with the tokenizer and defaults of params.yaml's `{stage}` section; prints the text.")
    parser.add_argument("--params", default="params.yaml",
                        help=f"params file: {stage}.out_dir, {stage}.tokenizer_dir, {stage}.generate.* (default: "
                             "params.yaml)")
    parser.add_argument("--model", help=f"ONNX model file (default: <{stage}.out_dir>/onnx/{model_name}; "
                                        f"<{stage}.out_dir>/onnx/{fp32_name} is the FP32 one)")
    parser.add_argument("--prompt", help=f"text to continue, UTF-8 (default: {stage}.generate.prompt)")
    parser.add_argument("--max-new-tokens",
                        help=f"tokens to add at most, 1 to {MAX_NEW_TOKENS}; sampling also stops at the "
                             f"end-of-document token (default: {stage}.generate.max_new_tokens)")
    parser.add_argument("--temperature", help="sampling temperature, >= 0; 0 = greedy, always the likeliest "
                                              f"token (default: {stage}.generate.temperature)")
    parser.add_argument("--top-k", help="sample among the k likeliest tokens, >= 0; 0, or at least the vocabulary "
                                        f"size, = the whole vocabulary (default: {stage}.generate.top_k)")
    parser.add_argument("--seed", help=f"random seed, 0 to {MAX_SEED}: the same seed, prompt and model give the "
                                       f"same text (default: {stage}.generate.seed)")
    args = parser.parse_args(argv)
    try:
        overrides = generate_overrides(vars(args))  # before the params file and the model are read
        params = load_section(stage, params_cls, args.params)
        g = replace(params.generate, **overrides)
        model = args.model or str(Path(params.out_dir) / "onnx" / model_name)
        if not Path(model).is_file():
            raise ConfigError(missing_input(stage, "out_dir", model) if args.model is None else
                              f"--model {model}: no such file")
        check_owned_paths(stage, {"tokenizer_dir": params.tokenizer_dir}, {})
    except ValueError as e:  # params, or a model not exported yet: one line
        config_error(e)
    print(generate_text(model, params.tokenizer_dir, g, params.num_threads))
