"""The `retrain` flow: when raw data is new or changed, run the pipeline and promote only a better model.

1. `dvc status` says whether a configured raw input (a stage dependency, e.g. `clean.input`) changed; if
   none did, nothing runs and the log says so;
2. the `pipeline` flow reproduces the workspace (a subflow, under the same workspace lock);
3. the candidate model and the champion are scored on the frozen evaluation set, each by one run of the
   command `python -m stages.evaluate` whose JSON the flow reads (flows/registry.py);
4. the candidate is promoted only when better by `retrain.min_improvement`; the registry records it
   either way, with the git revision, the dvc.lock digest, the metrics and the reason.
"""
from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from flows import registry
from flows.artifacts import flatten, markdown_table, read_metrics
from flows.check import check_workspace
from flows.commands import dvc, run
from flows.config import (
    ROOT,
    RetrainConfig,
    UnresolvedReference,
    load_config,
    resolve,
    resolve_workspace,
    workspace_params,
)
from flows.graph import changed_deps, stages_in_order, status_json
from flows.lock import workspace_lock
from flows.pipeline import pipeline
from stages.common.runtime.digest import sha256_file


def _is_under(path: str, root: str) -> bool:
    path, root = Path(path).as_posix().rstrip("/"), Path(root).as_posix().rstrip("/")
    return path == root or path.startswith(root + "/")


@task(name="detect-new-data", cache_policy=NO_CACHE)
def detect_new_data(root: Path, raw_inputs: list[str]) -> dict[str, str]:
    """Changed raw inputs according to `dvc status`: {path: change} (empty: nothing new)."""
    deps = {d for s in stages_in_order(root) for d in s.deps}
    unused = [r for r in raw_inputs if not any(_is_under(d, r) or _is_under(r, d) for d in deps)]
    if unused:
        raise ValueError(f"retrain.raw_inputs {unused} are not dependencies of any stage in dvc.yaml, so DVC "
                         f"cannot tell whether they changed (flows/config.yaml)")
    status = status_json(run(dvc("status", "--json"), root, get_run_logger(), quiet=True).output)
    return {path: change for deps_changed in changed_deps(status).values() for path, change in deps_changed.items()
            if any(_is_under(path, r) for r in raw_inputs)}


def candidate_path(root: Path, cfg: RetrainConfig, params: dict[str, Any]) -> Path:
    """The first configured candidate that exists (one naming a params key that is absent is skipped)."""
    tried = []
    for template in cfg.candidates:
        try:
            path = root / resolve(template, params)
        except UnresolvedReference:
            continue
        if path.is_file():
            return path
        tried.append(str(path))
    raise FileNotFoundError(f"no candidate model: none of {tried} exists (retrain.candidates in flows/config.yaml)")


@task(name="evaluate", task_run_name="evaluate-{role}", cache_policy=NO_CACHE)
def evaluate(role: str, model_path: Path, tokenizer_dir: Path, eval_set: Path, cfg: RetrainConfig) -> registry.Evaluation:
    """One run of `python -m stages.evaluate`, from the checkout these flows ship in (so the workspace's own
    code cannot move the yardstick); its JSON is the result."""
    log = get_run_logger()
    with tempfile.TemporaryDirectory(prefix=f"refinery-evaluate-{role}-") as tmp:
        out = Path(tmp) / "evaluation.json"
        run(registry.evaluate_command(model_path, tokenizer_dir, eval_set, out, cfg.device, cfg.num_threads),
            ROOT, log, what=f"scoring the {role} ({model_path})")
        result = registry.Evaluation.read(out)
    log.info("%s %s: %.4f bits/byte, token perplexity %.2f over %d documents",
             role, model_path, result.bits_per_byte, result.token_perplexity, result.num_docs)
    return result


@task(name="freeze-eval-set", cache_policy=NO_CACHE)
def freeze_eval_set(docs_dir: Path, eval_set: Path, cfg: RetrainConfig) -> None:
    num_docs = registry.freeze_eval_set(docs_dir, eval_set, cfg.eval_max_docs, cfg.eval_max_chars)
    get_run_logger().info("froze %d validation documents of %s into %s", num_docs, docs_dir, eval_set)


@task(name="provenance", cache_policy=NO_CACHE)
def provenance(root: Path) -> dict[str, Any]:
    """Git revision (and whether tracked files differ from it) and the dvc.lock digest of this candidate."""
    log = get_run_logger()
    revision = run(["git", "rev-parse", "HEAD"], root, log, quiet=True).output[-1]
    dirty = run(["git", "status", "--porcelain", "--untracked-files=no"], root, log, quiet=True).output
    lock = root / "dvc.lock"
    return {"git_revision": revision, "git_dirty": any(dirty),
            "dvc_lock_sha256": sha256_file(lock) if lock.is_file() else None}


