"""The controller alone in a process, for tests that kill it: ``python -m
tests.support.service_controller --store DIR --redis-url U --prefix P``, run in the
repository's root (``-m`` puts the working directory on ``sys.path``).

It runs `simrun.service.controller.Controller.run_forever` with the test settings of
`tests.support.service_harness` until it is signalled or killed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

from simrun.service.controller import Controller
from tests.support.service_harness import TYPES, settings


async def serve(store: Path, redis_url: str, prefix: str) -> None:
    controller = await Controller.open(settings(store, redis_url, prefix), TYPES)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await controller.run_forever(stop)
    finally:
        await controller.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="tests.support.service_controller")
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--prefix", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s controller %(message)s")
    asyncio.run(serve(args.store, args.redis_url, args.prefix))


if __name__ == "__main__":
    main()
