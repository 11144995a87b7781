"""The training wizard: fields checked where they are typed, fields that do not apply greyed out with the
reason, the last spec remembered, "train again" from a run's spec, fp16 refused on the CPU, and the spec
comparison that ignores the order of a table's keys."""

from __future__ import annotations

import copy

import pytest
from fake_worker import FAKE_DEVICES
from PySide6.QtWidgets import QWizard

from workbench.gui.panels.training.wizard import TrainingWizard
from workbench.gui.state import DatasetState
from workbench.gui.widgets.spec_form import spec_differences
from workbench.specs import DataSpec, TrainSpec


@pytest.fixture
def wizard(qtbot):
    wizard = TrainingWizard(DatasetState(), FAKE_DEVICES, "cpu")
    qtbot.addWidget(wizard)
    wizard.show()
    return wizard


def go_to(wizard, page) -> None:
    wizard.restart()
    while wizard.currentPage() is not page:
        wizard.next()


def retype(qtbot, widget, text: str) -> None:
    widget.clear()
    qtbot.keyClicks(widget, text)


def test_an_invalid_field_is_flagged_where_it_is_typed(wizard, qtbot):
    go_to(wizard, wizard.hyper_page)
    form = wizard.hyper_page.form
    next_button = wizard.button(QWizard.NextButton)
    assert next_button.isEnabled() and form.error_labels["lr"].isHidden()
    retype(qtbot, form.widgets["lr"], "-1")
    assert form.widgets["lr"].text() == "-1"
    label = form.error_labels["lr"]
    assert label.isVisible() and label.text() == "lr: -1.0 is out of range; must be > 0 and <= 10"
    assert not next_button.isEnabled()
    retype(qtbot, form.widgets["weight_decay"], "abc")  # two wrong fields: both are named, each at its own
    assert form.error_labels["weight_decay"].text() == "weight_decay: 'abc' is not a number"
    assert form.error_labels["lr"].isVisible()
    retype(qtbot, form.widgets["lr"], "3e-4")
    retype(qtbot, form.widgets["weight_decay"], "0.01")
    assert form.error_labels["lr"].isHidden() and form.error_labels["weight_decay"].isHidden()
    assert next_button.isEnabled()
    assert wizard.spec.lr == 3e-4 and wizard.spec.weight_decay == 0.01


def test_a_cross_field_rule_is_shown_at_the_field_it_names(wizard, qtbot):
    go_to(wizard, wizard.speed_page)
    form = wizard.speed_page.form
    form.widgets["nproc"].setValue(2)
    assert "nproc: 2 needs distributed=ddp" in form.error_labels["nproc"].text()
    assert not wizard.button(QWizard.NextButton).isEnabled()
    form.set_value("distributed", "ddp")
    assert form.error_labels["nproc"].isHidden() and wizard.button(QWizard.NextButton).isEnabled()


def test_save_spec_is_disabled_while_the_spec_is_invalid(wizard, qtbot):
    retype(qtbot, wizard.hyper_page.form.widgets["lr"], "-1")
    go_to(wizard, wizard.review_page)  # next() in code goes on where the button would not
    review = wizard.review_page
    assert not review.save.isEnabled()
    assert (
        review.text.toPlainText() == ""
        and "No spec while a field is invalid" in review.text.placeholderText()
    )
    assert "lr: -1.0 is out of range" in review.error.text()
    assert not wizard.button(QWizard.FinishButton).isEnabled()
    retype(qtbot, wizard.hyper_page.form.widgets["lr"], "0.01")
    assert review.save.isEnabled() and "lr = 0.01" in review.text.toPlainText()
    assert wizard.button(QWizard.FinishButton).isEnabled()


def test_fields_that_do_not_apply_are_greyed_out_with_the_reason(wizard, qtbot):
    form = wizard.hyper_page.form
    momentum, step_size, gamma = (form.widgets[name] for name in ("momentum", "step_size", "gamma"))
    form.set_value("optimizer", "sgd")
    assert momentum.isEnabled()
    form.set_value("optimizer", "adam")
    assert not momentum.isEnabled()
    assert momentum.toolTip().startswith("Not used by adam: only sgd and rmsprop take a momentum.")
    form.set_value("scheduler", "none")
    assert not step_size.isEnabled() and not gamma.isEnabled()
    assert "only the step schedule uses it" in gamma.toolTip()
    form.set_value("scheduler", "step")
    assert step_size.isEnabled() and gamma.isEnabled()
    form.set_value("loss", "mse")
    assert not form.widgets["label_smoothing"].isEnabled()
    # A wrong value in a field that stops applying no longer blocks the run (the loop never reads it).
    form.set_value("optimizer", "sgd")
    retype(qtbot, momentum, "5")
    assert wizard.spec is None and not form.error_labels["momentum"].isHidden()
    form.set_value("optimizer", "adamw")
    assert wizard.spec is not None and form.error_labels["momentum"].isHidden()
    assert wizard.spec.momentum == TrainSpec().momentum


