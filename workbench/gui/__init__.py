"""The GUI process: the only place Qt lives. It must never import torch, torchvision, onnx or
model_explorer."""
