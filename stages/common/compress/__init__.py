"""From a trained model to a deployable one: structured pruning, INT8 quantization, distillation fine-tunes,
the deployable graph and ONNX / onnxruntime. Imports `runtime`, `lm` and `training`.
"""

IMPORTS = ("runtime", "lm", "training")  # the packages of stages.common it may import (tests/test_floor_plan.py)