def test_the_wizard_starts_from_the_last_spec_started(qtbot, settings):
    first = TrainingWizard(DatasetState(), FAKE_DEVICES, "cpu", settings=settings)
    qtbot.addWidget(first)
    hyper = first.hyper_page.form
    hyper.widgets["epochs"].setValue(3)
    hyper.set_value("optimizer", "sgd")
    hyper.widgets["momentum"].setText("0.5")
    first.model_page.name.setCurrentText("mlp")
    first.accept()  # Start training
    second = TrainingWizard(
        DatasetState(DataSpec.from_dict({"name": "fake"})),
        FAKE_DEVICES,
        "cpu",
        num_classes=7,
        settings=settings,
    )
    qtbot.addWidget(second)
    form = second.hyper_page.form
    assert form.value("epochs") == 3 and form.value("optimizer") == "sgd" and form.value("momentum") == "0.5"
    assert second.model_page.model_name() == "mlp"
    # The dataset is the Data tab's, and its classes set the model's outputs.
    assert second.spec.dataset.name == "fake" and second.spec.model.num_classes == 7
    # Cancelling does not overwrite what was remembered.
    form.widgets["epochs"].setValue(9)
    second.reject()
    third = TrainingWizard(DatasetState(), FAKE_DEVICES, "cpu", settings=settings)
    qtbot.addWidget(third)
    assert third.hyper_page.form.value("epochs") == 3


def test_train_again_starts_from_a_runs_spec(qtbot, settings):
    run_spec = TrainSpec.from_dict(
        {
            "epochs": 7,
            "lr": 0.02,
            "dataset": {"name": "fake", "size": 50},
            "model": {"name": "mlp", "num_classes": 3},
        }
    ).to_dict()
    wizard = TrainingWizard(
        DatasetState(), FAKE_DEVICES, "cpu", start=run_spec, num_classes=10, settings=settings
    )
    qtbot.addWidget(wizard)
    assert wizard.hyper_page.form.value("epochs") == 7
    assert "fake" in wizard.dataset_page.summary.text()
    assert wizard.spec == TrainSpec.from_dict({**run_spec, "device": "cpu"})
    broken = {**run_spec, "epochs": 0}
    again = TrainingWizard(DatasetState(), FAKE_DEVICES, "cpu", start=broken)
    qtbot.addWidget(again)
    assert "cannot be used as it is (epochs: 0 is out of range" in again.dataset_page.note.text()
    assert again.spec is not None


def test_fp16_is_greyed_out_on_the_cpu_even_where_autocast_takes_it(qtbot):
    devices = copy.deepcopy(FAKE_DEVICES)
    devices[0]["capabilities"]["autocast_fp16"] = True  # what the real worker reports for a CPU
    wizard = TrainingWizard(DatasetState(), devices, "cpu", start=TrainSpec.from_dict({"amp": "fp16"}))
    qtbot.addWidget(wizard)
    speed = wizard.speed_page
    fp16 = speed.amp.findData("fp16")
    item = speed.amp.model().item(fp16)
    assert not item.isEnabled() and "ten times slower" in item.toolTip()
    assert "fp16 on the CPU runs about ten times slower" in speed.reasons.text()
    assert speed.amp.currentData() == "none" and wizard.spec.amp == "none"
    assert speed.amp.model().item(speed.amp.findData("bf16")).isEnabled()
    speed.device.setCurrentIndex(speed.device.findData("cuda:0"))
    assert speed.amp.model().item(fp16).isEnabled() and item.toolTip() == ""


@pytest.mark.parametrize(
    ("spec", "shown", "hidden"),
    [
        ({"name": "fake", "size": 50}, "50 random images in 10 classes", "root"),
        ({"name": "digits"}, "bundled with scikit-learn", "root"),
        ({"name": "shapes_detection", "size": 160}, "160 synthetic shape images", "random"),
        (
            {"name": "mnist", "root": "/data/m", "download": True},
            "root /data/m · downloads what is missing",
            "random",
        ),
    ],
)
def test_the_dataset_summary_shows_only_what_the_dataset_uses(qtbot, spec, shown, hidden):
    wizard = TrainingWizard(DatasetState(DataSpec.from_dict(spec)), FAKE_DEVICES, "cpu", data_dir="/ws/data")
    qtbot.addWidget(wizard)
    text = wizard.dataset_page.summary.text()
    assert shown in text and hidden not in text


def test_the_dataset_page_follows_the_data_tab_when_it_takes_a_choice_back(qtbot):
    state = DatasetState()
    wizard = TrainingWizard(state, FAKE_DEVICES, "cpu")
    qtbot.addWidget(wizard)
    state.set_spec(DataSpec.from_dict({"name": "fake", "num_workers": 2}))
    assert "fake" in wizard.dataset_page.summary.text()
    assert wizard.speed_page.form.value("dataset.num_workers") == 2 and wizard.spec.dataset.num_workers == 2


