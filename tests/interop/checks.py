"""What the interop scripts share: counting checks, and saying what went wrong."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import mcp_types as types
from mcp import MCPError


class Checks:
    """Counts checks; a failed one is reported, never raised past its step."""

    def __init__(self) -> None:
        self.passed = 0
        self.failed: list[str] = []

    def check(self, label: str, ok: bool, detail: str = "") -> bool:
        if ok:
            self.passed += 1
            print(f"ok    {label}", flush=True)
        else:
            self.fail(label, detail)
        return ok

    def equal(self, label: str, got: Any, want: Any) -> bool:
        return self.check(label, got == want, f"got {got!r}, expected {want!r}")

    def fail(self, label: str, detail: str) -> None:
        self.failed.append(f"{label}: {detail}")
        print(f"FAIL  {label}: {detail}", flush=True)

    def error(self, label: str, err: BaseException) -> None:
        self.fail(label, describe(err))

    @contextlib.contextmanager
    def step(self, label: str) -> Iterator[None]:
        """Runs a step; an exception in it is one failed check, and the next step runs."""
        try:
            yield
        except Exception as err:  # noqa: BLE001 - any error is a failed check
            self.error(label, err)


def describe(err: BaseException) -> str:
    if isinstance(err, MCPError):
        return f"MCPError {err.code}: {err}"
    inner = getattr(err, "exceptions", None)  # an ExceptionGroup (builtin only from Python 3.11)
    if isinstance(inner, (list, tuple)):
        return "; ".join(describe(e) for e in inner)
    if isinstance(err, TimeoutError):
        return f"timed out ({type(err).__name__})"
    return f"{type(err).__name__}: {err}"


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))
