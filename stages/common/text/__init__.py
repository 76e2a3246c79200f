"""Text curation: readers for raw corpora, normalisation, language ID, quality rules and exact / near dedup.
Imports `stages.common.runtime` only.
"""