def test_spec_differences_ignore_the_order_of_a_tables_keys():
    a = {
        "epochs": 3,
        "dataset": {
            "name": "digits",
            "augment": [{"name": "rotation", "degrees": 15}, {"name": "hflip", "p": 0.5}],
            "normalize": {"mean": [0.5], "std": [0.2]},
        },
    }
    b = {
        "dataset": {
            "normalize": {"std": [0.2], "mean": [0.5]},
            "augment": [{"degrees": 15, "name": "rotation"}, {"p": 0.5, "name": "hflip"}],
            "name": "digits",
        },
        "epochs": 3,
    }
    assert spec_differences(a, b) == []
    b["dataset"]["augment"][0]["degrees"] = 30
    b["epochs"] = 4
    assert spec_differences(a, b) == [
        ("dataset.augment", a["dataset"]["augment"], b["dataset"]["augment"]),
        ("epochs", 3, 4),
    ]
    # Augmentations run in list order, so the order of the list itself still counts.
    swapped = {**a, "dataset": {**a["dataset"], "augment": a["dataset"]["augment"][::-1]}}
    assert [path for path, _, _ in spec_differences(a, swapped)] == ["dataset.augment"]
    assert spec_differences({"normalize": "auto"}, {"normalize": {"mean": [0.5], "std": [0.2]}}) == [
        ("normalize", "auto", {"mean": [0.5], "std": [0.2]})
    ]
    assert spec_differences({"deterministic": True}, {"deterministic": 1}) != []
    assert spec_differences({"lr": 0.1}, {}) == [("lr", 0.1, None)]


def test_a_true_false_or_auto_field_is_a_three_way_choice(qtbot):
    from PySide6.QtWidgets import QComboBox

    from workbench.gui.widgets.spec_form import SpecForm

    form = SpecForm(TrainSpec, ["channels_last", "dataset.on_device"], TrainSpec().to_dict())
    qtbot.addWidget(form)
    for field in ("channels_last", "dataset.on_device"):
        combo = form.widgets[field]
        assert isinstance(combo, QComboBox)
        assert [combo.itemText(i) for i in range(combo.count())] == ["auto", "true", "false"]
        assert form.value(field) == "auto"
        for value in (True, False, "auto"):
            form.set_value(field, value)
            assert (
                form.value(field) is value
                or form.value(field) == value
                and type(form.value(field)) is type(value)
            )
    data = form.apply_to(TrainSpec().to_dict())
    assert TrainSpec.from_dict(data).channels_last == "auto"


def test_loader_workers_read_auto_by_default_and_a_count_when_set(qtbot):
    state = DatasetState()
    wizard = TrainingWizard(state, FAKE_DEVICES, "cpu")
    qtbot.addWidget(wizard)
    box = wizard.speed_page.form.widgets["dataset.num_workers"]
    assert box.text() == "auto" and wizard.spec.dataset.num_workers == "auto"
    box.setValue(4)
    assert wizard.speed_page.form.value("dataset.num_workers") == 4
    box.setValue(box.minimum())
    assert box.text() == "auto" and wizard.speed_page.form.value("dataset.num_workers") == "auto"


def test_a_seed_field_reaching_past_a_spin_boxs_int_is_clamped_to_it(qtbot):
    # Seeds take torch's 64-bit bound; a QSpinBox holds a C int, and a range past it would wrap to a negative.
    from workbench.gui.widgets.spec_form import QT_INT_MAX, SpecForm

    form = SpecForm(TrainSpec, ["seed", "dataset.seed"], TrainSpec().to_dict())
    qtbot.addWidget(form)
    for field in ("seed", "dataset.seed"):
        box = form.widgets[field]
        assert box.minimum() == 0 and box.maximum() == QT_INT_MAX
        box.setValue(QT_INT_MAX)
        assert form.value(field) == QT_INT_MAX


def test_the_model_pages_class_count_reads_auto_for_zero(wizard):
    box = wizard.model_page.form.widgets["model.num_classes"]
    box.setValue(0)
    assert box.text() == "auto" and wizard.model_page.form.value("model.num_classes") == 0
    box.setValue(3)
    assert box.text() == "3"


def test_a_generated_datasets_image_count_travels_into_the_spec(qtbot):
    """shapes_detection writes `size` images: the wizard keeps the example's count (it once fell back to
    1000); a dataset with its own files leaves `size` out."""
    for name, kept in (("shapes_detection", True), ("fake", True), ("mnist", False)):
        spec = DataSpec.from_dict({"name": name, "size": 160})
        wizard = TrainingWizard(DatasetState(spec), FAKE_DEVICES, "cpu", data_dir="/ws/data")
        qtbot.addWidget(wizard)
        dataset = wizard.spec_data()["dataset"]
        assert ("size" in dataset and dataset["size"] == 160) == kept, (name, dataset)
