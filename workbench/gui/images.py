"""numpy uint8 images (H, W, C) to QImage/QPixmap, pixel-exact for tiny images and smooth for large ones."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage, QPixmap


def to_qimage(image: np.ndarray) -> QImage:
    """An owned QImage (the numpy buffer may go away) from uint8 (H, W), (H, W, 1) or (H, W, 3)."""
    image = np.ascontiguousarray(image)
    if image.ndim == 3 and image.shape[2] == 1:
        image = np.ascontiguousarray(image[:, :, 0])
    if image.ndim == 2:
        h, w = image.shape
        return QImage(image.data, w, h, w, QImage.Format_Grayscale8).copy()
    h, w, c = image.shape
    if c != 3:
        raise ValueError(f"cannot show an image with {c} channels")
    return QImage(image.data, w, h, 3 * w, QImage.Format_RGB888).copy()


def scaled_pixmap(image: QImage, size: int) -> QPixmap:
    """Fit into a size x size box; nearest-neighbour when enlarging so 8x8 digits stay crisp pixels."""
    mode = Qt.FastTransformation if max(image.width(), image.height()) < size else Qt.SmoothTransformation
    return QPixmap.fromImage(image.scaled(size, size, Qt.KeepAspectRatio, mode))
