"""`OutageWorker`: arq's `Worker` riding out a Redis outage: no polls while the link is down,
a failed ``start_jobs`` gives its semaphore slot back, a failed ``finish_job`` runs again
once Redis is back, after the job's report."""

from __future__ import annotations

from typing import Any

from arq.constants import in_progress_key_prefix
from arq.utils import timestamp_ms
from arq.worker import Worker
from redis.exceptions import ResponseError, WatchError

from simrun.worker.link import LINK_ERRORS, RedisLink


class OutageWorker(Worker):
    def __init__(self, *args: Any, link: RedisLink, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.link = link

    async def _poll_iteration(self) -> None:
        if not self.link.is_up:
            return
        try:
            await super()._poll_iteration()
        except LINK_ERRORS as exc:
            self.link.lost(exc)

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        """arq's own, but a Redis error gives back the slot the job had taken."""
        for job_id_b in job_ids:
            await self.sem.acquire()
            if self.job_counter >= self.max_jobs:
                self.sem.release()
                return None
            self.job_counter = self.job_counter + 1
            job_id = job_id_b.decode()
            in_progress_key = in_progress_key_prefix + job_id
            started = False
            try:
                async with self.pool.pipeline(transaction=True) as pipe:
                    await pipe.watch(in_progress_key)
                    ongoing_exists = await pipe.exists(in_progress_key)
                    score = await pipe.zscore(self.queue_name, job_id)
                    if ongoing_exists or not score or score > timestamp_ms():
                        continue  # taken elsewhere, finished, or deferred
                    pipe.multi()  # type: ignore[no-untyped-call]
                    pipe.psetex(in_progress_key, int(self.in_progress_timeout_s * 1000), b"1")
                    try:
                        await pipe.execute()
                    except (ResponseError, WatchError):
                        continue  # taken elsewhere since
                    task = self.loop.create_task(self.run_job(job_id, int(score)))
                    task.add_done_callback(lambda _: self._release_sem_dec_counter_on_complete())
                    self.tasks[job_id] = task
                    started = True
            finally:
                if not started:
                    self.job_counter = self.job_counter - 1
                    self.sem.release()
        return None

    async def finish_job(self, job_id: str, *args: Any, **kwargs: Any) -> None:
        try:
            await super().finish_job(job_id, *args, **kwargs)
        except LINK_ERRORS as exc:
            self.link.lost(exc)
            self.link.defer(lambda: super(OutageWorker, self).finish_job(job_id, *args, **kwargs))

    async def finish_failed_job(self, job_id: str, result_data: bytes | None) -> None:
        try:
            await super().finish_failed_job(job_id, result_data)
        except LINK_ERRORS as exc:
            self.link.lost(exc)
            self.link.defer(
                lambda: super(OutageWorker, self).finish_failed_job(job_id, result_data)
            )
