"""Text curation: readers for raw corpora, normalisation, language ID, quality rules, exact / near dedup,
`filters`, the base of the filter stages (clean, semantic_filter), and the dataset cards of the documents
they publish. Imports `stages.common.runtime` only.
"""

IMPORTS = ("runtime",)  # the packages of stages.common it may import (tests/test_floor_plan.py)
