"""Run on a cluster: the torchrun command for each node and a SLURM batch script for a training spec.

The window does not start anything here: it writes the spec and the script into a folder every node can see,
and shows the command to copy. With the workspace on that shared filesystem, the Training tab follows the run
from its metrics database, as it does for any run in the workspace.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from workbench.cluster import (
    HEAD_NODE_ENDPOINT,
    SCRIPT_NAME,
    SPEC_NAME,
    default_run_id,
    sbatch_script,
    torchrun_command,
)
from workbench.gui.widgets.spec_form import ERROR_COLOUR
from workbench.specs import TrainSpec

INTRO = (
    "Run the command below on each node, the same line on every one, with <code>HEAD_NODE</code> set to the "
    "first node's address (or submit the batch script with <code>sbatch</code>: it finds that node). With "
    "the workspace on a filesystem all nodes share, the Training tab follows the run live from its metrics "
    "database, like any run in the workspace."
)


def _monospace() -> QFont:
    font = QFontDatabase.systemFont(QFontDatabase.FixedFont)
    if not font.fixedPitch():
        font = QFont("monospace")
        font.setStyleHint(QFont.TypeWriter)
    return font


def _code_box(lines: int) -> QPlainTextEdit:
    box = QPlainTextEdit()
    box.setReadOnly(True)
    box.setFont(_monospace())
    box.setLineWrapMode(QPlainTextEdit.WidgetWidth)
    box.setMinimumHeight(box.fontMetrics().lineSpacing() * lines + 12)
    return box


class ClusterPage(QDialog):
    """Nodes, processes per node, rendezvous, restarts, SLURM time and partition, shared workspace and folder;
    the command and the script follow every edit. `save_to(folder)` writes the spec and the script there."""

    def __init__(self, spec: TrainSpec, workspace: str | Path = "", parent=None, *, run_id: str = ""):
        super().__init__(parent)
        self.setWindowTitle("Run on a cluster")
        self.setMinimumSize(820, 760)
        self.spec = spec
        self.command = ""
        self.script = ""
        self._build_fields(spec, workspace, run_id)
        settings = self._build_settings()
        self._build_messages()
        self._build_outputs()
        buttons = self._build_buttons()
        self._build_layout(settings, buttons)
        self._connect()
        self.refresh()

    def _build_fields(self, spec: TrainSpec, workspace: str | Path, run_id: str) -> None:
        """The cluster's settings: nodes, processes, head node, restarts, SLURM limits, workspace, run id,
        folder."""
        self.nodes = QSpinBox()
        self.nodes.setRange(1, 4096)
        self.nodes.setValue(2)
        self.nodes.setToolTip("How many machines take part (torchrun --nnodes, #SBATCH --nodes).")
        self.nproc = QSpinBox()
        self.nproc.setRange(1, 1024)
        self.nproc.setValue(spec.nproc if spec.distributed == "ddp" else 1)
        self.nproc.setToolTip(
            "Training processes on each node, usually one per GPU "
            "(torchrun --nproc-per-node, #SBATCH --gpus-per-node)."
        )
        self.endpoint = QLineEdit(HEAD_NODE_ENDPOINT)
        self.endpoint.setToolTip(
            "HOST:PORT of the node that hosts the rendezvous, reachable from every node. "
            "$HEAD_NODE is left for the shell to expand: set it on each node, or type the "
            "address. The batch script finds the head node itself."
        )
        self.restarts = QSpinBox()
        self.restarts.setRange(0, 1000)
        self.restarts.setValue(3)
        self.restarts.setToolTip(
            "How often torchrun restarts the whole group after a process fails "
            "(each restart resumes from the last checkpoint)."
        )
        self.time = QLineEdit("04:00:00")
        self.time.setToolTip("SLURM time limit, HH:MM:SS or D-HH:MM:SS.")
        self.partition = QLineEdit()
        self.partition.setPlaceholderText("the cluster's default")
        self.partition.setToolTip("SLURM partition (queue); empty leaves the line commented out.")
        self.workspace = QLineEdit(str(workspace))
        self.workspace.setToolTip("The workspace on a filesystem every node sees, by the same path on each.")
        self.run_id = QLineEdit(run_id or default_run_id(spec))
        self.run_id.setToolTip("The run's id: its folder in the workspace and torchrun's rendezvous id.")
        self.folder = QLineEdit()
        self.folder.setToolTip(
            f"Where {SPEC_NAME} and {SCRIPT_NAME} are saved; every node reads the spec from "
            "here, so it must be on the shared filesystem too."
        )
        self._folder_auto = True  # follows the workspace and run id until the user edits it
        self._set_auto_folder()

    def _build_settings(self) -> QGroupBox:
        """The Cluster box laying out the fields."""
        settings = QGroupBox("Cluster")
        form = QFormLayout(settings)
        form.setFieldGrowthPolicy(QFormLayout.AllNonFixedFieldsGrow)
        counts = QHBoxLayout()
        counts.addWidget(self.nodes)
        counts.addSpacing(16)
        counts.addWidget(QLabel("Processes (GPUs) per node"))
        counts.addWidget(self.nproc)
        counts.addSpacing(16)
        counts.addWidget(QLabel("Max restarts"))
        counts.addWidget(self.restarts)
        counts.addStretch(1)
        form.addRow("Nodes", counts)
        form.addRow("Head node (host:port)", self.endpoint)
        slurm = QHBoxLayout()
        slurm.addWidget(self.time)
        slurm.addSpacing(16)
        slurm.addWidget(QLabel("Partition"))
        slurm.addWidget(self.partition, 1)
        form.addRow("Time limit (SLURM)", slurm)
        form.addRow("Shared workspace", self._with_browse(self.workspace, "Shared workspace"))
        form.addRow("Run id", self.run_id)
        form.addRow(
            "Save spec and script in", self._with_browse(self.folder, "Folder for the spec and script")
        )
        return settings

    def _build_messages(self) -> None:
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: #c77700")
        self.note.hide()
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet(f"color: {ERROR_COLOUR}")
        self.error.hide()

    def _build_outputs(self) -> None:
        """The command for each node and the batch script, each with its Copy button."""
        self.command_box = _code_box(3)
        self.command_box.setMaximumHeight(self.command_box.minimumHeight() + 24)
        self.copy_command = QPushButton("Copy")
        self.copy_command.setToolTip("Copy the command to the clipboard")
        self.copy_command.clicked.connect(lambda: self._copy(self.command))
        self.script_box = _code_box(12)
        self.copy_script = QPushButton("Copy")
        self.copy_script.setToolTip("Copy the batch script to the clipboard")
        self.copy_script.clicked.connect(lambda: self._copy(self.script))

    def _build_buttons(self) -> QDialogButtonBox:
        self.save_button = QPushButton("Save…")
        self.save_button.setToolTip(f"Write {SPEC_NAME} and {SCRIPT_NAME} side by side into a folder")
        self.save_button.clicked.connect(self._on_save_clicked)
        self.saved = QLabel()
        self.saved.setWordWrap(True)
        self.saved.setTextInteractionFlags(Qt.TextSelectableByMouse)
        buttons = QDialogButtonBox(QDialogButtonBox.Close)
        buttons.rejected.connect(self.reject)
        buttons.addButton(self.save_button, QDialogButtonBox.ActionRole)
        return buttons

    def _build_layout(self, settings: QGroupBox, buttons: QDialogButtonBox) -> None:
        intro = QLabel(INTRO)
        intro.setWordWrap(True)
        intro.setTextFormat(Qt.RichText)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addSpacing(6)
        layout.addWidget(settings)
        layout.addWidget(self.note)
        layout.addWidget(self.error)
        layout.addLayout(self._heading("On each node", self.copy_command))
        layout.addWidget(self.command_box)
        layout.addLayout(self._heading(f"SLURM batch script ({SCRIPT_NAME})", self.copy_script))
        layout.addWidget(self.script_box, 1)
        bottom = QHBoxLayout()
        bottom.addWidget(self.saved, 1)
        bottom.addWidget(buttons)
        layout.addLayout(bottom)

    def _connect(self) -> None:
        for spin in (self.nodes, self.nproc, self.restarts):
            spin.valueChanged.connect(self.refresh)
        for line in (self.endpoint, self.time, self.partition, self.folder):
            line.textChanged.connect(self.refresh)
        for line in (self.workspace, self.run_id):
            line.textChanged.connect(self._on_location_changed)
        self.folder.textEdited.connect(self._on_folder_edited)

    # -- building blocks -------------------------------------------------------------------------------------

    def _with_browse(self, line: QLineEdit, title: str) -> QWidget:
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(line, 1)
        browse = QPushButton("Browse…")
        browse.clicked.connect(lambda: self._browse(line, title))
        layout.addWidget(browse)
        return row

    @staticmethod
    def _heading(text: str, button: QPushButton) -> QHBoxLayout:
        row = QHBoxLayout()
        label = QLabel(f"<b>{text}</b>")
        row.addWidget(label)
        row.addStretch(1)
        row.addWidget(button)
        return row

    def _browse(self, line: QLineEdit, title: str) -> None:
        path = QFileDialog.getExistingDirectory(self, title, line.text())
        if path:
            line.setText(path)
            if line is self.folder:
                self._folder_auto = False

    def _set_auto_folder(self) -> None:
        workspace, run_id = self.workspace.text().strip(), self.run_id.text().strip()
        self.folder.setText(str(Path(workspace) / "cluster" / run_id) if workspace and run_id else "")

    def _on_location_changed(self, *args) -> None:
        if self._folder_auto:
            self._set_auto_folder()  # refreshes through the folder's textChanged
        self.refresh()

    def _on_folder_edited(self, *args) -> None:
        self._folder_auto = False

    # -- what the page shows ---------------------------------------------------------------------------------

    def spec_path(self) -> str:
        return str(Path(self.folder.text().strip()) / SPEC_NAME) if self.folder.text().strip() else ""

    def refresh(self, *args) -> None:
        """Rebuild the command and the script from the fields; a bad field empties them and says why."""
        common = dict(
            run_id=self.run_id.text().strip(),
            workspace=self.workspace.text().strip(),
            max_restarts=self.restarts.value(),
        )
        try:
            if not self.folder.text().strip():
                raise ValueError("folder: choose where to save the spec and the script")
            self.command = torchrun_command(
                self.spec_path(),
                nnodes=self.nodes.value(),
                nproc_per_node=self.nproc.value(),
                rdzv_endpoint=self.endpoint.text().strip(),
                **common,
            )
            self.script = sbatch_script(
                self.spec_path(),
                nodes=self.nodes.value(),
                gpus_per_node=self.nproc.value(),
                time=self.time.text(),
                partition=self.partition.text(),
                **common,
            )
            error = ""
        except ValueError as exc:
            self.command, self.script, error = "", "", f"Fix this first: {exc}"
        self.error.setText(error)
        self.error.setVisible(bool(error))
        self.command_box.setPlainText(self.command)
        self.script_box.setPlainText(self.script)
        for button in (self.copy_command, self.copy_script, self.save_button):
            button.setEnabled(not error)
        device = self.spec.device
        self.note.setText(
            f"This spec trains on device {device}: every process would use the CPU. Choose auto or "
            "cuda on the wizard's device page to train on the nodes' GPUs."
            if device == "cpu" or device == "mps"
            else ""
        )
        self.note.setVisible(bool(self.note.text()))

    def _copy(self, text: str) -> None:
        QGuiApplication.clipboard().setText(text)
        self.saved.setText("Copied to the clipboard.")

    # -- saving ----------------------------------------------------------------------------------------------

    def save_to(self, folder: Path) -> list[Path]:
        """Write the spec and the batch script into `folder` (made if missing); the command and script then
        name that folder's spec. Returns [spec path, script path]; ValueError while a field is invalid."""
        folder = Path(folder)
        if self.folder.text().strip() != str(folder):
            self._folder_auto = False
            self.folder.setText(str(folder))  # the command must name the spec where it is saved
        if not self.script:
            raise ValueError(self.error.text() or "nothing to save")
        folder.mkdir(parents=True, exist_ok=True)
        spec_file, script_file = folder / SPEC_NAME, folder / SCRIPT_NAME
        spec_file.write_text(self.spec.to_toml(), encoding="utf-8")
        script_file.write_text(self.script, encoding="utf-8")
        try:
            script_file.chmod(script_file.stat().st_mode | 0o111)  # also runnable with bash by hand
        except OSError:
            pass  # a filesystem without modes: `sbatch train.sbatch` does not need it
        self.saved.setText(f"Saved {spec_file} and {script_file}.")
        return [spec_file, script_file]

    def _on_save_clicked(self) -> None:
        # The dialog picks existing folders: make the suggested one, and take it back if the user cancels.
        start = Path(self.folder.text().strip() or self.workspace.text().strip() or Path.home())
        made = False
        try:
            if not start.exists():
                start.mkdir(parents=True)
                made = True
        except OSError:
            pass
        path = QFileDialog.getExistingDirectory(self, "Save the spec and the batch script in", str(start))
        if made and (not path or Path(path) != start):
            try:
                start.rmdir()  # only while empty
            except OSError:
                pass
        if not path:
            return
        try:
            self.save_to(Path(path))
        except (OSError, ValueError) as exc:
            self.saved.setText("")
            self.error.setText(f"Could not save: {exc}")
            self.error.show()
