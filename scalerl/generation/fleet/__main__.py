"""``python -m scalerl.generation.fleet HOST:PORT RANK [TIMEOUT_S]``: one generator process
(``worker.py`` says what it does). Running the package, not ``worker.py``, keeps the worker
module imported once: the package's ``__init__`` already imports it."""
import sys

from scalerl.generation.fleet.worker import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
