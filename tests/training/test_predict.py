"""Try it (`predict.model`) through the real runner: a digits run's prediction for a PNG of a test sample is
the model's own prediction on that sample, read and normalised as evaluation reads it; every odd image mode
converts, every hostile file is a clear error naming `input`; a W8A8 quantize run gives FP32 and quantized
predictions; a regression, multilabel or segmentation run of a user Dataset answers for a sample
(test_predict_segmentation.py walks segmentation)."""

from __future__ import annotations

import os
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from test_train_tasks import DATASETS, MODELS
from training_helpers import QUICK, Recorder, done, failed, merge, train

from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

INDEX = 5  # a test sample of digits


def predict(workspace, **spec) -> dict:
    return run_task(get_task("predict.model"), spec, emit=Recorder(), workspace=workspace)


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """(workspace, training run id, quantize run id) of a digits cnn and its W8A8 quantization."""
    workspace = tmp_path_factory.mktemp("predict")
    trained = done(train(workspace, merge(QUICK, epochs=3)))
    run_id = Path(trained["run_dir"]).name
    quant = run_task(
        get_task("quant.analyze"),
        {"source": {"run": run_id}, "calibration": {"samples": 128}},
        emit=Recorder(),
        workspace=workspace,
    )
    assert quant["status"] == "done", quant.get("error")
    return workspace, run_id, Path(quant["run_dir"]).name


@pytest.fixture(scope="module")
def sample():
    """(uint8 8x8 image, label) of test sample INDEX, and the digits dataset it came from."""
    from workbench.specs import DataSpec
    from workbench.worker.data import load_dataset

    dataset = load_dataset(DataSpec(name="digits"))
    split = dataset.splits["test"]
    return split.images([INDEX])[0, 0].numpy(), int(split.labels[INDEX]), dataset


def own_logits(workspace, run_id: str, dataset) -> torch.Tensor:
    """The run's model on test sample INDEX as evaluation feeds it: the split's own normalised batch."""
    from workbench.runs import RunStore
    from workbench.specs import TrainSpec
    from workbench.worker.models import build_model, load_checkpoint

    with RunStore(workspace).open_run(run_id) as run:
        spec = TrainSpec.from_dict(run.read_spec())
        folder = run.dir
    model = build_model(spec.model, input_shape=dataset.sample_shape, pretrained=False, checkpoint=False)
    load_checkpoint(model, folder / "checkpoints" / "best.pt")
    model.eval()
    for indices, x, _ in dataset.splits["test"].indexed_batches(64, device="cpu"):  # evaluation's own batches
        hit = (indices == INDEX).nonzero()
        if len(hit):
            with torch.no_grad():
                return model(x[int(hit[0, 0])][None])[0]
    raise AssertionError("sample not found")


def png(path: Path, array: np.ndarray, mode: str | None = None) -> str:
    Image.fromarray(array, mode).save(path) if mode else Image.fromarray(array).save(path)
    return str(path)


def test_a_png_of_a_sample_predicts_what_the_model_predicts_on_that_sample(digits, sample, tmp_path):
    workspace, run_id, _ = digits
    image, label, dataset = sample
    result = done(predict(workspace, source={"run": run_id}, input=png(tmp_path / "d.png", image), top_k=10))
    assert (
        result["run_kind"] == "train" and result["task"] == "classification" and result["dataset"] == "digits"
    )
    rows = result["predictions"]
    assert len(rows) == 10
    probabilities = [row["probability"] for row in rows]
    assert probabilities == sorted(probabilities, reverse=True)
    assert sum(probabilities) == pytest.approx(1.0, abs=1e-6)
    assert {row["label"] for row in rows} == set(dataset.classes)
    logits = own_logits(workspace, run_id, dataset)
    assert rows[0]["class"] == int(logits.argmax())
    expected = torch.softmax(logits.double(), 0)
    for row in rows:
        assert row["probability"] == pytest.approx(float(expected[row["class"]]), abs=1e-5)
    info = result["input"]
    assert info["kind"] == "file" and info["size"] == [8, 8] and info["model_size"] == [8, 8]
    assert info["mode"] == "L" and info["converted_to"] == "L" and info["notes"] == []
    assert len(info["normalize"]["mean"]) == 1 and info["normalize"]["how"] == "auto"
    # The same sample picked from the dataset gives the same answer, and says its true label.
    picked = done(
        predict(workspace, source={"run": run_id}, sample={"split": "test", "index": INDEX}, top_k=10)
    )
    assert picked["predictions"] == rows and picked["truth"] == {"class": label, "label": str(label)}
    assert "preview" not in picked
    with_preview = done(
        predict(workspace, source={"run": run_id}, input=str(tmp_path / "d.png"), top_k=3, preview=True)
    )
    assert len(with_preview["predictions"]) == 3
    assert with_preview["preview"].dtype == np.uint8 and with_preview["preview"].shape == (8, 8, 1)
    assert (with_preview["preview"][..., 0] == image).all()


