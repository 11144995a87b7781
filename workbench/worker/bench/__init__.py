"""The benchmark engine behind the `bench.latency` task: latency percentiles, throughput, peak memory and
transfer time of a model on eager PyTorch, torch.compile, TorchScript, torch.export, ONNX Runtime (FP32 and
QDQ INT8) and TensorRT. Imports torch when a submodule that needs it is imported; never Qt.
"""
