"""The Graph tab: build a model's graph (`graph.build` on the worker) from a training run or a saved file,
show it in Model Explorer (its own server process, started the first time the tab is shown), with the module
table beside it, overlays with a legend, selection that follows between the two, and exports. A quantize run's
per-layer SQNR is painted the same way (`show_quant_run`); a module picked while it shows asks for that
layer's histogram.

A thin view: graphs come from the worker as run folders; jobs go out through the `submit` callable it is
given. Never imports torch or model_explorer.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QItemSelectionModel, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from workbench.errors import WorkbenchError
from workbench.graph_server.process import GraphServer
from workbench.gui.panels.graph.legend import OverlayLegend, number_text
from workbench.gui.panels.graph.module_table import (
    NAME_ROLE,
    ModuleFilterProxy,
    ModuleTableItemModel,
    flops_text,
)
from workbench.gui.panels.graph.web_view import GraphView, WebEngineUnavailable
from workbench.gui.run_identity import RunIdentities, short_model
from workbench.results import dig
from workbench.runs import RunStore, atomic_write_text
from workbench.task_ids import GRAPH_TASK

POLL_MS = 100
NO_OVERLAY = "none"
# graph.build's overlays of a quantize run (`quant_run`), the one "Show on graph" colours by first
QUANT_OVERLAYS = ("quant_weight_sqnr", "quant_activation_sqnr", "quant_doctor")
DOCTOR_OVERLAY = "quant_doctor"  # a quantize run's doctor findings by severity: a click opens the finding
CAPTURE_WORDS = {
    "export": "torch.export (strict)",
    "non_strict": "torch.export",
    "modules": "the module hierarchy (torch.export could not capture it)",
}


def read_graph_run(run_dir: str | Path) -> dict:
    """The result a graph run wrote (its report.json), with the paths of its files fixed to where the run is
    now."""
    run_dir = Path(run_dir)
    report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
    if report.get("status") != "done" or "modules" not in report:
        raise WorkbenchError(f"run {run_dir.name} holds no graph ({report.get('status', 'unfinished')})")
    folder = run_dir / "artifacts" / "graph"
    report["graph_json"] = str(folder / "graph.json")  # the folder may have moved with its workspace
    try:
        report["overlay_index"] = json.loads((folder / "overlays.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        report["overlay_index"] = {}
    report["run_dir"] = str(run_dir)
    return report


class GraphPanel(QWidget):
    status_message = Signal(str)
    # (quantize run id, module name, "weight" or "activation"): a module was picked in the graph or the table
    # while the graph is coloured by that run's SQNR; the Quantize tab opens that layer's histogram.
    quant_layer_requested = Signal(str, str, str)
    # (quantize run id, module name): a module picked while the graph shows that run's doctor findings; the
    # Quantize tab opens its finding.
    doctor_finding_requested = Signal(str, str)

    def __init__(
        self,
        workspace,
        submit: Callable[[str, dict], object],
        parent=None,
        *,
        server_factory: Callable[[list], GraphServer] = GraphServer,
        view_factory: Callable[[], QWidget] = GraphView,
    ):
        super().__init__(parent)
        self.store = RunStore(workspace)
        self.workspace = Path(workspace)
        self.submit = submit
        self.server_factory = server_factory
        self.view_factory = view_factory
        self.server: GraphServer | None = None
        self.view: GraphView | None = None
        self.graph: dict | None = None  # the shown graph run's result
        self.node_module: dict[str, str] = {}  # graph node id -> module name
        self.module_node: dict[str, str] = {}  # module name -> the node selecting it shows
        self.jobs: set[str] = set()  # graph.build jobs this panel started
        # job id -> the overlays its graph is first coloured by
        self.job_overlays: dict[str, tuple[str, ...]] = {}
        self.job_sources: dict[str, str] = {}  # job id -> what it builds, in words: named again if it fails
        self._shown_once = False
        self._page_url = ""
        self._beside_copies: dict[str, tuple[Path, str, str]] = {}  # graph run -> its right-hand copy
        self._poll = QTimer(self)
        self._poll.setInterval(POLL_MS)
        self._poll.timeout.connect(self._on_poll_timeout)
        self._build()
        app = QApplication.instance()
        if app is not None:  # the window's close calls shutdown() too; this covers a quit that skips it
            app.aboutToQuit.connect(self.shutdown)
        self.refresh()

    # -- construction ----------------------------------------------------------------------------
    def _build(self) -> None:
        bar = self._build_bar()
        self._build_page()
        side = self._build_side()
        self._build_layout(bar, side)
        self._connect()
        self._show_message(
            "No graph yet: pick a training run under “Build from” and press Build graph, or open "
            "a saved .pt2 or .onnx file."
        )
        self._update_buttons()

    def _build_bar(self) -> QHBoxLayout:
        """The row on top: the graph shown, what to build one from, the graph beside it, the exports."""
        self.graph_combo = QComboBox()
        self.graph_combo.setMinimumContentsLength(28)
        self.graph_combo.setToolTip("Graphs built earlier in this workspace")
        self.source_combo = QComboBox()
        self.source_combo.setMinimumContentsLength(24)
        self.source_combo.setToolTip("A training run: its model with its best (else last) checkpoint")
        self.build_button = QPushButton("Build graph")
        self.build_button.setToolTip(
            "Capture the chosen run's model with torch.export, count its parameters and FLOPs, and show it"
        )
        self.file_button = QPushButton("Open file…")
        self.file_button.setToolTip("Show a saved ExportedProgram (.pt2) or an ONNX file")
        self.beside_combo = QComboBox()
        self.beside_combo.setMinimumContentsLength(20)
        self.beside_combo.setToolTip(
            "Another graph to show side by side with this one in Model Explorer's split "
            "pane (FP32 beside quantized, before beside after a change)"
        )
        self.export_json_button = QPushButton("Export graph JSON…")
        self.export_csv_button = QPushButton("Export table CSV…")
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Graph"))
        bar.addWidget(self.graph_combo, 2)
        bar.addSpacing(12)
        bar.addWidget(QLabel("Build from"))
        bar.addWidget(self.source_combo, 2)
        for button in (self.build_button, self.file_button):
            bar.addWidget(button)
        bar.addSpacing(12)
        bar.addWidget(QLabel("Beside it"))
        bar.addWidget(self.beside_combo, 1)
        bar.addStretch(1)
        bar.addWidget(self.export_json_button)
        bar.addWidget(self.export_csv_button)
        return bar

    def _build_page(self) -> None:
        """The info line and the left stack, which holds the graph's page or a message in its place."""
        self.info = QLabel()
        self.info.setWordWrap(True)
        self.info.setTextInteractionFlags(Qt.TextSelectableByMouse)

        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setAlignment(Qt.AlignCenter)
        self.message.setMargin(24)
        self.left = QStackedWidget()
        self.left.addWidget(self.message)

    def _build_side(self) -> QWidget:
        """The side panel: the module table, its filters, the overlay and its legend."""
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search modules by name or type")
        self.search.setClearButtonEnabled(True)
        self.leaves_only = QCheckBox("Layers only")
        self.leaves_only.setChecked(True)
        self.leaves_only.setToolTip(
            "Hide modules that only contain others (their counts include their children's)"
        )
        self.model = ModuleTableItemModel(self)
        self.proxy = ModuleFilterProxy(self)
        self.proxy.setSourceModel(self.model)
        self.table = QTableView()
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(4, Qt.DescendingOrder)  # heaviest first: what a user looks for
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.setAlternatingRowColors(True)
        # module paths differ at their ends: layer4.0.downsample.0
        self.table.setTextElideMode(Qt.ElideMiddle)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.Stretch)
        for column in range(1, 5):
            header.setSectionResizeMode(column, QHeaderView.ResizeToContents)
        self.overlay_combo = QComboBox()
        self.overlay_combo.setToolTip("Colour the graph's nodes by a per-layer value")
        self.legend = OverlayLegend()
        # the picked module's value in the overlay shown (both SQNRs of a quant run)
        self.selection_value = QLabel()
        self.selection_value.setWordWrap(True)
        self.selection_value.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.selection_value.hide()
        filters = QHBoxLayout()
        filters.addWidget(self.search, 1)
        filters.addWidget(self.leaves_only)
        overlay_row = QHBoxLayout()
        overlay_row.addWidget(QLabel("Colour by"))
        overlay_row.addWidget(self.overlay_combo, 1)
        side = QWidget()
        side_layout = QVBoxLayout(side)
        side_layout.setContentsMargins(0, 0, 0, 0)
        side_layout.addLayout(filters)
        side_layout.addWidget(self.table, 1)
        side_layout.addLayout(overlay_row)
        side_layout.addWidget(self.legend)
        side_layout.addWidget(self.selection_value)
        return side

    def _build_layout(self, bar: QHBoxLayout, side: QWidget) -> None:
        self.splitter = QSplitter(Qt.Horizontal)
        self.splitter.addWidget(self.left)
        self.splitter.addWidget(side)
        self.splitter.setStretchFactor(0, 2)
        self.splitter.setStretchFactor(1, 1)
        # Model Explorer brings its own side panel: the page needs the room
        self.splitter.setSizes([900, 560])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(bar)
        layout.addWidget(self.info)
        layout.addWidget(self.splitter, 1)

    def _connect(self) -> None:
        self.graph_combo.activated.connect(self._on_graph_combo_activated)
        self.build_button.clicked.connect(self._on_build_clicked)
        self.file_button.clicked.connect(self._on_file_clicked)
        self.export_json_button.clicked.connect(self._on_export_json_clicked)
        self.export_csv_button.clicked.connect(self._on_export_csv_clicked)
        self.search.textChanged.connect(self.proxy.set_text)
        self.leaves_only.toggled.connect(self.proxy.set_leaves_only)
        self.overlay_combo.currentIndexChanged.connect(self._on_overlay_combo_changed)
        self.beside_combo.currentIndexChanged.connect(lambda _index: self._load_page())
        self.table.selectionModel().selectionChanged.connect(self._on_table_selection_changed)

    # -- runs ------------------------------------------------------------------------------------
    def set_workspace(self, workspace) -> None:
        self.store = RunStore(workspace)
        self.workspace = Path(workspace)
        if self.server is not None:  # it serves files of one workspace only
            self.server.stop()
            self.server = None
            if self._shown_once:
                self._start_server()
        self.clear()
        self.refresh()

    def refresh(self) -> None:
        """Re-read the workspace's graph runs and training runs for the two combos."""
        runs = self.store.list_runs()
        shown = self.graph["run_dir"] if self.graph else None
        self.graph_combo.blockSignals(True)
        self.graph_combo.clear()
        for entry in runs:
            if entry.get("task") == GRAPH_TASK and entry.get("status") == "done":
                self.graph_combo.addItem(self._graph_label(entry), entry["run_dir"])
        if self.graph_combo.count() == 0:
            self.graph_combo.addItem("no graphs yet", None)
        index = self.graph_combo.findData(shown) if shown else -1
        self.graph_combo.setCurrentIndex(max(index, 0) if shown else self.graph_combo.currentIndex())
        self.graph_combo.blockSignals(False)
        beside = self.beside_combo.currentData()
        self.beside_combo.blockSignals(True)
        self.beside_combo.clear()
        self.beside_combo.addItem("— none —", None)
        for entry in runs:
            if entry.get("task") == GRAPH_TASK and entry.get("status") == "done":
                self.beside_combo.addItem(self._graph_label(entry), entry["run_dir"])
        self.beside_combo.setCurrentIndex(max(0, self.beside_combo.findData(beside)) if beside else 0)
        self.beside_combo.blockSignals(False)
        chosen = self.source_combo.currentData()
        self.source_combo.clear()
        # Readable labels (model · dataset · key metric · date), the id in the tooltip; failed runs left out.
        identities = RunIdentities(self.store)
        tasks = {entry.get("task") for entry in runs if str(entry.get("task", "")).startswith("train.")}
        for entry, identity in identities.sources(runs, tasks):
            status = "" if entry.get("status") == "done" else f" ({entry.get('status', '')})"
            self.source_combo.addItem(identity.label + status, entry["id"])
            self.source_combo.setItemData(self.source_combo.count() - 1, identity.tooltip, Qt.ToolTipRole)
        if self.source_combo.count() == 0:
            self.source_combo.addItem("no training runs", None)
        if chosen is not None and self.source_combo.findData(chosen) >= 0:
            self.source_combo.setCurrentIndex(self.source_combo.findData(chosen))
        self._update_buttons()

    def _graph_label(self, entry: dict) -> str:
        try:
            model = json.loads((Path(entry["run_dir"]) / "report.json").read_text()).get("model", "")
        except (OSError, ValueError, AttributeError):
            model = ""
        return f"{model} · {entry['id']}" if model else entry["id"]

    # -- building --------------------------------------------------------------------------------
    def build_graph(self, spec: dict):
        """Start `graph.build` on the worker; its graph shows when it is done. Returns the job record, or
        None."""
        record = self.submit(GRAPH_TASK, spec)
        if record is None:
            self.info.setText("The worker cannot take the job now (see the log).")
            return None
        self.jobs.add(record.job_id)
        what = self._source_words(spec)
        self.job_sources[record.job_id] = what
        self.info.setText(
            f"Building the graph of {what}… (capturing with torch.export, counting parameters and FLOPs)"
        )
        return record

    def _source_words(self, spec: dict) -> str:
        """What a graph.build spec builds, as the person picked it: the run as Build from names it, a file's
        name."""
        source = spec.get("source") or {}
        if source.get("run"):
            index = self.source_combo.findData(str(source["run"]))
            return self.source_combo.itemText(index) if index >= 0 else f"run {source['run']}"
        if source.get("file"):
            return Path(source["file"]).name
        if spec.get("quant_run"):
            return f"the model quantized by {spec['quant_run']}"
        return dig(spec, "model", "name") or "the model"

    def _still_shown(self) -> str:
        """After a build that failed, which graph the panel still shows: not the one just asked for."""
        if not self.graph:
            return ""
        return (
            " The graph shown is still the earlier one of "
            f"{short_model(self.graph.get('model') or '') or 'another model'}."
        )

    def build_graph_of_run(self, run: str, overlays: tuple[str, ...] = ()):
        """The graph of a training run (its id or folder): what the Training and Runs tabs' "Show graph" call;
        coloured first by the first of `overlays` it has (the Layers view asks for a layer statistic)."""
        index = self.source_combo.findData(str(run))
        if index >= 0:  # Build from names the run being built, also when another tab asked for it
            self.source_combo.setCurrentIndex(index)
        record = self.build_graph({"source": {"run": str(run)}})
        if record is not None and overlays:
            self.job_overlays[record.job_id] = tuple(overlays)
        return record

    def show_quant_run(self, quant_run_id: str, source_run_id: str, first: tuple[str, ...] = ()):
        """A quantize run's per-layer SQNR on the graph of the training run it quantized (the Quantize tab's
        "Show on graph"): builds that graph with `quant_run` and, once it is shown, colours it by the weight
        SQNR (or by the first overlay of `first` it has, such as DOCTOR_OVERLAY). Returns the job record, or
        None."""
        spec: dict = {"quant_run": str(quant_run_id)}
        if source_run_id:
            spec["source"] = {"run": str(source_run_id)}
        record = self.build_graph(spec)
        if record is not None:
            self.job_overlays[record.job_id] = tuple(first) + QUANT_OVERLAYS
            self.info.setText(
                f"Building the graph of {source_run_id or 'the quantized model'} with the per-layer "
                f"SQNR of {quant_run_id}…"
            )
        return record

    def on_job_changed(self, record) -> None:
        if record.task != GRAPH_TASK or record.job_id not in self.jobs or record.active:
            return
        self.jobs.discard(record.job_id)
        overlays = self.job_overlays.pop(record.job_id, ())
        what = self.job_sources.pop(record.job_id, "the model")
        if record.state == "done" and record.run_dir:
            self.refresh()
            self.show_graph_run(record.run_dir, overlays=overlays)
        elif record.state == "cancelled":
            self.info.setText(f"Building the graph of {what} was cancelled.{self._still_shown()}")
        else:
            error = record.error_message or record.state
            self.info.setText(f"The graph of {what} could not be built: {error}{self._still_shown()}")

    def _on_build_clicked(self) -> None:
        run = self.source_combo.currentData()
        if run:
            self.build_graph_of_run(run)

    def _on_file_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Open a saved model", str(self.workspace), "Saved models (*.pt2 *.onnx);;All files (*)"
        )
        if path:
            self.build_graph({"source": {"file": path}})

    # -- showing ---------------------------------------------------------------------------------
    def _on_graph_combo_activated(self, index: int) -> None:
        run_dir = self.graph_combo.itemData(index)
        if run_dir:
            self.show_graph_run(run_dir)

    def show_graph_run(self, run_dir: str | Path, overlays: tuple[str, ...] = ()) -> bool:
        """Show the graph a finished graph.build run wrote, coloured by the first of `overlays` it has (else
        the overlay chosen before); False (and the reason, in the panel) if it cannot."""
        try:
            graph = read_graph_run(run_dir)
            nodes = json.loads(Path(graph["graph_json"]).read_text(encoding="utf-8"))["graphs"][0]["nodes"]
        except (OSError, ValueError, KeyError, IndexError, WorkbenchError) as exc:
            self.info.setText(f"Cannot show the graph of {Path(run_dir).name}: {exc}")
            return False
        self.graph = graph
        self.node_module, self.module_node = {}, {}
        for node in nodes:
            module = next((a["value"] for a in node.get("attrs", []) if a.get("key") == "module"), None)
            if isinstance(module, str):
                self.node_module[node["id"]] = module
                self.module_node.setdefault(module, node["id"])  # a module's first op: where its work starts
        self.model.set_modules(graph["modules"])
        self.table.sortByColumn(
            self.table.horizontalHeader().sortIndicatorSection(),
            self.table.horizontalHeader().sortIndicatorOrder(),
        )
        index = self.graph_combo.findData(str(run_dir))
        if index >= 0:
            self.graph_combo.setCurrentIndex(index)
        self._fill_overlays(overlays)
        self.info.setText(self._describe(graph))
        self.info.setToolTip(graph.get("capture_reason", ""))
        self._update_buttons()
        self._load_page()
        return True

    def _describe(self, graph: dict) -> str:
        total, trainable = graph["params_total"], graph["params_trainable"]
        params = f"{total:,} parameters" + (
            " (all trainable)" if total == trainable else f" ({trainable:,} trainable)"
        )
        capture = CAPTURE_WORDS.get(graph["capture"], graph["capture"])
        shape = "×".join(map(str, graph.get("input_shape") or [])) or "its saved input"
        text = (
            f"<b>{graph.get('model', '')}</b> · {graph['nodes']} nodes · {params} · "
            f"{flops_text(graph['flops'])}FLOPs per sample at {shape} · captured by {capture}"
        )
        if graph["capture"] == "modules":
            text += f"<br><span style='color:#b35900'>{graph.get('capture_reason', '')}</span>"
        return text

    def _fill_overlays(self, preferred: tuple[str, ...] = ()) -> None:
        overlays = dig(self.graph, "overlay_index", "overlays", default={})
        current = self.overlay_combo.currentData() or NO_OVERLAY
        self.overlay_combo.blockSignals(True)
        self.overlay_combo.clear()
        self.overlay_combo.addItem("None", NO_OVERLAY)
        for metric, overlay in overlays.items():
            self.overlay_combo.addItem(overlay.get("label", metric), metric)
        wanted = next((m for m in preferred if m in overlays), current)
        index = self.overlay_combo.findData(wanted)
        self.overlay_combo.setCurrentIndex(index if index >= 0 else 0)
        self.overlay_combo.blockSignals(False)
        self._show_legend()
        self._show_selection_value()

    def _overlay(self) -> dict | None:
        metric = self.overlay_combo.currentData()
        if not self.graph or metric in (None, NO_OVERLAY):
            return None
        return self.graph.get("overlay_index", {}).get("overlays", {}).get(metric)

    def overlay_path(self) -> str | None:
        overlay = self._overlay()
        if overlay is None:
            return None
        return str(Path(self.graph["graph_json"]).parent / overlay["path"])

    def _show_legend(self) -> None:
        overlay = self._overlay()
        if overlay is None:
            self.legend.clear()
        else:
            self.legend.set_legend(overlay["legend"])

    def _on_overlay_combo_changed(self, index: int) -> None:
        self._show_legend()
        self._show_selection_value()
        path = self.overlay_path()
        if self.view is not None and self.view.ready and path:
            self.view.load_node_data(path)  # no reload: Model Explorer keeps the graph as it is laid out
        else:
            self._load_page()

    def clear(self) -> None:
        self.graph = None
        self.node_module, self.module_node = {}, {}
        self.model.set_modules([])
        self.overlay_combo.clear()
        self.legend.clear()
        self._show_selection_value()
        self.info.setText("")
        self._page_url = ""
        self._show_message("No graph shown.")
        self._update_buttons()

    # -- the server and the page -----------------------------------------------------------------
    def showEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().showEvent(event)
        self.refresh()  # graphs built elsewhere (the command line, another tab) appear when the tab is shown
        if not self._shown_once:
            self._shown_once = True
            self._start_view()
            self._start_server()

    def _start_view(self) -> None:
        try:
            self.view = self.view_factory()
        except WebEngineUnavailable as exc:
            self.view = None
            self.web_problem = (
                f"The graph cannot be drawn here: {exc}. Install PySide6-Addons (and, on Linux, "
                "libnss3) to see it. The module table, overlays' values and exports work without it."
            )
            self._show_message(self.web_problem)
            return
        self.web_problem = ""
        self.view.node_selected.connect(self._on_view_node_selected)
        self.view.status_changed.connect(self._on_view_status_changed)
        self.left.addWidget(self.view)

    def _start_server(self) -> None:
        if self.view is None or self.server is not None:
            return
        self.server = self.server_factory([self.workspace])
        try:
            self.server.start()
        except OSError as exc:
            self._show_message(f"The graph server could not start: {exc}. The module table still works.")
            return
        self._poll.start()

    def _on_poll_timeout(self) -> None:
        if self.server is None:
            self._poll.stop()
            return
        state = self.server.poll()
        if state == "starting":
            return
        self._poll.stop()
        if state == "ready":
            self._load_page()
        else:
            self._show_message(
                f"The graph server stopped: {self.server.error}. The module table still works."
            )

    def _load_page(self) -> None:
        if not self.graph:
            return
        if self.view is None:
            if self._shown_once:
                self._show_message(self.web_problem)
            return
        if self.server is None or self.server.state != "ready":
            self._show_message("Starting the graph viewer…")
            return
        path = self.overlay_path()
        beside = self._beside_graph()
        if beside is not None:
            url = self.server.url_for(self.graph["graph_json"], [path] if path else [], beside=beside)
        else:
            url = self.server.url_for(self.graph["graph_json"], [path] if path else [])
        if url != self._page_url:
            self._page_url = url
            self.view.load(url)
        self.left.setCurrentWidget(self.view)

    def show_beside(self, run_dir: str | Path | None) -> bool:
        """Show another graph run beside this one (None: this one alone); False when it is not a graph run."""
        index = self.beside_combo.findData(str(run_dir)) if run_dir else 0
        if index < 0:
            self.refresh()
            index = self.beside_combo.findData(str(run_dir))
        if index < 0:
            return False
        self.beside_combo.setCurrentIndex(index)
        return True

    def _beside_graph(self) -> tuple[Path, str, str] | None:
        """(graph JSON, collection label, graph id) of the graph for the right-hand pane, or None.

        Model Explorer renames a graph whose id another collection already uses, and a pane whose graph it
        cannot find falls back to the first: the right-hand graph is served from a copy with ids of its own.
        """
        run_dir = self.beside_combo.currentData()
        if not run_dir or not self.graph:
            return None
        made = self._beside_copies.get(run_dir)
        if made is not None and made[0].is_file():  # a finished graph run does not change: copy it once
            return made
        try:
            other = read_graph_run(run_dir)
            data = json.loads(Path(other["graph_json"]).read_text(encoding="utf-8"))
        except (OSError, ValueError, WorkbenchError) as exc:
            self.status_message.emit(f"Cannot show {Path(run_dir).name} beside this graph: {exc}")
            return None
        label = f"{data.get('label') or Path(run_dir).name} (right)"
        renamed = {}
        for graph in data.get("graphs") or []:
            renamed[graph.get("id", "")] = graph["id"] = f"{graph.get('id', 'graph')} (right)"
        for graph in data.get("graphs") or []:  # subgraph references follow their graphs' new ids
            for node in graph.get("nodes") or []:
                if node.get("subgraphIds"):
                    node["subgraphIds"] = [renamed.get(i, i) for i in node["subgraphIds"]]
        data["label"] = label
        folder = self.workspace / "cache" / "graph-split"  # inside the workspace: the server serves only it
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{Path(run_dir).name}.json"
        atomic_write_text(path, json.dumps(data))
        first = (data.get("graphs") or [{"id": ""}])[0]["id"]
        self._beside_copies[run_dir] = (path, label, first)
        return path, label, first

    def _show_message(self, text: str) -> None:
        self.message.setText(text)
        self.left.setCurrentWidget(self.message)

    def _on_view_status_changed(self, state: str, text: str) -> None:
        if state in ("no_webgl", "failed"):
            self._show_message(text)
        elif state == "ready" and self.graph:
            self.left.setCurrentWidget(self.view)
            # A module picked before the page was shown ("Show on graph" from another tab): load() dropped the
            # request, so it is made again now that Model Explorer takes it.
            self._select_in_graph(self.selected_module())

    def shutdown(self) -> None:
        """Stop the graph server (the window calls this as it closes; the server also exits with the
        window)."""
        self._poll.stop()
        if self.server is not None:
            self.server.stop()
            self.server = None

    # -- selection between the table and the graph -----------------------------------------------
    def selected_module(self) -> str | None:
        rows = self.table.selectionModel().selectedRows()
        return rows[0].data(NAME_ROLE) if rows else None

    def select_module(self, name: str) -> bool:
        """Select a module's row (shown by the current filters); False when it is hidden or unknown."""
        for row in range(self.proxy.rowCount()):
            index = self.proxy.index(row, 0)
            if index.data(NAME_ROLE) == name:
                self.table.selectionModel().select(
                    index, QItemSelectionModel.ClearAndSelect | QItemSelectionModel.Rows
                )
                self.table.scrollTo(index)
                return True
        return False

    def _on_table_selection_changed(self, *args) -> None:
        name = self.selected_module()
        self._show_selection_value(name)
        if name is None:
            return
        self._request_quant_layer(name)
        self._select_in_graph(name)

    def _select_in_graph(self, name: str | None) -> None:
        """Select the module's node in Model Explorer (its first op's, for a module without a node of its
        own)."""
        if self.view is None or name is None:
            return
        node = self.module_node.get(name) or next(
            (node for node, module in self.node_module.items() if module.startswith(name + ".") or not name),
            None,
        )
        if node:
            self.view.select_node(node)

    def _on_view_node_selected(self, node_id: str) -> None:
        if self._request_node_finding(node_id):
            return
        module = self.node_module.get(node_id)
        if module is None:
            return
        self.table.selectionModel().blockSignals(True)
        try:
            found = self.select_module(module)
        finally:
            self.table.selectionModel().blockSignals(False)
        self.table.viewport().update()
        self._show_selection_value(module)  # the table may hide it: the value shows all the same
        self._request_quant_layer(module)
        if not found:
            self.status_message.emit(f"{module or 'the model'} is hidden by the table's filters")

    # -- a quantize run's overlays ---------------------------------------------------------------
    def _request_node_finding(self, node_id: str) -> bool:
        """A node the doctor overlay painted for a finding about no module (a concat, an add): open that
        finding. False where the node carries none."""
        overlay = self._overlay()
        nodes = (overlay or {}).get("node_findings") if overlay and overlay.get("doctor") else None
        layer = nodes.get(node_id) if isinstance(nodes, dict) else None
        if not layer or not overlay.get("quant_run"):
            return False
        self.doctor_finding_requested.emit(str(overlay["quant_run"]), str(layer))
        return True

    def _request_quant_layer(self, module: str) -> None:
        """Ask for a layer's histogram when the graph shows a quantize run's SQNR and `module` has one."""
        overlay = self._overlay()
        if not overlay or not overlay.get("quant_run") or module not in overlay.get("values", {}):
            return
        if overlay.get("doctor"):
            self.doctor_finding_requested.emit(str(overlay["quant_run"]), module)
            return
        tensor = overlay.get("tensor") or (
            "activation" if "activation" in self.overlay_combo.currentData() else "weight"
        )
        self.quant_layer_requested.emit(str(overlay["quant_run"]), module, tensor)

    def _show_selection_value(self, module: str | None = None) -> None:
        """The picked module's value in the overlay shown; for a quantize run's SQNR, both its weight and its
        activation SQNR. `module` is the one just picked in the graph (else the table's selected row)."""
        module = module if module is not None else self.selected_module()
        overlay = self._overlay()
        if overlay is None or module is None:
            self.selection_value.clear()
            self.selection_value.hide()
            return
        entries = [overlay]
        run = overlay.get("quant_run")
        if run:
            overlays = self.graph.get("overlay_index", {}).get("overlays", {})
            entries = [
                overlays[m] for m in QUANT_OVERLAYS if overlays.get(m, {}).get("quant_run") == run
            ] or entries
        parts = []
        for entry in entries:
            value = entry.get("values", {}).get(module)
            parts.append(f"{entry.get('label', '')}: {'—' if value is None else number_text(float(value))}")
        text = f"<b>{module or 'the model'}</b> · " + " · ".join(parts)
        if run:
            text += f"<br><span style='color:gray'>quantize run {run}</span>"
        self.selection_value.setText(text)
        self.selection_value.show()

    # -- exports ---------------------------------------------------------------------------------
    def _update_buttons(self) -> None:
        self.build_button.setEnabled(self.source_combo.currentData() is not None)
        self.export_json_button.setEnabled(self.graph is not None)
        self.export_csv_button.setEnabled(self.graph is not None)
        self.overlay_combo.setEnabled(self.graph is not None)

    def export_graph_json(self, path: str | Path) -> None:
        shutil.copyfile(self.graph["graph_json"], path)

    def export_table_csv(self, path: str | Path) -> None:
        self.model.write_csv(path)

    def _default_name(self, suffix: str) -> str:
        return str(self.workspace / f"{Path(self.graph['run_dir']).name}{suffix}")

    def _on_export_json_clicked(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "Export graph JSON", self._default_name("-graph.json"), "Model Explorer graph (*.json)"
        )
        if path:
            self._export(self.export_graph_json, path)

    def _on_export_csv_clicked(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "Export module table", self._default_name("-modules.csv"), "CSV (*.csv)"
        )
        if path:
            self._export(self.export_table_csv, path)

    def _export(self, write, path: str) -> None:
        try:
            write(path)
        except OSError as exc:
            self.status_message.emit(f"Could not write {path}: {exc.strerror or exc}")
            return
        self.status_message.emit(f"Wrote {path}")
