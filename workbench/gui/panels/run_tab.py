"""What the Training, Quantization and Export tabs share: their runs of the workspace, the jobs of this window still
running them, the messages a job sends before its record names its run, which run is selected, and the Open folder
and Delete… actions. Each tab says what it shows; the bookkeeping lives here once.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QSplitter, QStackedWidget, QTableWidget, QVBoxLayout, QWidget

from workbench.gui.early_messages import EarlyMessages
from workbench.gui.panels.runs_panel import delete_run_action
from workbench.gui.widgets import run_table
from workbench.gui.widgets.open_folder import open_folder
from workbench.protocol import Message
from workbench.runs import RunStore


class RunTab(QWidget):
    """A tab of runs of `TASKS`: `runs` (run id -> list entry with the tab's summary), `live` (job id -> what the
    tab keeps of a run while its job goes on), `job_of_run` (run id -> job id) and `table`, set by the tab's build.

    A tab overrides `run_summary(entry)` (its columns' values), `forget(run_id)` (a deleted run, or every run when the
    workspace changes: None) and, where it keeps arrays of a live job, `take_array(kept, msg)`.
    """

    TASKS: tuple[str, ...] = ()
    EARLY_PREFIX = ""  # the array names of the tab's jobs ("quant/", "bench/") that may come before their record
    EARLY_TYPES: tuple[str, ...] = ("array",)  # the message types that may
    ENDED_KEPT = 50  # jobs whose late messages still find their run after the job ended

    def __init__(self, workspace, parent=None):
        super().__init__(parent)
        self.store = RunStore(workspace)
        self.runs: dict[str, dict] = {}
        self.live: dict[str, object] = {}
        self.job_of_run: dict[str, str] = {}
        self._early = EarlyMessages(self.EARLY_PREFIX, self.EARLY_TYPES)
        # job id -> (what was kept, run id) of jobs that ended: the reply that ends a job can overtake its last
        # events (another channel), which still belong to its run.
        self.ended: dict[str, tuple[object, str | None]] = {}
        self.table: QTableWidget | None = None

    # -- what a tab says -------------------------------------------------------------------------
    def run_summary(self, entry: dict) -> dict:
        """The tab's own values of a listed run (its spec, its key result); {} when it cannot be read."""
        return {}

    def forget(self, run_id: str | None) -> None:
        """A run left the workspace (None: the workspace changed): drop what the tab shows of it."""

    def take_array(self, kept, msg: Message) -> bool:
        """Add an array event of a live job to what the tab keeps of it; True when it changed something."""
        return False

    # -- the frame -----------------------------------------------------------------------------------
    def build_frame(self, buttons, left: QWidget, right: QWidget, empty_state: QWidget,
                    sizes: tuple[int, int]) -> QSplitter:
        """The tab's frame: its toolbar of `buttons`, then `empty_state` (no runs yet) or the runs (`left`) beside
        the run shown (`right`) in a splitter, which it returns; `pages` switches between the two."""
        bar = QHBoxLayout()
        for button in buttons:
            bar.addWidget(button)
        bar.addStretch(1)
        splitter = QSplitter(Qt.Horizontal)
        splitter.addWidget(left)
        splitter.addWidget(right)
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 5)
        splitter.setSizes(list(sizes))
        self.pages = QStackedWidget()
        self.pages.addWidget(empty_state)
        self.pages.addWidget(splitter)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(bar)
        layout.addWidget(self.pages, 1)
        return splitter

    # -- the workspace and its runs ----------------------------------------------------------------
    def set_workspace(self, workspace) -> None:
        self.store = RunStore(workspace)
        self.forget(None)
        self.refresh()

    def refresh(self) -> None:  # each tab fills its table from list_runs()
        raise NotImplementedError

    def list_runs(self) -> tuple[list[dict], list[dict]]:
        """(this tab's entries, every run listed): the store is listed once, since listing opens every run."""
        listed = self.store.list_runs()
        entries = run_table.task_runs(listed, self.TASKS, self.job_of_run, self.run_summary)
        self.runs = {entry["id"]: entry for entry in entries}
        return entries, listed

    def keep_selection(self, selected: str | None, entries: list[dict], *, pick_first: bool = True) -> None:
        """After the rows were set: the run selected before, else the newest one (when `pick_first`)."""
        if selected and self.select_run(selected):
            return
        if pick_first and entries and self.selected_run_id() is None:
            self.select_run(entries[0]["id"])

    def selected_run_id(self) -> str | None:
        return run_table.selected_run_id(self.table)

    def select_run(self, run_id: str) -> bool:
        return run_table.select_run(self.table, run_id)

    def selected_entry(self) -> dict | None:
        return self.runs.get(self.selected_run_id() or "")

    # -- jobs of this window -----------------------------------------------------------------------
    def start_tracking(self, job_id: str, run_id: str | None, kept, *, take: Callable | None = None) -> None:
        """A job of the tab's task began (or named its run): keep `kept` for it, and hand it the messages that
        came first (to `take`, by default `take_array`)."""
        self.live[job_id] = kept
        if run_id:
            self.job_of_run[run_id] = job_id
        for msg in self._early.take(job_id):
            (take or self.take_array)(kept, msg)

    def name_run(self, job_id: str, run_id: str) -> None:
        """A tracked job's record named its run folder."""
        self.job_of_run[run_id] = job_id

    def stop_tracking(self, job_id: str, run_id: str | None = None) -> tuple[object, str | None]:
        """A job ended: (what was kept for it, its run id); early messages still held for it go."""
        kept = self.live.pop(job_id, None)
        self._early.take(job_id)
        # The run the job was tracked under wins over the one its last record names.
        tracked = next((run for run, job in self.job_of_run.items() if job == job_id), None)
        if tracked:
            self.job_of_run.pop(tracked, None)
        if kept is not None:
            self.ended[job_id] = (kept, tracked or run_id)
            while len(self.ended) > self.ENDED_KEPT:
                self.ended.pop(next(iter(self.ended)))
        return kept, tracked or run_id

    def live_of(self, msg: Message):
        """What is kept for the job a message is of, while it runs or just after; None (and the message held, when it
        may be the tab's) when the job is not known yet."""
        job_id = msg.parent_id or ""
        kept = self.live.get(job_id)
        if kept is None and job_id in self.ended:
            kept = self.ended[job_id][0]
        if kept is None:
            self._early.keep(msg)
        return kept

    def drop_early(self, job_id: str) -> None:
        """A job turned out to be another tab's: what was held for it goes."""
        self._early.take(job_id)

    # -- actions every tab has -----------------------------------------------------------------------
    def open_selected_folder(self) -> None:
        entry = self.selected_entry()
        if entry:
            open_folder(self, entry["run_dir"])

    def delete_selected(self) -> None:
        """Delete… : asks first; the tab forgets the run once it is gone."""
        run_id = self.selected_run_id()
        if run_id and delete_run_action(self, self.store, run_id):
            self.forget(run_id)
        self.refresh()
