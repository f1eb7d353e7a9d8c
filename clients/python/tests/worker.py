"""A worker process for the cross-language tests (run by the Go test
cmd/sluice TestClientsShareOneBudget, with the TypeScript worker beside it):

    python3 worker.py load URL KEY START_AT_MS UNTIL_MS THREADS
        from START_AT_MS to UNTIL_MS (Unix ms), THREADS threads check KEY
        as fast as they can; prints {"admitted": N, "refused": N, "last_ms": T}
    python3 worker.py fifo URL KEY AT_MS
        at AT_MS books one request on descriptor slow=KEY (max_wait 10 s), prints
        {"sent_ms": S, "admitted_ms": T} (Unix ms: when it sent the booking,
        when it was admitted)
"""

import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from sluice_client import Client  # noqa: E402


def sleep_until(ms: int) -> None:
    d = ms / 1000 - time.time()
    if d > 0:
        time.sleep(d)


def main() -> None:
    mode, url, key = sys.argv[1], sys.argv[2], sys.argv[3]
    c = Client(url, timeout=10)
    if mode == "fifo":
        # A first request readies the client's code paths and connection,
        # so that the timed one leaves when it says it does.
        c.check({"slow": key + "-warm"})
        sleep_until(int(sys.argv[4]))
        sent = time.time() * 1000
        d = c.check({"slow": key}, max_wait=10)
        print(json.dumps({"allowed": d.allowed, "sent_ms": sent, "admitted_ms": time.time() * 1000}))
        return
    start, until, threads = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    counts = {"admitted": 0, "refused": 0, "last_ms": 0.0}
    lock = threading.Lock()

    def run() -> None:
        sleep_until(start)
        while time.time() * 1000 < until:
            d = c.check({"k": key})
            with lock:
                if d.allowed:
                    counts["admitted"] += 1
                    counts["last_ms"] = max(counts["last_ms"], time.time() * 1000)
                else:
                    counts["refused"] += 1

    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
