"""`train.classifier` through the real runner on digits: the result and metric contracts, evaluation.json,
determinism, the NaN guard, cancel and resume, profiling, AMP, early stopping and clear failures."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from training_helpers import QUICK, Recorder, done, failed, merge, metrics, train

from workbench.runs import Run
from workbench.worker.checkpoints import load_state_dict
from workbench.worker.training import load_last, resolve_device

RESULT_KEYS = {
    "status",
    "run_dir",
    "epochs_completed",
    "final",
    "throughput",
    "checkpoint",
    "best_checkpoint",
    "device",
    "amp",
    "parameters",
    "elapsed_s",
}
STEP_METRICS = {"train/loss", "train/acc", "lr", "train/samples_per_s"}
EPOCH_METRICS = {"epoch", "epoch/train_loss", "epoch/train_acc", "val/loss", "val/acc"}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One two-epoch cnn run whose result, metrics and files several tests read."""
    workspace = tmp_path_factory.mktemp("ws")
    recorder = Recorder()
    result = done(train(workspace, QUICK, recorder=recorder))
    return result, recorder


def test_result_has_every_contract_key(quick_run):
    result, _ = quick_run
    assert RESULT_KEYS <= set(result)
    assert "resumed_from_epoch" not in result  # only a resumed run has it
    # device=auto: whatever this machine trains on (cuda where there is one).
    assert result["epochs_completed"] == 2 and result["device"] == str(resolve_device("auto"))
    assert result["amp"] == "none"
    throughput = result["throughput"]
    assert set(throughput) == {"train_samples_per_s", "warmup_s", "warmup_steps", "compile_s"}
    # Throughput counts what came after the warm-up: at least WARMUP_STEPS, rounded up to a read-back (every
    # 5).
    assert throughput["warmup_steps"] == 5 and throughput["warmup_s"] > 0 and throughput["compile_s"] is None
    assert isinstance(result["channels_last"], bool)
    assert result["data_placement"] == ("device" if result["device"].startswith("cuda") else "host")
    final = result["final"]
    assert set(final) == {"train_loss", "val_loss", "val_accuracy", "test_accuracy"}
    assert all(isinstance(v, float) and math.isfinite(v) for v in final.values())
    assert final["val_accuracy"] > 0.5 and final["test_accuracy"] > 0.5  # two epochs already learn digits
    assert result["throughput"]["train_samples_per_s"] > 0
    assert result["parameters"]["trainable"] == result["parameters"]["total"] > 0
    json.dumps(result, allow_nan=False)  # plain JSON: report.json and --json print it as it is
    for key in ("checkpoint", "best_checkpoint"):
        assert set(load_state_dict(result[key])) == set(load_state_dict(result["checkpoint"]))
    with Run(result["run_dir"]) as run:
        assert run.read_report()["epochs_completed"] == 2 and run.status == "done"


def test_metric_names_and_steps_follow_the_contract(quick_run):
    result, recorder = quick_run
    series = metrics(result["run_dir"])
    assert STEP_METRICS | EPOCH_METRICS <= set(series)
    steps_per_epoch = math.ceil(1437 / 64)
    assert result["global_steps"] == 2 * steps_per_epoch
    # Every optimiser step's loss, metrics and lr, the last included (#21: read back every log_every_steps
    # steps but drawn at each); throughput per read-back interval; epoch metrics at each epoch's last global
    # step.
    every_step = list(range(1, 2 * steps_per_epoch + 1))
    for name in ("train/loss", "train/acc", "lr"):
        assert series[name][0] == every_step, name
    assert series["train/samples_per_s"][0] == [5, 10, 15, 20, 25, 30, 35, 40, 45]
    # The steps' losses are the epoch's: weighted by each step's samples (64, the last 1437 - 22 * 64), they
    # average to epoch/train_loss.
    sizes = [64] * (steps_per_epoch - 1) + [1437 - 64 * (steps_per_epoch - 1)]
    first_epoch = series["train/loss"][1][:steps_per_epoch]
    assert sum(v * n for v, n in zip(first_epoch, sizes)) / 1437 == pytest.approx(
        series["epoch/train_loss"][1][0], rel=1e-9
    )
    assert series["epoch"] == ([steps_per_epoch, 2 * steps_per_epoch], [1.0, 2.0])
    for name in EPOCH_METRICS:
        assert series[name][0] == [steps_per_epoch, 2 * steps_per_epoch]
    assert all(0 <= v <= 1 for v in series["train/acc"][1] + series["val/acc"][1])
    assert series["lr"][1][0] == pytest.approx(0.01)
    assert series["epoch/train_loss"][1][1] < series["epoch/train_loss"][1][0]
    texts = [p["text"] for p in recorder.of("progress") if p["text"].startswith("epoch")]
    assert texts and all(t.startswith(("epoch 1/2 · loss ", "epoch 2/2 · loss ")) for t in texts)
    assert recorder.of("progress")[-1]["done"] == recorder.of("progress")[-1]["total"]


