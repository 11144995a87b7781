"""The window's tabs and the routing between them: each panel built on first use, a run, a sample, a graph or
a layer opened in the tab that owns it, and the worker's events handed to the tabs that are built."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QTabWidget, QWidget

from workbench.errors import SpecError
from workbench.gui.widgets.lazy_tab import LazyTab
from workbench.specs import DataSpec


class Navigation(QObject):
    """Owns `tabs` and their panels for `main` (a MainWindow); every hand-off from one tab to another goes
    through here, so a panel never needs to know the others."""

    def __init__(self, main):
        super().__init__(main)
        self.main = main
        self.tabs = QTabWidget(main)
        self.tabs.setDocumentMode(True)
        # Each tab is built the first time it is shown or needed: the window paints before pyqtgraph and the
        # panels' modules are imported (benchmarks/startup.py), and an unvisited tab costs nothing.
        self.data_tab = LazyTab(self._make_dataset_panel, "Data", main)
        self.training_tab = LazyTab(self._make_training_panel, "Training", main)
        self.runs_tab = LazyTab(self._make_runs_panel, "Runs", main)
        self.graph_tab = LazyTab(self._make_graph_panel, "Graph", main)
        self.quant_tab = LazyTab(self._make_quant_panel, "Quantization", main)
        self.export_tab = LazyTab(self._make_export_panel, "Export & Benchmark", main)
        self.tabs.addTab(self.data_tab, "Data")
        self.tabs.addTab(self.training_tab, "Training")
        self.tabs.addTab(self.graph_tab, "Graph")
        self.tabs.addTab(self.quant_tab, "Quantization")
        # && shows one & (a single one marks a mnemonic)
        self.tabs.addTab(self.export_tab, "Export && Benchmark")
        self.tabs.addTab(self.runs_tab, "Runs")

    # -- the tabs' panels, built on first use ------------------------------------------------------
    @property
    def dataset_panel(self):
        return self.data_tab.panel()

    @property
    def training_panel(self):
        return self.training_tab.panel()

    @property
    def runs_panel(self):
        return self.runs_tab.panel()

    @property
    def graph_panel(self):
        return self.graph_tab.panel()

    @property
    def quant_panel(self):
        return self.quant_tab.panel()

    @property
    def export_panel(self):
        return self.export_tab.panel()

    @property
    def lazy_tabs(self) -> tuple[LazyTab, ...]:
        return (
            self.data_tab,
            self.training_tab,
            self.graph_tab,
            self.quant_tab,
            self.export_tab,
            self.runs_tab,
        )

    def _tab_of(self, panel: QWidget) -> LazyTab:
        # Only a built tab can hold the panel asked for; asking each tab for its panel would build them all.
        return next(tab for tab in self.lazy_tabs if tab.is_built and tab.panel() is panel)

    def show_tab(self, panel: QWidget) -> None:
        """Bring a panel's tab to the front (building the panel if it is not yet)."""
        self.tabs.setCurrentWidget(self._tab_of(panel))

    def current_panel(self) -> QWidget:
        return self.tabs.currentWidget().panel()

    def _say(self, text: str, ms: int = 0) -> None:
        self.main.statusBar().showMessage(text, ms)

    def _make_dataset_panel(self):
        from workbench.gui.panels.data.dataset_panel import DatasetPanel

        main = self.main
        panel = DatasetPanel(main.dataset_state, main.queries, main)
        panel.status_message.connect(lambda text: self._say(text, 5000))
        panel.zoom.setValue(int(main.settings.get("thumbnail_size") or 64))
        if main.manager.state == "ready":
            panel.ensure_loaded()
        return panel

    def _make_training_panel(self):
        from workbench.gui.panels.training.training_panel import TrainingPanel

        main, launcher = self.main, self.main.launcher
        panel = TrainingPanel(main.workspace, main.queries, main)
        panel.new_run_requested.connect(lambda: launcher.new_training_run())
        panel.train_again_requested.connect(launcher.new_training_run)
        panel.quick_start_requested.connect(launcher.quick_start_training)
        panel.resume_requested.connect(launcher.resume_training)
        panel.cancel_requested.connect(main.worker_control.cancel_job)
        panel.sample_requested.connect(self.open_sample)
        panel.graph_requested.connect(lambda run_id: run_id and self.show_graph_of_run(run_id))
        panel.layers_graph_requested.connect(self.show_graph_of_run)
        panel.quantize_requested.connect(lambda run_id: run_id and launcher.new_quantization(run_id))
        panel.try_it_requested.connect(self.open_try_it)
        self._catch_up(panel)
        return panel

    def _catch_up(self, panel) -> None:
        # Jobs that began before the tab was built: their curves come from the store, live from here on.
        for record in self.main.manager.jobs.all():
            panel.on_job_changed(record)

    def _make_runs_panel(self):
        from workbench.gui.panels.runs_panel import RunsPanel

        panel = RunsPanel(self.main.workspace, self.main)
        panel.status_message.connect(self._say)
        panel.open_requested.connect(self.open_run_in_its_tab)
        panel.resume_requested.connect(self.main.launcher.resume_training)
        panel.graph_requested.connect(self.show_graph_of_run)
        return panel

    def _make_graph_panel(self):
        from workbench.gui.panels.graph.graph_panel import GraphPanel

        main = self.main
        panel = GraphPanel(main.workspace, lambda task, spec: main.launcher.submit_job(task, spec), main)
        panel.status_message.connect(lambda text: self._say(text, 5000))
        panel.quant_layer_requested.connect(self.open_quant_layer)
        panel.doctor_finding_requested.connect(self.open_doctor_finding)
        return panel

    def _make_quant_panel(self):
        from workbench.gui.panels.quant.quant_panel import QuantPanel

        main, launcher = self.main, self.main.launcher
        panel = QuantPanel(main.workspace, main)
        panel.restore_splitters(main.settings.get("quant_splitters"))
        panel.status_message.connect(lambda text: self._say(text, 6000))
        panel.new_run_requested.connect(lambda source, spec: launcher.new_quantization(source, spec or None))
        panel.start_requested.connect(launcher.start_quantization_data)
        panel.cancel_requested.connect(main.worker_control.cancel_job)
        panel.graph_requested.connect(self.show_quantization_on_graph)
        panel.try_it_requested.connect(self.open_try_it)
        self._catch_up(panel)
        return panel

    def _make_export_panel(self):
        from workbench.gui.panels.export.export_panel import ExportPanel

        main = self.main
        panel = ExportPanel(main.workspace, lambda task, spec: main.launcher.submit_job(task, spec), main)
        panel.status_message.connect(lambda text: self._say(text, 6000))
        panel.cancel_requested.connect(main.worker_control.cancel_job)
        panel.graph_requested.connect(self.show_export_divergence)
        panel.report_requested.connect(main.launcher.write_model_report)
        panel.set_default_device(main.device_picker.current_device() or "cpu")
        main.device_picker.device_chosen.connect(panel.set_default_device)
        self._catch_up(panel)
        return panel

    # -- opening things in the tab that owns them --------------------------------------------------
    def open_run_in_its_tab(self, run_dir: str, task: str) -> None:
        """Show a run in the tab that owns its task (the Runs tab's double-click and "Open in its tab")."""
        run_id = Path(run_dir).name
        if task == "graph.build":
            self.show_tab(self.graph_panel)
            self.graph_panel.refresh()
            if self.graph_panel.show_graph_run(run_dir):
                return
        if task == "quant.analyze":
            self.show_tab(self.quant_panel)
            if self.quant_panel.open_run(run_id):
                return
        if task in ("export.model", "bench.latency"):
            self.show_tab(self.export_panel)
            if self.export_panel.open_run(run_id):
                return
        if task.startswith("train."):
            self.show_tab(self.training_panel)
            self.training_panel.refresh()
            if self.training_panel.select_run(run_id):
                self.training_panel.set_shown(run_id, True)
                return
        self._say(f"Run {run_id} has no tab of its own yet; its details are in the Runs tab", 6000)

    def open_in_runs_tab(self, run_dir: str) -> None:
        """A job's run, selected in the Runs tab (the Jobs panel's "Open run")."""
        panel = self.runs_panel
        self.show_tab(panel)
        panel.refresh()
        panel.select_run(Path(run_dir).name)

    def choose_dataset(self) -> None:
        self.show_tab(self.dataset_panel)
        self.dataset_panel.choose_dataset()

    def open_sample(self, dataset: dict, split: str, index: int, note: str = "") -> None:
        """A sample a training run names (a misclassified one, say), shown in the Data tab on its dataset."""
        try:
            spec = DataSpec.from_dict(dataset)
        except SpecError as exc:
            self.main.log_panel.append(f"Cannot open that sample: {exc}", "error")
            return
        self.main.dataset_state.set_spec(spec)
        self.show_tab(self.dataset_panel)
        self.dataset_panel.show_sample(split, index, note)

    def show_graph_of_run(self, run_id: str, overlay: str = "") -> None:
        """Build (or show) the graph of a training run in the Graph tab, coloured by `overlay` when it has it
        (the Layers view's "Show on graph": a layer statistic)."""
        self.show_tab(self.graph_panel)
        self.graph_panel.build_graph_of_run(run_id, overlays=(overlay,) if overlay else ())

    def show_quantization_on_graph(self, quant_run_id: str, source_run_id: str) -> None:
        """Paint a quantize run's per-layer SQNR on its model's graph in the Graph tab."""
        from workbench.gui.panels.graph.graph_panel import DOCTOR_OVERLAY

        # From the Doctor view the graph opens coloured by the findings, else by the weight SQNR.
        first = (DOCTOR_OVERLAY,) if self.quant_panel.doctor_shown() else ()
        self.show_tab(self.graph_panel)
        self.graph_panel.show_quant_run(quant_run_id, source_run_id, first)

    def open_quant_layer(self, quant_run_id: str, module: str, tensor: str) -> None:
        """A node clicked on a graph coloured by SQNR: open that layer's histogram in the Quantization tab."""
        panel = self.quant_panel
        self.show_tab(panel)
        if panel.results is None or panel.results.run_id != quant_run_id:
            panel.open_run(quant_run_id)
        if not panel.select_layer(module, tensor):
            self._say(f"{module or 'That node'} has no quantizer in run {quant_run_id}", 5000)

    def open_doctor_finding(self, quant_run_id: str, module: str) -> None:
        """A node clicked on a graph coloured by a quantize run's doctor findings: open its finding."""
        panel = self.quant_panel
        self.show_tab(panel)
        if panel.results is None or panel.results.run_id != quant_run_id:
            panel.open_run(quant_run_id)
        if not panel.select_finding(module):
            self._say(f"{module or 'That node'} has no doctor finding in run {quant_run_id}", 5000)

    def show_export_divergence(self, run_id: str, module: str) -> None:
        """The layer where an export first diverges, on its model's graph."""
        self.show_graph_of_run(run_id)
        self._say(f"The export first diverges at {module}: find it in the module table", 8000)
        self.graph_panel.search.setText(module)

    def open_try_it(self, run_id: str):
        """Try it: a finished training or quantize run's model on a dropped image or a dataset sample,
        in a window of its own beside the tabs; returns the dialog."""
        from workbench.gui.panels.try_it import TryItDialog

        if not run_id:
            return None
        main = self.main
        dialog = TryItDialog(
            main.queries,
            main.workspace,
            run_id,
            data_sample=self.data_tab_sample,
            parent=main,
            settings=main.settings.qsettings,
        )
        dialog.setAttribute(Qt.WA_DeleteOnClose)
        dialog.show()
        main.try_it_dialog = dialog
        return dialog

    def data_tab_sample(self) -> dict | None:
        """The sample the Data tab shows (its dataset spec, split and index), or None before one is
        clicked."""
        if not self.data_tab.is_built:
            return None
        shown = self.dataset_panel.sample_view.result
        if not shown or "split" not in shown:
            return None
        return {
            "dataset": self.main.dataset_state.spec.to_dict(),
            "split": shown["split"],
            "index": int(shown["index"]),
        }

    def stop_selected_run(self) -> None:
        if not self.training_panel.stop_selected():
            self._say("Select a running run in the Training tab to stop it", 5000)

    def resume_selected_run(self) -> None:
        if not self.training_panel.resume_selected():
            self._say("Select a stopped, failed or interrupted run in the Training tab to resume it", 5000)

    # -- what reaches every built tab --------------------------------------------------------------
    def on_job_changed(self, record) -> None:
        for tab in (self.training_tab, self.graph_tab, self.quant_tab, self.export_tab):
            if tab.is_built:
                tab.panel().on_job_changed(record)

    def on_message(self, msg) -> None:
        for tab in (self.training_tab, self.quant_tab, self.export_tab):
            if tab.is_built:
                tab.panel().on_message(msg)

    def refresh_runs(self) -> None:
        if self.runs_tab.is_built:  # an unbuilt Runs tab reads the store when it is built
            self.runs_panel.refresh()

    def on_worker_ready(self) -> None:
        if self.data_tab.is_built:  # else it loads when it is built
            self.dataset_panel.ensure_loaded()

    def set_workspace(self, workspace: Path) -> None:
        for tab in (self.runs_tab, self.training_tab, self.graph_tab, self.quant_tab, self.export_tab):
            if tab.is_built:
                tab.panel().set_workspace(workspace)

    def save_panel_settings(self, settings) -> None:
        if self.data_tab.is_built:
            settings.set("thumbnail_size", self.dataset_panel.zoom.value())
        if self.quant_tab.is_built:
            settings.set("quant_splitters", self.quant_panel.splitter_states())

    def shutdown(self) -> None:
        if self.graph_tab.is_built:
            self.graph_panel.shutdown()  # the graph server never outlives the window
