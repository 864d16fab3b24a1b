"""``python -m scalerl.sweep``: run one arm, or a sweep of arms.

Laptop (no GPU, no downloads; the embedded tiny model and task)::

    python -m scalerl.sweep                              # the ScaleRL recipe, one run
    python -m scalerl.sweep -m loss=cispo,dapo,gspo      # three arms in parallel
    python -m scalerl.sweep -m sweep=loo                 # a study file from sweeps/
    python -m scalerl.sweep -m sweep=loo --status        # done/running/failed/pending per arm
    python -m scalerl.sweep -m sweep=loo --dry-run       # expand and validate, launch nothing
    python -m scalerl.sweep --help                       # groups, studies, flags (composes nothing)

SLURM cluster (same command plus a launcher)::

    python -m scalerl.sweep -m loss=cispo,dapo,gspo hydra/launcher=slurm \\
        hydra.launcher.partition=gpu hydra.launcher.gpus_per_node=1 model=hf model.path=/ckpt/8b

Relaunching any of these skips finished arms and resumes unfinished ones.
"""
from __future__ import annotations

import os
import signal
import sys


def main(argv: list[str] | None = None) -> None:
    try:
        _main(argv)
    except KeyboardInterrupt as e:  # Ctrl-C (any count, any moment) or a sweep's SIGTERM: one line, no traceback
        from scalerl.train.signals import exit_code, signal_of

        signum = signal_of(e)
        for s in (signal.SIGINT, signal.SIGTERM):  # one more while this process exits changes nothing
            signal.signal(s, signal.SIG_IGN)
        print(f"\n[scalerl] interrupted ({'Ctrl-C' if signum == signal.SIGINT else 'SIGTERM'}); relaunch the same command "
              "to resume", file=sys.stderr, flush=True)
        sys.exit(exit_code(signum))  # 130 after Ctrl-C, 143 after SIGTERM
    except BrokenPipeError:  # the reader went away (`--help | head`): exit quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        sys.exit(141)  # 128 + SIGPIPE, what the shell reports for a tool its reader cut off


def _main(argv: list[str] | None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "-h" in argv or "--help" in argv:  # scalerl's own help: no Hydra, no composition, no torch
        from scalerl.launch.cli_help import print_help

        print_help()
        return
    from scalerl.launch.app import main as run

    run(argv)


if __name__ == "__main__":
    main()