def test_evaluation_json_has_the_shape_the_gui_reads(quick_run):
    result, recorder = quick_run
    path = result["evaluation"]
    assert {"name": "evaluation", "path": path, "kind": "evaluation"} in recorder.of("artifact")
    with open(path) as f:
        evaluation = json.load(f)
    # Today's keys, which the Evaluation view reads, plus what every task's evaluation carries (issue #20).
    assert set(evaluation) == {
        "classes",
        "confusion_matrix",
        "per_class_accuracy",
        "test_accuracy",
        "worst",
        "task",
        "split",
        "monitor",
        "metrics",
        "checkpoint",
    }
    assert evaluation["task"] == "classification" and evaluation["split"] == "test"
    assert (
        evaluation["monitor"]["name"] == "acc"
        and evaluation["monitor"]["value"] == evaluation["test_accuracy"]
    )
    assert evaluation["classes"] == [str(i) for i in range(10)]
    matrix = torch.tensor(evaluation["confusion_matrix"])
    assert matrix.shape == (10, 10) and int(matrix.sum()) == 180  # 10 % of 1,797 digits
    assert evaluation["test_accuracy"] == pytest.approx(float(matrix.diagonal().sum()) / 180)
    assert evaluation["test_accuracy"] == pytest.approx(result["final"]["test_accuracy"])
    for i, accuracy in enumerate(evaluation["per_class_accuracy"]):
        assert accuracy == pytest.approx(float(matrix[i, i] / matrix[i].sum()))
    worst = evaluation["worst"]
    wrong = int(matrix.sum() - matrix.diagonal().sum())
    assert len(worst) == min(32, wrong) > 0
    from workbench.specs import DataSpec
    from workbench.worker.data import load_dataset

    test_labels = load_dataset(DataSpec(name="digits"), workspace=result["run_dir"]).splits["test"].labels
    confidences = [w["confidence"] for w in worst]
    assert confidences == sorted(confidences, reverse=True)
    for item in worst:
        assert set(item) == {"split", "index", "label", "predicted", "confidence"} and item["split"] == "test"
        assert item["label"] == int(test_labels[item["index"]]) != item["predicted"]
        assert 0.1 <= item["confidence"] <= 1


def test_same_seed_and_deterministic_give_identical_losses(tmp_path):
    spec = merge(
        QUICK,
        epochs=1,
        seed=3,
        deterministic=True,
        log_every_steps=1,
        dataset={"name": "digits", "augment": [{"name": "rotation", "degrees": 10}]},
    )
    first = metrics(done(train(tmp_path, spec))["run_dir"])["train/loss"]
    second = metrics(done(train(tmp_path, spec))["run_dir"])["train/loss"]
    assert len(first[0]) == 23 and first == second
    other = metrics(done(train(tmp_path, merge(spec, seed=4)))["run_dir"])["train/loss"]
    assert other[1] != first[1]  # and the seed really matters
    assert not torch.are_deterministic_algorithms_enabled()  # the worker's own setting is restored


