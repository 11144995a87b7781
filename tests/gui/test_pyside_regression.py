"""PySide6 6.12.0 on Python 3.11 drops a reference to None on every void call and aborts the interpreter.

We pin PySide6 < 6.12; this test makes an upgrade that brings the bug back fail CI instead of users.
"""

import sys

from PySide6.QtCore import QObject


def test_void_calls_do_not_leak_none_references(qapp):
    obj = QObject()
    before = sys.getrefcount(None)
    for _ in range(10_000):
        obj.setObjectName("x")
    after = sys.getrefcount(None)
    # Other threads may hold a few None references transiently; the bug loses one per call (10,000).
    assert abs(after - before) < 100
