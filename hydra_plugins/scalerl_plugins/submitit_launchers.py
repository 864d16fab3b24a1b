"""``hydra/launcher=submitit_local`` and ``hydra/launcher=slurm``.

hydra-submitit-launcher's classes with scalerl's launch (``scalerl.launch.submitit_pool``:
wait for every job, turn a failed or cancelled one into a FAILED result, record job
ids in ``launch.json``) and a job side that registers scalerl's configs before it
composes. Preemption and timeouts requeue through the inherited ``checkpoint()``;
on SLURM the requeue itself survives the preemption's SIGTERM
(``scalerl.launch.requeue``).
"""
from __future__ import annotations

from typing import Sequence

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher, SlurmLauncher


class _Scalerl:
    _EXECUTOR: str

    def __call__(self, *args, **kwargs) -> JobReturn:
        # Imported here (as everything of scalerl's in this module): Hydra imports this module in
        # every Hydra app on the machine, which must neither pay for scalerl nor be changed by it.
        from scalerl.launch.app import register

        register()  # this job composes its config: scalerl's schemas and run-name resolver first
        return super().__call__(*args, **kwargs)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from scalerl.launch.submitit_pool import submit_and_wait

        return submit_and_wait(self, job_overrides, initial_job_idx)


class ScalerlSubmititLocalLauncher(_Scalerl, LocalLauncher):
    pass


class ScalerlSlurmLauncher(_Scalerl, SlurmLauncher):
    def __call__(self, *args, **kwargs) -> JobReturn:
        from scalerl.launch.requeue import harden_submitit

        harden_submitit()  # in the job: a preempted arm must not be lost to its own SIGTERM
        return super().__call__(*args, **kwargs)