NAN_MODEL = '''
import torch
from torch import nn


class GoesNaN(nn.Module):
    """A small net whose output turns NaN from its 31st training forward pass (in epoch 2 of 23 steps)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.fc = nn.Linear(64, num_classes)
        self.calls = 0

    def forward(self, x):
        out = self.fc(x.flatten(1))
        if self.training:
            self.calls += 1
            if self.calls > 30:
                out = out * float("nan")
        return out
'''


def test_a_nan_loss_fails_cleanly_and_keeps_the_last_good_checkpoint(tmp_path):
    model_file = tmp_path / "nan_model.py"
    model_file.write_text(NAN_MODEL)
    spec = merge(QUICK, epochs=3, model={"name": f"file:{model_file}:GoesNaN"})
    result = train(tmp_path, spec)
    message = failed(result)
    assert "NaN" in message and "epoch 2, step 31" in message
    last = f"{result['run_dir']}/checkpoints/last.pt"
    assert last in message and "lower lr" in message and "amp=none" in message
    state = load_last(Path(last))
    assert state["state"]["epoch"] == 1 and state["state"]["global_step"] == 23
    assert all(torch.isfinite(v).all() for v in state["model"].values())
    with Run(result["run_dir"]) as run:
        assert run.status == "failed" and "NaN" in run.message
        assert not (run.checkpoints_dir / "model.pt").exists()


def test_an_absurd_learning_rate_is_caught_as_well(tmp_path):
    # lr=10 is the largest the spec allows; on digits it blows the loss up long before it turns NaN.
    message = failed(
        train(tmp_path, merge(QUICK, epochs=1, lr=10, model={"name": "mlp"}, optimizer="sgd", momentum=0.0))
    )
    assert "the training loss diverged" in message and "no checkpoint had been written yet" in message


def test_cancel_from_another_thread_saves_last_pt_and_resume_finishes_the_plan(tmp_path):
    stop = threading.Event()
    reached = threading.Event()
    recorder = Recorder(
        on_progress=lambda p: reached.set() if p["text"].startswith("epoch") and p["done"] >= 4 else None
    )
    canceller = threading.Thread(target=lambda: reached.wait(60) and stop.set())
    canceller.start()
    spec = merge(QUICK, epochs=3, batch_size=16, log_every_steps=2)  # 90 steps an epoch
    result = train(tmp_path, spec, recorder=recorder, stop=stop)
    canceller.join()
    assert result["status"] == "cancelled", result
    assert "cancelled by the user" in result["error"]["message"] and "last.pt" in result["error"]["message"]
    saved = load_last(Path(result["run_dir"]) / "checkpoints" / "last.pt")["state"]
    assert 4 <= saved["global_step"] < 270  # where exactly depends on thread timing; never at the end
    assert saved["global_step"] == 90 * saved["epoch"] + saved["step_in_epoch"]
    with Run(result["run_dir"]) as run:
        assert run.status == "cancelled"
    resumed = done(train(tmp_path, spec, resume=result["run_dir"]))
    assert resumed["epochs_completed"] == 3 and resumed["resumed_from_epoch"] == saved["epoch"]
    # the interrupted epoch went on where it stopped, not from scratch
    assert resumed["global_steps"] == 3 * 90
    epochs = metrics(result["run_dir"])["epoch"]
    assert epochs == ([90, 180, 270], [1.0, 2.0, 3.0])
    assert all(v > 0 for v in metrics(result["run_dir"])["epoch/train_loss"][1])


