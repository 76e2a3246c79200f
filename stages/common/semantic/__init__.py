"""The semantic filter's model parts: features, the classification head, the sentence encoder. Imports
`runtime` and `text`.
"""

IMPORTS = ("runtime", "text")  # the packages of stages.common it may import (tests/test_floor_plan.py)
