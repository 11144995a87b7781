"""`bench.latency` through the real runner on a tiny CPU model: rows for every backend asked for (measured, or
unavailable with the reason), sent live as they finish, with per-iteration samples kept in
artifacts/samples.npz; sources from a training run, a quantize run and exported files; cancel in the middle.
Nothing here asserts on how long anything took."""

from __future__ import annotations

import json
import sys
import threading
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
from bench_helpers import TINY_CNN, Events, bench, done, rows, write_float_onnx, write_qdq_onnx
from stored_models import BRANCHY

from workbench.worker.bench.engine import ROWS_KEY, SAMPLES_FILE, array_name

ROW_KEYS = {
    "backend",
    "batch_size",
    "device",
    "dtype",
    "status",
    "reason",
    "latency_ms",
    "throughput_per_s",
    "peak_memory_bytes",
    "transfer_ms",
}
MEASURABLE = ["eager", "torchscript", "exported_program", "onnxruntime"]


def check_measured(row: dict) -> None:
    assert row["status"] == "ok", row
    assert row["reason"] == ""
    lat = row["latency_ms"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"]
    assert lat["std"] >= 0 and lat["min"] <= lat["mean"]
    assert row["throughput_per_s"] == pytest.approx(row["batch_size"] / (lat["p50"] / 1000))
    assert row["device"] == "cpu" and row["dtype"] == "float32"
    assert isinstance(row["peak_memory_bytes"], int) and row["peak_memory_bytes"] >= 0
    assert row["transfer_ms"] is None  # no host-device copy on the CPU


def check_unavailable(row: dict, *words: str) -> None:
    assert row["status"] == "unavailable", row
    assert row["latency_ms"] is None and row["throughput_per_s"] is None
    for word in words:
        assert word.lower() in row["reason"].lower(), row["reason"]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One job: the four CPU backends at batch 1 and 3, with the two that cannot run here (kept for many
    tests)."""
    workspace = tmp_path_factory.mktemp("bench-measured")
    events = Events()
    result = bench(
        workspace,
        {"model": TINY_CNN, "backends": [*MEASURABLE, "tensorrt", "onnxruntime_int8"], "batch_sizes": [1, 3]},
        events,
    )
    return done(result), events


def test_each_cpu_backend_is_measured_at_each_batch_size(measured):
    result, _ = measured
    table = rows(result)
    assert list(table) == [(b, n) for b in [*MEASURABLE, "tensorrt", "onnxruntime_int8"] for n in (1, 3)]
    for backend in MEASURABLE:
        for batch in (1, 3):
            row = table[backend, batch]
            assert ROW_KEYS <= set(row)
            check_measured(row)
            assert row["iters"] == 3
    assert table["onnxruntime", 1]["source"] == "model (exported to ONNX)"
    assert result["input_shape"] == [1, 8, 8] and result["dtype"] == "float32"
    assert result["model"] == "cnn" and result["threads"] == 1


def test_backends_that_cannot_run_here_are_reported_with_a_reason(measured):
    result, _ = measured
    table = rows(result)
    for batch in (1, 3):
        check_unavailable(table["tensorrt", batch], "TensorRT", "cpu")
        check_unavailable(table["onnxruntime_int8", batch], "QDQ", "quantize run")


def test_rows_go_out_live_with_their_samples(measured):
    result, events = measured
    logs = [c["text"] for c in events.of("log")]
    for row in result["results"]:
        name = array_name(row["backend"], row["batch_size"])
        sent = events.arrays(name)
        if row["status"] != "ok":
            assert sent == []
            assert any(row["reason"] in text for text in logs)
            continue
        assert len(sent) == 1
        assert np.dtype(sent[0]["array"]["dtype"]) == np.float64 and sent[0]["array"]["shape"] == [
            row["iters"]
        ]
        assert sent[0]["unit"] == "ms" and sent[0]["row"] == row
    tables = events.arrays("bench/results")
    # one more each time
    assert [len(t["rows"]) for t in tables] == list(range(1, len(result["results"]) + 1))
    assert tables[-1]["rows"] == result["results"]
    assert tables[-1]["array"]["shape"] == [len(result["results"]), len(tables[-1]["columns"])]


def test_samples_are_saved_for_each_measured_row(measured):
    result, events = measured
    path = Path(result["run_dir"]) / "artifacts" / SAMPLES_FILE
    assert result["samples"] == str(path)
    assert any(a["name"] == "samples" and a["path"] == str(path) for a in events.of("artifact"))
    with np.load(path) as saved:
        assert json.loads(str(saved[ROWS_KEY])) == result["results"]
        keys = {k for k in saved.files if k != ROWS_KEY}
        assert keys == {f"{b}/{n}" for b in MEASURABLE for n in (1, 3)}
        for row in result["results"]:
            if row["status"] == "ok":
                samples = saved[f"{row['backend']}/{row['batch_size']}"]
                assert samples.dtype == np.float64 and samples.size == row["iters"]
                assert np.percentile(samples, 50) == pytest.approx(row["latency_ms"]["p50"])
    report = json.loads((Path(result["run_dir"]) / "report.json").read_text())
    assert report["results"] == result["results"]


def test_one_failing_backend_never_fails_the_job(tmp_path):
    model_file = tmp_path / "branchy.py"
    model_file.write_text(BRANCHY)
    result = done(
        bench(
            tmp_path / "ws",
            {
                "model": {"name": f"file:{model_file}:Branchy", "input_shape": [1, 8, 8]},
                "backends": ["eager", "exported_program"],
                "batch_sizes": [2],
            },
        )
    )
    table = rows(result)
    check_measured(table["eager", 2])
    check_unavailable(table["exported_program", 2], "torch.export failed")


def test_a_dtype_a_backend_cannot_take_is_reported(tmp_path):
    result = done(
        bench(
            tmp_path / "ws",
            {
                "model": TINY_CNN,
                "backends": ["eager", "onnxruntime", "onnxruntime_int8"],
                "dtype": "bfloat16",
            },
        )
    )
    table = rows(result)
    assert table["eager", 1]["dtype"] == "bfloat16"
    assert table["eager", 1]["status"] in ("ok", "unavailable")  # bf16 kernels depend on the CPU
    check_unavailable(table["onnxruntime", 1], "bfloat16")
    check_unavailable(table["onnxruntime_int8", 1], "float32")


def test_a_training_run_gives_its_model_and_input_shape(runs, tmp_path):
    workspace, train_id, _ = runs
    result = done(
        bench(
            workspace,
            {"source": {"run": train_id}, "backends": ["eager", "onnxruntime_int8"], "batch_sizes": [2]},
        )
    )
    assert result["input_shape"] == [1, 8, 8]  # the digits' sample shape: the run's model has none of its own
    assert train_id in result["model"]
    check_measured(rows(result)["eager", 2])
    check_unavailable(rows(result)["onnxruntime_int8", 2], "quantize run")


def _fake_exporter(monkeypatch, calls: list):
    """Stand in for workbench.worker.export.onnx_qdq (written separately): record the call, write a QDQ
    model."""

    def write_onnx_qdq(quant_run_dir, out_path, *, opset=18, dynamic_batch=True, log=print):
        calls.append({"dir": Path(quant_run_dir), "opset": opset, "dynamic_batch": dynamic_batch})
        log("fake QDQ export")
        write_qdq_onnx(Path(out_path))
        return {"nodes": 5}

    package = types.ModuleType("workbench.worker.export")
    package.__path__ = []
    module = types.ModuleType("workbench.worker.export.onnx_qdq")
    module.write_onnx_qdq = write_onnx_qdq
    monkeypatch.setitem(sys.modules, "workbench.worker.export", package)
    monkeypatch.setitem(sys.modules, "workbench.worker.export.onnx_qdq", module)


def test_a_quantize_run_gives_the_qdq_model_for_onnxruntime_int8(runs, monkeypatch):
    workspace, train_id, quant_id = runs
    calls: list = []
    _fake_exporter(monkeypatch, calls)
    result = done(
        bench(
            workspace,
            {"source": {"run": quant_id}, "backends": ["eager", "onnxruntime_int8"], "batch_sizes": [1, 4]},
        )
    )
    table = rows(result)
    check_measured(table["eager", 1])  # the FP32 model the quantize run started from
    for batch in (1, 4):
        check_measured(table["onnxruntime_int8", batch])
        assert table["onnxruntime_int8", batch]["source"] == f"quantize run {quant_id}"
    assert len(calls) == 1  # written once, used for every batch size
    assert calls[0]["dir"].name == quant_id and calls[0]["opset"] == 18 and calls[0]["dynamic_batch"] is True
    assert train_id in result["model"] and quant_id in result["model"]


def test_without_the_qdq_exporter_the_int8_row_says_so(runs, monkeypatch):
    workspace, _, quant_id = runs
    monkeypatch.setitem(sys.modules, "workbench.worker.export.onnx_qdq", None)  # import raises ImportError
    result = done(bench(workspace, {"source": {"run": quant_id}, "backends": ["onnxruntime_int8"]}))
    check_unavailable(rows(result)["onnxruntime_int8", 1], "onnx_qdq", "not importable")


def test_exported_files_are_measured_by_their_own_backends(tmp_path):
    fp32 = write_float_onnx(tmp_path / "cnn.onnx")
    qdq = write_qdq_onnx(tmp_path / "cnn-qdq.onnx")
    # A float ONNX artifact beside the model: onnxruntime measures the file, eager the model.
    result = done(
        bench(
            tmp_path / "ws",
            {
                "model": TINY_CNN,
                "artifact": str(fp32),
                "backends": ["eager", "onnxruntime", "onnxruntime_int8"],
            },
        )
    )
    table = rows(result)
    check_measured(table["eager", 1])
    check_measured(table["onnxruntime", 1])
    assert table["onnxruntime", 1]["source"] == "file cnn.onnx"
    check_unavailable(table["onnxruntime_int8", 1], "QuantizeLinear", "onnxruntime")
    # A QDQ file alone: its input shape comes from the file; only onnxruntime_int8 can run it.
    result = done(
        bench(
            tmp_path / "ws",
            {
                "source": {"file": str(qdq)},
                "backends": ["onnxruntime_int8", "onnxruntime", "eager"],
                "batch_sizes": [1, 5],
            },
        )
    )
    table = rows(result)
    assert result["input_shape"] == [1, 8, 8]
    for batch in (1, 5):
        check_measured(table["onnxruntime_int8", batch])
        assert table["onnxruntime_int8", batch]["source"] == "file cnn-qdq.onnx"
        check_unavailable(table["onnxruntime", batch], "onnxruntime_int8")
        check_unavailable(table["eager", batch], "PyTorch model")


def test_a_bad_source_fails_the_job_with_a_message_naming_the_field(tmp_path):
    result = bench(tmp_path / "ws", {"artifact": str(tmp_path / "missing.onnx"), "model": TINY_CNN})
    assert result["status"] == "failed" and "artifact" in result["error"]["message"]
    (tmp_path / "model.bin").write_bytes(b"x")
    result = bench(tmp_path / "ws", {"source": {"file": str(tmp_path / "model.bin")}})
    assert result["status"] == "failed" and "source.file" in result["error"]["message"]
    result = bench(tmp_path / "ws", {"source": {"run": "no-such-run"}})
    assert result["status"] == "failed" and "source.run" in result["error"]["message"]


def test_cancel_during_timing_stops_the_job(tmp_path):
    stop = threading.Event()

    def on_event(msg_type, content):
        if msg_type == "progress" and "timing" in content["text"] and content["done"] > 0:
            stop.set()

    events = Events(on_event)
    result = bench(
        tmp_path / "ws",
        {"model": TINY_CNN, "backends": ["eager", "onnxruntime"], "iters": 10_000_000, "warmup": 0},
        events,
        stop,
    )
    assert result["status"] == "cancelled", result
    assert events.arrays(array_name("eager", 1)) == []  # the row being timed never finished


def test_cancel_between_rows_keeps_the_rows_that_finished(tmp_path):
    stop = threading.Event()
    events = Events(
        lambda kind, content: stop.set() if kind == "array" and content["name"] == "bench/results" else None
    )
    result = bench(
        tmp_path / "ws", {"model": TINY_CNN, "backends": ["eager"], "batch_sizes": [1, 2, 3]}, events, stop
    )
    assert result["status"] == "cancelled"
    artifacts = Path(result["run_dir"]) / "artifacts"
    with np.load(artifacts / SAMPLES_FILE) as saved:
        assert set(saved.files) == {"eager/1", ROWS_KEY}
    finished = json.loads((artifacts / "results.json").read_text())["results"]
    assert [(r["backend"], r["batch_size"], r["status"]) for r in finished] == [("eager", 1, "ok")]


def test_torchscript_and_exported_program_files_are_measured(tmp_path):
    import torch

    from workbench.specs import ModelSpec
    from workbench.worker.models import build_model

    model = build_model(ModelSpec(**TINY_CNN), input_shape=(1, 8, 8)).eval()
    example = torch.randn(2, 1, 8, 8)
    scripted = tmp_path / "cnn.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit is deprecated; users still have such files
        torch.jit.trace(model, (example,), check_trace=False).save(str(scripted))
    program = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(model, (example,)), str(program))
    result = done(
        bench(
            tmp_path / "ws",
            {
                "source": {"file": str(scripted)},
                "model": {"input_shape": [1, 8, 8]},
                "backends": ["torchscript"],
                "batch_sizes": [2, 3],
            },
        )
    )
    for batch in (2, 3):  # a trace runs other batch sizes too
        check_measured(rows(result)["torchscript", batch])
        assert rows(result)["torchscript", batch]["source"] == "file cnn.pt"
    # A program exported at batch 2 takes batch 2 only: the other batch size says so instead of failing the
    # job.
    result = done(
        bench(
            tmp_path / "ws",
            {"source": {"file": str(program)}, "backends": ["exported_program"], "batch_sizes": [2, 3]},
        )
    )
    assert result["input_shape"] == [1, 8, 8]  # read from the program
    check_measured(rows(result)["exported_program", 2])
    check_unavailable(rows(result)["exported_program", 3], "cnn.pt2")


def test_a_state_dict_named_as_torchscript_is_refused_by_name(tmp_path):
    import torch

    path = tmp_path / "weights.pt"
    torch.save({"w": torch.zeros(2)}, path)
    result = done(
        bench(
            tmp_path / "ws",
            {"source": {"file": str(path)}, "model": {"input_shape": [1, 8, 8]}, "backends": ["torchscript"]},
        )
    )
    check_unavailable(rows(result)["torchscript", 1], "weights.pt", "not a TorchScript archive")


cuda = pytest.mark.skipif("not __import__('torch').cuda.is_available()", reason="needs a CUDA device")


@cuda
def test_on_cuda_the_transfer_is_timed_apart_and_memory_is_the_allocator_peak(tmp_path):
    result = done(
        bench(
            tmp_path / "ws",
            {
                "model": TINY_CNN,
                "backends": ["eager", "onnxruntime", "tensorrt"],
                "batch_sizes": [1, 8],
                "device": "cuda",
            },
        )
    )
    for batch in (1, 8):
        row = rows(result)["eager", batch]
        assert row["status"] == "ok" and row["device"].startswith("cuda")
        assert row["transfer_ms"] is not None and row["transfer_ms"] > 0
        assert row["peak_memory_bytes"] > 0
        for backend in ("onnxruntime", "tensorrt"):  # measured where the package has CUDA, else a reason
            other = rows(result)[backend, batch]
            assert other["status"] == "ok" or other["reason"], other
            if other["status"] == "ok":
                assert other["transfer_ms"] is not None


@pytest.mark.slow
def test_torch_compile_is_measured_or_says_why(tmp_path):
    result = done(
        bench(
            tmp_path / "ws",
            {"model": {"name": "mlp", "input_shape": [1, 8, 8]}, "backends": ["compile"], "batch_sizes": [2]},
        )
    )
    row = rows(result)["compile", 2]
    if row["status"] == "ok":  # compiling needs a C compiler on the CPU; without one the row says so
        check_measured(row)
    else:
        check_unavailable(row, "compile")


def test_a_damaged_onnx_file_is_reported_by_name(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not a protobuf of a model" * 10)
    result = bench(tmp_path / "ws", {"source": {"file": str(bad)}, "backends": ["onnxruntime"]})
    assert result["status"] == "failed" and "broken.onnx" in result["error"]["message"]
    assert "traceback" not in result
    # Beside a model, as an artifact: its rows say so, the model's rows are measured.
    result = done(
        bench(
            tmp_path / "ws",
            {
                "model": TINY_CNN,
                "artifact": str(bad),
                "backends": ["eager", "onnxruntime", "onnxruntime_int8"],
            },
        )
    )
    check_measured(rows(result)["eager", 1])
    check_unavailable(rows(result)["onnxruntime", 1], "broken.onnx")
    check_unavailable(rows(result)["onnxruntime_int8", 1], "broken.onnx")


def test_the_real_qdq_exporter_gives_a_model_onnxruntime_runs(runs):
    pytest.importorskip("workbench.worker.export.onnx_qdq", reason="the QDQ exporter is not in this tree yet")
    workspace, _, quant_id = runs
    result = done(
        bench(
            workspace, {"source": {"run": quant_id}, "backends": ["onnxruntime_int8"], "batch_sizes": [1, 4]}
        )
    )
    for batch in (1, 4):
        check_measured(rows(result)["onnxruntime_int8", batch])
