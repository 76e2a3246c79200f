import dataclasses
import importlib
import json
import math
import re
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from stages import clean, perplexity, prune, semantic_embed, semantic_head, tokenizer, train
from stages.common.lm.token_shards import read_manifest
from stages.common.runtime.cli import stage_main
from stages.common.runtime.params import (MAX_ALIASES, MAX_PARAMS_BYTES, SHOWN_CHARS, ConfigError, from_dict,
                                          load_section, param, read_params, validate)
from stages.common.text.dedup import DedupParams
from stages.common.training.optim import OptimParams


@dataclass(frozen=True)
class Inner:
    ratio: float = 0.5


@dataclass(frozen=True)
class Outer:
    name: str = "x"
    count: int = 1
    langs: tuple[str, ...] = ("en",)
    inner: Inner = field(default_factory=Inner)
    optional: int | None = None


def test_builds_nested_dataclass_and_coerces_lists():
    p = from_dict(Outer, {"count": 3, "langs": ["zh", "en"], "inner": {"ratio": 1}})
    assert p == Outer(count=3, langs=("zh", "en"), inner=Inner(ratio=1.0))


@pytest.mark.parametrize("data, key", [
    ({"cuont": 3}, "cuont"),
    ({"inner": {"ratoi": 0.1}}, "inner.ratoi"),
])
def test_unknown_key_is_named(data, key):
    with pytest.raises(ValueError, match=f"unknown param '{key}'"):
        from_dict(Outer, data)


