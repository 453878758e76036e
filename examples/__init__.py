"""Small example models built by :mod:`examples.build` (``make examples``)."""
