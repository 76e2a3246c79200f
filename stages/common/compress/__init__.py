"""From a trained model to a deployable one: structured pruning, INT8 quantization, distillation fine-tunes,
the deployable graph, ONNX / onnxruntime, and sampling text from an exported model (`generate`). Imports
`runtime`, `lm` and `training`.
"""

IMPORTS = ("runtime", "lm", "training")  # the packages of stages.common it may import (tests/test_floor_plan.py)