def test_odd_image_modes_convert_sensibly(digits, sample, tmp_path):
    workspace, run_id, _ = digits
    image, _, _ = sample
    reference = done(predict(workspace, source={"run": run_id}, input=png(tmp_path / "l.png", image)))[
        "predictions"
    ]

    def run(name: str, img: Image.Image) -> dict:
        img.save(tmp_path / name)
        return done(predict(workspace, source={"run": run_id}, input=str(tmp_path / name)))

    rgb = np.repeat(image[..., None], 3, axis=2)
    result = run("rgb.png", Image.fromarray(rgb, "RGB"))
    assert result["predictions"][0]["class"] == reference[0]["class"]
    assert "RGB converted to grayscale (L)" in result["input"]["notes"]
    alpha = np.dstack([rgb, np.full_like(image, 255)])
    result = run("rgba.png", Image.fromarray(alpha, "RGBA"))
    assert result["predictions"] == run("rgb2.png", Image.fromarray(rgb, "RGB"))["predictions"]
    assert any("alpha" in note for note in result["input"]["notes"])
    result = run("palette.png", Image.fromarray(image, "L").convert("P"))
    assert result["input"]["mode"] == "P" and result["predictions"][0]["class"] == reference[0]["class"]
    # 16 bits: PIL's own conversion would clip every value above 255 to white; scaled, it is the 8-bit image
    # again.
    result = run("sixteen.png", Image.fromarray(image.astype(np.uint16) * 257))
    assert result["input"]["mode"].startswith("I")
    assert any("16-bit" in note for note in result["input"]["notes"])
    assert result["predictions"] == reference
    big = Image.fromarray(image, "L").resize((64, 48), Image.Resampling.NEAREST)
    result = run("big.png", big)
    assert result["input"]["size"] == [64, 48] and any(
        "resized from 64x48 to 8x8" in n for n in result["input"]["notes"]
    )
    Image.fromarray(rgb, "RGB").save(tmp_path / "photo.jpg", quality=95)
    assert (
        done(predict(workspace, source={"run": run_id}, input=str(tmp_path / "photo.jpg")))["input"]["format"]
        == "JPEG"
    )


