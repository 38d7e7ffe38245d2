"""The scripts' progress lines: `[tag] message`, flushed, so they interleave
in order with the output of the child processes a script starts."""
from __future__ import annotations

import time
from typing import Callable


def logger(tag: str, clock: bool = False) -> Callable[[str], None]:
    """A print function for `[tag] message` lines; with clock, `[tag   12.3s] message`
    (seconds since this call)."""
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        prefix = f"{tag} {time.perf_counter() - t0:7.1f}s" if clock else tag
        print(f"[{prefix}] {msg}", flush=True)

    return log
