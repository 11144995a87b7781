"""The wizard's review page is editable (#21 part 6.6): the TOML is checked as it is typed, an error names the
field, Start runs the edited text, Save writes it, and the pages' own rebuilds never wipe what is being
typed."""

from __future__ import annotations

import pytest
from fake_worker import FAKE_DEVICES
from PySide6.QtWidgets import QWizard

from workbench.gui.panels.training.wizard import TrainingWizard
from workbench.gui.state import DatasetState
from workbench.specs import DataSpec, TrainSpec


@pytest.fixture
def review(qtbot):
    wizard = TrainingWizard(
        DatasetState(DataSpec(name="digits")), FAKE_DEVICES, "cpu", start={"epochs": 3, "device": "cpu"}
    )
    qtbot.addWidget(wizard)
    wizard.show()
    while wizard.currentPage() is not wizard.review_page:
        wizard.next()
    return wizard


def test_an_edit_is_checked_as_typed_and_start_runs_it(review, qtbot):
    page = review.review_page
    text = page.text.toPlainText()
    assert "epochs = 3" in text and not page.is_edited() and not page.note.isVisible()
    page.text.setPlainText(text.replace("epochs = 3", "epochs = 7"))
    qtbot.waitUntil(lambda: page.edited is not None, timeout=2000)  # after the typing pause
    assert page.note.isVisible() and not page.error.isVisible() and page.isComplete()
    assert review.button(QWizard.FinishButton).isEnabled()
    review.accept()
    assert review.spec.epochs == 7 and review.spec == TrainSpec.from_toml(page.text.toPlainText())


def test_a_bad_value_or_bad_toml_names_what_is_wrong_and_disables_start(review, qtbot):
    page = review.review_page
    text = page.text.toPlainText()
    page.text.setPlainText(text.replace("epochs = 3", "epochs = -1"))
    page.check_edit()
    assert page.error.isVisible() and page.error.text().startswith("epochs:")
    assert not page.isComplete() and not review.button(QWizard.FinishButton).isEnabled()
    assert not page.save.isEnabled() and not page.cluster.isEnabled()
    review.accept()
    assert review.isVisible()  # refused: nothing started
    page.text.setPlainText(text.replace("epochs = 3", "epochs = [3"))
    page.check_edit()
    assert "the review page" in page.error.text() and not page.isComplete()
    page.text.setPlainText(text)  # back to the pages' own text: no longer an edit
    page.check_edit()
    assert not page.is_edited() and not page.error.isVisible() and page.isComplete()


def test_a_rebuild_while_typing_keeps_the_edit_and_save_writes_it(review, qtbot, tmp_path, monkeypatch):
    page = review.review_page
    edited = page.text.toPlainText().replace("epochs = 3", "epochs = 9")
    page.text.setPlainText(edited)
    review.rebuild()  # what a data.info reply or a form signal does
    assert page.text.toPlainText() == edited
    page.check_edit()
    path = tmp_path / "edited.toml"
    monkeypatch.setattr(
        "workbench.gui.panels.training.wizard.QFileDialog.getSaveFileName", lambda *a, **k: (str(path), "")
    )
    page.save.click()
    assert TrainSpec.load(path).epochs == 9


def test_a_key_given_twice_is_named_with_its_line(review, qtbot):
    page = review.review_page
    text = page.text.toPlainText()
    lines = text.splitlines()
    at = next(n for n, line in enumerate(lines, 1) if line.startswith("epochs = "))
    page.text.setPlainText(text.replace("epochs = 3", "epochs = 3\nepochs = 4"))
    page.check_edit()
    assert page.error.text() == f"the review page: line {at + 1}: the key 'epochs' appears twice"
    assert not page.isComplete()
