"""engine.caffe2: see docs/architecture.md."""
