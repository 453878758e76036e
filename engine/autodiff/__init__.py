"""engine.autodiff: see docs/architecture.md."""
