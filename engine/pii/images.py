"""Personal data in images' metadata: EXIF GPS position, camera and lens serial numbers, owner and
author fields, and free-text fields (description, comment) scanned like any text.

A scrubbed copy of an image folder keeps its layout and pixels and drops every metadata block
(EXIF, XMP, comments, PNG text chunks): a JPEG is re-saved with its own quantisation tables
(``quality="keep"``), so it looks the same; other formats are re-saved losslessly.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".tif", ".tiff", ".bmp")
GPS_IFD = 0x8825
EXIF_IFD = 0x8769
# EXIF tags that identify a person or a device, by finding type.
IDENTIFYING = {
    0x013B: ("PERSON", "Artist"),
    0x8298: ("PERSON", "Copyright"),
    0xA430: ("PERSON", "CameraOwnerName"),
    0xA431: ("DEVICE_SERIAL", "BodySerialNumber"),
    0xA435: ("DEVICE_SERIAL", "LensSerialNumber"),
}
FREE_TEXT = {0x010E: "ImageDescription", 0x9286: "UserComment", 0x9C9C: "XPComment", 0x9C9F: "XPSubject"}


def image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        for enc in ("utf-16-le", "utf-8"):  # XP* tags are UTF-16; UserComment starts with an 8-byte code
            try:
                return value.removeprefix(b"ASCII\0\0\0").removeprefix(b"UNICODE\0").decode(enc).strip("\0 ")
            except UnicodeDecodeError:
                continue
        return ""
    return str(value).strip("\0 ")


def metadata(path: Path) -> Iterator[tuple[str, str, str | None]]:
    """(field, finding type or None for free text, value) of the identifying metadata of one image."""
    from PIL import Image

    with Image.open(path) as im:
        exif = im.getexif()
        gps = exif.get_ifd(GPS_IFD)
        if gps:
            yield "EXIF GPS", "LOCATION", None
        merged = dict(exif)
        merged.update(exif.get_ifd(EXIF_IFD))
        for tag, (kind, name) in IDENTIFYING.items():
            value = _text(merged.get(tag, ""))
            if value:
                yield f"EXIF {name}", kind, value
        for tag, name in FREE_TEXT.items():
            value = _text(merged.get(tag, ""))
            if value:
                yield f"EXIF {name}", "", value
        for key, value in (im.info or {}).items():  # PNG text chunks, JPEG comments
            if isinstance(value, str | bytes) and key not in ("icc_profile", "exif", "dpi", "transparency"):
                text = _text(value)
                if text:
                    yield f"{im.format} {key}", "", text


def strip(src: Path, dst: Path) -> None:
    """``src`` re-saved at ``dst`` with its pixels and no metadata, checked by reading it back."""
    from PIL import Image, JpegImagePlugin

    dst.parent.mkdir(parents=True, exist_ok=True)
    with Image.open(src) as im:
        im.load()
        fmt = im.format or "PNG"
        kwargs: dict[str, Any] = {}
        if fmt == "JPEG" and getattr(im, "quantization", None):
            kwargs = {"qtables": im.quantization, "subsampling": JpegImagePlugin.get_sampling(im)}
        # copy() gives a plain image: no TIFF tags or EXIF carried by the file object; of its info only
        # what is about the pixels stays.
        clean = im.copy()
        clean.info = {k: v for k, v in im.info.items() if k in ("transparency", "dpi", "gamma")}
        clean.save(dst, format=fmt, **kwargs)
    left = list(metadata(dst))
    if left:
        raise RuntimeError(f"{dst.name} still carries {', '.join(f for f, _k, _v in left)} after stripping")
