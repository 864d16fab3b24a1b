"""`python -m analysis fit PATH --out DIR` / `python -m analysis extrapolate PATH --out DIR`.

The `scalerl-analysis` script points at `main`; the commands live in analysis/cli.py.
"""
import sys

from analysis.cli import main

if __name__ == "__main__":
    sys.exit(main())
