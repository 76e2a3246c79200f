"""The perplexity tiers, easiest first: the names of the token shards, the curriculum's mixes, the metrics and
the report. No torch and no other import, so the report and the flows read the names from here too."""
from __future__ import annotations

TIERS = ("easy", "medium", "hard")
