"""The colour scales every view shares, so a weight looks the same in the terminal, SVG and HTML.

- :func:`weight_color`: attention weights in [0, 1] → white … dark blue, linear in the weight
  (absolute, never rescaled per head: 0.5 is the same blue in every head and every view).
- :func:`signed_color`: vector components (queries, keys, their products) → orange for negative,
  blue for positive, white at 0, by ``|x| / limit``.
"""

from __future__ import annotations

import numpy as np

WHITE = (255, 255, 255)
BLUE = (8, 48, 107)  # ColorBrewer Blues, darkest
ORANGE = (166, 54, 3)  # ColorBrewer Oranges, darkest
POSITIVE = (33, 102, 172)  # a blue a little lighter than BLUE, so signs read at a glance
MASKED = (217, 217, 217)  # a masked pair: grey, never on the white…blue weight scale
MASKED_MARK = "×"  # printed in masked cells, so "masked" never reads as "weight 0"
# Text on a weight cell: black up to this weight, white above. 0.655 is where the two meet, so
# every cell's text has a WCAG contrast of at least 4.5:1 (AA) against its background.
INK_THRESHOLD = 0.655
INK_LIGHT, INK_DARK = "#ffffff", "#000000"


def _mix(a: tuple[int, int, int], b: tuple[int, int, int], t: float) -> tuple[int, int, int]:
    t = min(max(float(t), 0.0), 1.0)
    return tuple(round(x + (y - x) * t) for x, y in zip(a, b, strict=True))


def hex_color(rgb: tuple[int, int, int]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def weight_rgb(w: float) -> tuple[int, int, int]:
    """An attention weight in [0, 1] → (r, g, b): 0 white, 1 dark blue (values clipped)."""
    return _mix(WHITE, BLUE, w)


def weight_color(w: float) -> str:
    """``#rrggbb`` for an attention weight."""
    return hex_color(weight_rgb(w))


def ink_for(w: float) -> str:
    """Text colour readable on :func:`weight_color` ``(w)``: white on dark cells."""
    return INK_LIGHT if w > INK_THRESHOLD else INK_DARK


def signed_rgb(x: float, limit: float) -> tuple[int, int, int]:
    """A signed value → orange (negative) … white (0) … blue (positive), saturated at ±limit."""
    t = 0.0 if limit <= 0 else abs(float(x)) / float(limit)
    return _mix(WHITE, POSITIVE if x >= 0 else ORANGE, t)


def signed_color(x: float, limit: float) -> str:
    return hex_color(signed_rgb(x, limit))


def limit_of(*arrays: np.ndarray) -> float:
    """The largest |value| across arrays: the saturation point of a shared signed scale."""
    return max((float(np.abs(a).max()) for a in arrays if np.size(a)), default=0.0)


def scale_spec() -> dict:
    """The weight scale as data, for pages that draw it themselves (``qkv explore`` serves
    this at ``/api/colors``): linear from ``low`` at 0 to ``high`` at 1, text turns ``ink_dark``
    → ``ink_light`` above ``ink_threshold``, masked pairs are ``masked`` with ``masked_mark``."""
    return {"low": hex_color(WHITE), "high": hex_color(BLUE), "low_rgb": list(WHITE),
            "high_rgb": list(BLUE), "interpolation": "linear", "domain": [0.0, 1.0],
            "ink_threshold": INK_THRESHOLD, "ink_light": INK_LIGHT, "ink_dark": INK_DARK,
            "masked": hex_color(MASKED), "masked_mark": MASKED_MARK,
            "negative": hex_color(ORANGE), "positive": hex_color(POSITIVE)}
