"""`workbench train` end to end on a LightningModule project written here (one real subprocess): a spec beside
the project with relative lightning: paths runs from another folder, exits 0, prints Lightning's epochs as log
lines without a traceback, and the run reads done with its checkpoints in the run folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
from cli_helpers import TRACEBACK, wb  # noqa: E402
from lightning_helpers import lightning_spec, write_project  # noqa: E402
from training_helpers import done, train  # noqa: E402

from workbench.runs import Run, RunStore  # noqa: E402

pytest.importorskip("lightning")


def test_workbench_train_runs_a_lightning_spec_from_another_folder(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    write_project(project)
    (project / "train.toml").write_text(
        'epochs = 1\n[model]\nname = "lightning:project.py:Classifier"\n'
        '[dataset]\nname = "lightning:project.py:Features"\n'
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = wb(
        elsewhere, "train", str(project / "train.toml"), "--trust", workspace=tmp_path / "ws", timeout=600
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert TRACEBACK not in output
    assert "epoch 1/1: " in output and "val_acc" in output
    (run,) = RunStore(tmp_path / "ws").list_runs()
    assert run["status"] == "done"
    assert {"model.pt", "last.ckpt"} <= {p.name for p in (Path(run["run_dir"]) / "checkpoints").iterdir()}


def test_a_resume_with_fewer_epochs_than_done_is_a_spec_error_and_leaves_the_run_as_it_was(tmp_path):
    project = write_project(tmp_path)
    run_dir = done(train(tmp_path / "ws", lightning_spec(project, epochs=2)))["run_dir"]
    proc = wb(tmp_path, "train", "--resume", run_dir, "--set", "epochs=1", "--json", timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert TRACEBACK not in proc.stderr and "site-packages" not in proc.stdout + proc.stderr
    message = json.loads(proc.stdout)["error"]["message"]
    assert message.startswith("epochs: 1 is below the 2 epoch(s) this run has done"), message
    with Run(run_dir, readonly=True) as run:
        assert run.summary()["status"] == "done"


GARBLING = """

def _garbage(obj, f, *args, **kwargs):
    f.write(b"these bytes are not a checkpoint")


torch.save = _garbage  # the module replaces torch.save: every checkpoint it writes is garbage, yet not empty
"""


def test_a_replaced_torch_save_that_writes_garbage_fails_a_lightning_run(tmp_path):
    project = write_project(tmp_path)
    project.write_text(project.read_text() + GARBLING)
    proc = wb(
        tmp_path,
        "train",
        "--set",
        f"model.name=lightning:{project}:Plain",
        "--set",
        f"dataset.name=lightning:{project}:Features",
        "--set",
        "epochs=1",
        "--json",
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert TRACEBACK not in proc.stderr + proc.stdout
    result = json.loads(proc.stdout)
    message = result["error"]["message"]
    assert result["status"] == "failed", result
    assert message.startswith(
        "checkpoints/best.pt was saved but does not load back (torch.save is replaced "
        f"by _garbage from {project})"
    ), message
    (run,) = RunStore(tmp_path / "ws").list_runs()
    assert run["status"] == "failed"
