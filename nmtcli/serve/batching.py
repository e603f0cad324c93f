"""Dynamic batching: the lines of concurrent requests are gathered for at most `max_delay` seconds and
translated together in one call (the Python API's `Translator.translate_lines`, which sorts them by length into batches
of `batch_tokens`); each request gets its own lines back, in order.

One worker thread translates, one call at a time (PyTorch already spreads one batch over every core);
the event loop goes on reading requests meanwhile, so whatever arrives during a batch waits for the
next one and is taken at once: under load, batches fill without any waiting. Only requests with the
same model and search settings share a call. A request that gives up (its time-out, or its client
went away) before its lines are taken leaves the queue at once; once taken, its lines finish with
their batch and are dropped.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from nmtcli import faults
from nmtcli.documents.protect import Protection
from nmtcli.inference.results import Scored
from nmtcli.inference.results import Translation
from nmtcli.inference.settings import SearchSettings
from nmtcli.serve.models import ServedModel

# on_batch(model, lines, requests, seconds): called after each translation call (metrics).
OnBatch = Callable[[ServedModel, int, int, float], None]


class QueueFull(Exception):
    """More lines are waiting than the queue limit allows: the request is refused (429), not queued."""

    def __init__(self, queued: int, limit: int):
        super().__init__(f"{queued} lines waiting, limit {limit}")
        self.queued = queued
        self.limit = limit


@dataclass(eq=False)
class Job:
    model: ServedModel
    lines: list[str]
    settings: SearchSettings
    future: asyncio.Future
    arrived: float = field(default_factory=time.monotonic)
    taken: bool = False
    prefixes: list[str] | None = None  # target prefixes, one per line; a batch mixes jobs with and without
    targets: list[str] | None = None  # given translations: the lines are scored with them (forced decoding), not translated
    protection: Protection | None = None  # the spans kept as they are (documents/protect.py)

    def joins(self, other: Job) -> bool:
        """Whether this job's lines can be translated in one call with `other`'s."""
        return (self.model is other.model and self.settings == other.settings and (self.targets is None) == (other.targets is None)
                and self.protection == other.protection)


class Batcher:
    """The queue of lines to translate and the worker that empties it; start() and stop() inside the event loop."""

    def __init__(self, max_delay: float = 0.005, max_lines: int = 256, queue_limit: int = 2000, enabled: bool = True,
                 on_batch: OnBatch | None = None):
        self.max_delay = max_delay
        self.max_lines = max_lines
        self.queue_limit = queue_limit
        self.enabled = enabled  # off: one request per call, as a server without batching would do
        self.on_batch = on_batch or (lambda model, lines, requests, seconds: None)
        self.pending: collections.deque[Job] = collections.deque()
        self.queued_lines = 0  # lines waiting, not yet taken into a batch: what the queue limit bounds
        self.running: list[Job] = []  # the jobs of the batch being translated
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nmt-translate")
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="nmt-batcher")

    async def stop(self) -> None:
        """Stop the worker (the server has already let the requests in flight finish) and cancel what is left."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        for job in [*self.pending, *self.running]:
            job.future.cancel()
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown)

    async def run(self, call: Callable, *args, **kwargs):
        """`call(*args, **kwargs)` on the translation thread, after the batch being translated (a chunk of a file:
        serve/files.py), so that the model is never used by two threads at once."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(call, *args, **kwargs))

    async def translate(self, model: ServedModel, lines: list[str], settings: SearchSettings,
                        prefixes: list[str] | None = None, targets: list[str] | None = None,
                        protection: Protection | None = None) -> list[list[Translation]] | list[Scored]:
        """The n-best lists of `lines`, in order (with `targets`: the scores of those translations); raises
        QueueFull when they would exceed the queue limit."""
        if not lines:
            return []
        if self.queued_lines + len(lines) > self.queue_limit:
            raise QueueFull(self.queued_lines, self.queue_limit)
        job = Job(model, list(lines), settings, asyncio.get_running_loop().create_future(), prefixes=prefixes, targets=targets,
                  protection=protection)
        self.pending.append(job)
        self.queued_lines += len(job.lines)
        self._wake.set()
        try:
            return await job.future
        finally:
            if not job.taken:  # timed out or cancelled while waiting: its slot is free at once
                self.pending.remove(job)
                self.queued_lines -= len(job.lines)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self.pending:
                self._wake.clear()
                await self._wake.wait()
            await self._gather()
            if not self.pending:
                continue  # everyone waiting gave up
            jobs = self._take()
            lines = [line for job in jobs for line in job.lines]
            prefixes = [p for job in jobs for p in job.prefixes or [""] * len(job.lines)] if any(job.prefixes for job in jobs) else None
            numbers = [number for job in jobs for number in range(1, len(job.lines) + 1)]  # samples keyed within a request
            targets = None if jobs[0].targets is None else [t for job in jobs for t in job.targets]
            self.running = jobs
            started = time.perf_counter()
            try:
                results = await loop.run_in_executor(self._executor, _translate, jobs[0], lines, numbers, prefixes, targets)
            except Exception as e:  # noqa: BLE001 - handed to every request of the batch, which answers 500
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(e)
                continue
            finally:
                self.running = []
            self.on_batch(jobs[0].model, len(lines), len(jobs), time.perf_counter() - started)
            start = 0
            for job in jobs:
                if not job.future.done():
                    job.future.set_result(results[start:start + len(job.lines)])
                start += len(job.lines)

    async def _gather(self) -> None:
        """Wait until the first job has waited max_delay, or enough lines that join it are there."""
        if not self.enabled:
            return
        deadline = self.pending[0].arrived + self.max_delay
        while self.pending and self._joining_lines() < self.max_lines:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), remaining)
            except asyncio.TimeoutError:
                return

    def _joining_lines(self) -> int:
        first = self.pending[0]
        return sum(len(job.lines) for job in self.pending if job.joins(first))

    def _take(self) -> list[Job]:
        """The first job and, in arrival order, the jobs that join it while they fit in max_lines."""
        first = self.pending[0]
        taken, total = [first], len(first.lines)
        if self.enabled:
            for job in list(self.pending)[1:]:
                if not job.joins(first):
                    continue
                if total + len(job.lines) > self.max_lines:
                    break
                taken.append(job)
                total += len(job.lines)
        for job in taken:
            job.taken = True
            self.pending.remove(job)
        self.queued_lines -= total
        return taken


def _translate(job: Job, lines: list[str], numbers: list[int], prefixes: list[str] | None = None,
               targets: list[str] | None = None) -> list[list[Translation]] | list[Scored]:
    """In the worker thread: one call of the Python API for the lines of every job of the batch; each line's n-best list."""
    faults.point("serve-batch", lines=lines)
    if targets is not None:
        s = job.settings
        return list(job.model.translator._score_with(s, lines, targets, s.alignment))
    return [t.nbest for t in job.model.translator._translate_lines(job.settings, lines, prefixes, numbers, job.protection)]