def _png_header(width: int, height: int) -> bytes:
    """A tiny PNG that claims width x height pixels in its header and holds none: a decompression bomb's
    shape."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(b""))
        + chunk(b"IEND", b"")
    )


def test_hostile_files_are_clear_errors_naming_input(digits, sample, tmp_path):
    workspace, run_id, _ = digits
    image, _, _ = sample

    def message(path) -> str:
        text = failed(predict(workspace, source={"run": run_id}, input=str(path)))
        assert text.startswith("input: "), text
        return text

    assert "does not exist" in message(tmp_path / "missing.png")
    assert "is a folder" in message(tmp_path)
    (tmp_path / "notes.png").write_text("not an image at all")
    assert "not an image" in message(tmp_path / "notes.png")
    (tmp_path / "empty.png").write_bytes(b"")
    assert "empty file" in message(tmp_path / "empty.png")
    (tmp_path / "huge.png").write_bytes(_png_header(8000, 8000))
    text = message(tmp_path / "huge.png")
    assert "8000x8000" in text and "megapixels" in text and "shrink" in text
    whole = tmp_path / "whole.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64), dtype=np.uint8)).save(whole)
    (tmp_path / "cut.png").write_bytes(whole.read_bytes()[:200])
    assert "cannot be decoded" in message(tmp_path / "cut.png")
    # What is wrong with the spec or the run, each named.
    assert failed(predict(workspace, source={"run": run_id}))[:6] == "input:"
    assert failed(predict(workspace, input=str(whole)))[:11] == "source.run:"
    assert failed(predict(workspace, source={"run": "nope"}, input=str(whole))).startswith("source.run: ")
    text = failed(predict(workspace, source={"run": run_id}, sample={"split": "test", "index": 100_000}))
    assert text.startswith("sample.index: 100000 is past the end of the test split")


def test_a_fifo_as_input_is_refused_without_waiting_for_a_writer(digits, tmp_path):
    workspace, run_id, _ = digits
    fifo = tmp_path / "image.png"
    os.mkfifo(fifo)
    answer: list = []
    # A thread: opening the FIFO would block for a writer that never comes, and the test must end either way.
    thread = threading.Thread(
        target=lambda: answer.append(predict(workspace, source={"run": run_id}, input=str(fifo))), daemon=True
    )
    thread.start()
    thread.join(60)
    assert answer, "predict was still waiting on the FIFO after 60 s"
    text = failed(answer[0])
    assert text.startswith(f"input: {fifo} is not a regular file"), text


def test_a_quantize_run_gives_fp32_and_quantized_side_by_side(digits, sample, tmp_path):
    workspace, run_id, quant_id = digits
    image, _, _ = sample
    path = png(tmp_path / "d.png", image)
    trained = done(predict(workspace, source={"run": run_id}, input=path))
    result = done(predict(workspace, source={"run": quant_id}, input=path))
    assert result["run_kind"] == "quantize" and result["run"] == quant_id
    assert result["predictions"] == result["quantized"]
    assert len(result["fp32"]) == len(result["quantized"]) == 5
    # The FP32 side is the training run's model itself; W8A8 moves the probabilities a little, not the answer.
    assert result["fp32"] == trained["predictions"]
    assert result["quantized"] != result["fp32"]
    assert result["agree"] is (result["quantized"][0]["class"] == result["fp32"][0]["class"])
    assert result["quantized"][0]["probability"] == pytest.approx(result["fp32"][0]["probability"], abs=0.1)
    assert sum(
        row["probability"]
        for row in done(predict(workspace, source={"run": quant_id}, input=path, top_k=10))["quantized"]
    ) == pytest.approx(1.0, abs=1e-6)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("project")
    (root / "data.py").write_text(textwrap.dedent(DATASETS))
    (root / "nets.py").write_text(textwrap.dedent(MODELS))
    return root


def user_run(workspace, project: Path, dataset: str, net: str, **changes) -> str:
    spec = {
        "dataset": {"name": f"file:{project / 'data.py'}:{dataset}", "num_workers": 0},
        "model": {"name": f"file:{project / 'nets.py'}:{net}"},
        "epochs": 1,
        "batch_size": 32,
        "lr": 0.05,
    }
    return Path(done(train(workspace, merge(spec, **changes)))["run_dir"]).name


def test_user_dataset_runs_answer_for_a_sample_or_say_what_try_it_takes(tmp_path, project, sample):
    image, _, _ = sample
    path = png(tmp_path / "d.png", image)
    wave = user_run(tmp_path, project, "Wave", "linear")
    result = done(predict(tmp_path, source={"run": wave}, sample={"split": "test", "index": 0}))
    assert result["task"] == "regression" and len(result["predictions"]) == 1
    assert isinstance(result["predictions"][0]["value"], float) and "value" in result["truth"]
    text = failed(predict(tmp_path, source={"run": wave}, input=path))
    assert text.startswith("input: ") and "sample.split" in text
    tags = user_run(tmp_path, project, "Tags", "tagger")
    result = done(predict(tmp_path, source={"run": tags}, sample={"split": "val", "index": 1}))
    rows = result["predictions"]
    assert result["task"] == "multilabel" and len(rows) == 3 and all("positive" in row for row in rows)
    assert [row["probability"] for row in rows] == sorted((row["probability"] for row in rows), reverse=True)
    squares = user_run(tmp_path, project, "Squares", "segmenter", model={"num_classes": 2})
    result = done(
        predict(tmp_path, source={"run": squares}, sample={"split": "test", "index": 0}, preview=True)
    )
    assert result["task"] == "segmentation" and result["mask"].shape == (16, 16) and result["mask"].max() <= 1
    assert result["true_mask"].shape == (16, 16) and "truth" not in result


def test_the_command_line_prints_one_json_object(digits, sample, tmp_path):
    from cli_helpers import no_traceback, one_json, wb

    workspace, run_id, quant_id = digits
    image, _, _ = sample
    path = png(tmp_path / "d.png", image)
    proc = wb(
        tmp_path,
        "predict",
        "--set",
        f"source.run={quant_id}",
        "--set",
        f"input={path}",
        "--json",
        workspace=workspace,
    )
    assert proc.returncode == 0, proc.stderr
    result = one_json(proc)
    assert result["status"] == "done" and result["run_kind"] == "quantize"
    assert [row["class"] for row in result["fp32"]] and result["predictions"] == result["quantized"]
    assert set(result["predictions"][0]) == {"class", "label", "probability", "logit"}
    proc = wb(
        tmp_path,
        "predict",
        "--set",
        f"source.run={run_id}",
        "--set",
        "input=nothing-here.png",
        "--json",
        workspace=workspace,
    )
    assert proc.returncode == 1
    assert one_json(proc)["error"]["message"].startswith("input: ")
    no_traceback(proc)
    proc = wb(
        tmp_path, "predict", "--set", f"source.run={run_id}", "--set", "inptu=d.png", workspace=workspace
    )
    assert proc.returncode == 2 and "inptu" in proc.stderr and "input" in proc.stderr
