"""ThumbnailItemModel: a virtual list of a whole split that fetches pages of thumbnails only for what is
visible.

Pages come from the worker's `data.page` query; a reply for an older filter (generation) or a page that has
scrolled out of view before it was asked for is dropped. Fetched pages are kept in a bounded LRU cache.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from PySide6.QtCore import QAbstractListModel, QModelIndex, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QImage, QPixmap

from workbench.gui.images import scaled_pixmap, to_qimage

PAGE_SIZE = 200
MAX_PAGES_CACHED = 60  # 12,000 thumbnails
MAX_IN_FLIGHT = 3
INDEX_ROLE = Qt.UserRole  # the sample's index within its split
LABEL_ROLE = Qt.UserRole + 1


class _Page:
    def __init__(self, result: dict):
        images = result["images"]
        self.images = [to_qimage(img) for img in images]
        self.labels = list(result["labels"])
        self.indices = list(result["indices"])
        # A user's Dataset says what each target is ("map 32×32, classes 0, 1, 2", "[1, 0, 1]", "2.5"); its
        # labels are -1 where the target is not a class index.
        self.captions = list(result.get("captions") or [])


class ThumbnailItemModel(QAbstractListModel):
    load_failed = Signal(str)  # message
    total_changed = Signal(int)
    page_loaded = Signal(int)  # page number

    def __init__(self, queries, parent=None):
        super().__init__(parent)
        self.queries = queries
        self.dataset: dict | None = None
        self.split = "train"
        self.label = -1
        self.classes: list[str] = []
        self.icon_size = 64
        self.thumb_size = 64
        self.visible_rows: Callable[[], tuple[int, int]] = lambda: (0, PAGE_SIZE - 1)
        self._total = 0
        self._generation = 0
        self._pages: OrderedDict[int, _Page] = OrderedDict()
        self._pixmaps: dict[int, QPixmap] = {}
        self._in_flight: dict[int, str] = {}  # page -> job id
        self._wanted: set[int] = set()
        self._placeholder = QPixmap(QSize(self.icon_size, self.icon_size))
        self._placeholder.fill(QColor(128, 128, 128, 40))
        self._fetch_timer = QTimer(self)
        self._fetch_timer.setSingleShot(True)
        self._fetch_timer.setInterval(15)  # coalesce the burst of data() calls one repaint makes
        self._fetch_timer.timeout.connect(self._fetch_wanted)

    # -- configuration ---------------------------------------------------------------------------
    def configure(
        self, dataset: dict, split: str = "train", label: int = -1, classes: list[str] | None = None
    ) -> None:
        """Show another dataset, split or class filter: everything cached or in flight becomes stale."""
        self.beginResetModel()
        self.dataset, self.split, self.label = dataset, split, label
        if classes is not None:
            self.classes = classes
        self._generation += 1
        for job_id in self._in_flight.values():
            self.queries.forget(job_id)
        self._in_flight.clear()
        self._wanted.clear()
        self._pages.clear()
        self._pixmaps.clear()
        self._total = 0
        self.endResetModel()
        self._request(0)  # page 0 also tells how many rows there are

    def set_classes(self, classes: list[str]) -> None:
        self.classes = classes
        if self._total:
            self.dataChanged.emit(
                self.index(0), self.index(self._total - 1), [Qt.DisplayRole, Qt.ToolTipRole]
            )

    def set_icon_size(self, size: int) -> None:
        self.icon_size = size
        self._pixmaps.clear()
        self._placeholder = QPixmap(QSize(size, size))
        self._placeholder.fill(QColor(128, 128, 128, 40))
        if self._total:
            self.dataChanged.emit(self.index(0), self.index(self._total - 1), [Qt.DecorationRole])

    # -- Qt model --------------------------------------------------------------------------------
    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802 (Qt override)
        return 0 if parent.isValid() else self._total

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid():
            return None
        row = index.row()
        page_no, offset = divmod(row, PAGE_SIZE)
        page = self._pages.get(page_no)
        if page is None:
            self._want(page_no)
            if role == Qt.DecorationRole:
                return self._placeholder
            # A text placeholder too: with uniform item sizes, the first item's size hint sets every cell's,
            # and one without text would clip every label.
            return "…" if role == Qt.DisplayRole else None
        self._pages.move_to_end(page_no)
        if offset >= len(page.images):
            return None
        label = page.labels[offset]
        if role == Qt.DecorationRole:
            pixmap = self._pixmaps.get(row)
            if pixmap is None:
                pixmap = self._pixmaps[row] = scaled_pixmap(page.images[offset], self.icon_size)
            return pixmap
        if role == Qt.DisplayRole:
            return self._caption(page, offset)
        if role == Qt.ToolTipRole:
            img = page.images[offset]
            return (
                f"{self.split} #{page.indices[offset]} · {self._caption(page, offset)} · "
                f"{img.width()}×{img.height()}"
            )
        if role == INDEX_ROLE:
            return page.indices[offset]
        if role == LABEL_ROLE:
            return label
        return None

    def _caption(self, page: _Page, offset: int) -> str:
        label = page.labels[offset]
        if label < 0 and offset < len(page.captions):
            return page.captions[offset]
        return self.class_name(label)

    def class_name(self, label: int) -> str:
        return self.classes[label] if 0 <= label < len(self.classes) else str(label)

    def image_at(self, row: int) -> QImage | None:
        page = self._pages.get(row // PAGE_SIZE)
        return page.images[row % PAGE_SIZE] if page and row % PAGE_SIZE < len(page.images) else None

    @property
    def total(self) -> int:
        return self._total

    @property
    def cached_pages(self) -> list[int]:
        return sorted(self._pages)

    @property
    def in_flight(self) -> list[int]:
        return sorted(self._in_flight)

    # -- fetching --------------------------------------------------------------------------------
    def _want(self, page_no: int) -> None:
        if page_no not in self._in_flight:
            self._wanted.add(page_no)
            self._fetch_timer.start()

    def _fetch_wanted(self) -> None:
        first, last = self.visible_rows()
        visible = set(range(max(0, first) // PAGE_SIZE, max(0, last) // PAGE_SIZE + 1))
        # Only what is on screen now: pages that scrolled past in between are never asked for. Visible
        # pages beyond the in-flight limit stay wanted and go out as replies free a slot.
        waiting = set()
        for page_no in sorted(self._wanted & visible):
            if len(self._in_flight) >= MAX_IN_FLIGHT:
                waiting.add(page_no)
            else:
                self._request(page_no)
        self._wanted = waiting

    def _request(self, page_no: int) -> None:
        if self.dataset is None or page_no in self._in_flight or page_no in self._pages:
            return
        generation = self._generation
        spec = {
            "dataset": self.dataset,
            "split": self.split,
            "offset": page_no * PAGE_SIZE,
            "count": PAGE_SIZE,
            "label": self.label,
            "thumb_size": self.thumb_size,
            "request_id": generation,
        }
        job_id = self.queries.query(
            "data.page",
            spec,
            lambda result: self._on_page(generation, page_no, result),
            lambda error: self._on_page_error(generation, page_no, error),
        )
        if job_id is not None:
            self._in_flight[page_no] = job_id

    def _on_page(self, generation: int, page_no: int, result: dict) -> None:
        if generation != self._generation or result.get("request_id") != generation:
            return  # a reply for a filter the user has already left
        self._in_flight.pop(page_no, None)
        total = int(result["total"])
        if total != self._total:
            self.beginResetModel()
            self._total = total
            self.endResetModel()
            self.total_changed.emit(total)
        self._pages[page_no] = _Page(result)
        while len(self._pages) > MAX_PAGES_CACHED:
            old, _ = self._pages.popitem(last=False)
            for row in range(old * PAGE_SIZE, (old + 1) * PAGE_SIZE):
                self._pixmaps.pop(row, None)
        first = page_no * PAGE_SIZE
        last = min(self._total, first + PAGE_SIZE) - 1
        if last >= first:
            self.dataChanged.emit(self.index(first), self.index(last))
        self.page_loaded.emit(page_no)
        if self._wanted:
            self._fetch_timer.start()

    def _on_page_error(self, generation: int, page_no: int, error: dict) -> None:
        if generation != self._generation:
            return
        self._in_flight.pop(page_no, None)
        self._wanted.clear()  # do not hammer a dataset that cannot be read
        self.load_failed.emit(error.get("message", "the dataset could not be read"))
