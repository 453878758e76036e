"""Messages between the TUI's widgets: small dataclasses, bubbling up to the main screen."""
from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from netviz.session import BlobRef, OpRef


@dataclass
class OpSelected(Message):
    """The user moved to an op (tree cursor, canvas click, search)."""

    ref: OpRef


@dataclass
class BlobSelected(Message):
    """The user picked a blob (inspector list, canvas click, search)."""

    ref: BlobRef


@dataclass
class DrillRequested(Message):
    """Enter a subnet of an op (``arg`` None: its first)."""

    ref: OpRef
    arg: str | None = None
