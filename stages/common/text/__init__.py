"""Text curation: readers for raw corpora, normalisation, language ID, quality rules, exact / near dedup, and
`filters`, the base of the filter stages (clean, semantic_filter). Imports `stages.common.runtime` only.
"""
