"""A minimal PNG encoder (RGB, 8 bits, no filtering) for heat-map thumbnails in HTML.

One pixel per weight, scaled up by the browser with ``image-rendering: pixelated``: a 72-head
overview costs a few kilobytes instead of tens of thousands of SVG elements.
"""

from __future__ import annotations

import base64
import struct
import zlib

import numpy as np

from .colors import BLUE, MASKED, WHITE


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def weights_png(weights: np.ndarray, allowed: np.ndarray | None = None) -> bytes:
    """PNG bytes of ``weights (Nq, Nk)``: pixel (i, j) is ``weight_color(weights[i, j])``,
    or the MASKED grey where ``allowed[i, j]`` is False."""
    w = np.clip(np.asarray(weights, dtype=np.float64), 0.0, 1.0)[..., None]  # (Nq, Nk, 1)
    white, blue = np.array(WHITE, np.float64), np.array(BLUE, np.float64)
    rgb = np.round(white + (blue - white) * w).astype(np.uint8)  # (Nq, Nk, 3), as weight_rgb
    if allowed is not None:
        rgb[~np.asarray(allowed, dtype=bool)] = MASKED
    nq, nk = w.shape[:2]
    rows = b"".join(b"\x00" + rgb[i].tobytes() for i in range(nq))  # filter type 0 per row
    header = struct.pack(">IIBBBBB", nk, nq, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(rows))
            + _chunk(b"IEND", b""))


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")
