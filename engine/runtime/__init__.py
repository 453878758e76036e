"""engine.runtime: see docs/architecture.md."""
