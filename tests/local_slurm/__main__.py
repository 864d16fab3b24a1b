"""Command line for the local SLURM cluster (run as root).

    python3 tests/local_slurm install        # apt-get the packages if missing
    python3 tests/local_slurm start [--cpus 8] [--nodes 3]
    python3 tests/local_slurm status         # exits 1 unless every daemon is up and healthy
    python3 tests/local_slurm env            # eval "$(python3 tests/local_slurm env)"
    python3 tests/local_slurm stop

State lives in $SCALERL_SLURM_DIR (default /var/lib/scalerl-slurm); see cluster.py.
"""

import argparse
import logging
import sys
from pathlib import Path

if not __package__:  # run by path (python3 tests/local_slurm): import the package from its parent folder
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from local_slurm import cluster  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 tests/local_slurm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["install", "start", "stop", "status", "env"])
    parser.add_argument("--cpus", type=int, default=None,
                        help="CPUs each node advertises (start only; default: keep, else 8)")
    parser.add_argument("--nodes", type=int, default=None,
                        help="namespaced nodes rl-node1..N besides this machine's, own address each "
                             "(start only; default: keep, else 0)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[local_slurm] %(message)s")
    try:
        if args.command == "install":
            cluster.install()
        elif args.command == "start":
            cluster.start(cpus=args.cpus, n_nodes=args.nodes)
        elif args.command == "stop":
            cluster.stop()
        elif args.command == "status":
            for name, up in cluster.status().items():
                print(f"{name:9s} {'up' if up else 'down'}")
            ok = cluster.healthy()
            print(f"healthy   {ok}")
            return 0 if ok else 1
        else:
            for key, value in cluster.env_exports().items():
                print(f"export {key}={value}")
    except cluster.ClusterError as exc:
        print(f"[local_slurm] error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
