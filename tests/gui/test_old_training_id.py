"""A training run recorded under the old id train.classifier sits beside a train.model one in the window: the
Training tab lists both, the quantize, export and bench wizards offer both as sources, the Graph tab builds
from both, and the Runs tab shows both as training runs."""

from __future__ import annotations

from workbench.runs import RunStore
from workbench.task_ids import TRAIN_ALIAS, TRAIN_TASK

MONITOR = {"name": "acc", "label": "accuracy", "higher_is_better": True, "best_val": 0.9, "test": 0.91}


def _train_run(workspace, task: str) -> str:
    spec = {"epochs": 1, "model": {"name": "cnn"}, "dataset": {"name": "digits"}}
    with RunStore(workspace).create_run("train", spec, task=task) as run:
        run.write_report(
            {"status": "done", "epochs_completed": 1, "monitor": MONITOR, "final": {"test_accuracy": 0.91}}
        )
        run.set_status("done")
        return run.id


def test_runs_under_either_training_id_are_listed_and_offered_as_sources(fake_window, qtbot):
    old = _train_run(fake_window.workspace, TRAIN_ALIAS)
    new = _train_run(fake_window.workspace, TRAIN_TASK)
    both = {old, new}

    training = fake_window.training_panel
    training.refresh()
    assert both <= set(training.runs)
    assert {training.runs[old]["task"], training.runs[new]["task"]} == {"train.classifier", "train.model"}

    assert both <= {r["id"] for r in fake_window.quant_panel.training_runs()}
    assert both <= {r["id"] for r in fake_window.export_panel.source_runs()}

    graph = fake_window.graph_panel
    graph.refresh()
    combo = graph.source_combo
    assert both <= {combo.itemData(i) for i in range(combo.count())}

    panel = fake_window.runs_panel
    panel.refresh()
    assert both <= {run["id"] for run in panel.model.runs}
