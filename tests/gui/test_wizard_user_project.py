"""The training wizard for your own project (issue #20): a Python-file dataset with arguments, the Task choice
filled from the worker's data.info (auto's pick, greyed tasks with their reason), a LightningModule model, and
the note that the user's file runs with the user's permissions. The worker is the fake one over the real
protocol."""

from __future__ import annotations

import fake_worker
import pytest
from fake_worker import FAKE_DEVICES
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWidget, QWizard

from workbench.client import WorkerManager
from workbench.errors import JobError
from workbench.gui.panels.training.user_code_fields import format_args, parse_args
from workbench.gui.panels.training.wizard import OLD_WORKER_NOTE, TrainingWizard
from workbench.gui.queries import QueryRunner
from workbench.gui.state import DatasetState
from workbench.gui.worker_bridge import QtWorkerBridge
from workbench.specs import TrainSpec

WHY = "an integer map the input's size"
UNAVAILABLE = {
    "classification": "the target is a 16×16 map, not one label per sample",
    "regression": "the target is int64; regression needs float targets",
    "multilabel": "the target holds 3 values, not only 0 and 1",
    "detection": "task=detection, but the target is an int64 tensor of shape [16, 16]",
}


@pytest.fixture
def asked():
    """The dataset tables data.info was asked about, in order."""
    return []


@pytest.fixture
def queries(monkeypatch, qtbot, tmp_path, asked):
    """The GUI's query runner on a fake worker (no main window: it is not needed here) whose data.info
    describes a file: dataset as a segmentation set, fails for a class named Broken, and answers as an older
    worker (no "tasks") for the built-in sets."""
    builtin_info = fake_worker._fake_info

    def info(spec, ctx):
        dataset = spec["dataset"]
        asked.append(dataset)
        name = dataset.get("name", "")
        if name.endswith(":Broken"):
            raise JobError(f"dataset {name}: Broken() raised ValueError: no shapes (data.py, line 3)")
        if not name.startswith("file:"):
            return builtin_info(spec, ctx)
        return {
            "dataset": name,
            "classes": ["0", "1", "2"],
            "num_samples": {"train": 32, "val": 4, "test": 4},
            "sample_shape": [1, 16, 16],
            "input_dtype": "float32",
            "target": "int64 tensor of shape [16, 16]",
            "tasks": {"auto": "segmentation", "why": WHY, "unavailable": UNAVAILABLE},
        }

    monkeypatch.setattr(fake_worker, "_fake_info", info)
    worker = fake_worker.FakeWorker(tmp_path)
    manager = WorkerManager(connection_file=worker.connection_file, heartbeat_interval=0.2)
    runner = QueryRunner(QtWorkerBridge(manager), tmp_path / "workspace")
    manager.start(wait=False)
    qtbot.waitUntil(lambda: manager.state == "ready", timeout=30_000)
    yield runner
    manager.detach()
    worker.stop()


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "shapes.py"
    path.write_text("from torch.utils.data import Dataset\n\nclass Shapes(Dataset):\n    pass\n")
    return path


def open_wizard(qtbot, queries=None, **kwargs) -> TrainingWizard:
    wizard = TrainingWizard(DatasetState(), FAKE_DEVICES, "cpu", queries=queries, **kwargs)
    qtbot.addWidget(wizard)
    wizard.show()
    return wizard


def choose_file_dataset(qtbot, wizard, path, name="Shapes", args="") -> None:
    page = wizard.dataset_page
    page.source.setCurrentIndex(page.source.findData("file"))
    qtbot.keyClicks(page.user.path, str(path))
    qtbot.keyClicks(page.user.attr, name)
    if args:
        qtbot.keyClicks(page.user.args, args)


