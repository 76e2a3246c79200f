"""What a person reads after a run: the figures gathered from the stages' outputs as plain dicts (`data`: pure
functions, reading with pyarrow and json at its edge), tiny inline SVG charts (`svg`), the self-contained
HTML page (`html`), where the run came from (`lineage`), the model card (`card`), and headless Chromium for
the tests and bench/report.py (`browser`: the stages never start a browser). Imports `runtime`, and of `lm`
only the tier names (`lm.tiers`, which imports nothing), never torch, so the report stage starts in a fraction
of a second.
"""

IMPORTS = ("runtime", "lm.tiers")  # the packages of stages.common it may import (tests/test_floor_plan.py)
