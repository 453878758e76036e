"""Caffe2's gradient markers for every op the catalogue lists with one (see register_markers)."""
from __future__ import annotations

from engine.catalogue.facts import table
from engine.runtime.grad_makers import register_markers


def register() -> list[str]:
    """Register NO_GRADIENT / SHOULD_NOT_DO_GRADIENT / GRADIENT_NOT_IMPLEMENTED_YET where missing."""
    return register_markers((t, f.gradient) for t, f in table().items() if not f.engine)
