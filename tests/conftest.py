"""Test-wide setup: Qt renders offscreen (set before any Qt import) and settings never touch the user's own."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QTWEBENGINE_DISABLE_SANDBOX", "1")
