"""The service of the fault campaign in a process of its own, so that the campaign can
SIGKILL it: ``python -m tests.support.campaign_service --store DIR --redis-url U --prefix P
--port N [--address-space-gb G] [--redis-timeout-s T]``, run in the repository's root.

It is `simrun.service.main.serve` (the controller loop and the HTTP API, what ``simrun
service`` runs) over the campaign's task type (tests/support/campaign_tasks.py), with the
settings of the service's tests (tests/support/service_harness.py: a short poll, frequent
reconciliation) and the campaign workers' heartbeat time to live. ``--address-space-gb`` caps the
process's address space (RLIMIT_AS), so an input that makes it allocate without bound
meets ``MemoryError`` instead of the machine's memory.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
from pathlib import Path

from simrun.plugins import load_types
from simrun.service.main import serve
from tests.support.campaign import HEARTBEAT_TTL_S
from tests.support.campaign_tasks import REFS
from tests.support.service_harness import settings

GIB = 2**30


def main() -> None:
    parser = argparse.ArgumentParser(prog="tests.support.campaign_service")
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--address-space-gb", type=float, default=None)
    parser.add_argument("--redis-timeout-s", type=float, default=None)
    args = parser.parse_args()
    if args.address_space_gb is not None:
        limit = int(args.address_space_gb * GIB)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    types = load_types(REFS)
    more = {} if args.redis_timeout_s is None else {"redis_timeout_s": args.redis_timeout_s}
    service_settings = settings(
        args.store, args.redis_url, args.prefix, heartbeat_ttl_s=HEARTBEAT_TTL_S, **more
    )
    asyncio.run(serve(service_settings, types, port=args.port, log_level="warning"))


if __name__ == "__main__":
    main()