@pytest.mark.parametrize("data, key", [
    ({"count": "3"}, "count"),
    ({"count": True}, "count"),
    ({"langs": "en"}, "langs"),
    ({"inner": {"ratio": "high"}}, "inner.ratio"),
    ({"optional": "x"}, "optional"),
])
def test_wrong_type_is_named(data, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        from_dict(Outer, data)


def test_missing_section(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("other: {}\n")
    with pytest.raises(ValueError, match="missing section 'clean'"):
        load_section("clean", Outer, path)


# ---- rules on values: `param(...)` fields, no NaN or infinity, checked by from_dict and at construction ----

ROOT = Path(__file__).resolve().parents[3]
STAGES = sorted(yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"])


def required(stage: str, cls: type) -> dict:
    """The fields `cls` has no default for (its paths), with their values in the repo's params.yaml."""
    section = yaml.safe_load((ROOT / "params.yaml").read_text())[stage]
    return {f.name: section[f.name] for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}


@dataclass(frozen=True)
class Ruled:
    size: int = param(4, min=1)
    ratio: float = param(0.5, min=0.0, max=1.0)
    share: float = param(0.5, gt=0.0, lt=1.0)
    kind: str = param("a", choices=("a", "b"))
    sizes: tuple[int, ...] = param((1, 2), min=1, nonempty=True)
    weights: dict[str, float] = param(default_factory=lambda: {"x": 1.0}, min=0.0)
    free: float = 1.0  # no rule: still finite

    def __post_init__(self) -> None:
        validate(self, "ruled")


@pytest.mark.parametrize("data, message", [
    ({"size": 0}, "param 'ruled.size': must be >= 1, got 0"),
    ({"ratio": 1.5}, "param 'ruled.ratio': must be in [0, 1], got 1.5"),
    ({"share": 1.0}, "param 'ruled.share': must be in (0, 1), got 1.0"),
    ({"kind": "c"}, "param 'ruled.kind': must be one of a, b, got 'c'"),
    ({"kind": "A"}, "param 'ruled.kind': must be one of a, b, got 'A' (did you mean 'a'?)"),
    ({"sizes": [1, 0]}, "param 'ruled.sizes[1]': must be >= 1, got 0"),
    ({"sizes": []}, "param 'ruled.sizes': must not be empty"),
    ({"weights": {"x": -1.0}}, "param 'ruled.weights.x': must be >= 0, got -1.0"),
    ({"free": float("nan")}, "param 'ruled.free': must be a finite number, got nan"),
    ({"free": float("-inf")}, "param 'ruled.free': must be a finite number, got -inf"),
])
def test_rules_are_checked_by_from_dict_and_at_construction(data, message):
    with pytest.raises(ValueError) as built:
        from_dict(Ruled, data, prefix="ruled.")
    with pytest.raises(ValueError) as constructed:
        Ruled(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})
    assert str(built.value) == str(constructed.value) == message


def test_an_unknown_rule_is_a_programming_error():
    with pytest.raises(TypeError, match="unknown param rule 'minimum'"):
        param(1, minimum=0)


def write_params(tmp_path, text: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


def load_error(tmp_path, section: str, cls: type, text: str) -> str:
    """The one-line error `load_section` gives for this params.yaml text."""
    with pytest.raises(ValueError) as e:
        load_section(section, cls, write_params(tmp_path, text))
    assert "\n" not in str(e.value)
    return str(e.value)


# One rule family per case: the stage's own section in YAML, as a user writes it.
@pytest.mark.parametrize("section, cls, text, message", [
    ("clean", clean.Params, "clean: {languages: [xx]}",
     "param 'clean.languages[0]': must be one of af, ar, "),
    ("clean", clean.Params, "clean: {languages: [zh, EN]}",
     "param 'clean.languages[1]': must be one of af, ar, "),
    ("clean", clean.Params, "clean: {languages: [zh-cn]}",  # the identifier answers zh for both scripts
     "param 'clean.languages[0]': must be one of af, ar, "),
    ("semantic_embed", semantic_embed.Params, "semantic_embed: {embed_languages: [En]}",
     "param 'semantic_embed.embed_languages[0]': must be one of "),
    ("clean", clean.Params, "clean: {dedup: {word_ngram: 0}}",
     "param 'clean.dedup.word_ngram': must be >= 1, got 0"),
    ("semantic_head", semantic_head.Params, "semantic_head: {ngrams: {word_ngrams: [1, 0]}}",
     "param 'semantic_head.ngrams.word_ngrams[1]': must be >= 1, got 0"),
    ("clean", clean.Params, "clean: {langid_trials: 0}",
     "param 'clean.langid_trials': must be >= 1, got 0"),
    ("clean", clean.Params, "clean: {batch_size: -5}",
     "param 'clean.batch_size': must be >= 1, got -5"),
    ("train", train.Params, "train: {micro_batch_size: -1}",
     "param 'train.micro_batch_size': must be >= 1, got -1"),
    ("tokenizer", tokenizer.Params, "tokenizer: {max_train_chars: -1}",
     "param 'tokenizer.max_train_chars': must be >= 0, got -1"),
    ("clean", clean.Params, "clean: {dedup: {threshold: .nan}}",
     "param 'clean.dedup.threshold': must be a finite number, got nan"),
    ("train", train.Params, "train: {optim: {lr: .inf}}",
     "param 'train.optim.lr': must be a finite number, got inf"),
    ("perplexity", perplexity.Params, "perplexity: {reference: {optim: {min_lr_ratio: .nan}}}",
     "param 'perplexity.reference.optim.min_lr_ratio': must be a finite number, got nan"),
    ("clean", clean.Params, "clean: {min_lang_prob: 1.5}",
     "param 'clean.min_lang_prob': must be in [0, 1], got 1.5"),
    ("clean", clean.Params, "clean: {quality: {max_dup_line_ratio: 1.2}}",
     "param 'clean.quality.max_dup_line_ratio': must be in [0, 1], got 1.2"),
    ("clean", clean.Params, "clean: {seed: -1}",
     "param 'clean.seed': must be >= 0, got -1"),
    # a subclass that declares a field again (a different default) keeps its rule
    ("prune", prune.Params, "prune: {distill: {optim: {lr: 0}}}",
     "param 'prune.distill.optim.lr': must be > 0, got 0.0"),
])
def test_a_value_out_of_range_is_one_line_naming_the_key(tmp_path, section, cls, text, message):
    assert load_error(tmp_path, section, cls, text).startswith(message)


def test_a_language_in_capitals_says_which_code_is_meant(tmp_path):
    assert load_error(tmp_path, "clean", clean.Params, "clean: {languages: [EN]}").endswith(
        "got 'EN' (did you mean 'en'?)")


@pytest.mark.parametrize("overrides, message", [
    ({"dedup": DedupParams(word_ngram=0)}, "param 'clean.dedup.word_ngram': must be >= 1, got 0"),
    ({"dedup": DedupParams(threshold=math.nan)}, "param 'clean.dedup.threshold': must be a finite number, got nan"),
    ({"languages": ("EN",)}, "param 'clean.languages[0]': must be one of "),
    ({"langid_trials": 0}, "param 'clean.langid_trials': must be >= 1, got 0"),
    ({"max_record_bytes": -1}, "param 'clean.max_record_bytes': must be >= 1, got -1"),
    ({"min_lang_prob": 2.0}, "param 'clean.min_lang_prob': must be in [0, 1], got 2.0"),
])
def test_params_built_directly_are_checked_with_the_full_key(overrides, message):
    with pytest.raises(ValueError) as e:
        dataclasses.replace(clean.Params(**required("clean", clean.Params)), **overrides)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_a_nested_section_built_directly_is_checked_inside_its_stage():
    with pytest.raises(ValueError, match=r"^param 'train\.optim\.beta2': must be in \[0, 1\), got 1\.0$"):
        train.Params(**required("train", train.Params), optim=OptimParams(beta2=1.0))


@pytest.mark.parametrize("stage", STAGES)
def test_the_repo_params_load_cleanly(stage):
    cls = importlib.import_module(f"stages.{stage}").Params
    params = load_section(stage, cls, ROOT / "params.yaml")
    validate(params, stage)
    cls(**required(stage, cls))  # the dataclass defaults pass their own rules too


def test_demo_languages_are_valid():
    assert load_section("clean", clean.Params, ROOT / "params.yaml").languages == ("zh", "en")


def test_invalid_params_stop_the_stage_before_it_runs(tmp_path, capsys):
    ran = []
    with pytest.raises(SystemExit) as e:
        stage_main("clean", clean.Params, ran.append, None,
                   argv=["--params", str(write_params(tmp_path, "clean: {langid_trials: 0}"))])
    assert e.value.code == 2 and ran == []
    assert capsys.readouterr().err == "error: param 'clean.langid_trials': must be >= 1, got 0\n"


@pytest.mark.parametrize("text, message", [
    ("clean: [1, 2\n", r"^.*params\.yaml:2:1: not valid YAML \(expected ',' or '\]', but got '<stream end>'\)$"),
    ("- 1\n", r"^.*params\.yaml: top level must be a mapping, got list$"),
    ("clean: 3\n", r"^param 'clean': expected a mapping, got 3$"),
])
def test_a_malformed_params_file_is_one_line(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        load_section("clean", clean.Params, write_params(tmp_path, text))


# ---- hostile params files: one line, fast, bounded memory ----

def anchor_bomb(key: str) -> str:
    """A "billion laughs": nine levels of aliases, each standing for ten of the level below (10^9 leaves)."""
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    section, name = key.split(".")
    return "\n".join(lines) + f"\n{section}:\n  {name}: *a9\n"


@pytest.mark.parametrize("section, cls, key", [("report", None, "report.title"),
                                               ("clean", clean.Params, "clean.languages")])
def test_an_anchor_bomb_is_refused_fast_in_bounded_memory(tmp_path, section, cls, key):
    path = write_params(tmp_path, anchor_bomb(key))
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(ConfigError) as e:
        load_section(section, cls, path) if cls else read_params(path)
    seconds, (_, peak) = time.perf_counter() - start, tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert str(e.value) == (f"{path}:2:10: alias *a0 stands for a mapping or list; an alias may only repeat a "
                            "single value")
    assert seconds < 1 and peak < 16 << 20


def test_an_alias_of_a_single_value_is_kept_and_their_number_bounded(tmp_path):
    assert read_params(write_params(tmp_path, "a: &x data/docs\nb: {c: *x}\n")) == {"a": "data/docs",
                                                                                    "b": {"c": "data/docs"}}
    many = "a: &x 1\n" + "".join(f"b{i}: *x\n" for i in range(MAX_ALIASES + 1))
    with pytest.raises(ConfigError, match=rf"params\.yaml:{MAX_ALIASES + 2}:\d+: more than {MAX_ALIASES} aliases"):
        read_params(write_params(tmp_path, many))


@pytest.mark.parametrize("text, key, line", [
    ("report:\n  title: a\n  title: b\n", "report.title", 3),
    ("train: {max_steps: 1}\ntrain: {max_steps: 2}\n", "train", 2),
    ("clean:\n  sources:\n    - {path: a, format: jsonl, format: csv}\n", "clean.sources[0].format", 3),
])
def test_a_duplicate_key_is_one_line_naming_it(tmp_path, text, key, line):
    path = write_params(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        read_params(path)
    assert str(e.value).startswith(f"{path}:{line}:") and f"key '{key}' appears twice" in str(e.value)
    assert "\n" not in str(e.value)


def test_an_oversize_or_deep_or_binary_file_is_refused(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_bytes(b"report: {title: '" + b"x" * MAX_PARAMS_BYTES + b"'}\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: larger than 1024 KiB, the most a params file"):
        read_params(path)
    path.write_text("a: " + "[" * 10_000 + "]" * 10_000 + "\n")  # deeper than Python's stack
    with pytest.raises(ConfigError, match=r"params\.yaml:1:\d+: nested deeper than 32 levels$"):
        read_params(path)
    path.write_bytes(b"a: \xff\n")
    with pytest.raises(ConfigError, match=r"params\.yaml: not UTF-8 text \(byte 3\)$"):
        read_params(path)


@pytest.mark.parametrize("text, start, filler", [
    ("clean: {languages: '" + "x" * 10_000 + "'}", "param 'clean.languages': expected a list, got 'xxxx", "x"),
    ("clean: {languages: ['" + "x" * 10_000 + "']}", "param 'clean.languages[0]': must be one of ", "x"),
    ("clean: {seed: [" + "1, " * 1_000 + "]}", "param 'clean.seed': expected an integer, got [1, 1, 1", "1, "),
    ("clean: {" + "k" * 1_000 + ": 1}", "unknown param 'clean.kkkk", "k"),  # PyYAML: keys up to 1024
    ("clean: {seed: " + "9" * 5_000 + "}", "params.yaml: not valid YAML (Exceeds the limit", "9"),
])
def test_a_long_value_is_cut_short_in_the_message(tmp_path, text, start, filler):
    message = load_error(tmp_path, "clean", clean.Params, text)
    assert start in message and filler * (SHOWN_CHARS // len(filler)) not in message
    assert "\u2026" in message or "..." in message


def test_a_missing_params_file_is_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"^.*nope\.yaml: no such params file$"):
        load_section("clean", clean.Params, tmp_path / "nope.yaml")


def test_an_unknown_key_suggests_the_close_one():
    with pytest.raises(ValueError, match=r"^unknown param 'clean\.langid_trails' \(did you mean 'clean\.langid_trials'\? "
                                         r"known: .*\)$"):
        from_dict(clean.Params, {"langid_trails": 3}, prefix="clean.")


# ---- the token manifest the train stage (and prune/qat's resume identity) read next to the shards ----

@pytest.mark.parametrize("text, message", [
    ("{}", "'vocab_size' must be an integer >= 1, got nothing"),
    ('{"vocab_size": 0, "eos_id": 0, "shards": {}}', "'vocab_size' must be an integer >= 1, got 0"),
    ('{"vocab_size": 400, "shards": {}}', "'eos_id' must be an integer >= 0, got nothing"),
    ('{"vocab_size": 400, "eos_id": 0}', "'shards' (docs and tokens per shard) must be a mapping, got None"),
    ("[]", "must be a JSON object, got list"),
    ("", "not JSON"),
])
def test_an_empty_or_partial_token_manifest_is_one_line(tmp_path, text, message):
    (tmp_path / "manifest.json").write_text(text)
    with pytest.raises(ValueError) as e:
        read_manifest(tmp_path)
    assert message in str(e.value) and str(tmp_path / "manifest.json") in str(e.value)
    assert "\n" not in str(e.value) and "perplexity stage" in str(e.value)


def test_a_token_manifest_is_read(tmp_path):
    manifest = {"vocab_size": 400, "eos_id": 0, "shards": {"train/easy": {"num_docs": 1, "num_tokens": 9}}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert read_manifest(tmp_path) == manifest