def test_profile_steps_writes_top_ops_and_a_chrome_trace(tmp_path):
    recorder = Recorder()
    result = done(train(tmp_path, merge(QUICK, epochs=1, profile_steps=3), recorder=recorder))
    artifacts = {a["name"]: a for a in recorder.of("artifact")}
    assert artifacts["profile"]["kind"] == "profile" and artifacts["trace"]["kind"] == "trace"
    with open(artifacts["profile"]["path"]) as f:
        rows = json.load(f)
    assert 5 <= len(rows) <= 30
    for row in rows:
        assert set(row) == {
            "name",
            "calls",
            "cpu_time_total_us",
            "self_cpu_time_total_us",
            "device_time_total_us",
        }
        assert row["calls"] >= 1 and row["cpu_time_total_us"] >= row["self_cpu_time_total_us"] >= 0
    selfs = [r["self_cpu_time_total_us"] for r in rows]
    assert selfs == sorted(selfs, reverse=True)
    names = {r["name"] for r in rows}
    assert any(n.startswith("aten::") for n in names)
    assert (
        "aten::convolution_backward" in names
        or "aten::mkldnn_convolution" in names
        or any("conv" in n for n in names)
    )
    with open(artifacts["trace"]["path"]) as f:
        trace = json.load(f)
    assert trace["traceEvents"]
    assert artifacts["trace"]["path"].startswith(result["run_dir"])


def test_bf16_on_the_cpu_trains_and_learns(tmp_path):
    result = done(train(tmp_path, merge(QUICK, amp="bf16", epochs=3)))
    assert result["amp"] == "bf16" and result["final"]["val_accuracy"] > 0.8


def test_early_stopping_ends_the_run_when_validation_stalls(tmp_path):
    # lr this small barely moves the weights: validation accuracy stops improving at once.
    result = done(
        train(
            tmp_path,
            merge(
                QUICK,
                epochs=10,
                lr=1e-9,
                early_stop_patience=2,
                model={"name": "mlp"},
                optimizer="sgd",
                momentum=0.0,
            ),
        )
    )
    assert result["early_stopped"] is True and result["epochs_completed"] == 3
    assert result["best_epoch"] == 1


def test_a_device_that_is_not_there_fails_with_a_clear_message(tmp_path):
    if torch.cuda.is_available():  # one past the last CUDA device is missing on any machine
        count = torch.cuda.device_count()
        message = failed(train(tmp_path, merge(QUICK, device=f"cuda:{count}")))
        assert f"cuda:{count} does not exist" in message and f"has {count} CUDA" in message
    else:
        message = failed(train(tmp_path, merge(QUICK, device="cuda")))
        assert "cuda is not available" in message and "cpu" in message


def test_a_class_count_that_does_not_fit_the_data_is_refused(tmp_path):
    message = failed(train(tmp_path, merge(QUICK, model={"name": "cnn", "num_classes": 5})))
    assert "model.num_classes is 5" in message and "10 classes" in message


def test_the_class_count_defaults_to_the_datasets_and_the_run_keeps_it(tmp_path):
    # A two-class dataset and no model.num_classes: auto (0) takes the dataset's count, and the run's spec
    # says what was trained, so its graph, quantization and export rebuild the same head.
    spec = merge(
        QUICK, epochs=1, dataset={"name": "fake", "size": 64, "num_classes": 2, "image_size": [8, 8]}
    )
    assert "num_classes" not in spec.get("model", {})
    result = done(train(tmp_path, spec))
    with Run(result["run_dir"], readonly=True) as run:
        assert run.read_spec()["model"]["num_classes"] == 2


def test_ddp_batch_size_must_divide_by_the_process_count(tmp_path):
    message = failed(train(tmp_path, merge(QUICK, distributed="ddp", nproc=3)))
    assert "batch_size: 64 is not divisible by nproc=3" in message


