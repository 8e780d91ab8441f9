"""A progress line on stderr: redrawn in place on a terminal; in a log, every 10% or 30 s."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, what: str, stream=sys.stderr):
        self.total = max(total, 1)
        self.what = what
        self.stream = stream
        self.done = 0
        self.start = time.perf_counter()
        self.tty = stream.isatty()
        self._last_decile = -1
        self._last_line = self.start

    def advance(self) -> None:
        self.done += 1
        self._draw("", force=self.done * 10 // self.total != self._last_decile
                   or self.done == self.total)
        self._last_decile = self.done * 10 // self.total

    def within(self, text: str) -> None:
        """Where the current item is (an operation's rounds): long items move the line too."""
        self._draw(f"; {text}", force=False)

    def _draw(self, extra: str, force: bool) -> None:
        elapsed = time.perf_counter() - self.start
        # The ETA counts finished items only: an item in progress is not yet a rate.
        eta = (f", ~{elapsed / self.done * (self.total - self.done):.0f}s left" if self.done
               else "")
        width = 30
        filled = width * self.done // self.total
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {self.what}"
                f"  {elapsed:.0f}s elapsed{eta}{extra}")
        if self.tty:
            self.stream.write("\r\033[K" + line[:160])
            if self.done == self.total and not extra:
                self.stream.write("\n")
        elif force or time.perf_counter() - self._last_line > 30:
            self._last_line = time.perf_counter()
            self.stream.write(line + "\n")
        self.stream.flush()

    def message(self, text: str) -> None:
        """Text on stdout that must stay visible above the progress bar."""
        if self.tty:
            self.stream.write("\r\033[K")
            self.stream.flush()
        print(text, flush=True)
