"""What an image in a chat message costs, by OpenAI's documented rule for its vision
models: 85 tokens at ``detail: low``; otherwise 85 plus 170 per 512-pixel tile of the
image scaled to fit 2048 x 2048 and then to a shortest side of at most 768 pixels.

The size is read from the image itself when it is inline (a ``data:`` URL of a PNG,
GIF, WebP or JPEG: only its first bytes are decoded); an image the gateway cannot
measure (a remote URL, another format) is counted at the most any size could cost.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct

__all__ = ["IMAGE_MAX_TOKENS", "image_size", "image_tokens"]

BASE_TOKENS = 85
TILE_TOKENS = 170
TILE = 512
FIT = 2048
SHORT_SIDE = 768
# A shortest side of at most 768 and a longest of at most 2048: 2 x 4 tiles at most.
IMAGE_MAX_TOKENS = BASE_TOKENS + TILE_TOKENS * 2 * 4
# How much of an inline image is decoded to find its size: enough for a JPEG whose
# frame header follows 64 KiB of metadata (EXIF, ICC), in base64 characters.
_HEAD_CHARS = 4 * math.ceil((65536 + 1024) / 3)
_PNG = b"\x89PNG\r\n\x1a\n"
# JPEG start-of-frame markers (they hold the size): C0-CF but DHT, JPG and DAC
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def image_tokens(url: object, detail: object) -> int:
    """Tokens an ``image_url`` content part costs (its ``url`` and ``detail`` as sent)."""
    if detail == "low":
        return BASE_TOKENS
    size = image_size(url) if isinstance(url, str) else None
    if size is None:
        return IMAGE_MAX_TOKENS
    return tiled_tokens(*size)


def tiled_tokens(width: int, height: int) -> int:
    scale = min(1.0, FIT / max(width, height))
    width_f, height_f = width * scale, height * scale
    shortest = min(width_f, height_f)
    if shortest > SHORT_SIDE:
        width_f, height_f = width_f * SHORT_SIDE / shortest, height_f * SHORT_SIDE / shortest
    tiles = math.ceil(width_f / TILE) * math.ceil(height_f / TILE)
    return min(IMAGE_MAX_TOKENS, BASE_TOKENS + TILE_TOKENS * tiles)


def image_size(url: str) -> tuple[int, int] | None:
    """(width, height) of a base64 ``data:`` URL's image, or None if it cannot be read."""
    if not url.startswith("data:"):
        return None
    comma = url.find(",", 0, 200)
    if comma < 0 or not url[:comma].endswith(";base64"):
        return None
    head = url[comma + 1 : comma + 1 + _HEAD_CHARS]
    try:
        data = base64.b64decode(head[: len(head) // 4 * 4])
    except (binascii.Error, ValueError):
        return None
    size = _size(data)
    if size is None or size[0] <= 0 or size[1] <= 0:
        return None
    return size


def _size(data: bytes) -> tuple[int, int] | None:
    if data.startswith(_PNG) and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return width, height
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return width, height
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp_size(data)
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 9 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in _SOF:
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return width, height
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        at += 2 + length
    return None
