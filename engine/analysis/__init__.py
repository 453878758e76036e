"""engine.analysis: see docs/architecture.md."""
