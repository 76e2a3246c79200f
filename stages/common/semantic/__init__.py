"""The semantic filter's model parts: features, the classification head, the sentence encoder. Imports
`runtime` and `text`.
"""
