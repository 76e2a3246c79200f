"""The language model and what feeds and scores it: the Llama-style `Transformer`, the byte-level BPE library,
token shards with tiers, scoring, validation perplexity, Hugging Face conversion, and for corpora larger than
memory per-document columns on disk (`doc_columns`), exact streamed order statistics (`order_stats`) and the
corpus the perplexity stage scores, built on both (`corpus.ScoredCorpus`).
Imports `runtime` only.
"""

IMPORTS = ("runtime",)  # the packages of stages.common it may import (tests/test_floor_plan.py)