@pytest.mark.heavy  # CI time (two minutes of inductor); the message: test_train_step.py
def test_a_compile_failure_is_a_clear_error_that_suggests_compile_off(tmp_path):
    # Inductor cannot build its C++ kernels with a compiler that is not there: a real failure, not a mocked
    # one, on any machine. device=cpu: on CUDA inductor writes Triton kernels and never calls the C++
    # compiler. A fresh inductor cache: kernels compiled by an earlier run would be reused and never compiled.
    if not (shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")):
        pytest.skip(
            "no C compiler: the job refuses compile before it starts (tested by check_compile's message)"
        )
    env = {
        **os.environ,
        "CXX": str(tmp_path / "no-such-compiler"),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache"),
    }
    # A fresh interpreter, not the forked CLI: torch._inductor reads CXX when it is imported.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "workbench",
            "train",
            "--set",
            "epochs=1",
            "--set",
            "compile=default",
            "--set",
            "model.name=mlp",
            "--set",
            "device=cpu",
            "--workspace",
            str(tmp_path),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    result = json.loads(proc.stdout)
    assert proc.returncode == 1 and result["status"] == "failed" and "traceback" not in result
    assert result["error"]["message"].startswith("compile: torch.compile failed")
    assert "set compile=off" in result["error"]["message"]


class _Quiet:
    """A reporter that keeps metrics and says nothing else (the Trainer used without a run)."""

    def __init__(self):
        self.rows = []

    def progress(self, *args, **kwargs):
        pass

    def metrics(self, step, values):
        self.rows.append((step, values))

    def log(self, *args, **kwargs):
        pass

    def artifact(self, *args, **kwargs):
        pass

    def should_stop(self):
        return False


def test_a_cancel_during_validation_keeps_the_epoch_it_ends(tmp_path):
    from workbench.errors import JobCancelled
    from workbench.specs import TrainSpec
    from workbench.worker.data import load_dataset
    from workbench.worker.models import build_model
    from workbench.worker.training import Trainer, TrainSetup

    spec = TrainSpec.from_dict(merge(QUICK, epochs=2))
    dataset = load_dataset(spec.dataset, workspace=tmp_path)

    def trainer(resume=None, stop_check=None):
        torch.manual_seed(0)
        model = build_model(spec.model, input_shape=dataset.sample_shape)
        return Trainer(
            TrainSetup(
                spec=spec,
                dataset=dataset,
                model=model,
                device=torch.device("cpu"),
                checkpoints_dir=tmp_path,
                artifacts_dir=tmp_path,
                report=_Quiet(),
                resume=resume,
                stop_check=stop_check,
            )
        )

    # No batch check comes after the epoch's last step (23): the first check to see it is validation's.
    with pytest.raises(JobCancelled, match="after epoch 1/2 at step 23"):
        trainer(stop_check=lambda completed: completed >= 23).fit()
    saved = load_last(tmp_path / "last.pt")
    assert saved["state"]["epoch"] == 0 and saved["state"]["step_in_epoch"] == 23
    assert saved["state"]["partial_epoch_sums"][2] == 1437  # the epoch's training, kept for its metrics
    resumed = trainer(resume=saved)
    summary = resumed.fit()
    assert summary["epochs_completed"] == 2 and summary["global_steps"] == 46
    step, first_epoch = next(
        (step, values) for step, values in resumed.report.rows if values.get("epoch") == 1
    )
    assert step == 23 and 0 < first_epoch["epoch/train_loss"] < 3 and first_epoch["val/acc"] > 0.3


def test_a_run_made_before_stratified_splits_resumes_on_its_own_splits(tmp_path):
    first = done(train(tmp_path, merge(QUICK, epochs=1, model={"name": "mlp"})))
    spec_file = Path(first["run_dir"]) / "spec.toml"
    text = spec_file.read_text()
    assert "stratify = true" in text
    spec_file.write_text(text.replace("stratify = true\n", ""))  # as a run written before the option
    recorder = Recorder()
    resumed = done(
        train(
            tmp_path,
            merge(QUICK, epochs=2, model={"name": "mlp"}),
            recorder=recorder,
            resume=first["run_dir"],
        )
    )
    assert resumed["resumed_from_epoch"] == 1
    logs = [log["text"] for log in recorder.of("log")]
    assert "dataset.stratify: this run began with stratify=false; it keeps those splits" in logs
    assert "stratify = false" in spec_file.read_text()
