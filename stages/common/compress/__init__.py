"""From a trained model to a deployable one: structured pruning, INT8 quantization, distillation fine-tunes,
the deployable graph and ONNX / onnxruntime. Imports `runtime`, `lm` and `training`.
"""
