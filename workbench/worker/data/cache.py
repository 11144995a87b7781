"""The worker's cache of loaded datasets: an LRU of two, safe for the two query threads that share it.

Two threads asking for the same dataset load it once: the second waits for the first instead of loading twice.
A failed load is not cached, so fixing the files and asking again works.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

CAPACITY = 2


class DatasetCache:
    def __init__(self, capacity: int = CAPACITY):
        self.capacity = capacity
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[Hashable, threading.Lock] = {}

    def _lookup(self, key: Hashable) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            return None

    def get_or_load(self, key: Hashable, load: Callable[[], Any]) -> Any:
        found = self._lookup(key)
        if found is not None:
            return found
        with self._lock:
            key_lock = self._loading.setdefault(key, threading.Lock())
        with key_lock:
            found = self._lookup(key)  # another thread may have loaded it while this one waited
            if found is not None:
                return found
            value = load()
            with self._lock:
                self._items[key] = value
                self._items.move_to_end(key)
                while len(self._items) > self.capacity:
                    self._items.popitem(last=False)
                self._loading.pop(key, None)
            return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
