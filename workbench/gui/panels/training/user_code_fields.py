"""The wizard's fields for the user's own Python code: a `.py` file, the class or function in it, and its
keyword arguments, with the note that the file runs with the user's permissions. Also the
`<scheme>:<path.py>:<Name>` names they make and the arguments' text forms (a JSON object, a TOML inline table
or key=value pairs)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QFormLayout, QHBoxLayout, QLabel, QLineEdit, QPushButton, QWidget

from workbench.gui.user_args import ARGS_EXAMPLES, args_or_message, format_args, parse_args  # noqa: F401 (the wizard's names)
from workbench.gui.widgets.spec_form import ERROR_COLOUR

WARNING_COLOUR = "#c77700"
PERMISSION_NOTE = (
    "This runs the Python code in that file inside the worker process, with your permissions. "
    "Only use files you trust."
)


def split_user_name(name: str) -> tuple[str, str, str]:
    """'file:/p/data.py:Shapes' -> ('file', '/p/data.py', 'Shapes'); ('', '', '') for any other name.

    The path may itself hold colons (C:\\ on Windows), so the name is the part after the last one.
    """
    scheme, colon, rest = name.partition(":")
    if not colon or scheme not in ("file", "lightning"):
        return "", "", ""
    path, _, attr = rest.rpartition(":")
    return scheme, path, attr


class UserCodeFields(QObject):
    """File, class-or-function name and (optionally) arguments of the user's code, as rows of the page's form
    (so every label on the page lines up in one column), shown or hidden together.

    It judges only what the GUI alone can know (the arguments' text, a file missing on this machine); the
    spec's own check names the rest, and the page shows it in `name_error`.
    """

    changed = Signal()

    def __init__(
        self,
        what: str,
        name_label: str,
        name_placeholder: str,
        with_args: bool = False,
        args_field: str = "dataset.args",
        file_label: str = "Python file",
        with_note: bool = True,
        parent=None,
    ):
        super().__init__(parent)
        self.what = what
        self.name_label = name_label
        self.file_label = file_label
        self.with_note = with_note
        self.args_field = args_field
        self.form: QFormLayout | None = None
        self._rows: list[QWidget] = []  # the widgets of the rows added to `form`
        self.path = QLineEdit()
        self.path.setPlaceholderText("/path/to/your_file.py")
        self.path.setToolTip(f"The Python file that defines the {what}.")
        self.browse = QPushButton("Browse…")
        self.browse.setToolTip("Choose the .py file")
        self.browse.clicked.connect(self._on_browse_clicked)
        self.file_row = QWidget()
        file_layout = QHBoxLayout(self.file_row)
        file_layout.setContentsMargins(0, 0, 0, 0)
        file_layout.addWidget(self.path, 1)
        file_layout.addWidget(self.browse)
        self.attr = QLineEdit()
        self.attr.setPlaceholderText(name_placeholder)
        self.attr.setToolTip(f"The name of the {what} inside that file, as written after `class` or `def`.")
        self.path_warning = _message(WARNING_COLOUR)
        self.name_error = _message(ERROR_COLOUR)
        self.args = QLineEdit() if with_args else None
        self.args_error = _message(ERROR_COLOUR)
        if self.args is not None:
            self.args.setPlaceholderText('none, e.g. size=500, name="shapes" or {"size": 500}')
            self.args.setToolTip(
                f"Keyword arguments passed to the {what}: {ARGS_EXAMPLES}. Empty passes none."
            )
        self.note = QLabel(PERMISSION_NOTE)
        self.note.setWordWrap(True)
        self.note.setStyleSheet(f"color: {WARNING_COLOUR}")
        for edit in (self.path, self.attr, self.args):
            if edit is not None:
                edit.textChanged.connect(self._on_text_changed)
        self._on_text_changed()

    def add_to(self, form: QFormLayout, row: int) -> int:
        """Insert the rows into `form` from `row` on; returns the row after them."""
        self.form = form
        rows = [
            (self.file_label, self.file_row),
            ("", self.path_warning),
            (self.name_label, self.attr),
            ("", self.name_error),
        ]
        if self.args is not None:
            rows += [("Arguments", self.args), ("", self.args_error)]
        if self.with_note:
            rows.append(("", self.note))
        for label, widget in rows:
            form.insertRow(row, label, widget)
            row += 1
        self._rows = [widget for _, widget in rows]
        return row

    def set_visible(self, visible: bool) -> None:
        messages = (self.path_warning, self.name_error, self.args_error)
        for widget in self._rows:
            # A message's row shows only while it has something to say.
            self.form.setRowVisible(widget, visible and (widget not in messages or bool(widget.text())))

    def name_label_widget(self) -> QLabel:
        return self.form.labelForField(self.attr)

    def visible(self) -> bool:
        return self.form is not None and self.form.isRowVisible(self.attr)

    # -- values ----------------------------------------------------------------------------------
    def is_empty(self) -> bool:
        return not self.path.text().strip() and not self.attr.text().strip()

    def name(self, scheme: str) -> str:
        return f"{scheme}:{self.path.text().strip()}:{self.attr.text().strip()}"

    def set_name(self, name: str) -> None:
        _, path, attr = split_user_name(name)
        self.path.setText(path)
        self.attr.setText(attr)

    def set_args(self, args: dict) -> None:
        if self.args is not None:
            self.args.setText(format_args(args))

    def args_value(self) -> tuple[dict, str]:
        """(the parsed arguments, "") or ({}, the message naming the field)."""
        return args_or_message(self.args.text(), self.args_field) if self.args is not None else ({}, "")

    # -- messages --------------------------------------------------------------------------------
    def set_name_error(self, text: str) -> None:
        self._show(self.name_error, text)

    def _show(self, label: QLabel, text: str) -> None:
        label.setText(text)
        if self.form is not None and label in self._rows:
            self.form.setRowVisible(label, bool(text) and self.form.isRowVisible(self.attr))

    def _on_text_changed(self, *args) -> None:
        path = self.path.text().strip()
        # Only a warning: a remote worker reads its own disk, so a path this machine lacks may still be right.
        missing = bool(path) and not Path(path).expanduser().is_file()
        self._show(
            self.path_warning,
            f"{path} is not a file on this machine; the worker looks for it where it runs."
            if missing
            else "",
        )
        self._show(self.args_error, self.args_value()[1])
        self.changed.emit()

    def _on_browse_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self.browse.window(),
            f"Python file with the {self.what}",
            self.path.text().strip(),
            "Python files (*.py)",
        )
        if path:
            self.path.setText(path)
            self.attr.setFocus()  # the name is the next thing to type


def _message(colour: str) -> QLabel:
    label = QLabel()
    label.setWordWrap(True)
    label.setStyleSheet(f"color: {colour}")
    return label
