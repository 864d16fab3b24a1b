"""`python -m analysis fit PATH --out DIR` / `python -m analysis extrapolate PATH --out DIR`.

The `scalerl-analysis` script points at `main`; the commands live in analysis/cli.py.
Piped into `head`, every command (and `--help`) stops quietly when the reader goes away.
"""
import sys

from analysis import cli
from analysis.pipes import quiet_broken_pipe


def main(argv=None):
    with quiet_broken_pipe():
        return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