def test_a_python_file_dataset_builds_a_file_spec_with_its_arguments(qtbot, data_file):
    wizard = open_wizard(qtbot)
    page = wizard.dataset_page
    next_button = wizard.button(QWizard.NextButton)
    assert page.user.note.isHidden() and page.summary.isVisible()  # the built-in dataset until told otherwise
    page.source.setCurrentIndex(page.source.findData("file"))
    # Running the user's file is running their code: the page says so, and shows the file fields.
    assert page.user.note.isVisible() and "with your permissions" in page.user.note.text()
    assert not page.summary.isVisible() and page.user.path.isVisible() and page.user.args.isVisible()
    assert not next_button.isEnabled()  # no file yet: the spec's own message names the field
    assert page.user.name_error.isVisible() and page.user.name_error.text().startswith("dataset.name:")
    qtbot.keyClicks(page.user.path, str(data_file))
    qtbot.keyClicks(page.user.attr, "Shapes")
    assert page.user.path_warning.isHidden() and page.user.name_error.isHidden()
    qtbot.keyClicks(page.user.args, "{size: 500")  # neither JSON nor TOML: named inline, Next waits
    assert page.user.args_error.isVisible() and page.user.args_error.text().startswith("dataset.args: ")
    assert not next_button.isEnabled() and wizard.spec is None
    page.user.args.clear()
    qtbot.keyClicks(page.user.args, 'size=500, name="shapes", sizes=[8, 16], noisy=true')
    assert page.user.args_error.isHidden() and next_button.isEnabled()
    page.splits.widgets["dataset.val_fraction"].setText("0.2")
    spec = wizard.spec
    assert spec.dataset.name == f"file:{data_file}:Shapes"
    assert spec.dataset.args == {"size": 500, "name": "shapes", "sizes": [8, 16], "noisy": True}
    assert spec.dataset.val_fraction == 0.2 and spec.task == "auto"
    # The Data tab's built-in choices (its folder, its augmentation) do not travel into a user dataset's spec.
    assert spec.dataset.root == "" and spec.dataset.augment == []
    assert TrainSpec.from_dict(spec.to_dict()) == spec and TrainSpec.from_toml(spec.to_toml()) == spec
    # Train again from that spec: the page opens on the Python file with the same fields.
    again = open_wizard(qtbot, start=spec.to_dict())
    assert again.dataset_page.source_kind() == "file" and again.dataset_page.user.attr.text() == "Shapes"
    assert again.spec == spec


def test_a_file_missing_on_this_machine_is_a_warning_not_a_refusal(qtbot, tmp_path):
    # A remote worker reads its own disk, so a path this machine lacks may still be right.
    wizard = open_wizard(qtbot)
    choose_file_dataset(qtbot, wizard, tmp_path / "elsewhere.py")
    assert "is not a file on this machine" in wizard.dataset_page.user.path_warning.text()
    assert wizard.dataset_page.user.path_warning.isVisible()
    assert wizard.spec is not None and wizard.spec.dataset.name.endswith("elsewhere.py:Shapes")


def test_the_task_choice_shows_autos_pick_and_greys_what_the_data_cannot_serve(
    queries, qtbot, data_file, asked
):
    wizard = open_wizard(qtbot, queries)
    page, choice = wizard.dataset_page, wizard.dataset_page.task_choice
    # the Data tab's dataset, an older worker's reply
    qtbot.waitUntil(lambda: len(asked) >= 1, timeout=10_000)
    qtbot.waitUntil(lambda: OLD_WORKER_NOTE in choice.line.text(), timeout=10_000)
    assert all(choice.is_enabled(task) for task in ("auto", "classification", "regression", "segmentation"))
    choose_file_dataset(qtbot, wizard, data_file, args="size=40")
    assert "first sample" in choice.line.text()  # asking: a busy hint, and the window keeps working
    qtbot.waitUntil(lambda: choice.auto == "segmentation", timeout=10_000)
    assert asked[-1]["name"] == f"file:{data_file}:Shapes" and asked[-1]["args"] == {"size": 40}
    combo = choice.combo
    assert combo.itemText(combo.findData("auto")) == f"auto (segmentation: {WHY})"
    for task, reason in UNAVAILABLE.items():
        item = combo.model().item(combo.findData(task))
        assert not item.isEnabled() and item.toolTip() == reason
        assert reason in choice.line.text()  # a visible line too, not only a tooltip
    assert choice.is_enabled("segmentation") and choice.is_enabled("custom")
    assert choice.line.isVisible() and "auto picks <b>segmentation</b>" in choice.line.text()
    assert "32 train" in page.info_line.text() and "int64 tensor of shape [16, 16]" in page.info_line.text()
    # A greyed task cannot be picked: the keyboard walks past it.
    combo.setFocus()
    seen = set()
    for key in (Qt.Key_Down,) * 6 + (Qt.Key_Up,) * 6:
        qtbot.keyClick(combo, key)
        seen.add(combo.currentData())
    assert seen == {"auto", "segmentation", "custom"}
    combo.setCurrentIndex(combo.findData("segmentation"))
    assert wizard.spec.task == "segmentation" and wizard.button(QWizard.NextButton).isEnabled()


def test_a_starting_task_the_data_cannot_serve_is_named_and_blocks_next(queries, qtbot, data_file):
    start = TrainSpec.from_dict({"task": "regression", "dataset": {"name": f"file:{data_file}:Shapes"}})
    wizard = open_wizard(qtbot, queries, start=start)
    choice = wizard.dataset_page.task_choice
    assert wizard.spec is not None and wizard.spec.task == "regression"  # nothing known yet: nothing refused
    qtbot.waitUntil(lambda: choice.auto == "segmentation", timeout=10_000)
    assert choice.error.isVisible() and choice.error.text().startswith(
        "task: regression does not fit this data"
    )
    assert wizard.spec is None and not wizard.button(QWizard.NextButton).isEnabled()
    choice.set_task("auto")
    assert (
        choice.error.isHidden()
        and wizard.spec.task == "auto"
        and wizard.button(QWizard.NextButton).isEnabled()
    )


