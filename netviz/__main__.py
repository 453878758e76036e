"""``python -m netviz``: the same command line as the ``netviz`` console script."""
import sys

from netviz.cli import main

if __name__ == "__main__":
    sys.exit(main())
