"""The language model and what feeds and scores it: the Llama-style `Transformer`, the byte-level BPE library,
token shards with tiers, scoring, validation perplexity, Hugging Face conversion. Imports `runtime` only.
"""
