"""What every ``qkv train`` command shares: SIGTERM as a clean exit while training, and progress
bars whose columns fit the terminal. Below the commands that use it (train.py, train_gpt.py):
it imports none of them."""

from __future__ import annotations


def exit_on_sigterm():
    """While training, SIGTERM (``kill PID``) raises SystemExit(143) instead of ending the
    process on the spot, so a checkpoint save under way removes its temporary file (the exit
    status is the same 128 + 15). Returns a function restoring the previous handler."""
    import contextlib
    import signal

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except (ValueError, AttributeError):  # not the main thread, or no SIGTERM
        return lambda: None

    def restore():
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, previous)

    return restore


# -- progress bars that fit the terminal -------------------------------------------------------
# Rich cuts a progress line at the terminal's edge (at 80 columns when piped), losing whatever is
# on the right — the loss and accuracy. So the columns are chosen for the console's width: the
# richest layout that fits, then shorter labels, then no time remaining, no bar, no label.
# Loss, accuracy and the step count stay in every layout.
BAR = None  # in a layout: the bar, which gets the room left over (MIN_BAR to 40 cells)
MIN_BAR = 10
LOSS_WIDTH = 7  # "12.3456" (cross-entropy of 128 classes starts at ~4.85) or "nan"


def fit_columns(width: int, layouts: list[list[tuple[object, int]]]) -> list:
    """The first of ``layouts`` (``[(column, widest rendering in cells)]``, richest first) whose
    columns fit in ``width - 1`` cells (the last cell is left free: some terminals wrap there).
    ``BAR`` entries become a bar as wide as the room left, at most 40."""
    from rich.progress import BarColumn

    for layout in layouts:
        fixed = sum(w for col, w in layout if col is not BAR) + len(layout) - 1
        n_bars = sum(col is BAR for col, _ in layout)
        room = width - 1 - fixed
        if room >= n_bars * MIN_BAR:
            return [BarColumn(bar_width=min(40, room)) if col is BAR else col
                    for col, _ in layout]
    return [col for col, _ in layouts[-1] if col is not BAR]
