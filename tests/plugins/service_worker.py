"""A real worker container for the service's end-to-end tests, with short heartbeats.

``python -m tests.plugins.service_worker --redis-url U --prefix P [--queue cpu]
[--memory-gb 2] [--processes 2] [--gpus 0] [--heartbeat-s 0.2] [--heartbeat-ttl-s 1.0]``

It runs `simrun.worker.main.run_container`, exactly what ``simrun worker`` runs; only the
heartbeat period and time to live (not flags of ``simrun worker``) are set short, so that a
killed worker is noticed within a second or two. GPUs are the first ``--gpus`` ids of
``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from simrun.worker.capacity import Capacity  # noqa: E402  # after the repo root is on sys.path
from simrun.worker.main import WorkerOptions, run_container  # noqa: E402  # same reason
from tests.plugins.service_tasks import REFS  # noqa: E402  # same reason


def main() -> None:
    parser = argparse.ArgumentParser(prog="tests.plugins.service_worker")
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--queue", default="cpu")
    parser.add_argument("--memory-gb", type=float, default=2.0)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("--heartbeat-s", type=float, default=0.2)
    parser.add_argument("--heartbeat-ttl-s", type=float, default=1.0)
    parser.add_argument("--id", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s worker %(message)s")
    logging.getLogger("arq").setLevel(logging.WARNING)
    visible = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
    options = WorkerOptions(
        redis_url=args.redis_url,
        capacity=Capacity(args.memory_gb, args.processes, tuple(visible[: args.gpus])),
        queues=(args.queue,),
        prefix=args.prefix,
        worker_id=args.id,
        plugins=REFS,
        python_path=(str(REPO),),
        poll_delay_s=0.01,
        grace_s=2.0,
        heartbeat_s=args.heartbeat_s,
        heartbeat_ttl_s=args.heartbeat_ttl_s,
    )
    run_container(options)


if __name__ == "__main__":
    main()
