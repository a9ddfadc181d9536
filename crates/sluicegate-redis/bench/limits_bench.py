"""Python `limits` (async, redis-py) on the same Redis and traffic as examples/redis_bench.rs.

python limits_bench.py PORT SECONDS TASKS KEYS STRATEGY   (STRATEGY: moving-window,
fixed-window or sliding-window-counter)
"""

import asyncio
import json
import sys
import time

from limits import parse
from limits.aio import storage, strategies

STRATEGIES = {
    "moving-window": strategies.MovingWindowRateLimiter,
    "fixed-window": strategies.FixedWindowRateLimiter,
    "sliding-window-counter": strategies.SlidingWindowCounterRateLimiter,
}


async def main() -> None:
    port, seconds, tasks, keys = (int(a) for a in sys.argv[1:5])
    name = sys.argv[5] if len(sys.argv) > 5 else "sliding-window-counter"
    store = storage.RedisStorage(
        f"async+redis://127.0.0.1:{port}", implementation="redispy", key_prefix="bench:limits"
    )
    limiter = STRATEGIES[name](store)
    item = parse("100/second")
    done = False
    counts = {"total": 0, "allowed": 0}

    async def worker(task: int) -> None:
        i = task
        while not done:
            key = f"user-{i % keys}"
            i = ((i * 6364136223846793005 + 1442695040888963407) & ((1 << 64) - 1)) >> 1
            if await limiter.hit(item, key):
                counts["allowed"] += 1
            counts["total"] += 1

    started = time.perf_counter()
    workers = [asyncio.create_task(worker(t)) for t in range(tasks)]
    await asyncio.sleep(seconds)
    done = True
    await asyncio.gather(*workers)
    secs = time.perf_counter() - started
    print(json.dumps({
        "impl": "limits", "algorithm": name, "tasks": tasks, "decisions": counts["total"],
        "allowed": counts["allowed"], "seconds": round(secs, 3),
        "per_second": round(counts["total"] / secs),
    }))


asyncio.run(main())
