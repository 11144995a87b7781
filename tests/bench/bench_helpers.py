"""What the bench tests share besides their fixtures: a test module imports these (`from conftest import`
finds another folder's conftest when several test folders run in one process)."""

from __future__ import annotations

import threading
from pathlib import Path

from event_recorder import Events
from stored_models import stored_training_run  # noqa: F401 (re-exported for the tests)

from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

QUICK = {"warmup": 1, "iters": 3, "threads": 1}
TINY_CNN = {"name": "cnn", "input_shape": [1, 8, 8]}


def bench(
    workspace: Path, spec: dict, events: Events | None = None, stop: threading.Event | None = None
) -> dict:
    spec = {**QUICK, **spec}
    return run_task(
        get_task("bench.latency"), spec, emit=events or Events(), workspace=workspace, stop_event=stop
    )


def done(result: dict) -> dict:
    assert result["status"] == "done", (result.get("error"), result.get("traceback"))
    return result


def rows(result: dict) -> dict[tuple[str, int], dict]:
    return {(row["backend"], row["batch_size"]): row for row in result["results"]}


def write_qdq_onnx(path: Path, input_shape=(1, 8, 8), classes: int = 10) -> Path:
    """A tiny QDQ model with a dynamic batch: x -> Q -> DQ -> Flatten -> MatMul (int8 weights through DQ) ->
    y."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    features = int(np.prod(input_shape))
    rng = np.random.default_rng(0)
    weight = rng.integers(-127, 128, size=(features, classes), dtype=np.int8)
    initializers = [
        numpy_helper.from_array(np.asarray(0.05, dtype=np.float32), "x_scale"),
        numpy_helper.from_array(np.asarray(0, dtype=np.int8), "x_zero"),
        numpy_helper.from_array(weight, "w_int8"),
        numpy_helper.from_array(np.asarray(0.01, dtype=np.float32), "w_scale"),
        numpy_helper.from_array(np.asarray(0, dtype=np.int8), "w_zero"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["input", "x_scale", "x_zero"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zero"], ["xdq"]),
        helper.make_node("Flatten", ["xdq"], ["flat"], axis=1),
        helper.make_node("DequantizeLinear", ["w_int8", "w_scale", "w_zero"], ["w"]),
        helper.make_node("MatMul", ["flat", "w"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", *input_shape])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", classes])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def write_float_onnx(path: Path, input_shape=(1, 8, 8)) -> Path:
    """The tiny cnn exported to ONNX (float32, dynamic batch), as an exported artifact would be."""
    import torch

    from workbench.specs import ModelSpec
    from workbench.worker.bench.backends import export_onnx
    from workbench.worker.models import build_model

    model = build_model(ModelSpec(name="cnn", input_shape=list(input_shape)), input_shape=input_shape).eval()
    return export_onnx(model, torch.randn(2, *input_shape), path, dynamic_batch=True)
