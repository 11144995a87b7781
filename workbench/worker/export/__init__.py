"""The export engine: a model (training run, quantize run or model.*) written as TorchScript, torch.export,
ONNX, ONNX QDQ or TensorRT and checked against eager PyTorch. engine runs the export.model job;
onnx_qdq.write_onnx_qdq is shared with the benchmarks. Worker side; never imports Qt; onnx, onnxruntime,
torch_tensorrt load lazily.
"""
