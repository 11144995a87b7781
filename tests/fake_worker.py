"""A fake worker for panel tests: the real kernel and protocol in a thread, serving torch-free tasks.

Its `devices.list` answers with a canned CPU and GPU, so the window's device picker can be tested here.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
from fake_export import fake_bench_latency, fake_export_model
from fake_quant import fake_quant_analyze

from workbench.errors import JobError
from workbench.protocol import ConnectionInfo
from workbench.specs import BenchSpec, ExportSpec, GraphSpec, PredictSpec, QuantSpec, TrainSpec
from workbench.task_ids import TRAIN_TASK
from workbench.worker.kernel import Kernel
from workbench.worker.registry import TaskInfo, get_task

FAKE_DEVICES = [
    {
        "id": "cpu",
        "type": "cpu",
        "name": "Fake CPU",
        "memory_total": 16 * 2**30,
        "capabilities": {
            "autocast_bf16": True,
            "autocast_fp16": False,
            "compile": {"available": True, "reason": ""},
            "onnxruntime_providers": ["CPUExecutionProvider"],
            "tensorrt": {"available": False, "reason": "TensorRT runs on CUDA devices only"},
        },
    },
    {
        "id": "cuda:0",
        "type": "cuda",
        "name": "Fake GPU",
        "memory_total": 24 * 2**30,
        "capabilities": {
            "autocast_bf16": True,
            "autocast_fp16": True,
            "compile": {"available": True, "reason": ""},
            "onnxruntime_providers": ["CUDAExecutionProvider", "CPUExecutionProvider"],
            "tensorrt": {"available": True, "reason": ""},
        },
    },
]


def _fake_devices(spec, ctx):
    return {"devices": FAKE_DEVICES, "torch": "fake"}


# A torch-free stand-in for the data engine with the same result shapes: 10 classes of 12x12 grey images
# whose pixel value encodes the index, so tests can tell exactly which image arrived where.
FAKE_SPLITS = {"train": 1500, "val": 300, "test": 200}
FAKE_CLASSES = [f"class {i}" for i in range(10)]


def _fake_image(split: str, index: int) -> np.ndarray:
    image = np.zeros((12, 12, 1), dtype=np.uint8)
    image[:, :, 0] = index % 256
    image[0, 0, 0] = list(FAKE_SPLITS).index(split)
    return image


def _fake_info(spec, ctx):
    if spec["dataset"].get("name") == "cifar10":
        raise JobError(
            "CIFAR-10 files are missing: put cifar-10-batches-py/ under /nowhere or set dataset.download=true"
        )
    counts = {split: [n // 10] * 10 for split, n in FAKE_SPLITS.items()}
    return {
        "dataset": spec["dataset"].get("name", "digits"),
        "classes": FAKE_CLASSES,
        "num_samples": dict(FAKE_SPLITS),
        "class_counts": counts,
        "sample_shape": [1, 12, 12],
        "mean": [0.5],
        "std": [0.25],
        "skipped_files": [],
        "in_memory": True,
        "root": "",
    }


def _fake_page(spec, ctx):
    if spec["dataset"].get("name") == "cifar10":
        raise JobError("CIFAR-10 files are missing")
    split, label = spec["split"], spec.get("label", -1)
    indices = [i for i in range(FAKE_SPLITS[split]) if label < 0 or i % 10 == label]
    page = indices[spec["offset"] : spec["offset"] + spec["count"]]
    images = np.stack([_fake_image(split, i) for i in page]) if page else np.zeros((0, 12, 12, 1), np.uint8)
    ctx.log(f"page {spec['offset']}")
    return {
        "request_id": spec["request_id"],
        "split": split,
        "offset": spec["offset"],
        "total": len(indices),
        "indices": page,
        "labels": [i % 10 for i in page],
        "images": images,
    }


def _fake_sample(spec, ctx):
    split, index = spec["split"], spec["index"]
    image = _fake_image(split, index)
    augmented = np.flip(image, axis=1).copy() if spec["dataset"].get("augment") else image
    counts = np.zeros((1, 32), dtype=np.int64)
    counts[0, image[1, 1, 0] // 8] = 143
    counts[0, 0] += 1
    return {
        "index": index,
        "split": split,
        "label": index % 10,
        "class_name": FAKE_CLASSES[index % 10],
        "shape": [1, 12, 12],
        "image": image,
        "augmented": augmented,
        "histogram": {"edges": np.linspace(0, 256, 33, dtype=np.float32), "counts": counts},
        "path": "",
        "mean": [0.5],
        "std": [0.25],
    }


def _fake_train(spec, ctx):
    """Speaks like train.model (metric names, progress, evaluation.json) without torch."""
    if "broken" in spec.model.name:  # a model file that does not import: the run fails before its first step
        raise JobError(f"model.name: {spec.model.name.split(':')[1]}, line 3: SyntaxError: invalid syntax")
    steps_per_epoch = 10
    total = spec.epochs * steps_per_epoch
    step = 0
    for epoch in range(1, spec.epochs + 1):
        for _ in range(steps_per_epoch):
            step += 1
            ctx.metrics(step, {"train/loss": 2.0 / step, "train/acc": 1 - 1.0 / step, "lr": spec.lr})
            ctx.progress(step, total, f"epoch {epoch}/{spec.epochs}")
            time.sleep(spec.seed / 1000)  # the seed doubles as a per-step delay (ms) for tests
            yield
        ctx.metrics(
            step,
            {
                "epoch": epoch,
                "epoch/train_loss": 1.0 / epoch,
                "epoch/train_acc": 1 - 0.5 / epoch,
                "val/loss": 1.2 / epoch,
                "val/acc": 1 - 0.6 / epoch,
            },
        )
    evaluation = {
        "classes": FAKE_CLASSES,
        "confusion_matrix": (np.eye(10, dtype=int) * 18 + 1).tolist(),
        "per_class_accuracy": [0.9] * 10,
        "test_accuracy": 0.9,
        "worst": [
            {
                "split": "test",
                "index": i,
                "label": i % 10,
                "predicted": (i + 1) % 10,
                "confidence": 0.99 - i / 100,
            }
            for i in range(6)
        ],
    }
    path = ctx.run.artifacts_dir / "evaluation.json"
    path.write_text(json.dumps(evaluation))
    ctx.artifact("evaluation", path, kind="evaluation")
    return {"epochs_completed": spec.epochs, "final": {"val_accuracy": 1 - 0.6 / spec.epochs}}


# A torch-free graph.build: a four-layer chain in Model Explorer's graph format, with the result contract and
# the overlays the real engine writes (write_overlay is plain JSON), so the Graph tab can be tested without
# torch.
FAKE_GRAPH_LAYERS = [
    ("features.0", "Conv2d", "conv2d", [8, 12, 12], 80, 23040),
    ("features.1", "ReLU", "relu", [8, 12, 12], 0, 0),
    ("features.2", "Conv2d", "conv2d_1", [16, 12, 12], 1168, 331776),
    ("classifier", "Linear", "linear", [10], 23050, 46080),
]


def _fake_graph_json() -> dict:
    def node(node_id, label, namespace, module=None, source=None, shape=None):
        return {
            "id": node_id,
            "label": label,
            "namespace": namespace,
            "attrs": [{"key": "module", "value": module}] if module is not None else [],
            "incomingEdges": [{"sourceNodeId": source, "sourceNodeOutputId": "0", "targetNodeInputId": "0"}]
            if source
            else [],
            "outputsMetadata": [
                {"id": "0", "attrs": [{"key": "tensor_shape", "value": f"float32{json.dumps([1, *shape])}"}]}
            ]
            if shape
            else [],
        }

    nodes, previous = [node("x", "x", "inputs", shape=[1, 12, 12])], "x"
    for module, kind, node_id, shape, _, _ in FAKE_GRAPH_LAYERS:
        parent = "Fake/Sequential_features" if module.startswith("features") else "Fake"
        nodes.append(
            node(
                node_id,
                node_id.split("_")[0],
                f"{parent}/{kind}_{module.rsplit('.', 1)[-1]}",
                module,
                previous,
                shape,
            )
        )
        previous = node_id
    nodes.append(node("output", "output", "", source=previous))
    return {"label": "fake cnn", "graphs": [{"id": "graph", "nodes": nodes}]}


# A quantize run's report `layers` as graph.build reads them (name, tensor, sqnr_db); "input" is the model's
# input.
FAKE_QUANT_LAYERS = [
    {"name": "features.0", "tensor": "weight", "sqnr_db": 24.5},
    {"name": "features.2", "tensor": "weight", "sqnr_db": 18.25},
    {"name": "classifier", "tensor": "weight", "sqnr_db": 22.0},
    {"name": "input", "tensor": "activation", "sqnr_db": 60.0},
    {"name": "features.0", "tensor": "activation", "sqnr_db": 41.0},
    {"name": "features.2", "tensor": "activation", "sqnr_db": 37.5},
    {"name": "classifier", "tensor": "activation", "sqnr_db": 35.0},
]


def _doctor_of(quant_run: str, ctx) -> dict | None:
    """The doctor block of a quantize run in the store, as graph.build reads it (canned run ids have none)."""
    from workbench.errors import WorkbenchError
    from workbench.runs import RunStore

    try:
        with RunStore(ctx.workspace).open_run(quant_run) as run:
            return (run.read_report() or {}).get("doctor")
    except WorkbenchError:
        return None


def _fake_graph(spec, ctx):
    from workbench.worker.graph.overlays import write_overlay, write_quant_overlays

    if spec.source.file.endswith(".broken"):
        raise JobError(f"source.file: {spec.source.file} cannot be read as a saved ExportedProgram")
    if "-train-" in spec.quant_run:  # a training run's id
        raise JobError(f"quant_run: run {spec.quant_run} is not a quantize run (it is a train.model run)")
    folder = ctx.run.artifacts_dir / "graph"
    folder.mkdir(parents=True, exist_ok=True)
    graph = _fake_graph_json()
    (folder / "graph.json").write_text(json.dumps(graph))
    rows = [
        {
            "name": "",
            "type": "Fake",
            "output_shape": [10],
            "params": sum(r[4] for r in FAKE_GRAPH_LAYERS),
            "flops": sum(r[5] for r in FAKE_GRAPH_LAYERS),
            "leaf": False,
            "calls": 1,
        },
        {
            "name": "features",
            "type": "Sequential",
            "output_shape": [16, 12, 12],
            "params": sum(r[4] for r in FAKE_GRAPH_LAYERS[:3]),
            "flops": sum(r[5] for r in FAKE_GRAPH_LAYERS[:3]),
            "leaf": False,
            "calls": 1,
        },
    ]
    rows += [
        {"name": m, "type": t, "output_shape": shape, "params": p, "flops": f, "leaf": True, "calls": 1}
        for m, t, _, shape, p, f in FAKE_GRAPH_LAYERS
    ]
    (folder / "modules.json").write_text(json.dumps(rows))
    overlays = {}
    for metric, label, key, scale in (
        ("params", "Parameters", "params", 1),
        ("flops", "FLOPs (millions)", "flops", 1e6),
    ):
        overlay = write_overlay(
            folder, metric, {r["name"]: r[key] / scale for r in rows}, graph=graph, label=label, additive=True
        )
        overlays[metric] = overlay.summary(folder)
    if spec.quant_run:  # the real engine's painting of a quantize run's report, on canned values
        written = write_quant_overlays(
            folder,
            graph,
            FAKE_QUANT_LAYERS,
            quant_run=spec.quant_run,
            names=[r["name"] for r in rows],
            doctor=_doctor_of(spec.quant_run, ctx),
        )
        overlays.update({metric: overlay.summary(folder) for metric, overlay in written.items()})
    return {
        "graph_json": str(folder / "graph.json"),
        "nodes": len(graph["graphs"][0]["nodes"]),
        "params_total": rows[0]["params"],
        "params_trainable": rows[0]["params"],
        "flops": rows[0]["flops"],
        "modules": rows,
        "capture": "export",
        "capture_reason": "torch.export (strict) captured the whole model",
        "model": spec.source.run or spec.model.name,
        "input_shape": [1, 12, 12],
        "overlays": overlays,
        "quant_run": spec.quant_run,
    }


def _fake_predict(spec: PredictSpec, ctx):
    """Speaks like predict.model (Try it) without torch: canned digits probabilities; a quantize run (read
    from the store) swaps ranks 2 and 3, and its top answer too for a file whose name holds "disagree"; a
    missing file is the worker's error naming input."""
    from workbench.runs import RunStore

    with RunStore(ctx.workspace).open_run(spec.source.run) as run:
        quantize = run.task == "quant.analyze"
    if spec.input and not Path(spec.input).is_file():
        raise JobError(
            f"input: {spec.input} does not exist; give the path of an image file (PNG, JPEG, BMP, ...)"
        )
    probabilities = [0.70, 0.12, 0.08, 0.04, 0.03, 0.01, 0.01, 0.005, 0.004, 0.001]
    order = [3, 8, 5, 9, 2, 7, 1, 0, 6, 4]

    def rows(ranked):
        return [
            {"class": c, "label": str(c), "probability": p, "logit": float(np.log(p))}
            for c, p in zip(ranked[: spec.top_k], probabilities)
        ]

    if spec.input:
        info = {
            "kind": "file",
            "path": spec.input,
            "format": "PNG",
            "mode": "RGBA",
            "size": [8, 8],
            "model_size": [8, 8],
            "channels": 1,
            "converted_to": "L",
            "notes": ["its alpha channel dropped, as the dataset loader drops it"],
        }
    else:
        info = {
            "kind": "sample",
            "split": spec.sample.split,
            "index": spec.sample.index,
            "model_size": [8, 8],
            "channels": 1,
        }
    info["normalize"] = {"mean": [0.3], "std": [0.37], "how": "auto"}
    result = {
        "run": spec.source.run,
        "run_kind": "quantize" if quantize else "train",
        "model": "cnn",
        "dataset": "digits",
        "task": "classification",
        "top_k": spec.top_k,
        "device": "cpu",
        "input": info,
        "notes": [],
    }
    if spec.sample.split:
        result["truth"] = {"class": 3, "label": "3"}
    fp32 = rows(order)
    if quantize:
        swapped = [8, 3, 5, 9] if "disagree" in Path(spec.input).name else [3, 5, 8, 9]
        quantized = rows(swapped + order[4:])
        result.update(
            predictions=quantized,
            quantized=quantized,
            fp32=fp32,
            agree=quantized[0]["class"] == fp32[0]["class"],
        )
    else:
        result["predictions"] = fp32
    if spec.preview:
        result["preview"] = np.arange(64, dtype=np.uint8).reshape(8, 8, 1) * 4
    return result


