"""The Quantization tab against a fake worker that speaks the real protocol: the wizard and its presets, the
ladder filling in live, the per-layer table with its worst layers, the plots following the selection, compare,
cancel, a failed run, mixed precision in one click, and the way in from the Training and Runs tabs and the
graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWizard

from workbench.gui.panels.quant.layer_table import COLUMNS, KEY_ROLE
from workbench.gui.panels.quant.results import QuantResults
from workbench.gui.panels.quant.wizard import PRESETS, QuantWizard
from workbench.runs import RunStore
from workbench.specs import QuantSpec

W4A8 = "W4A8 (paper's flow)"


def _trained_run(workspace) -> str:
    with RunStore(workspace).create_run(
        "train",
        {"epochs": 1, "model": {"name": "cnn"}, "dataset": {"name": "digits"}},
        task="train.classifier",
    ) as run:
        run.write_report({"status": "done", "epochs_completed": 1})
        run.set_status("done")
        return run.id


def _quantize(window, qtbot, source: str, *, delay_ms: int = 0, **fields) -> str:
    """Start a (fake) quantization from the window and wait until the tab shows its result; returns its run
    id."""
    data = {"source": {"run": source}, "calibration": {"samples": 64, "seed": delay_ms}, **fields}
    spec = QuantSpec.from_dict(data)
    before = {r.job_id for r in window.manager.jobs.all()}
    assert window.start_quantization(spec) is spec
    record = next(r for r in window.manager.jobs.all() if r.job_id not in before)
    panel = window.quant_panel

    def shown() -> bool:
        now = window.manager.jobs.get(record.job_id)
        return (
            not now.active
            and panel.results is not None
            and bool(panel.results.report)
            and panel.results.run_id == Path(now.run_dir or "").name
        )

    qtbot.waitUntil(shown, timeout=15_000)
    return panel.results.run_id


@pytest.fixture
def trained(fake_window):
    return _trained_run(fake_window.workspace)


def test_the_tab_is_there_and_says_what_to_do_first(fake_window, qtbot):
    titles = [fake_window.tabs.tabText(i) for i in range(fake_window.tabs.count())]
    assert "Quantization" in titles
    fake_window.show_tab(fake_window.quant_panel)
    panel = fake_window.quant_panel
    assert panel.pages.currentWidget() is panel.empty_state
    assert "train one in the Training tab first" in panel.empty_text.text()
    assert not panel.empty_button.isEnabled()
    _trained_run(fake_window.workspace)
    panel.refresh()
    assert panel.empty_button.isEnabled() and "white paper" in panel.empty_text.text()


def test_wizard_presets_fill_the_paper_flow_and_defaults_come_from_the_data_tab(
    fake_window, qtbot, trained, settings
):
    runs = fake_window.quant_panel.training_runs()
    assert [r["id"] for r in runs] == [trained]
    wizard = QuantWizard(runs, calibration=(100, 7), device="cpu", settings=settings, parent=fake_window)
    qtbot.addWidget(wizard)
    assert wizard.source_page.preset.currentData() == "W8A8 (safe)"
    spec = wizard.rebuild()
    assert spec.source.run == trained and spec.weights.bits == 8 and not spec.adaround.enabled
    assert (spec.calibration.samples, spec.calibration.seed, spec.device) == (100, 7, "cpu")
    wizard.source_page.preset.setCurrentIndex(wizard.source_page.preset.findData(W4A8))
    spec = wizard.spec
    assert spec.weights.bits == 4 and spec.adaround.enabled and spec.cle and spec.weights.range == "mse"
    assert spec.calibration.samples == 100  # a preset keeps the calibration subset
    assert wizard.scheme_page.form.value("weights.bits") == 4
    # A bad field is named under itself and blocks Quantize (the percentile counts with range=percentile
    # only).
    scheme = wizard.scheme_page.form
    scheme.set_value("weights.range", "percentile")
    assert scheme.widgets["weights.percentile"].isEnabled()
    wizard.scheme_page.form.widgets["weights.percentile"].setText("120")
    assert wizard.spec is None and "weights.percentile" in wizard.scheme_page.form.errors
    assert not wizard.scheme_page.isComplete()
    wizard.scheme_page.form.widgets["weights.percentile"].setText("99.9")
    wizard.accept()
    assert wizard.result() == QWizard.Accepted
    # The next wizard starts from what was last used.
    again = QuantWizard(runs, settings=settings, parent=fake_window)
    qtbot.addWidget(again)
    assert again.rebuild().weights.bits == 4 and again.spec.weights.percentile == 99.9


def test_wizard_greys_out_what_the_rest_of_the_spec_leaves_unused(qtbot, settings):
    wizard = QuantWizard([{"id": "digits-run", "learned": "classification"}], settings=settings)
    qtbot.addWidget(wizard)
    scheme, pipeline = wizard.scheme_page.form, wizard.pipeline_page.form
    wizard.source_page.preset.setCurrentIndex(wizard.source_page.preset.findData(W4A8))
    # mse ranges take no percentile: greyed, the reason in its tooltip, and a stale bad value blocks nothing.
    percentile = scheme.widgets["activations.percentile"]
    assert not percentile.isEnabled() and "range method mse" in percentile.toolTip()
    percentile.setText("120")
    assert wizard.rebuild() is not None and wizard.spec.activations.percentile == 99.99
    scheme.set_value("activations.range", "percentile")
    assert percentile.isEnabled() and wizard.spec is None  # now it counts, and 120 is out of range
    percentile.setText("99.5")
    assert wizard.spec.activations.percentile == 99.5
    # AdaRound's iterations only with AdaRound on; QAT's learning rate only with QAT epochs.
    assert pipeline.widgets["adaround.iterations"].isEnabled()
    pipeline.set_value("adaround.enabled", False)
    assert not pipeline.widgets["adaround.iterations"].isEnabled()
    assert not pipeline.widgets["qat.lr"].isEnabled() and "no QAT" in pipeline.widgets["qat.lr"].toolTip()
    assert pipeline.widgets["qat.epochs"].text() == "0 (no QAT)"
    pipeline.set_value("qat.epochs", 2)
    assert pipeline.widgets["qat.lr"].isEnabled() and wizard.spec.qat.epochs == 2
    # Counts of 0 and the granularity read as words; the values stay the spec's.
    assert wizard.calibration_page.form.widgets["eval_samples"].text() == "all (the whole test split)"
    assert wizard.spec.eval_samples == 0
    granularity = scheme.widgets["weights.granularity"]
    assert granularity.currentText() == "per-channel" and wizard.spec.weights.granularity == "per_channel"
    # The allowed drop's tooltip speaks of the unit it is typed in.
    assert (
        "percentage points: 1 allows one point" in pipeline.widgets["mixed_precision.target_drop"].toolTip()
    )


def test_wizard_without_training_runs_cannot_start(fake_window, qtbot, settings):
    wizard = QuantWizard([], settings=settings, parent=fake_window)
    qtbot.addWidget(wizard)
    assert wizard.rebuild() is None and not wizard.source_page.isComplete()
    assert wizard.source_page.empty.isVisibleTo(wizard.source_page)


def test_the_ladder_fills_in_live_then_the_table_and_plots_show_the_worst_layer(fake_window, qtbot, trained):
    # calibration.seed is the fake job's pause per rung in ms: 1.5 s, so the window sees the ladder mid-run
    # even when its first event arrives seconds late (two tests share the cores).
    spec = QuantSpec.from_dict({"source": {"run": trained}, "cle": True, "calibration": {"seed": 1500}})
    fake_window.start_quantization(spec)
    panel = fake_window.quant_panel
    assert fake_window.current_panel() is panel
    qtbot.waitUntil(lambda: panel.results is not None and len(panel.results.ladder) >= 2, timeout=10_000)
    live = panel.results
    assert live.planned == ["fp32", "fold_bn", "cle", "weight_ranges", "activation_ranges"]
    assert len(live.ladder) < len(live.planned)  # seen mid-run, not only at the end
    assert panel.progress_box.isVisible() and panel.stop_button.isEnabled()
    qtbot.waitUntil(lambda: not panel.job_of_run and bool(panel.results.report.get("layers")), timeout=30_000)
    results = panel.results
    assert [s["step"] for s in results.ladder] == live.planned
    assert panel.layer_model.rowCount() == 7  # input + 3 layers × weight and activation
    assert not panel.progress_box.isVisible()
    # The worst weight quantizer is selected and drawn first; the worst rows are marked.
    current = panel.layer_view.currentIndex().data(KEY_ROLE)
    assert current == ("classifier", "weight")
    worst_row = panel.layer_model.row_of("classifier", "weight")
    assert panel.layer_model.data(panel.layer_model.index(worst_row, 0), Qt.BackgroundRole) is not None
    # Only the worst few: at most a quarter of each tensor kind (at least one) carries the mark.
    for tensor in ("weight", "activation"):
        kind = [e for e in panel.layer_model.rows if e.get("tensor") == tensor]
        marked = [e for e in kind if (e["name"], tensor) in panel.layer_model.worst]
        assert 1 <= len(marked) <= max(1, len(kind) // 4), (tensor, len(marked), len(kind))
    assert "FP32 99.00%" in panel.summary.text() and "logit SQNR" in panel.summary.text()
    assert panel.table.item(0, 2).text() == "W8A8 +CLE"


def test_sorting_by_sqnr_and_filtering_by_tensor(fake_window, qtbot, trained):
    _quantize(fake_window, qtbot, trained, weights={"bits": 4})
    panel = fake_window.quant_panel
    sqnr = COLUMNS.index("SQNR (dB)")
    panel.layer_view.sortByColumn(sqnr, Qt.AscendingOrder)
    shown = [float(panel.layer_proxy.index(r, sqnr).data()) for r in range(panel.layer_proxy.rowCount())]
    assert shown == sorted(shown)
    panel.tensor_combo.setCurrentIndex(panel.tensor_combo.findData("activation"))
    assert panel.layer_proxy.rowCount() == 4
    assert {panel.layer_proxy.index(r, 1).data() for r in range(4)} == {"activation"}
    # Selecting a weight row from elsewhere (the graph) brings every row back so it can be seen.
    assert panel.select_layer("features.2", "weight")
    assert panel.layer_proxy.rowCount() == 7
    assert panel.layer_view.currentIndex().data(KEY_ROLE) == ("features.2", "weight")


def test_a_finished_run_reads_back_as_it_was_seen_live(fake_window, qtbot, trained):
    run_id = _quantize(fake_window, qtbot, trained, sensitivity=True)
    panel = fake_window.quant_panel
    live_layers = panel.results.layers
    stored = QuantResults.from_run(panel.runs[run_id]["run_dir"])
    assert stored.layers == live_layers
    arrays = stored.tensor("features.0", "weight")
    assert arrays.estimators == ["chosen", "minmax", "mse", "percentile"]
    assert arrays.cle_ranges.shape == (2, 8, 2)
    assert np.array_equal(arrays.counts, panel.results.tensor("features.0", "weight").counts)


def test_compare_puts_two_ladders_side_by_side(fake_window, qtbot, trained):
    first = _quantize(fake_window, qtbot, trained)
    second = _quantize(fake_window, qtbot, trained, weights={"bits": 4}, adaround={"enabled": True})
    panel = fake_window.quant_panel
    assert panel.results.run_id == second
    assert panel.compare_with(first)
    assert panel.compared is not None and panel.compared.run_id == first
    assert [label for label, _ in panel.ladder.ladders] == [panel.results.label, panel.compared.label]
    assert panel.results.label.startswith("W4A8") and panel.compared.label.startswith("W8A8")
    # The run shown is not offered to compare with itself.
    offered = [panel.compare_combo.itemData(i) for i in range(panel.compare_combo.count())]
    assert first in offered and second not in offered


def test_cancel_stops_a_running_quantization(fake_window, qtbot, trained):
    spec = QuantSpec.from_dict({"source": {"run": trained}, "calibration": {"seed": 3000}})  # 3 s a rung
    fake_window.start_quantization(spec)
    panel = fake_window.quant_panel
    qtbot.waitUntil(lambda: panel.cancel_button.isVisible() and bool(panel.job_of_run), timeout=10_000)
    run_id = panel.selected_run_id()
    qtbot.mouseClick(panel.cancel_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: not panel.job_of_run, timeout=10_000)
    assert panel.runs[run_id]["status"] == "cancelled"
    assert not panel.progress_box.isVisible()


def test_a_failed_quantization_says_why_and_the_window_stays(fake_window, qtbot):
    spec = QuantSpec.from_dict({"source": {"run": "broken"}})
    fake_window.start_quantization(spec)
    panel = fake_window.quant_panel
    qtbot.waitUntil(
        lambda: (
            not panel.job_of_run
            and bool(panel.runs)
            and next(iter(panel.runs.values()))["status"] == "failed"
        ),
        timeout=10_000,
    )
    assert "not a training run" in panel.summary.text()
    assert fake_window.status_light.state == "ready"


def test_apply_mixed_precision_is_one_click(fake_window, qtbot, trained):
    _quantize(fake_window, qtbot, trained, weights={"bits": 4}, mixed_precision={"target_drop": 0.005})
    panel = fake_window.quant_panel
    assert panel.apply_button.isEnabled()
    jobs_before = len(fake_window.manager.jobs.all())
    qtbot.mouseClick(panel.apply_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: len(fake_window.manager.jobs.all()) > jobs_before, timeout=5_000)
    started = max(fake_window.manager.jobs.all(), key=lambda r: r.submitted)
    assert started.task == "quant.analyze"
    assert started.spec["mixed_precision"] == {
        "target_drop": 0.0,
        "layers": [{"name": "classifier", "bits": 8}],
    }
    assert started.spec["weights"]["bits"] == 4


def test_graph_clicks_and_the_runs_tab_open_a_layer_here(fake_window, qtbot, trained):
    run_id = _quantize(fake_window, qtbot, trained)
    fake_window.show_tab(fake_window.training_panel)
    fake_window._on_quant_layer_requested(run_id, "features.2", "activation")
    panel = fake_window.quant_panel
    assert fake_window.current_panel() is panel
    assert panel.layer_view.currentIndex().data(KEY_ROLE) == ("features.2", "activation")
    fake_window.show_tab(fake_window.runs_panel)
    fake_window._on_runs_open_requested(panel.runs[run_id]["run_dir"], "quant.analyze")
    assert fake_window.current_panel() is panel and panel.selected_run_id() == run_id


def test_the_training_tab_offers_quantize_on_a_finished_run(fake_window, qtbot, trained, monkeypatch):
    opened = []

    def exec_(wizard):  # the wizard would be modal: note what it opened on, and close it
        opened.append(wizard.source_page.run.currentData())
        return 0

    monkeypatch.setattr(QuantWizard, "exec", exec_)
    training = fake_window.training_panel
    training.refresh()
    training.select_run(trained)
    assert training.quantize_button.isEnabled()
    qtbot.mouseClick(training.quantize_button, Qt.LeftButton)
    assert opened == [trained]


def test_presets_are_valid_specs():
    from workbench.gui.panels.quant.wizard import preset_data

    for name in PRESETS:
        QuantSpec.from_dict(preset_data(name))


def test_wizard_fields_say_what_they_are_under_weights_and_activations_headings(
    fake_window, qtbot, trained, settings
):
    from PySide6.QtWidgets import QLabel

    wizard = QuantWizard(fake_window.quant_panel.training_runs(), settings=settings, parent=fake_window)
    qtbot.addWidget(wizard)
    scheme = wizard.scheme_page.form
    headings = [
        label.text() for label in scheme.findChildren(QLabel) if label.objectName().startswith("heading:")
    ]
    assert headings == ["<b>Weights</b>", "<b>Activations</b>"]
    # Bits appears under both headings, the heading saying whose; the range method reads as one.
    layout = scheme.layout_
    rows = []
    for row in range(layout.rowCount()):
        item = layout.itemAt(row, layout.ItemRole.LabelRole) or layout.itemAt(
            row, layout.ItemRole.SpanningRole
        )
        if item is not None and isinstance(item.widget(), QLabel):
            rows.append(item.widget().text())
    assert rows.index("<b>Weights</b>") < rows.index("Bits") < rows.index("<b>Activations</b>")
    assert rows.count("Range method") == 2
    pipeline = wizard.pipeline_page.form
    texts = {field: pipeline.widgets[field].text() for field in ("fold_bn", "cle", "adaround.enabled")}
    assert texts == {
        "fold_bn": "Fold BatchNorm",
        "cle": "Cross-layer equalisation",
        "adaround.enabled": "AdaRound",
    }
    label = pipeline.layout_.labelForField(pipeline._rows["adaround.iterations"])
    assert label.text() == "AdaRound iterations"


def test_a_mixed_precision_runs_label_gives_every_bit_width_it_uses():
    from workbench.gui.panels.quant.quant_panel import scheme_of
    from workbench.gui.panels.quant.results import bit_widths

    mixed = {
        "weights": {"bits": 2},
        "activations": {"bits": 8},
        "cle": True,
        "adaround": {"enabled": True},
        "mixed_precision": {
            "layers": [{"name": "features.0", "bits": 8}, {"name": "classifier", "bits": 16}]
        },
    }
    assert bit_widths(mixed) == "W2/8/16 mixed A8/16"
    assert scheme_of(mixed) == "W2/8/16 mixed A8/16 +CLE+AdaRound"
    assert bit_widths({"weights": {"bits": 4}, "activations": {"bits": 8}}) == "W4A8"
    assert bit_widths({}) == ""


def test_the_tabs_splitter_positions_come_back_in_the_next_session(fake_window, qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from workbench.gui.main_window import MainWindow
    from workbench.gui.settings import Settings

    panel = fake_window.quant_panel
    panel.splitters["right"].setSizes([500, 300])
    dragged = panel.splitters["right"].sizes()
    fake_window.close()
    reread = Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat))
    again = MainWindow(fake_window.manager, tmp_path / "workspace", reread)
    qtbot.addWidget(again)
    again.resize(1300, 850)
    again.show()
    assert again.quant_panel.splitters["right"].sizes() == dragged


def test_apply_mixed_precision_says_why_it_is_greyed_out(fake_window, qtbot, trained):
    _quantize(fake_window, qtbot, trained)
    panel = fake_window.quant_panel
    # The summary also says how much of the model is quantized and what stays float.
    assert "99.9% of parameters quantized (float: LayerNorm)" in panel.summary.text()
    assert not panel.apply_button.isEnabled()
    assert "no mixed-precision proposal" in panel.apply_button.toolTip()


def test_the_allowed_drop_is_typed_in_percentage_points_for_a_share(qtbot, settings):
    runs = [
        {"id": "digits-run", "learned": "classification", "label": "cnn · digits"},
        {"id": "diabetes-run", "learned": "regression", "label": "mlp · diabetes"},
    ]
    wizard = QuantWizard(runs, settings=settings)
    qtbot.addWidget(wizard)
    form = wizard.pipeline_page.form
    field = form.widgets["mixed_precision.target_drop"]
    label = form.layout_.labelForField(form._rows["mixed_precision.target_drop"])
    assert label.text() == "Mixed precision: allowed drop (percentage points)"
    field.setText("1")  # one point, as a person means it
    assert wizard.spec.mixed_precision.target_drop == 0.01
    field.setText("150")  # more than the whole scale: the spec says so, under the field
    assert wizard.spec is None and form.error_labels["mixed_precision.target_drop"].isVisibleTo(form)
    field.setText("0.5")
    # A regression's monitor (MAE) rises in its own units: the field shows the spec's value as it is.
    wizard.source_page.run.setCurrentIndex(1)
    assert label.text() == "Mixed precision: allowed drop" and field.text() == "0.005"
    assert "as a fraction" in field.toolTip()  # the spec's own help: the monitor's own units
    field.setText("0.3")
    assert wizard.spec.mixed_precision.target_drop == 0.3
    wizard.source_page.run.setCurrentIndex(0)
    assert field.text() == "30" and wizard.spec.mixed_precision.target_drop == 0.3


def test_the_layer_table_shows_eight_layers_at_first_in_a_1400x820_window(fake_window, qtbot):
    from workbench.gui.panels.quant.quant_panel import TABLE_ROWS

    fake_window.resize(1400, 820)
    fake_window.show_tab(fake_window.quant_panel)
    panel = fake_window.quant_panel
    panel.pages.setCurrentIndex(1)  # the runs and the run shown, as once a run exists
    panel.layer_model.set_layers(
        [{"name": f"features.{i}", "tensor": "weight", "bits": 8, "sqnr_db": 40.0 + i} for i in range(20)]
    )
    view = panel.layer_view

    def rows_in_view() -> int:
        return view.viewport().height() // view.rowHeight(0)

    qtbot.waitUntil(lambda: view.isVisible() and rows_in_view() >= TABLE_ROWS >= 8)
    assert panel.plots.height() > 150  # and the plots keep a height to read
    # A taller window gives its height to the plots; the table keeps its eight rows.
    right = panel.splitters["right"]
    table_height, plots_height = right.sizes()
    fake_window.resize(1400, 1000)
    qtbot.waitUntil(lambda: right.sizes()[1] > plots_height)
    assert right.sizes()[0] == table_height and rows_in_view() >= 8


def test_the_sensitivity_tab_shows_its_value_labels_and_its_legend_beside_it_in_a_1400x820_window(
    fake_window, qtbot
):
    """With eight layers in the table the plots are ~80 px shorter than they were: with the legend beside the
    chart the rows take its whole height, and five layers' bars still hold their values."""
    from PySide6.QtCore import QPoint, QRect

    fake_window.resize(1400, 820)
    fake_window.show_tab(fake_window.quant_panel)
    panel = fake_window.quant_panel
    panel.pages.setCurrentIndex(1)
    panel.plots.setCurrentWidget(panel.sensitivity)
    chart = panel.sensitivity
    chart.set_rows(
        [
            {"layer": name, "only_this": 0.944 - i * 0.002, "all_but_this": 0.939}
            for i, name in enumerate(["input", "features.0", "features.4", "pool", "classifier"])
        ],
        0.9944,
        0.939,
    )
    qtbot.waitUntil(
        lambda: chart.isVisible() and chart.legend.isVisible() and chart.plot.getViewBox().height() > 0
    )
    qtbot.waitUntil(lambda: all(label.isVisible() for label in chart.labels))
    # the plots' height at this size, where the legend over the chart hid the labels
    assert chart.height() < 300

    def rect(widget) -> QRect:
        return QRect(widget.mapTo(chart, QPoint(0, 0)), widget.size())

    assert rect(chart.legend).left() >= rect(chart.plot).right()
