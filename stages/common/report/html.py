"""The report page: one self-contained HTML file (inline CSS and SVG, no script, no external reference; a
Content-Security-Policy forbids any request) with a table of contents and one section per topic.

Every text from the data goes through `esc`. `index.html#view-<section>` shows that section alone (pure CSS,
`:target`): for screenshots and for pointing someone at one part."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from stages.common.report.svg import PALETTE, TIER_COLORS, Series, esc, histogram, line_chart, stacked_bars

# (id, title) in page order; tests check that the DOM holds each id
SECTIONS = (
    ("summary", "Summary"),
    ("funnel", "Document funnel"),
    ("drops", "Why documents were dropped"),
    ("semantic", "Semantic filter"),
    ("perplexity", "Perplexity tiers"),
    ("training", "Training"),
    ("compression", "Compression"),
    ("lineage", "Lineage"),
)
REASON_ROWS = 6  # reasons listed per family; the rest share one row
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
CSS = """
body{font:14px/1.45 system-ui,sans-serif;color:#1d1d1f;margin:0 auto;max-width:1200px;padding:0 20px 40px}
h1{font-size:24px;margin:20px 0 4px}h2{font-size:19px;border-bottom:2px solid #0072B2;padding-bottom:3px;
margin-top:34px}h3{font-size:15px;margin:20px 0 6px}h4{font-size:13px;margin:12px 0 4px}
.meta{color:#555;margin:0 0 10px}nav ol{columns:4;margin:6px 0;padding-left:20px}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}th,td{padding:3px 9px;border-bottom:1px solid #e2e2e2;
text-align:left;vertical-align:top}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}td.n{white-space:nowrap}
tr.family td{font-weight:600;background:#f3f6fa}tr.reason td:first-child{padding-left:22px}
.bar{display:inline-block;height:9px;background:#0072B2;margin-right:4px;vertical-align:middle}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(176px,1fr));gap:10px}
.card{border:1px solid #dde3ea;border-radius:6px;padding:8px 12px;background:#fafcff}
.card b{display:block;font-size:18px}.card span{color:#555;font-size:12px}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:6px 16px}
svg{max-width:100%;height:auto}.ex{white-space:pre-wrap;font:12px/1.4 ui-monospace,monospace;background:#f6f6f6;
border-left:3px solid #bbb;padding:4px 8px;margin:4px 0;word-break:break-word}
.sample{white-space:pre-wrap;max-width:480px}.note{color:#555;font-size:12px}.empty{color:#a00}
code{font-size:12px;background:#f1f1f1;padding:0 3px}
"""


def view_css() -> str:
    """`#view-<id>` in the address shows section <id> alone."""
    return "".join(f"body:has(#view-{sid}:target) :is(header,nav,main>section:not(#{sid})){{display:none}}"
                   for sid, _ in SECTIONS)


def num(value: Any, digits: int = 0) -> str:
    """A number with thousands separators and `digits` decimals; a dash for a missing one."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:,.{digits}f}"


def pct(part: float, whole: float) -> str:
    if not whole:
        return "–"
    share = 100 * part / whole
    return "<0.1%" if 0 < share < 0.05 else f"{share:.1f}%"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], numeric: Sequence[bool] | None = None,
          row_classes: Sequence[str] | None = None, raw: bool = False) -> str:
    """A table; `numeric` right-aligns columns; cells are escaped unless `raw` (cells already HTML)."""
    numeric = numeric or [False] * len(header)
    head = "".join(f'<th class="n">{esc(h)}</th>' if n else f"<th>{esc(h)}</th>" for h, n in zip(header, numeric))
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{row_classes[i]}"' if row_classes and row_classes[i] else ""
        cells = "".join(f'<td{" class=n" if n else ""}>{c if raw else esc(c)}</td>' for c, n in zip(row, numeric))
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def lang_colors(langs: Sequence[str]) -> dict[str, str]:
    return {lang: PALETTE[i % len(PALETTE)] for i, lang in enumerate(langs)}


# ---- sections ----

def summary(fig: dict[str, Any]) -> str:
    funnel, comp, train = fig["funnel"], fig["compression"], fig["training"]
    read, trained = funnel["steps"][0]["total"], sum(c["docs"] for t in funnel["train"].values() for c in t.values())
    train_tokens = sum(c["tokens"] for t in funnel["train"].values() for c in t.values())
    ratios = comp["ratios"]
    cards = [
        (f"{num(read)} → {num(trained)}", f"records read → documents in the training split ({pct(trained, read)}); "
                                          f"languages {', '.join(funnel['langs'])}"),
        (num(train_tokens), f"tokens in the training split; {num(train['summary']['tokens_seen'])} read by "
                            f"{num(train['summary']['steps'])} training steps"),
        (" / ".join(num(train["val_final"][t], 1) for t in ("easy", "medium", "hard")),
         "validation perplexity of the trained model, easy / medium / hard tier"),
    ]
    if ratios:
        cards.append((f"{ratios.get('ratio.int8_file_vs_fp32', 0):.2f}× size, "
                      f"{ratios.get('ratio.int8_latency_vs_fp32_b1', 0):.2f}× latency",
                      f"INT8 (QAT) against the final pruned FP32 model; perplexity "
                      f"{ratios.get('ratio.int8_ppl_vs_fp32', 0):.3f}×"))
    git = fig["lineage"]["git"]
    cards.append(((git["commit"] or "no git checkout")[:10],
                  "git revision" + (", with uncommitted changes to tracked files" if git["dirty"] else "")))
    cards.append((f"{num(sum(s for _, s in fig['timings']))} s", "wall time of the stages, summed (see Lineage)"))
    body = "".join(f"<div class=card><b>{esc(v)}</b><span>{esc(k)}</span></div>" for v, k in cards)
    return f"<div class=cards>{body}</div>"


def funnel_section(fig: dict[str, Any]) -> str:
    funnel, train = fig["funnel"], fig["training"]["summary"]
    langs, colors = funnel["langs"], lang_colors(funnel["langs"])
    read = funnel["steps"][0]["total"]
    chart = stacked_bars([(s["step"], s["by_lang"] or {"total": s["total"]}) for s in funnel["steps"]], langs, colors,
                         "documents per step and language", value_format=lambda v: num(v))
    rows = [[s["step"], num(s["total"]), pct(s["total"], read), *[num(s["by_lang"].get(l)) if s["by_lang"] else "–"
                                                                 for l in langs]] for s in funnel["steps"]]
    steps = table(["step", "documents", "of read", *langs], rows, [False, True, True, *[True] * len(langs)])
    split_rows = []
    for tier in ("easy", "medium", "hard"):
        for lang in langs:
            t, v = funnel["train"][tier][lang], funnel["val"][tier][lang]
            split_rows.append([tier, lang, num(t["docs"]), num(t["tokens"]), num(v["docs"]), num(v["tokens"])])
    train_tokens = sum(c["tokens"] for t in funnel["train"].values() for c in t.values())
    seen = train.get("tokens_seen")
    note = (f"The train stage read {num(seen)} tokens in {num(train.get('steps'))} steps: "
            f"{seen / train_tokens:.2f} passes over the training split (batches mix the tiers by schedule)."
            if seen and train_tokens else "")
    sources = funnel.get("sources") or []
    if len(sources) > 1:  # the input's sources (clean.sources): where the documents that survive come from
        steps += "<h3>Per input source</h3>" + table(
            ["source", "read", "kept by clean", "kept by semantic_filter", "train docs", "train tokens"],
            [[s["source"] or "–", num(s["read"]), num(s["clean"]), num(s["semantic_filter"]), num(s["train_docs"]),
              num(s["train_tokens"])] for s in sources], [False, True, True, True, True, True])
    return (f"<p class=note>Counts come from the datasets each stage wrote (kept documents and quarantine); "
            f"the language is the one the clean stage detected. A record read but dropped before language "
            f"identification has none.</p>{chart}{steps}<h3>Documents and tokens that reached training</h3>"
            + table(["tier", "language", "train docs", "train tokens", "validation docs", "validation tokens"],
                    split_rows, [False, False, True, True, True, True])
            + f"<p class=note>{esc(note)}</p>")


def drops_section(fig: dict[str, Any]) -> str:
    parts = []
    for stage in fig["drops"]:
        columns, read = stage["columns"], stage["num_read"]
        top = max((g["count"] for g in stage["families"]), default=1)
        rows, classes = [], []
        for group in stage["families"]:
            bar = f'<span class=bar style="width:{120 * group["count"] / top:.0f}px"></span>'
            rows.append([esc(group["family"]), bar + num(group["count"]), esc(pct(group["count"], read)),
                         *[""] * len(columns)])
            classes.append("family")
            shown, rest = group["reasons"][:REASON_ROWS], group["reasons"][REASON_ROWS:]
            for r in shown:
                rows.append([f'<code>{esc(r["reason"])}</code>', num(r["count"]), esc(pct(r["count"], read)),
                             *[num(r["by_lang"][c]) if r["by_lang"][c] else "" for c in columns]])
                classes.append("reason")
            if rest:
                names = ", ".join(f"{r['reason']} {r['count']:,}" for r in rest)
                count = sum(r["count"] for r in rest)
                rows.append([f"{len(rest)} more: <span class=note>{esc(names)}</span>", num(count), esc(pct(count, read)),
                             *[num(sum(r["by_lang"][c] for r in rest)) for c in columns]])
                classes.append("reason")
        parts.append(f"<h3>{esc(stage['stage'])}: {num(stage['num_dropped'])} of {num(read)} documents "
                     f"dropped ({esc(pct(stage['num_dropped'], read))})</h3>"
                     + table(["family / reason", "documents", "of the stage's input", *columns], rows,
                             [False, True, True, *[True] * len(columns)], classes, raw=True))
    examples = []
    for (stage, reason), picks in fig["examples"].items():
        quoted = "".join(f"<div class=ex>{f'<b>measured {value:.3g}</b> ' if value is not None else ''}{esc(t)}</div>"
                         for t, value in picks)
        examples.append(f"<h4>{esc(stage)}: <code>{esc(reason)}</code></h4>{quoted}")
    return ("".join(parts) + "<h3>Examples</h3><p class=note>A seeded random sample of the records of the most "
            "frequent reasons of each family, as the stage judged them (the clean stage: after normalisation, so "
            "a page's text, not its HTML), with what the deciding rule or model measured (a ratio, a count, a "
            "length, a language's probability or the filter's score; the threshold is in params.yaml), truncated; "
            "addresses are written <code>[:]//</code>.</p>" + "".join(examples))


def threshold_cell(lang: dict[str, Any]) -> str:
    """The threshold, and when it was chosen on too few validation examples, how few."""
    val = lang["val"]
    return f"{lang['threshold']:.3f}" + (f" (low confidence: {val['num_keep']} keep, {val['num_drop']} drop)"
                                          if val.get("low_confidence") else "")


def semantic_section(fig: dict[str, Any]) -> str:
    sem = fig["semantic"]
    categories = sorted({c for lang in sem["langs"] for c in lang["dropped"]})
    scores = ("precision", "recall", "f1", "accuracy")
    rows = [[l["lang"], threshold_cell(l), num(l["val"]["num"]), *[num(l["val"][k], 3) for k in scores],
             num(l["kept"]), *[num(l["dropped"].get(c, 0)) for c in categories]] for l in sem["langs"]]
    head = table(["language", "threshold", "validation docs", "precision", "recall", "F1", "accuracy", "kept",
                  *[f"dropped {c.split(':', 1)[-1]}" for c in categories]], rows,
                 [False, *[True] * (7 + len(categories))])
    width = 1.0 / sem["num_bins"]
    charts = []
    for l in sem["langs"]:
        bins = [(i * width, (i + 0.5) * width, n, "keep (true label)") for i, n in enumerate(l["hist"]["keep"])]
        bins += [((i + 0.5) * width, (i + 1) * width, n, "drop (true label)") for i, n in enumerate(l["hist"]["drop"])]
        charts.append(histogram(bins, {"keep (true label)": PALETTE[0], "drop (true label)": PALETTE[5]},
                                [(l["threshold"], "threshold")], f"{l['lang']}: validation scores",
                                f"{l['lang']}: head's probability of keep (validation)", "documents",
                                x_format=lambda v: f"{v:.1f}"))
    pooled = sem["pooled_threshold"]
    note = ("Documents scoring at or above their language's threshold are kept. Scores are the precision, recall "
            "and F1 of the drop decision on the head's validation split at that threshold"
            + (f"; languages without a head of their own use the pooled threshold {pooled:.3f}." if pooled is not None
               else ".")
            + (" A threshold marked low confidence was chosen on too few validation examples of keep or drop for "
               "its scores to mean much: label more examples of that language." if any(
                   l["val"].get("low_confidence") for l in sem["langs"]) else ""))
    return f"<p class=note>{esc(note)}</p>{head}<div class=charts>{''.join(charts)}</div>"


def perplexity_section(fig: dict[str, Any]) -> str:
    ppl = fig["perplexity"]
    rows = []
    charts = []
    for l in ppl["langs"]:
        counts = fig["funnel"]["steps"]
        docs = {s["step"].removeprefix("tier "): s["by_lang"].get(l["lang"]) for s in counts if s["step"].startswith("tier")}
        rows.append([l["lang"], num(l["easy_max"], 1), num(l["medium_max"], 1), "pooled" if l["pooled"] else "own",
                     *[num(docs.get(t)) for t in ("easy", "medium", "hard")],
                     *[num(l["mean"][t], 1) for t in ("easy", "medium", "hard")]])
        decades = range(math.floor(min(b[0] for b in l["bins"])), math.ceil(max(b[1] for b in l["bins"])) + 1)
        charts.append(histogram(l["bins"], TIER_COLORS, [(x, label) for x, label in l["cutoffs"]],
                                f"{l['lang']}: perplexity of the reference LM", f"{l['lang']}: perplexity (log scale)",
                                "documents", x_format=lambda v: num(10 ** v), x_ticks=list(decades)))
    head = table(["language", "easy ≤", "medium ≤", "cutoffs", "docs easy", "docs medium", "docs hard",
                  "mean ppl easy", "mean ppl medium", "mean ppl hard"], rows,
                 [False, True, True, False, *[True] * 6])
    examples = []
    for (lang, tier), docs in fig["tier_examples"].items():
        quoted = "".join(f"<div class=ex>perplexity {p:,.1f}: {esc(t)}</div>" for p, t in docs)
        examples.append(f"<h4>{esc(lang)}, {esc(tier)}</h4>{quoted}")
    return (f"<p class=note>The reference LM scores every document; per language, the cutoffs split them into "
            f"thirds. Reference LM validation perplexity {num(ppl['reference_val_perplexity'], 2)}.</p>"
            f"{head}<div class=charts>{''.join(charts)}</div><h3>Typical documents per tier</h3>"
            f"<p class=note>The documents closest to each tier's median perplexity.</p>{''.join(examples)}")


def training_section(fig: dict[str, Any]) -> str:
    tr = fig["training"]
    s, c, xs = tr["summary"], tr["curves"], tr["steps"]
    summary = (f"{num(s['steps'])} steps, {num(s['tokens_seen'])} tokens, {num(s['num_params'])} parameters, "
               f"{s['precision']} on {s['num_processes']} processes; final loss {num(s['final_loss'], 3)}, "
               f"{num(s['tokens_per_s'])} tokens/s, {num(s['seconds'], 1)} s; {num(s['num_clipped_steps'])} steps "
               f"clipped, {num(s['num_skipped_steps'])} skipped; peak memory {num(s['peak_memory_mb'])} MB.")
    charts = [
        line_chart([Series("loss", xs, c["loss"])], "training loss", "step", "loss"),
        line_chart([Series(t, tr["val_steps"], v, TIER_COLORS[t]) for t, v in tr["val_curves"].items()],
                   "validation perplexity per tier", "step", "perplexity (log scale)", log_y=True),
        line_chart([Series("learning rate", xs, c["lr"])], "learning rate", "step", "learning rate"),
        line_chart([Series("gradient norm", xs, c["grad_norm"]),
                    Series("clip threshold", xs, c["clip_threshold"], PALETTE[5], dashed=True)],
                   "gradient norm and clip threshold", "step", "norm"),
        line_chart([Series(f"ratio {t}", xs, c[f"ratio_{t}"], TIER_COLORS[t]) for t in ("easy", "medium", "hard")],
                   "share of each tier in the batch", "step", "share"),
        line_chart([Series("tokens/s", xs, c["tokens_per_s"])], "throughput", "step", "tokens/s"),
    ]
    return f"<p>{esc(summary)}</p><div class=charts>{''.join(charts)}</div>{curriculum_part(fig.get('curriculum'))}"


def curriculum_part(study: dict[str, Any] | None) -> str:
    """The curriculum study's summary (bench/curriculum.py), when its results file is there."""
    if not study:
        return ""
    corrected = study["num_tests"] is not None
    rows = [[a["arm"], f"{num(a['mean'], 4)} ± {num(a['std'], 4)}", f"{num(a['min'], 4)}–{num(a['max'], 4)}",
             "–" if a["diff"] is None else f"{a['diff']:+.4f}", num(a["p"], 3),
             "–" if a["significant"] is None else ("yes" if a["significant"] else "no"), a["reached"] or "–"]
            for a in study["arms"]]
    arms = table(["arm", "final validation loss (mean ± std)", "min–max", "vs uniform",
                  "Holm p" if corrected else "Welch p (uncorrected)",
                  f"significant at {study['alpha']}" + (" (Holm)" if corrected else ""),
                  f"seeds reaching {num(study['target_loss'], 4)}"], rows,
                 [False, True, True, True, True, False, True])
    stability = table(["reference LM", "language", "Spearman", "same tier"],
                      [[s["variant"], s["lang"], num(s["spearman"], 3), pct(s["same_tier"], 1)]
                       for s in study["stability"]], [False, False, True, True]) if study["stability"] else ""
    val = (f"the first {num(study['eval_windows'])} windows of each tier of the val split" if study["eval_windows"]
           else "windows of each tier of the val split")
    tests = (f"Welch's t-test against uniform sampling, p Holm-corrected over {num(study['num_tests'])} tests "
             "(every mix on the overall loss and on each tier)" if corrected else
             "Welch's t-test against uniform sampling, p uncorrected for the study's multiple tests")
    restat = (f"; statistics recomputed {esc(study['statistics_date'])}" if study["statistics_date"] else "")
    return (f"<h3>Does the curriculum help?</h3><p class=note>bench/curriculum.py ({esc(study['date'])}{restat}): the "
            f"{esc(study['preset'])} model trained {num(study['steps'])} steps ({num(study['tokens_per_arm'])} tokens) "
            f"per run under each tier mix, seeds {esc(', '.join(map(str, study['seeds'])))}; loss on {val}; "
            f"{tests}.</p>{arms}"
            + (f"<p class=note>Tier stability: the same documents scored by another reference LM.</p>{stability}"
               if stability else ""))


def compression_section(fig: dict[str, Any]) -> str:
    comp = fig["compression"]
    rows = [[r["model"], r["precision"], num(r["num_params"]), num(r["ffn_dim"]), num(r["num_heads"]),
             num(r["file_mb"], 2), num(r["latency_ms_b1"], 2), num(r["latency_ms_b1_median"], 2),
             num(r["tokens_per_s_b8"]), *[num(r[f"val_ppl_{t}"], 2) for t in ("easy", "medium", "hard", "all")]]
            for r in comp["rows"]]
    main = table(["model", "precision", "parameters", "MLP width", "heads", "file MB", "latency ms", "median ms",
                  "tokens/s (batch 8)", "ppl easy", "ppl medium", "ppl hard", "ppl all"], rows,
                 [False, False, *[True] * 11])
    measured = {**comp["ratios"], **comp["parity"]}
    ratios = table(["measurement", "key", "value"],
                   [[esc(MEASUREMENTS.get(k, "")), f"<code>{esc(k)}</code>",
                     esc(f"{v:.4g}" if isinstance(v, float) else v)] for k, v in measured.items()],
                   [False, False, True], raw=True)
    samples = comp["samples"]
    decoding = ", ".join(f"{k} {v}" for k, v in samples.get("decoding", {}).items())
    sample_rows = [[esc(s["prompt"]), f"<div class=sample>{esc(s['fp32'])}</div>",
                    f"<div class=sample>{esc(s['int8'])}</div>"] for s in samples.get("samples", [])]
    return (f"<p class=note>onnxruntime, batch 1 × {esc(comp['latency_seq_len'])} tokens (latency: fastest run, "
            f"and the median) and batch 8 (throughput); validation perplexity per tier on the same windows for "
            f"every model.</p>{main}<h3>Ratios and the INT8 check</h3>{ratios}"
            f"<h3>What <code>generate</code> prints</h3><p class=note>{esc(decoding)}</p>"
            + table(["prompt", "FP32 (pruned)", "INT8 (QAT)"], sample_rows, raw=True))


def lineage_section(fig: dict[str, Any]) -> str:
    lin = fig["lineage"]
    git, mach = lin["git"], lin["machine"]
    facts = [["git commit", git["commit"] or "not a git checkout"],
             ["uncommitted changes to tracked files", {True: "yes", False: "no", None: "–"}[git["dirty"]]],
             [f"sha256 of {lin['params_path']}", lin["params_sha256"]],
             ["machine", f"{mach['cpu']}, {mach['cores']} cores; {mach['platform']}"],
             ["CPU extensions", " ".join(mach["cpu_flags"]) or "none of AVX2 / AVX-512 / AMX"],
             ["report generated", fig["generated_at"]],
             ["report built in", f"{fig['seconds']:.2f} s"]]
    inputs = (table(["input", "output in dvc.lock", "stage", "digest"],
                    [[r["input"], r["out"], r["stage"], r["digest"]] for r in lin["inputs"]])
              if lin["lock_found"] else f"<p class=note>{esc(lin['lock_path'])} not found: no digests.</p>")
    return (table(["", ""], facts) + f"<h3>Inputs, as {esc(lin['lock_path'])} records them</h3>" + inputs
            + "<h3>Libraries</h3>" + table(["library", "version"], list(lin["versions"].items()))
            + "<h3>Stage wall time</h3>"
            + table(["stage", "seconds"], [[s, num(t, 1)] for s, t in fig["timings"]], [False, True]))


MEASUREMENTS = {
    "half_mlp.step": "pruning step with half the trained MLP width and every head",
    "ratio.half_mlp_speedup": "that step's batch-1 speed-up over the trained model",
    "ratio.half_mlp_throughput_b8": "that step's batch-8 throughput over the trained model's",
    "ratio.half_mlp_ppl": "that step's validation perplexity over the trained model's",
    "ratio.int8_file_vs_fp32": "INT8 (QAT) file size over the final pruned FP32 model's",
    "ratio.int8_latency_vs_fp32_b1": "INT8 batch-1 latency over FP32's",
    "ratio.int8_throughput_vs_fp32_b8": "INT8 batch-8 throughput over FP32's",
    "ratio.int8_ppl_vs_fp32": "INT8 validation perplexity over FP32's",
    "ratio.qat_ppl_vs_ptq": "QAT validation perplexity over PTQ's",
    "parity.fp32_max_abs_diff": "FP32 ONNX against torch: largest logit difference",
    "parity.fp32_argmax_agreement": "FP32 ONNX against torch: share of equal argmax",
    "parity.int8_kernels": "integer kernels onnxruntime ran the INT8 check with",
    "parity.int8_positions": "validation positions of the INT8 check",
    "parity.int8_argmax_agreement": "INT8 against its fake-quant source: share of equal argmax",
    "parity.int8_relative_diff": "INT8 against its fake-quant source: largest logit difference / largest logit",
    "parity.int8_vs_fake_quant_max_abs_diff": "INT8 against its fake-quant source: largest logit difference",
    "int8.exact_on": "x86 CPUs whose integer kernels compute the INT8 file exactly",
    "int8.max_pair_sum": "largest |w_a| + |w_b| of same-sign int8 weights adjacent along K (<= 128: exact without VNNI)",
}

RENDERERS = {"summary": summary, "funnel": funnel_section, "drops": drops_section, "semantic": semantic_section,
             "perplexity": perplexity_section, "training": training_section, "compression": compression_section,
             "lineage": lineage_section}


def page(fig: dict[str, Any]) -> str:
    """The whole page from the gathered figures (see stages/report.py)."""
    toc = "".join(f'<li><a href="#{sid}">{esc(title)}</a></li>' for sid, title in SECTIONS)
    views = "".join(f'<span id="view-{sid}"></span>' for sid, _ in SECTIONS)
    sections = "".join(f'<section id="{sid}"><h2>{esc(title)}</h2>{RENDERERS[sid](fig)}</section>'
                       for sid, title in SECTIONS)
    git = fig["lineage"]["git"]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{esc(fig['title'])}</title><style>{CSS}{view_css()}</style></head><body>{views}"
            f"<header><h1>{esc(fig['title'])}</h1><p class=meta>generated {esc(fig['generated_at'])} · commit "
            f"{esc((git['commit'] or 'none')[:12])}{' (uncommitted changes)' if git['dirty'] else ''}</p></header>"
            f'<nav id="contents"><ol>{toc}</ol></nav><main>{sections}</main></body></html>\n')
