"""The embedded Model Explorer page: a QWebEngineView, created only when QtWebEngine imports, that loads the
graph server's page and talks to Model Explorer through its postMessage commands (select a node, load node
data) and its `model-explorer-node-selected` message, which a small injected script relays as a console line.

QtWebEngine loads lazily (the window must paint without it). No torch.
"""

from __future__ import annotations

import json
import os

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QVBoxLayout, QWidget

BRIDGE_PREFIX = "WORKBENCH:"
# Model Explorer posts its events to window.parent, which for a top-level page is the page itself.
BRIDGE_SCRIPT = """
(function () {
  if (window.__workbenchBridge) { return; }
  window.__workbenchBridge = true;
  window.addEventListener('message', function (event) {
    var data = event.data || {};
    if (data.cmd === 'model-explorer-node-selected') { console.log('WORKBENCH:selected:' + data.nodeId); }
  });
  document.addEventListener('click', function (event) {
    var toggle = event.target && event.target.closest && event.target.closest('info-panel .hide-toggle');
    if (toggle && !window.__workbenchHiding) { console.log('WORKBENCH:info-panel-toggled'); }
  }, true);
})();
"""
# Model Explorer's side panel (node attributes, node-data statistics) takes half of the tab's graph area, and
# the module table beside it already lists each layer, so each page opens with it folded (its own toggle),
# unless the user opened it this session. The page counts as shown once it has folded (a 150 ms animation);
# then each pane fits its graph to the wider area, as Model Explorer's own Zoom to fit (Space) does, unless a
# node is to be selected (Model Explorer then zooms to that node).
FOLD_INFO_PANELS = """
(function () {
  var toggles = document.querySelectorAll('info-panel .hide-toggle');
  window.__workbenchHiding = true;
  try { toggles.forEach(function (t) { t.click(); }); } finally { window.__workbenchHiding = false; }
  return toggles.length;
})()
"""
FOLD_MS = 300
FIT_GRAPHS = """
Object.values((window.me_test && window.me_test.renderers) || {}).forEach(function (r) {
  try { r.webglRendererThreejsService.zoomFitGraph(); } catch (e) { /* another version: left as laid out */ }
});
"""
SELECT_NODE = "model-explorer-select-node-by-node-id"
# Model Explorer registers a pane's renderer under window.me_test (its own test hook) once the graph is laid
# out; before that its postMessage commands find no graph and are dropped.
GRAPH_SHOWN_CHECK = "!!(window.me_test && window.me_test.renderers && window.me_test.renderers[0])"
GRAPH_POLL_MS = 250
GRAPH_POLL_LIMIT = 240  # a minute: a large graph on a software renderer lays out slowly
WEBGL_CHECK = (
    "(function () { var c = document.createElement('canvas');"
    " return !!(c.getContext('webgl2') || c.getContext('webgl')); })()"
)
NO_WEBGL = (
    "WebGL is unavailable in this window, so Model Explorer cannot draw the graph (no GPU driver, and the "
    'software renderer is off). Start the workbench with QTWEBENGINE_CHROMIUM_FLAGS="--ignore-gpu-blocklist '
    '--enable-unsafe-swiftshader --use-gl=angle --use-angle=swiftshader-webgl". The module table works '
    "without it."
)


class WebEngineUnavailable(RuntimeError):
    """QtWebEngine cannot be imported or started here; the message says why."""


