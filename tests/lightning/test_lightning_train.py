"""LightningModules trained by Lightning's own Trainer through the real runner, in this process (issue #20):
logged values stream into the run's database under their own and the Training tab's names, the result has the
built-in route's keys and the module's monitor, a cancel reads cancelled and resumes at the next epoch, bad
modules and names fail in one line, and a Lightning run exports to ONNX with parity."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
from lightning_helpers import lightning_spec, write_project  # noqa: E402
from training_helpers import Recorder, done, failed, metrics, train  # noqa: E402

from workbench.errors import JobError  # noqa: E402
from workbench.runs import Run  # noqa: E402
from workbench.specs import TrainSpec  # noqa: E402
from workbench.worker.checkpoints import load_state_dict  # noqa: E402
from workbench.worker.lightning.monitor import direction_of, from_logged  # noqa: E402
from workbench.worker.registry import get_task  # noqa: E402
from workbench.worker.runner import run_task  # noqa: E402

pytest.importorskip("lightning")

BUILT_IN_KEYS = {
    "epochs_completed",
    "final",
    "throughput",
    "checkpoint",
    "best_checkpoint",
    "device",
    "amp",
    "channels_last",
    "data_placement",
    "parameters",
    "global_steps",
    "early_stopped",
    "best_val_accuracy",
    "best_epoch",
    "evaluation",
    "task",
    "monitor",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return write_project(tmp_path_factory.mktemp("project"))


@pytest.fixture(scope="module")
def trained(project, tmp_path_factory):
    workspace = tmp_path_factory.mktemp("ws")
    recorder = Recorder()
    result = done(train(workspace, lightning_spec(project), recorder=recorder))
    return workspace, result, recorder


def test_logged_values_stream_into_the_run(trained):
    _, result, recorder = trained
    stored = metrics(result["run_dir"])
    # 2 epochs of 3 steps (96 training samples, batches of 32), logged every step under the module's own name
    # and the Training tab's.
    # Lightning's own step: optimiser steps taken before it
    assert stored["train_loss"][0] == [0, 1, 2, 3, 4, 5]
    assert stored["train/loss"] == stored["train_loss"]
    assert stored["val_acc"] == stored["val/acc"] and len(stored["val_acc"][1]) == 2
    assert stored["val/loss"] == stored["val_loss"]
    assert stored["epoch"] == ([3, 6], [1.0, 2.0])
    assert "lr" in stored
    streamed = {series["name"] for event in recorder.of("metrics") for series in event["series"]}
    assert {"train_loss", "val_acc", "epoch"} <= streamed
    logs = [event["text"] for event in recorder.of("log")]
    assert any("runs with your permissions" in text for text in logs)
    assert any(text.startswith("epoch 2/2: ") and "val_acc" in text for text in logs)
    assert not any("GPU available" in text for text in logs)
    assert any(
        text.startswith("layer statistics (layer_stats_every) are recorded by the workbench's own loop")
        for text in logs
    )


def test_result_has_the_built_in_keys_and_the_modules_monitor(trained):
    _, result, _ = trained
    assert BUILT_IN_KEYS <= set(result)
    assert result["epochs_completed"] == 2 and result["global_steps"] == 6
    assert result["task"] == "custom"
    stored = metrics(result["run_dir"])["val_acc"][1]
    monitor = result["monitor"]
    # its ModelCheckpoint's, mode max
    assert monitor["name"] == "val_acc" and monitor["higher_is_better"] is True
    assert monitor["best_val"] == pytest.approx(max(stored))
    assert result["best_epoch"] == 1 + stored.index(max(stored))
    assert monitor["test"] == pytest.approx(result["final"]["test_metrics"]["test_acc"])
    assert result["final"]["val_loss"] == pytest.approx(metrics(result["run_dir"])["val_loss"][1][-1])
    run_dir = Path(result["run_dir"])
    weights = load_state_dict(result["checkpoint"])  # plain weights, weights_only
    assert set(weights) == {"net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"}
    assert Path(result["best_checkpoint"]).is_file() and (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert TrainSpec.load(run_dir / "spec.toml").model.input_shape == [8]  # for graph, export and bench


def test_without_a_checkpoint_monitor_the_first_val_metric_is_monitored(project, tmp_path):
    result = done(train(tmp_path, lightning_spec(project, "Plain", epochs=1, keep_best=False)))
    assert result["monitor"]["name"] == "val_loss" and result["monitor"]["higher_is_better"] is False
    assert result["best_checkpoint"] is None


def test_monitor_names_and_directions():
    assert from_logged(["train_loss", "val_acc_step", "val_mae", "val_acc"]).name == "val_mae"
    assert from_logged(["train_loss"]) is None
    assert [direction_of(n) for n in ("val_loss", "val_error", "val_mse", "val_acc", "val_f1")] == [
        False,
        False,
        False,
        True,
        True,
    ]


def test_a_cancel_reads_cancelled_and_the_run_resumes_at_the_next_epoch(project, tmp_path):
    stop = threading.Event()

    def after_epoch_one(progress):
        # the first epoch's end: the next step stops it
        if progress["text"] == "epoch 1/2" and progress["done"]:
            stop.set()

    cancelled = train(tmp_path, lightning_spec(project), recorder=Recorder(after_epoch_one), stop=stop)
    assert cancelled["status"] == "cancelled", cancelled.get("error")
    message = cancelled["error"]["message"]
    assert "in epoch 2/2" in message and "checkpoints/last.ckpt (after epoch 1)" in message
    with Run(cancelled["run_dir"]) as run:
        assert run.status == "cancelled"
    recorder = Recorder()
    resumed = done(train(tmp_path, lightning_spec(project), recorder=recorder, resume=cancelled["run_dir"]))
    assert resumed["resumed_from_epoch"] == 1 and resumed["epochs_completed"] == 2
    assert any("resuming after epoch 1" in event["text"] for event in recorder.of("log"))
    epochs = metrics(resumed["run_dir"])["epoch"]
    assert epochs == ([3, 6], [1.0, 2.0])  # epoch 2 once, after epoch 1's steps: not started over


@pytest.mark.parametrize(
    "module,missing", [("NoStep", "training_step"), ("NoOptimizer", "configure_optimizers")]
)
def test_a_module_without_a_required_hook_says_which(project, tmp_path, module, missing):
    message = failed(train(tmp_path, lightning_spec(project, module)))
    assert f"{module} in {project} does not define {missing};" in message


def test_a_nan_loss_ends_the_run_diverged_not_done(project, tmp_path):
    result = train(tmp_path, lightning_spec(project, "NaNLoss"))
    message = failed(result)
    assert message.startswith("the training loss became NaN by epoch 1, step 1;"), message
    with Run(result["run_dir"]) as run:
        assert run.status == "failed"


def test_a_training_step_returning_none_is_said_in_the_log_and_the_result(project, tmp_path):
    recorder = Recorder()
    result = done(train(tmp_path, lightning_spec(project, "NoneStep", epochs=1), recorder=recorder))
    warning = "NoneStep.training_step returned None for 3 of 3 training steps"
    assert any(text.startswith(warning) and "never changed" in text for text in result["warnings"]), result
    assert any(
        event["level"] == "warning" and event["text"].startswith(warning) for event in recorder.of("log")
    )


def test_bad_names_say_what_is_wrong(project, tmp_path):
    message = failed(train(tmp_path, lightning_spec(project, data="Featurez")))
    # names the classes it has
    assert message.startswith("dataset.name: 'Featurez' in") and "Features" in message
    message = failed(train(tmp_path, lightning_spec(project, "Clasifier")))
    assert message.startswith("model.name: 'Clasifier' in") and "Classifier" in message
    message = failed(train(tmp_path, lightning_spec(project, data=None)))
    assert "has no train_dataloader of its own" in message and "dataset.name=lightning:" in message
    message = failed(train(tmp_path, lightning_spec(tmp_path / "absent.py")))
    assert "does not exist" in message
    message = failed(train(tmp_path, lightning_spec(project, distributed="ddp", nproc=2)))
    assert message.startswith("distributed:")


def test_without_lightning_the_message_says_how_to_install_it(monkeypatch):
    from workbench.worker.lightning import require_lightning

    monkeypatch.setitem(sys.modules, "lightning", None)  # import lightning now raises ImportError
    with pytest.raises(JobError, match=r"pip install 'torch-workbench\[lightning\]'"):
        require_lightning()


def test_a_lightning_run_exports_to_onnx_with_parity(trained):
    pytest.importorskip("onnxruntime")
    workspace, result, _ = trained
    exported = run_task(
        get_task("export.model"),
        {"source": {"run": result["run_dir"]}, "format": "onnx"},
        emit=lambda *a: None,
        workspace=workspace,
    )
    assert exported["status"] == "done", exported.get("error")
    assert exported["parity"]["passed"] is True
    # Real inputs: the DataModule's first training batch (32 samples), not random ones.
    assert exported["parity"]["samples"] == 32 and "random_samples" not in exported["parity"]
    assert Path(exported["artifact"]).is_file()
    import onnxruntime

    session = onnxruntime.InferenceSession(exported["artifact"])
    x = torch.randn(4, 8)
    weights = load_state_dict(result["checkpoint"])
    expected = torch.relu(x @ weights["net.0.weight"].T + weights["net.0.bias"]) @ weights["net.2.weight"].T
    expected += weights["net.2.bias"]
    (out,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    assert torch.allclose(torch.from_numpy(out), expected, atol=1e-5)


def test_model_args_build_the_module_for_training_and_every_later_job(project, tmp_path):
    """model.args reach the LightningModule's constructor when it trains, and again when export rebuilds it: a
    checkpoint of 5 hidden units loads only into a module built with hidden=5."""
    workspace = tmp_path / "ws"
    spec = lightning_spec(project, epochs=1)
    spec["model"]["args"] = {"hidden": 5, "lr": 0.05}
    result = done(train(workspace, spec))
    assert load_state_dict(result["checkpoint"])["net.0.weight"].shape == (5, 8)
    exported = run_task(
        get_task("export.model"),
        {"source": {"run": result["run_dir"]}, "format": "onnx"},
        emit=lambda *a: None,
        workspace=workspace,
    )
    assert exported["status"] == "done", exported.get("error")
    assert exported["parity"]["passed"] is True
    spec["model"]["args"] = {"hiden": 5}
    message = failed(train(tmp_path / "ws2", spec))
    assert message.startswith("model.args: Classifier(hiden=) from") and "check its arguments" in message


def test_a_lightning_run_with_a_datamodule_quantizes_on_its_first_batch(trained):
    """Calibration reads the DataModule's first training batch (it normalises its own data); every rung is the
    module's own monitor, from its validation_step over the DataModule's val batches."""
    workspace, result, _ = trained
    quantized = run_task(
        get_task("quant.analyze"),
        {"source": {"run": result["run_dir"]}, "calibration": {"samples": 16}},
        emit=lambda *a: None,
        workspace=workspace,
    )
    assert quantized["status"] == "done", quantized.get("error")
    assert 0 <= quantized["quantized"]["accuracy"] <= 1 and quantized["steps"][0]["step"] == "fp32"
    assert quantized["metric"]["name"] == "val_acc" and quantized["metric"]["higher_is_better"] is True


def test_a_datamodules_samples_are_the_same_for_every_job_and_held_out_ones_come_from_its_val_loader(project):
    """The first training batch is drawn with torch's RNG seeded (a shuffling loader gave each job other
    samples, so a quantize run and its export measured different ones), and the held-out split is the
    val_dataloader's."""
    from workbench.specs import DataSpec
    from workbench.worker.lightning.data import load_lightning_dataset

    spec = DataSpec(name=f"lightning:{project}:Features")
    state = torch.random.get_rng_state()
    first, second = load_lightning_dataset(spec), load_lightning_dataset(spec)
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's random state is put back
    for split in ("train", "val"):
        a, b = first.splits[split], second.splits[split]
        assert len(a) == len(b) > 0 and all(
            torch.equal(a.sample(i)[0], b.sample(i)[0]) for i in range(len(a))
        )
    # Features' val set is the first quarter of its 192 rows, in order, in one batch of 48.
    assert len(first.splits["val"]) == 48 and len(first.splits["train"]) == 32
    g = torch.Generator().manual_seed(0)
    assert torch.equal(first.splits["val"].sample(0)[0], torch.randn(192, 8, generator=g)[0])


def test_data_info_reads_a_datamodule_for_the_wizards_task_choice(project, tmp_path):
    info = run_task(
        get_task("data.info"),
        {"dataset": {"name": f"lightning:{project}:Features"}},
        emit=lambda *a: None,
        workspace=tmp_path,
    )
    assert info["status"] == "done", info.get("error")
    assert info["tasks"]["auto"] == "classification" and info["sample_shape"] == [8]
    assert info["target_histogram"]["kind"] == "classes" and sum(info["target_histogram"]["counts"]) == 32


def test_the_jobs_last_progress_says_what_the_test_gave(trained):
    _, _, recorder = trained
    last = recorder.of("progress")[-1]
    assert last["fraction"] == 1.0 and last["text"].startswith("test: test_acc "), last