class FakeWorker:
    def __init__(self, directory: Path):
        tasks = {
            name: get_task(name) for name in ("debug.count", "debug.selftest", "debug.sleep", "debug.echo")
        }
        tasks["devices.list"] = TaskInfo(
            "devices.list", _fake_devices, "query", None, False, "canned devices"
        )
        for name, fn in (("data.info", _fake_info), ("data.page", _fake_page), ("data.sample", _fake_sample)):
            tasks[name] = TaskInfo(name, fn, "query", None, False, "fake data")
        tasks[TRAIN_TASK] = TaskInfo(TRAIN_TASK, _fake_train, "job", TrainSpec, True, "fake training")
        tasks["graph.build"] = TaskInfo("graph.build", _fake_graph, "job", GraphSpec, True, "fake graph")
        tasks["quant.analyze"] = TaskInfo(
            "quant.analyze", fake_quant_analyze, "job", QuantSpec, True, "fake quantize"
        )
        tasks["export.model"] = TaskInfo(
            "export.model", fake_export_model, "job", ExportSpec, True, "fake export"
        )
        tasks["bench.latency"] = TaskInfo(
            "bench.latency", fake_bench_latency, "job", BenchSpec, True, "fake benchmark"
        )
        tasks["predict.model"] = TaskInfo(
            "predict.model", _fake_predict, "query", PredictSpec, False, "fake Try it"
        )
        self.kernel = Kernel(ConnectionInfo.new(), tasks=tasks)
        self.connection_file = Path(directory) / "fake-worker.json"
        self.kernel.conn.write(self.connection_file)
        self.thread = threading.Thread(target=self.kernel.serve_forever, name="fake-worker", daemon=True)
        self.thread.start()

    def replace_task(self, name: str, fn) -> None:
        """Serve `name` with `fn` instead (same kind, spec type and run rule): a test's own canned answer."""
        task = self.kernel._task_overrides[name]
        self.kernel._task_overrides[name] = type(task)(
            task.name, fn, task.kind, task.spec_type, task.creates_run, task.description
        )

    def stop(self) -> None:
        self.kernel.request_shutdown()
        self.thread.join(timeout=5)