def test_a_dataset_the_worker_cannot_read_says_so_and_offers_every_task(queries, qtbot, data_file):
    window = QWidget()  # the main window hands its query runner to the wizards it opens
    window.queries = queries
    qtbot.addWidget(window)
    wizard = TrainingWizard(DatasetState(), FAKE_DEVICES, "cpu", parent=window)
    assert wizard.queries is queries
    wizard.show()
    choose_file_dataset(qtbot, wizard, data_file, name="Broken")
    page = wizard.dataset_page
    qtbot.waitUntil(lambda: "could not read" in page.info_line.text(), timeout=10_000)
    assert "Broken() raised ValueError: no shapes (data.py, line 3)" in page.info_line.text()
    assert all(page.task_choice.is_enabled(task) for task in ("auto", "classification", "segmentation"))
    wizard.reject()
    assert page._info_job is None  # a closed wizard asks nothing more


def test_a_lightning_module_builds_a_lightning_model_name(qtbot, tmp_path):
    wizard = open_wizard(qtbot)
    page = wizard.model_page
    wizard.next()
    assert wizard.currentPage() is page
    hyper = wizard.hyper_page.form
    assert page.user_code_note.isHidden() and hyper.widgets["lr"].isEnabled()
    page.name.setCurrentText("LightningModule…")
    assert page.user_code_note.isVisible() and "with your permissions" in page.user_code_note.text()
    assert page.lightning_note.isVisible() and page.file_path.isEnabled()
    qtbot.keyClicks(page.file_path, str(tmp_path / "module.py"))
    qtbot.keyClicks(page.file_class, "LitNet")
    assert page.model_name() == f"lightning:{tmp_path / 'module.py'}:LitNet"
    assert wizard.spec is not None and wizard.spec.model.name == page.model_name()
    # Its configure_optimizers and training_step decide these, so they are greyed out with the reason.
    for field in ("lr", "optimizer", "loss"):
        assert not hyper.widgets[field].isEnabled()
        assert hyper.widgets[field].toolTip().startswith("Not used with a LightningModule")
    assert hyper.widgets["epochs"].isEnabled()
    page.name.setCurrentText("Python file…")
    assert page.model_name() == f"file:{tmp_path / 'module.py'}:LitNet" and hyper.widgets["lr"].isEnabled()
    page.name.setCurrentText("mlp")
    assert page.user_code_note.isHidden() and not page.file_path.isEnabled()


def test_a_user_models_arguments_go_into_model_args_and_bad_ones_are_named(qtbot, tmp_path):
    wizard = open_wizard(qtbot)
    page = wizard.model_page
    wizard.next()
    assert not page.args.isEnabled()  # a built-in model takes no arguments
    page.name.setCurrentText("LightningModule…")
    qtbot.keyClicks(page.file_path, str(tmp_path / "module.py"))
    qtbot.keyClicks(page.file_class, "LitNet")
    assert page.args.isEnabled()
    qtbot.keyClicks(page.args, "hidden=64, lr=0.01")
    assert wizard.spec is not None and wizard.spec.model.args == {"hidden": 64, "lr": 0.01}
    page.args.setText('{"hidden": ')
    assert wizard.spec is None
    assert page.args_error.isVisible() and page.args_error.text().startswith("model.args")
    assert not wizard.button(QWizard.NextButton).isEnabled()
    page.name.setCurrentText("mlp")  # the unparsed text of a model that takes none is not held against it
    assert wizard.spec is not None and wizard.spec.model.args == {}
    reopened = open_wizard(
        qtbot,
        start=TrainSpec.from_dict(
            {"model": {"name": f"file:{tmp_path / 'm.py'}:Net", "args": {"hidden": 8}}}
        ),
    )
    assert reopened.model_page.args.text() == format_args({"hidden": 8})


