"""engine.onnx: see docs/architecture.md."""
