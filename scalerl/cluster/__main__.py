"""Command line for the local SLURM cluster (run as root).

    python -m scalerl.cluster install        # apt-get the packages if missing
    python -m scalerl.cluster start [--cpus 8]
    python -m scalerl.cluster status         # exits 1 unless every daemon is up and healthy
    python -m scalerl.cluster env            # eval "$(python -m scalerl.cluster env)"
    python -m scalerl.cluster stop

State lives in $SCALERL_SLURM_DIR (default /var/lib/scalerl-slurm); see local_slurm.py.
"""

import argparse
import logging
import sys

from scalerl.cluster import local_slurm


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scalerl.cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["install", "start", "stop", "status", "env"])
    parser.add_argument("--cpus", type=int, default=None,
                        help="CPUs the node advertises (start only; default: keep, else 8)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[scalerl.cluster] %(message)s")
    try:
        if args.command == "install":
            local_slurm.install()
        elif args.command == "start":
            local_slurm.start(cpus=args.cpus)
        elif args.command == "stop":
            local_slurm.stop()
        elif args.command == "status":
            for name, up in local_slurm.status().items():
                print(f"{name:9s} {'up' if up else 'down'}")
            ok = local_slurm.healthy()
            print(f"healthy   {ok}")
            return 0 if ok else 1
        else:
            for key, value in local_slurm.env_exports().items():
                print(f"export {key}={value}")
    except local_slurm.ClusterError as exc:
        print(f"[scalerl.cluster] error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
