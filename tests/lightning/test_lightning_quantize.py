"""`workbench quantize` of a LightningModule's run (real subprocesses): every rung is the module's own monitor
(val_acc, from its ModelCheckpoint) measured by its validation_step over all its val batches, the float rung
equal to what trainer.validate gives for the trained checkpoint, and the quantized rungs measured on the
simulated net."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cli_helpers import TRACEBACK, one_json, wb  # noqa: E402
from lightning_helpers import write_project  # noqa: E402

from workbench.gui.panels.quant.metric import Measure  # noqa: E402
from workbench.runs import Run  # noqa: E402

pytest.importorskip("lightning")

# Val batches of 16: the workbench's held-out samples are only the first (16 of 48), the module's validation
# reads all three, so a measure of the first batch alone would not equal trainer.validate.
SMALL_VAL = '''

class SmallVal(Features):
    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=16)


class Direct(Plain):
    """A validation_step that calls its net directly: the simulated copy cannot stand in for it."""

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean())


class Fragile(Plain):
    """Validates while it trains, and fails in the validation quantize runs."""

    def validation_step(self, batch, batch_idx):
        if self.trainer.state.fn == "validate":
            raise ValueError("no validation outside fit")
        return super().validation_step(batch, batch_idx)
'''


def _project(tmp_path: Path) -> Path:
    project = write_project(tmp_path)
    project.write_text(project.read_text() + SMALL_VAL)
    return project


def _train(tmp_path: Path, project: Path, module: str) -> dict:
    trained = one_json(
        wb(
            tmp_path,
            "train",
            "--set",
            f"model.name=lightning:{project}:{module}",
            "--set",
            f"dataset.name=lightning:{project}:SmallVal",
            "--set",
            "epochs=1",
            "--json",
            timeout=600,
        )
    )
    assert trained["status"] == "done", trained.get("error")
    return trained


def _quantize(tmp_path: Path, run_dir: str, *extra: str, status: str = "done") -> dict:
    proc = wb(
        tmp_path,
        "quantize",
        "--set",
        f"source.run={run_dir}",
        "--set",
        "calibration.samples=32",
        "--set",
        "weights.bits=3",
        *extra,
        "--json",
        timeout=600,
    )
    assert TRACEBACK not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    result = one_json(proc)
    assert result["status"] == status, result.get("error")
    return result


def _validate(project: Path, checkpoint: str) -> dict:
    """What Lightning's own trainer.validate gives for the trained weights, in this process."""
    import lightning as L

    from workbench.worker.checkpoints import load_state_dict

    spec = importlib.util.spec_from_file_location("lightning_quantize_project", project)
    code = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(code)
    module = code.Classifier()
    module.load_state_dict(load_state_dict(checkpoint))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    return trainer.validate(module, datamodule=code.SmallVal(), verbose=False)[0]


def test_a_lightning_runs_ladder_measures_the_modules_own_monitor(tmp_path):
    project = _project(tmp_path)
    trained = _train(tmp_path, project, "Classifier")
    result = _quantize(tmp_path, trained["run_dir"], "--set", "sensitivity=true")
    metric = result["metric"]
    assert metric == {"name": "val_acc", "label": "val_acc", "split": "val", "higher_is_better": True}
    measure = Measure.of(metric, result["held_out"]["split"])  # what the GUI's charts and summary show
    assert measure.axis == "val_acc ↑" and measure.title == "val_acc ↑" and not measure.accuracy
    expected = _validate(project, result["source"]["checkpoint"])
    steps = {step["step"]: step for step in result["steps"]}
    assert steps["fp32"]["accuracy"] == pytest.approx(expected["val_acc"], abs=1e-6)
    assert steps["fp32"]["loss"] == pytest.approx(expected["val_loss"], abs=1e-6)  # the module's val_loss
    assert result["fp32"]["metrics"]["val_acc"] == pytest.approx(expected["val_acc"], abs=1e-6)
    # The quantized rungs ran the simulated net: 3-bit weights move the module's own val_loss.
    for name in ("weight_ranges", "activation_ranges"):
        assert abs(steps[name]["loss"] - steps["fp32"]["loss"]) > 1e-4, steps
    assert result["quantized"]["metrics"]["val_loss"] != pytest.approx(expected["val_loss"], abs=1e-4)
    # The sensitivity sweep measures the same monitor: every row a val_acc of 48 samples (a multiple of 1/48).
    assert result["sensitivity"]
    for row in result["sensitivity"]:
        for value in (row["only_this"], row["all_but_this"]):
            assert value * 48 == pytest.approx(round(value * 48), abs=1e-4)


def test_a_validation_step_that_bypasses_forward_falls_back_and_says_so(tmp_path):
    project = _project(tmp_path)
    trained = _train(tmp_path, project, "Direct")
    result = _quantize(tmp_path, trained["run_dir"])
    assert "metric" not in result  # the workbench's own accuracy, as for any classifier
    with Run(result["run_dir"], readonly=True) as run:
        logs = [event["content"].get("text", "") for event in run.events("log")]
    assert any(text.startswith("Direct.validation_step never calls the module itself") for text in logs), logs


def test_a_validation_step_that_fails_in_quantize_names_the_users_line(tmp_path):
    project = _project(tmp_path)
    trained = _train(tmp_path, project, "Fragile")
    message = _quantize(tmp_path, trained["run_dir"], status="failed")["error"]["message"]
    assert message.startswith(f"{project}, line "), message
    assert "no validation outside fit" in message
    assert message.endswith("(during Lightning validation of a quantize step)"), message
