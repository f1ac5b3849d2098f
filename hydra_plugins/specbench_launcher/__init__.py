"""`hydra/launcher=submitit_local` for specbench: the sweep's jobs one at a time, each in a
process of its own through submitit (the job path SLURM runs), with the job's output shown.

Every run times decoding (tok/s, speedup), so two jobs sharing the machine's cores would
corrupt each other's numbers: hydra-submitit-launcher's LocalLauncher starts them all at once
and leaves their output in .submitit/<id>/ log files. (Hydra imports this module when it scans
for plugins: it must stay cheap to import.)
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from pathlib import Path
from typing import IO, Any, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides

from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher

log = logging.getLogger(__name__)


def quiet_schema_match_warning() -> None:
    """conf/hydra/launcher/submitit_local.yaml takes the name of the plugin's config on purpose,
    to point Hydra here; Hydra checks its fields against that config's (LocalQueueConf: the
    fields we keep) and warns, in the sweep and in each job's process, that this is deprecated."""
    warnings.filterwarnings(
        "ignore", message=r"\s*'hydra/launcher/submitit_local' is validated against ConfigStore schema"
    )


POLL_S = 0.2  # how often the job's log files are read while it runs
STOP_WAIT_S = 30  # after Ctrl-C: how long the job may take to save its samples and stop


class SequentialLocalLauncher(BaseSubmititLauncher):
    """Submits one job, shows its stdout and stderr as they are written, waits for it to
    end, then submits the next."""

    _EXECUTOR = "local"

    def __call__(self, *args: Any, **kwargs: Any) -> JobReturn:
        """(In the job's process: composes the job's config, then runs it.)"""
        quiet_schema_match_warning()
        return super().__call__(*args, **kwargs)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import submitit  # lazy, as in the base class: plugin discovery stays fast

        assert self.config is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, folder=self.params["submitit_folder"])
        executor.update_parameters(**{k: v for k, v in self.params.items() if k != "submitit_folder"})
        log.info(
            f"Submitit '{self._EXECUTOR}' sweep output dir: {sweep_dir} ({len(job_overrides)} jobs, one at a time)"
        )
        returns = []
        for offset, overrides in enumerate(job_overrides):
            idx = initial_job_idx + offset
            name = f"job {offset + 1}/{len(job_overrides)}"
            print(f"[{name}] {' '.join(filter_overrides(overrides))}", flush=True)
            job = executor.submit(
                self, list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()
            )
            output = JobOutput(job)
            try:
                output.show_until_done()
            except KeyboardInterrupt:  # Ctrl-C reaches the job too (same process group): show how it stops
                output.show_until_done(timeout_s=STOP_WAIT_S)
                if not job.done():  # only this process was interrupted
                    job.cancel(check=False)  # SIGINT: the run keeps its finished samples, as when run by hand
                sys.exit(130)  # as an interrupted run: its own message (above) says what was kept
            try:
                returns.append(job.results()[0])
            # it exited (a refused setting: exit 2), as the basic launcher stops
            except submitit.core.utils.UncompletedJobError:
                print(
                    f"error: {name} ended without a result (its output is above and in {job.paths.folder}); "
                    f"the jobs after it were not run",
                    file=sys.stderr,
                )
                sys.exit(1)
        return returns


class JobOutput:
    """What the job writes to its log files, copied to this process's stdout and stderr."""

    def __init__(self, job) -> None:
        self.job = job
        self.readers = [LogReader(job.paths.stdout, sys.stdout), LogReader(job.paths.stderr, sys.stderr)]

    def show_until_done(self, timeout_s: float = float("inf")) -> None:
        """Copies new output until the job's process has ended (then once more, for its last
        lines) or timeout_s has passed."""
        deadline = time.monotonic() + timeout_s
        while not self.job.done() and time.monotonic() < deadline:
            self.copy_new()
            time.sleep(POLL_S)
        self.copy_new()

    def copy_new(self) -> None:
        for reader in self.readers:
            reader.copy_new()


class LogReader:
    """The part of a growing file not yet copied to `out`."""

    def __init__(self, path: Path, out: IO[str]) -> None:
        self.path, self.out, self.offset = path, out, 0

    def copy_new(self) -> None:
        if not self.path.exists():  # before the job's process has opened it (or with stderr_to_stdout)
            return
        with self.path.open("rb") as file:
            file.seek(self.offset)
            data = file.read()
        if data:
            self.offset += len(data)
            if hasattr(self.out, "buffer"):  # bytes as written (a progress bar's \r, any encoding)
                self.out.buffer.write(data)
            else:
                self.out.write(data.decode(errors="replace"))
            self.out.flush()