def test_a_custom_task_takes_your_loss_metrics_and_monitor(qtbot, tmp_path):
    wizard = open_wizard(qtbot)
    page, form = wizard.dataset_page, wizard.dataset_page.splits
    loss_file = tmp_path / "objective.py"
    loss_file.write_text("def loss(outputs, target):\n    return (outputs - target).abs().mean()\n")
    assert not page.loss_fields.path.isVisible() and not form.widgets["monitor"].isVisible()
    page.task_choice.set_task("custom")
    assert page.loss_fields.path.isVisible() and page.metrics_fields.attr.isVisible()
    assert form.widgets["monitor"].isVisible() and form.widgets["monitor_mode"].isVisible()
    # The Hyperparameters page's loss is not the one used: greyed out there, with where to set it.
    assert not wizard.hyper_page.form.widgets["loss"].isEnabled()
    assert "Dataset and task page" in wizard.hyper_page.form.widgets["loss"].toolTip()
    assert wizard.spec is None and not wizard.button(QWizard.NextButton).isEnabled()
    assert page.loss_fields.name_error.isVisible() and page.loss_fields.name_error.text().startswith("loss:")
    qtbot.keyClicks(page.loss_fields.path, str(loss_file))
    qtbot.keyClicks(page.loss_fields.attr, "loss")
    assert (
        wizard.spec is not None
        and wizard.spec.loss == f"file:{loss_file}:loss"
        and wizard.spec.task == "custom"
    )
    assert wizard.button(QWizard.NextButton).isEnabled() and page.loss_fields.name_error.isHidden()
    # a metric, but no metrics function yet: named at its field
    qtbot.keyClicks(form.widgets["monitor"], "iou")
    assert wizard.spec is None and form.error_labels["monitor"].text().startswith(
        "monitor: 'iou' names a metric"
    )
    qtbot.keyClicks(page.metrics_fields.path, str(loss_file))
    qtbot.keyClicks(page.metrics_fields.attr, "metrics")
    assert form.error_labels["monitor_mode"].text().startswith("monitor_mode: auto cannot tell")
    form.set_value("monitor_mode", "max")
    spec = wizard.spec
    assert (spec.metrics, spec.monitor, spec.monitor_mode) == (f"file:{loss_file}:metrics", "iou", "max")
    assert TrainSpec.from_toml(spec.to_toml()) == spec
    again = open_wizard(qtbot, start=spec)  # train again: the custom fields come back
    assert again.spec == spec and again.dataset_page.loss_fields.attr.text() == "loss"
    # Another task has its own loss and metrics: the custom ones do not travel on.
    again.dataset_page.task_choice.set_task("auto")
    assert again.spec.loss == "auto" and again.spec.metrics == "" and again.spec.monitor == ""
    assert again.hyper_page.form.widgets["loss"].isEnabled()


@pytest.mark.parametrize(
    ("text", "args"),
    [
        ("", {}),
        ("size=500", {"size": 500}),
        (
            'size=500, name="shapes", scale=0.5, flip=false',
            {"size": 500, "name": "shapes", "scale": 0.5, "flip": False},
        ),
        ("mode=fast, sizes=[1, 2, 3]", {"mode": "fast", "sizes": [1, 2, 3]}),
        ('{"size": 500, "extra": {"a": null}}', {"size": 500, "extra": {"a": None}}),
        ("{size = 500, name = 'x'}", {"size": 500, "name": "x"}),
    ],
)
def test_arguments_read_as_json_toml_or_key_value_pairs_and_print_back(text, args):
    assert parse_args(text) == args
    assert parse_args(format_args(args)) == args


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("500", "'500' is not key=value"),
        ("[1, 2]", "'[1, 2]' is not key=value"),
        ('{"size": 5', "is neither a JSON object nor a TOML table"),
        ("2x=3", "'2x' is not a Python keyword argument name"),
    ],
)
def test_arguments_that_do_not_parse_name_the_field(text, words):
    with pytest.raises(ValueError) as info:
        parse_args(text, "dataset.args")
    assert str(info.value).startswith("dataset.args: ") and words in str(info.value)


def test_the_class_count_the_wizard_filled_in_follows_the_dataset_chosen(qtbot, queries, data_file):
    """From the Data tab's digits (10 classes), another dataset on the first page (3 classes) sets the model's
    class count too, rather than leaving a 10-way head on 3 classes."""
    wizard = open_wizard(qtbot, queries, num_classes=10)
    form = wizard.model_page.form
    assert form.value("model.num_classes") == 10
    choose_file_dataset(qtbot, wizard, data_file)
    qtbot.waitUntil(lambda: form.value("model.num_classes") == 3, timeout=10_000)
    assert wizard.spec.model.num_classes == 3


def test_a_class_count_the_person_typed_stays_theirs(qtbot, queries, data_file):
    wizard = open_wizard(qtbot, queries, num_classes=10)
    form = wizard.model_page.form
    form.set_value("model.num_classes", 7)  # what they typed on the Model page
    choose_file_dataset(qtbot, wizard, data_file)
    qtbot.waitUntil(
        lambda: str((wizard.dataset_page.info or {}).get("dataset", "")).startswith("file:"), timeout=10_000
    )  # the file's 3 classes have been counted
    assert form.value("model.num_classes") == 7
