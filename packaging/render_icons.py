"""Render app/resources/icons/ember.svg to the PNG sizes desktops look for (48, 128, 256 px).

Run after changing ember.svg: `.venv/bin/python packaging/render_icons.py`. The PNGs are committed,
so installing the desktop entry needs no SVG renderer.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SIZES = (48, 128, 256)
ICONS = Path(__file__).resolve().parent.parent / "app" / "resources" / "icons"


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    renderer = QSvgRenderer(str(ICONS / "ember.svg"))
    for size in SIZES:
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter)
        painter.end()
        out = ICONS / f"ember-{size}.png"
        if not image.save(str(out)):
            raise SystemExit(f"could not write {out}")
        print(f"wrote {out.name} ({size}x{size})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
