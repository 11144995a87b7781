"""The one job lifecycle of the run tabs (RunTab.on_job_changed and Stop): which hooks a tab's job goes
through and in what order, what another tab's job leaves behind, and the Export tab's status bar after a job
that failed before the tab took its record. Real Qt widgets and real job records and run folders; no worker
needed."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QPushButton

from workbench.client import JobRecord
from workbench.gui.panels.export.export_panel import ExportPanel
from workbench.gui.panels.run_tab import RunTab
from workbench.gui.widgets import run_table
from workbench.gui.widgets.job_progress import JobProgress
from workbench.protocol import Message
from workbench.runs import RunStore
from workbench.task_ids import EXPORT_TASK

TASK = "demo.job"


class DemoTab(RunTab):
    """A tab of `demo.job` runs that records each hook it is given; `wait_for_run`: as the Training and
    Quantization tabs, it tracks a job only once its record names its run."""

    TASKS = (TASK,)
    EARLY_PREFIX = "demo/"
    STOPPING_TEXT = "Stopping…"

    def __init__(self, workspace, *, wait_for_run: bool):
        super().__init__(workspace)
        self.wait_for_run = wait_for_run
        self.calls: list[tuple] = []
        self.shown = None
        self.table = run_table.make_run_table(("Run", "Status"))
        self.stop_button = QPushButton("Stop")
        self.connect_stop(self.stop_button)
        self.progress_box = JobProgress("Stop this job")
        self.refresh()

    def refresh(self) -> None:
        self.calls.append(("refresh",))
        entries, _ = self.list_runs()
        run_table.set_rows(self.table, [[run_table.id_item(e), run_table.status_item(e)] for e in entries])

    def job_started(self, record, run_id):
        self.calls.append(("started", run_id))
        if self.wait_for_run and not run_id:
            return None
        kept = {"arrays": []}
        self.start_tracking(record.job_id, run_id, kept)
        self.shown = kept
        return kept

    def run_named(self, record, kept, run_id) -> None:
        self.calls.append(("named", run_id))

    def showing(self, kept) -> bool:
        return kept is self.shown

    def job_finished(self, record, kept, run_id, showing) -> None:
        self.calls.append(("finished", run_id, showing, kept is not None))

    def ended_message(self, record, run_id) -> str:
        return f"{run_id} {record.state}"

    def take_array(self, kept, msg) -> bool:
        kept["arrays"].append(msg.content["name"])
        return True


def _run_dir(workspace, task: str = TASK) -> str:
    with RunStore(workspace).create_run("demo", {"what": "demo"}, task=task) as run:
        run.set_status("running")
        return str(run.dir)


def _array(job_id: str, name: str) -> Message:
    return Message(
        header={"msg_id": f"m-{name}", "msg_type": "array"},
        parent_header={"msg_id": job_id},
        content={"name": name},
    )


def test_a_job_goes_started_named_progress_finished_in_that_order(qtbot, tmp_path):
    tab = DemoTab(tmp_path, wait_for_run=False)
    qtbot.addWidget(tab)
    messages = []
    tab.status_message.connect(messages.append)
    run_dir = _run_dir(tmp_path)
    run_id = Path(run_dir).name
    tab.live_of(_array("j1", "demo/first"))  # an event that overtook the record: held for the job
    tab.calls.clear()

    tab.on_job_changed(JobRecord("j1", TASK, state="submitted"))
    assert tab.calls == [("started", None)] and tab.shown["arrays"] == ["demo/first"]
    assert not tab.progress_box.isHidden()  # the job shown has its progress
    tab.on_job_changed(JobRecord("j1", TASK, state="running", run_dir=run_dir))
    tab.on_job_changed(JobRecord("j1", TASK, state="running", run_dir=run_dir, fraction=0.5))
    assert tab.calls == [("started", None), ("named", run_id)]  # named once, started once
    assert tab.job_of_run == {run_id: "j1"} and tab.records["j1"].fraction == 0.5

    tab.on_job_changed(JobRecord("j1", TASK, state="failed", run_dir=run_dir, error={"message": "boom"}))
    assert tab.calls[-2:] == [("refresh",), ("finished", run_id, True, True)]  # the list is read first
    assert messages == [f"{run_id} failed"] and tab.progress_box.isHidden()
    assert tab.live == {} and tab.job_of_run == {} and tab.records == {}
    assert tab.live_of(_array("j1", "demo/late")) is tab.shown  # a late event still finds what was kept


def test_a_tab_that_waits_for_the_run_tracks_the_job_when_its_record_names_it(qtbot, tmp_path):
    tab = DemoTab(tmp_path, wait_for_run=True)
    qtbot.addWidget(tab)
    run_dir = _run_dir(tmp_path)
    run_id = Path(run_dir).name
    tab.calls.clear()
    tab.on_job_changed(JobRecord("j1", TASK, state="queued"))
    assert tab.calls == [("started", None)] and tab.live == {}
    tab.on_job_changed(JobRecord("j1", TASK, state="running", run_dir=run_dir))
    assert tab.calls == [("started", None), ("started", run_id)] and tab.job_of_run == {run_id: "j1"}
    tab.on_job_changed(JobRecord("j1", TASK, state="done", run_dir=run_dir))
    assert tab.calls[-1] == ("finished", run_id, True, True)


def test_a_job_that_ended_before_the_tab_saw_it_finishes_untracked(qtbot, tmp_path):
    tab = DemoTab(tmp_path, wait_for_run=True)
    qtbot.addWidget(tab)
    run_dir = _run_dir(tmp_path)
    tab.calls.clear()
    tab.on_job_changed(JobRecord("j1", TASK, state="done", run_dir=run_dir))
    assert tab.calls == [("refresh",), ("finished", Path(run_dir).name, False, False)]


def test_another_tabs_job_calls_no_hook_and_its_held_messages_go(qtbot, tmp_path):
    tab = DemoTab(tmp_path, wait_for_run=False)
    qtbot.addWidget(tab)
    tab.calls.clear()
    tab.live_of(_array("j2", "demo/held"))
    for record in (
        JobRecord("j2", "other.task", state="running"),
        JobRecord("j2", TASK, state="running", internal=True),
    ):
        tab.on_job_changed(record)
    assert tab.calls == [] and tab.live == {}
    kept = {"arrays": []}
    tab.start_tracking("j2", None, kept)
    assert kept["arrays"] == []  # what was held for it was let go


def test_stop_cancels_the_selected_runs_job_and_says_so(qtbot, tmp_path):
    tab = DemoTab(tmp_path, wait_for_run=True)
    qtbot.addWidget(tab)
    messages = []
    tab.status_message.connect(messages.append)
    run_dir = _run_dir(tmp_path)
    run_id = Path(run_dir).name
    tab.stop_button.setEnabled(False)
    assert not tab.stop_selected()
    tab.on_job_changed(JobRecord("j1", TASK, state="running", run_dir=run_dir))
    tab.refresh()
    assert tab.select_run(run_id)
    tab.stop_button.setEnabled(True)
    with qtbot.waitSignal(tab.cancel_requested) as signal:
        assert tab.stop_selected()
    assert signal.args == ["j1"] and messages == ["Stopping…"]


def test_an_export_that_failed_before_the_tab_took_its_record_leaves_no_exporting_in_the_status_bar(
    qtbot, tmp_path
):
    failed = JobRecord(
        "j1",
        EXPORT_TASK,
        spec={"source": {"run": "r1"}},
        state="failed",
        error={"message": "the worker refused it"},
    )
    panel = ExportPanel(tmp_path, lambda task, spec: failed)
    qtbot.addWidget(panel)
    messages = []
    panel.status_message.connect(messages.append)
    assert panel.start_export({"source": {"run": "r1"}}) is failed
    assert messages[0] == "Exporting r1…" and messages[-1] == "Export failed: see the verdict"
    assert panel.live == {} and panel.records == {}