@task(name="decide", cache_policy=NO_CACHE)
def decide_and_record(root: Path, cfg: RetrainConfig, candidate: Path, tokenizer_dir: Path,
                      scores: dict[str, registry.Evaluation | None], facts: dict[str, Any]) -> dict[str, Any]:
    promoted, reason = registry.decide(scores["candidate"], scores["champion"], cfg.min_improvement)
    eval_set = root / cfg.eval_set
    entry = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "flow_run": flow_run.get_name(),
        "candidate": {"path": str(candidate.relative_to(root)), "sha256": sha256_file(candidate),
                      "tokenizer": str(tokenizer_dir.relative_to(root))},
        **facts,
        "eval_set": {"path": cfg.eval_set, "sha256": sha256_file(eval_set)},
        "metrics": {role: asdict(score) if score else None for role, score in scores.items()},
        "pipeline_metrics": _pipeline_metrics(root),
        "decision": "promoted" if promoted else "kept champion",
        "reason": reason,
    }
    registry.append_entry(root / cfg.registry, entry)
    if promoted:
        registry.promote(candidate, tokenizer_dir, root / cfg.champion_dir, entry)
    get_run_logger().info("%s: %s", entry["decision"], reason)
    return entry


def _pipeline_metrics(root: Path) -> dict[str, Any]:
    """Every DVC metric of the run that made the candidate, flattened per file."""
    return {rel: flatten(read_metrics(root / rel)) for s in stages_in_order(root) for rel in s.metrics
            if (root / rel).is_file()}


@flow(name="retrain")
def retrain(force: bool = False) -> dict[str, Any]:
    """Rebuild on new raw data; promote the new model only if it beats the champion by the margin.

    force: run the pipeline and the comparison even when no raw input changed.
    The workspace is the one the flows are served for (flows/config.py: `resolve_workspace`).
    """
    root = resolve_workspace()
    cfg = load_config(root)
    log = get_run_logger()
    owner = f"flow run {flow_run.get_name()!r} ({flow_run.get_id()})"
    with workspace_lock(root, owner, cfg.lock_wait_s, log):
        check_workspace(root, log)  # params.yaml and its inputs, before DVC removes any output
        params = workspace_params(root)
        raw_inputs = [resolve(r, params) for r in cfg.retrain.raw_inputs]
        new_data = detect_new_data(root, raw_inputs)
        if not new_data and not force:
            log.info("no new or changed raw data in %s (dvc status): nothing to run", ", ".join(raw_inputs))
            return {"decision": "nothing new", "raw_inputs": raw_inputs}
        log.info("new or changed raw data: %s", json.dumps(new_data) if new_data else "none, but force=true")
        pipeline(experiment=False)
        return _challenge(root, cfg.retrain)


def _challenge(root: Path, cfg: RetrainConfig) -> dict[str, Any]:
    params = workspace_params(root)  # after the pipeline: what the candidate was built with
    candidate = candidate_path(root, cfg, params)
    tokenizer_dir = root / resolve(cfg.tokenizer, params)
    eval_set = root / cfg.eval_set
    if not eval_set.is_file():
        freeze_eval_set(root / resolve(cfg.eval_docs, params), eval_set, cfg)
    champion_dir = root / cfg.champion_dir
    scores = {"candidate": evaluate("candidate", candidate, tokenizer_dir, eval_set, cfg), "champion": None}
    if registry.champion_exists(champion_dir):
        scores["champion"] = evaluate("champion", champion_dir / registry.MODEL_FILE,
                                      champion_dir / registry.TOKENIZER_DIR, eval_set, cfg)
    entry = decide_and_record(root, cfg, candidate, tokenizer_dir, scores, provenance(root))
    rows = [{"model": role, **asdict(score)} for role, score in scores.items() if score]
    create_markdown_artifact(f"## Retrain: {entry['decision']}\n\n{entry['reason']}\n\n{markdown_table(rows)}\n\n"
                             f"Candidate `{entry['candidate']['path']}` at git {entry['git_revision'][:12]}"
                             f"{' (uncommitted changes)' if entry['git_dirty'] else ''}, dvc.lock "
                             f"{str(entry['dvc_lock_sha256'])[:12]}; history in `{cfg.registry}`.\n",
                             key="retrain-decision", description=entry["decision"])
    return entry
