"""``python -m scalerl.generation.worker HOST:PORT RANK [TIMEOUT_S]``: one generator process, the
command the trainer runs and prints for generators started by hand (docs/async.md, docs/slurm.md).
The generator's main loop is ``fleet/generator_loop.py``; this module is only its command-line name."""
import sys

from scalerl.generation.fleet.generator_loop import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
