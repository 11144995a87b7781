"""One generic name -> entry registry (register / get / list, with a did-you-mean), as torchvision's
models/_api.py keeps one for every kind of thing. Tasks, datasets and models each hold one; the later
exporters and range estimators will too. Stdlib only: any process may import it.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from workbench.errors import UsageError, WorkbenchError

T = TypeVar("T")


class Registry(Generic[T]):
    """Entries by name. `builtins` are modules whose import registers the built-in entries, on first use.

    `missing` writes the message for an unknown name, given the name and a hint (a did-you-mean, or the
    list of names); `error` is the exception type it raises.
    """

    def __init__(
        self,
        what: str,
        builtins: Iterable[str] = (),
        *,
        error: type[WorkbenchError] = UsageError,
        missing: Callable[[str, str], str] | None = None,
    ):
        self.what = what
        self.builtins = tuple(builtins)
        self.error = error
        self.missing = missing or (lambda name, hint: f"no {what} named {name!r}; {hint}")
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        if name in self._entries:
            raise ValueError(f"{self.what} {name!r} is registered twice")
        self._entries[name] = entry
        return entry

    def load_builtins(self) -> None:
        for module in self.builtins:
            importlib.import_module(module)  # cached after the first time: cheap to call on every lookup

    def lookup(self, name: str) -> T | None:
        """The entry, or None (no error): for callers with their own naming rules, like model families."""
        self.load_builtins()
        return self._entries.get(name)

    def get(self, name: str) -> T:
        entry = self.lookup(name)
        if entry is None:
            raise self.error(self.missing(name, self.hint(name)))
        return entry

    def hint(self, name: str, names: Iterable[str] | None = None) -> str:
        names = sorted(self._entries if names is None else names)
        close = difflib.get_close_matches(name, names, n=1)
        return f"did you mean {close[0]!r}?" if close else "choose one of: " + ", ".join(names)

    def names(self) -> list[str]:
        self.load_builtins()
        return sorted(self._entries)

    def entries(self) -> list[T]:
        self.load_builtins()
        return [self._entries[name] for name in sorted(self._entries)]

    def __contains__(self, name: object) -> bool:
        self.load_builtins()
        return name in self._entries
