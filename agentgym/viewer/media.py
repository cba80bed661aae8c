"""Screenshots in turn infos: base64 PNG/JPEG, data URIs, and image files referenced by path or file:// URI.

GUI envs put screenshots into ``info`` (inline as base64, or by reference so that
large blobs stay out of the store; docs/trajectory.md). The viewer shows inline images as data
URIs and serves referenced files through a route that only ever opens a path
the episode itself names, with an image suffix.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

IMAGE_SUFFIXES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
                  ".webp": "image/webp"}
_MAGIC = {"iVBORw0KGgo": "image/png", "/9j/": "image/jpeg", "R0lGOD": "image/gif", "UklGR": "image/webp"}
_DATA_URI = re.compile(r"^data:(image/[\w.+-]+);base64,", re.IGNORECASE)


@dataclass(frozen=True)
class ImageRef:
    """One image found in a turn's info."""

    key: str  #: the info key (``screenshot``, or ``shots.1`` for list items)
    kind: str  #: "inline" (a data URI we can embed), "file" (a local file), "remote" (a URL, linked only)
    src: str  #: the data URI, the file path, or the URL


def find_images(info: dict[str, Any]) -> list[ImageRef]:
    """Every image-looking value among the top-level info entries (and lists of them)."""
    found: list[ImageRef] = []
    for key, value in info.items():
        values = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
        for pos, item in values:
            if isinstance(item, str):
                ref = classify(f"{key}.{pos}" if pos is not None else str(key), item)
                if ref is not None:
                    found.append(ref)
    return found


def classify(key: str, value: str) -> ImageRef | None:
    """An `ImageRef` when `value` is an image (inline, file or URL), else None."""
    text = value.strip()
    if _DATA_URI.match(text):
        return ImageRef(key, "inline", text)
    for magic, mime in _MAGIC.items():
        if text.startswith(magic) and len(text) > 32 and _is_base64(text[:64]):
            return ImageRef(key, "inline", f"data:{mime};base64,{text}")
    if len(text) > 4096 or "\n" in text:
        return None
    parsed = urlparse(text)
    suffix = Path(unquote(parsed.path)).suffix.lower()
    if suffix not in IMAGE_SUFFIXES:
        return None
    if parsed.scheme in ("http", "https"):
        return ImageRef(key, "remote", text)
    if parsed.scheme in ("", "file"):
        return ImageRef(key, "file", unquote(parsed.path) if parsed.scheme == "file" else text)
    return None


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(text[: len(text) // 4 * 4], validate=True)
        return True
    except (binascii.Error, ValueError):
        return False


def media_file(info: dict[str, Any], key: str) -> tuple[Path, str] | None:
    """(path, mime type) of the file image `key` of a turn's info, when it exists on this machine."""
    for ref in find_images(info):
        if ref.key == key and ref.kind == "file":
            path = Path(ref.src).expanduser()
            mime = IMAGE_SUFFIXES.get(path.suffix.lower())
            if mime and path.is_file():
                return path, mime
    return None
