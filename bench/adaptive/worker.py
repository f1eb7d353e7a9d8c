"""A worker of bench/adaptive's row "service": THREADS threads call the
fake provider as fast as a real ``sluice serve``'s adaptive limit admits
(the Python client's check, waiting in line), and report each 429 without
hints with ``report_response`` (POST /v1/feedback overloaded).

    python3 worker.py SLUICE_URL PROVIDER_URL SECONDS THREADS
"""

from __future__ import annotations

import sys
import threading
import time
import urllib.error
import urllib.request

from sluice_client import Client


def main() -> None:
    sluice, provider, seconds, threads = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    end = time.monotonic() + seconds
    d = {"provider": "fake"}

    def run() -> None:
        c = Client(sluice, timeout=15)
        while time.monotonic() < end:
            dec = c.check(d, max_wait=min(10.0, max(end - time.monotonic(), 0.001)))
            if not dec.allowed:
                time.sleep(0.05)
                continue
            req = urllib.request.Request(provider + "/v1/messages", data=b'{"model":"m"}', method="POST")
            try:
                with urllib.request.urlopen(req, timeout=10) as res:
                    res.read()
            except urllib.error.HTTPError as e:
                e.read()
                c.report_response(e.code, dict(e.headers.items()), descriptors=d)

    ts = [threading.Thread(target=run, daemon=True) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


if __name__ == "__main__":
    main()
