"""What the Training, Quantization and Export tabs share: their runs of the workspace, the jobs of this
window still running them and the one lifecycle each job goes through, the messages a job sends before its
record names its run, which run is selected, and the Stop, Open folder and Delete… actions. Each tab says what
it shows; the bookkeeping lives here once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QSplitter, QStackedWidget, QTableWidget, QVBoxLayout, QWidget

from workbench.client import JobRecord
from workbench.gui.early_messages import EarlyMessages
from workbench.gui.panels.runs_panel import delete_run_action
from workbench.gui.widgets import run_table
from workbench.gui.widgets.open_folder import open_folder
from workbench.protocol import Message
from workbench.runs import RunStore
from workbench.task_ids import with_aliases


class RunTab(QWidget):
    """A tab of runs of `TASKS`: `runs` (run id -> list entry with the tab's summary), `live` (job id -> what
    the tab keeps of a run while its job goes on), `job_of_run` (run id -> job id) and `table`, set by the
    tab's build.

    A tab overrides `run_summary(entry)` (its columns' values), `forget(run_id)` (a deleted run, or every run
    when the workspace changes: None) and, where it keeps arrays of a live job, `take_array(kept, msg)`.

    A job goes through `on_job_changed`, one lifecycle for the three tabs: `job_started` (first seen: the tab
    tracks it and says what it keeps), `run_named` (its run folder came after it started), `job_finished` (it
    ended: the tab shows its result); `showing(kept)` and `ended_message` serve the progress box and status
    bar.
    """

    cancel_requested = Signal(str)  # job id: stop it at its next step
    status_message = Signal(str)
    TASKS: tuple[str, ...] = ()
    # the array names of the tab's jobs ("quant/", "bench/") that may come before their record
    EARLY_PREFIX = ""
    EARLY_TYPES: tuple[str, ...] = ("array",)  # the message types that may
    ENDED_KEPT = 50  # jobs whose late messages still find their run after the job ended
    STOPPING_TEXT = ""  # what the status bar says when Stop was clicked ("" : nothing)

    def __init__(self, workspace, parent=None):
        super().__init__(parent)
        self.store = RunStore(workspace)
        self.runs: dict[str, dict] = {}
        self.live: dict[str, object] = {}
        self.job_of_run: dict[str, str] = {}
        self._early = EarlyMessages(self.EARLY_PREFIX, self.EARLY_TYPES)
        # job id -> (what was kept, run id) of jobs that ended: the reply that ends a job can overtake its
        # last events (another channel), which still belong to its run.
        self.ended: dict[str, tuple[object, str | None]] = {}
        self.records: dict[str, JobRecord] = {}  # job id -> its latest record while it runs
        self.table: QTableWidget | None = None
        self.stop_button = None  # set by connect_stop
        self.progress_box = None  # a tab's JobProgress, shown for the live job it shows

    # -- what a tab says -------------------------------------------------------------------------
    def run_summary(self, entry: dict) -> dict:
        """The tab's own values of a listed run (its spec, its key result); {} when it cannot be read."""
        return {}

    def forget(self, run_id: str | None) -> None:
        """A run left the workspace (None: the workspace changed): drop what the tab shows of it."""

    def take_array(self, kept, msg: Message) -> bool:
        """Add an array event of a live job to what the tab keeps of it; True when it changed something."""
        return False

    def job_started(self, record: JobRecord, run_id: str | None):
        """A job of the tab's tasks is seen for the first time: track it (`start_tracking`) and show it;
        returns what the tab keeps of it, or None to wait for a later record (one that names its run)."""
        return None

    def run_named(self, record: JobRecord, kept, run_id: str) -> None:
        """A tracked job's record named its run folder after the job started (`name_run` was done)."""

    def job_finished(self, record: JobRecord, kept, run_id: str | None, showing: bool) -> None:
        """A job ended (done, failed or cancelled), after the runs list was read again: `kept` is what the tab
        kept of it (None: never tracked), `showing` whether the tab was showing it."""

    def showing(self, kept) -> bool:
        """Whether the tab shows this live job now (its progress box follows it)."""
        return False

    def ended_message(self, record: JobRecord, run_id: str | None) -> str:
        """What the status bar says when a job of the tab ends ("": nothing)."""
        return ""

    # -- the frame -----------------------------------------------------------------------------------
    def build_frame(
        self, buttons, left: QWidget, right: QWidget, empty_state: QWidget, sizes: tuple[int, int]
    ) -> QSplitter:
        """The tab's frame: its toolbar of `buttons`, then `empty_state` (no runs yet) or the runs (`left`)
        beside the run shown (`right`) in a splitter, which it returns; `pages` switches between the two."""
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
        """What is kept for the job a message is of, while it runs or just after; None (and the message held,
        when it may be the tab's) when the job is not known yet."""
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

    # -- the job lifecycle ---------------------------------------------------------------------------
    def on_job_changed(self, record: JobRecord) -> None:
        """A job's record changed: a job of the tab's tasks starts, names its run, progresses or ends here;
        another tab's job only lets go of the messages held for it."""
        if record.task not in with_aliases(self.TASKS) or record.internal:
            self.drop_early(record.job_id)
            return
        run_id = Path(record.run_dir).name if record.run_dir else None
        if record.active:
            self._job_running(record, run_id)
        else:
            self._job_ended(record, run_id)

    def _job_running(self, record: JobRecord, run_id: str | None) -> None:
        self.records[record.job_id] = record
        kept = self.live.get(record.job_id)
        if kept is None:
            kept = self.job_started(record, run_id)
        if kept is None:
            return
        if run_id and self.job_of_run.get(run_id) != record.job_id:
            self.name_run(record.job_id, run_id)
            self.run_named(record, kept, run_id)
        if self.progress_box is not None and self.showing(kept):
            self.progress_box.show_record(record)

    def _job_ended(self, record: JobRecord, run_id: str | None) -> None:
        self.records.pop(record.job_id, None)
        # The reply that ends a job can overtake its last events: stop_tracking keeps routing them to its run.
        kept, run_id = self.stop_tracking(record.job_id, run_id)
        # Asked before the refresh, whose selection may show another run.
        showing = kept is not None and self.showing(kept)
        self.refresh()
        message = self.ended_message(record, run_id)
        if message:
            self.status_message.emit(message)
        if showing and self.progress_box is not None:
            self.progress_box.hide()
        self.job_finished(record, kept, run_id, showing)

    # -- actions every tab has -----------------------------------------------------------------------
    def connect_stop(self, *buttons) -> None:
        """Stop buttons of the tab (the first is the toolbar's, which says whether there is a job to stop)."""
        self.stop_button = buttons[0]
        for button in buttons:
            button.clicked.connect(self._on_stop_clicked)

    def job_to_stop(self) -> str | None:
        """The job Stop cancels: the selected run's, while it runs."""
        return self.job_of_run.get(self.selected_run_id() or "")

    def _on_stop_clicked(self) -> None:
        job_id = self.job_to_stop()
        if job_id:
            self.cancel_requested.emit(job_id)
            if self.STOPPING_TEXT:
                self.status_message.emit(self.STOPPING_TEXT)

    def stop_selected(self) -> bool:
        """Stop the selected live run (a menu's Stop); False when none is selected and live."""
        if self.stop_button is None or not self.stop_button.isEnabled():
            return False
        self._on_stop_clicked()
        return True

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