def load_web_engine():
    """(QWebEngineView, QWebEnginePage, QWebEngineScript) classes, or WebEngineUnavailable saying why not."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # Chromium aborts the whole process when it runs as root with its sandbox on; read when the engine
        # starts.
        os.environ.setdefault("QTWEBENGINE_DISABLE_SANDBOX", "1")
    try:
        from PySide6.QtWebEngineCore import QWebEnginePage, QWebEngineScript
        from PySide6.QtWebEngineWidgets import QWebEngineView
    except ImportError as exc:  # PySide6-Addons missing, or its system libraries (libnss3 and friends)
        raise WebEngineUnavailable(f"QtWebEngine is not available ({exc})") from None
    return QWebEngineView, QWebEnginePage, QWebEngineScript


class GraphView(QWidget):
    """Model Explorer in a web view. Raises WebEngineUnavailable when QtWebEngine is missing."""

    node_selected = Signal(str)  # a node id the user clicked in the graph
    status_changed = Signal(str, str)  # "loading", "ready" (graph shown), "no_webgl" or "failed", and words

    def __init__(self, parent=None):
        super().__init__(parent)
        view_class, page_class, script_class = load_web_engine()
        owner = self

        class BridgePage(page_class):
            def javaScriptConsoleMessage(self, level, message, line, source):  # noqa: N802 (Qt override)
                owner._on_page_console(message)

        self.view = view_class(self)
        self.page = BridgePage(self.view)
        self.view.setPage(self.page)
        script = script_class()
        script.setName("workbench-bridge")
        script.setSourceCode(BRIDGE_SCRIPT)
        script.setInjectionPoint(script_class.DocumentCreation)
        script.setWorldId(script_class.MainWorld)
        script.setRunsOnSubFrames(False)
        self.page.scripts().insert(script)
        self.page.loadFinished.connect(self._on_page_load_finished)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view)
        self.state = "empty"
        self.ready = False  # Model Explorer shows the graph (it takes postMessage commands now)
        # Model Explorer's side panel: folded on each page until the user opens it
        self.info_panel_shown = False
        self._selecting = ""  # a selection we asked for: its echo is not a user's click
        self._pending: list[dict] = []  # commands asked for before the graph was shown
        self._polls = 0
        self._graph_poll = QTimer(self)
        self._graph_poll.setInterval(GRAPH_POLL_MS)
        self._graph_poll.timeout.connect(self._on_graph_poll_timeout)
        self._folding = QTimer(self)
        self._folding.setSingleShot(True)
        self._folding.setInterval(FOLD_MS)
        self._folding.timeout.connect(lambda: self._show_ready(fit=True))

    def load(self, url: str) -> None:
        self.ready = False
        self._pending.clear()
        self._graph_poll.stop()
        self._folding.stop()
        self._set_state("loading", "loading the graph…")
        self.view.setUrl(url)

    def select_node(self, node_id: str) -> None:
        self._selecting = node_id
        self._post({"cmd": SELECT_NODE, "nodeId": node_id})

    def load_node_data(self, path: str) -> None:
        self._post({"cmd": "model-explorer-load-node-data-file", "path": path})

    def _post(self, message: dict) -> None:
        if not self.ready:
            self._pending.append(message)
            return
        self.page.runJavaScript(f"window.postMessage({json.dumps(message)}, '*');", 0)

    def _on_graph_poll_timeout(self) -> None:
        self._polls += 1
        if self._polls > GRAPH_POLL_LIMIT:
            self._graph_poll.stop()
            return
        self.page.runJavaScript(GRAPH_SHOWN_CHECK, 0, self._on_graph_checked)

    def _on_graph_checked(self, shown) -> None:
        if not shown or self.ready or self._folding.isActive():  # a late answer of an earlier poll
            return
        self._graph_poll.stop()
        if self.info_panel_shown:
            self._show_ready(fit=False)
            return
        self.page.runJavaScript(FOLD_INFO_PANELS, 0)
        self._folding.start()

    def _show_ready(self, fit: bool) -> None:
        """The graph is shown: say so, then send what was asked for meanwhile (listeners of "ready"
        included)."""
        # what listeners ask for now still queues: it is sent with the rest below
        self._set_state("ready", "")
        self.ready = True
        pending, self._pending = self._pending, []
        if fit and not any(message.get("cmd") == SELECT_NODE for message in pending):
            self.page.runJavaScript(FIT_GRAPHS, 0)
        for message in pending:
            self._post(message)

    def _set_state(self, state: str, text: str) -> None:
        self.state = state
        self.status_changed.emit(state, text)

    def _on_page_load_finished(self, ok: bool) -> None:
        if not ok:
            self._set_state("failed", "the graph page did not load from the graph server")
            return
        self.page.runJavaScript(WEBGL_CHECK, 0, self._on_webgl_checked)

    def _on_webgl_checked(self, has_webgl) -> None:
        if has_webgl:
            self._polls = 0
            self._graph_poll.start()
        else:
            self._set_state("no_webgl", NO_WEBGL)

    def _on_page_console(self, message: str) -> None:
        if not message.startswith(BRIDGE_PREFIX):
            return
        event = message[len(BRIDGE_PREFIX) :]
        if event == "info-panel-toggled":
            self.info_panel_shown = not self.info_panel_shown
            return
        if event.startswith("selected:"):
            node_id = event[len("selected:") :]
            if node_id == self._selecting:
                self._selecting = ""
                return
            self.node_selected.emit(node_id)
