"""netviz: the command line, the Textual app, graph layout and drawing, graphviz export.

``netviz`` imports ``engine``; never the other way round.
"""
from engine import __version__

__all__ = ["__version__"]
