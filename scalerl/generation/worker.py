"""``python -m scalerl.generation.worker HOST:PORT RANK [TIMEOUT_S]``: one generator process, the
command the trainer runs and prints for generators started by hand (docs/async.md, docs/slurm.md).
The generator's main loop is ``fleet/worker.py``; this module is only its command-line name."""
import sys

from scalerl.generation.fleet.worker import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
