"""The W3C trace context the clients send (sluice_client.trace, and
Client's trace_headers), seen by a real HTTP server on loopback that
records what it gets."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import unittest
from typing import Dict, List

import sluice_client

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: List[Dict[str, str]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        _Recorder.seen.append({k.lower(): v for k, v in self.headers.items()})
        body = json.dumps({"allowed": True, "retry_after_ms": 0, "limits": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class TraceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
        threading.Thread(target=cls.srv.serve_forever, daemon=True).start()
        cls.url = f"http://127.0.0.1:{cls.srv.server_address[1]}"

    @classmethod
    def tearDownClass(cls) -> None:
        cls.srv.shutdown()
        cls.srv.server_close()

    def setUp(self) -> None:
        _Recorder.seen.clear()

    def test_trace_block(self) -> None:
        c = sluice_client.Client(self.url)
        with sluice_client.trace(TP, "vendor=1"):
            c.check({"tenant": "a"})
        c.check({"tenant": "a"})
        self.assertEqual(_Recorder.seen[0].get("traceparent"), TP)
        self.assertEqual(_Recorder.seen[0].get("tracestate"), "vendor=1")
        self.assertNotIn("traceparent", _Recorder.seen[1])

    def test_trace_headers_callable(self) -> None:
        c = sluice_client.Client(self.url, trace_headers=lambda: {"TraceParent": TP, "Authorization": "x", "baggage": "b"})
        c.check({"tenant": "a"})
        got = _Recorder.seen[0]
        self.assertEqual(got.get("traceparent"), TP)
        self.assertNotIn("baggage", got)
        self.assertNotIn("authorization", got)  # only the trace fields are taken
        # A malformed traceparent from the callable is not sent.
        sluice_client.Client(self.url, trace_headers=lambda: {"traceparent": "nope"}).check({"tenant": "a"})
        self.assertNotIn("traceparent", _Recorder.seen[1])

    def test_async_task_carries_its_trace(self) -> None:
        async def main() -> None:
            c = sluice_client.AsyncClient(self.url)
            with sluice_client.trace(TP):
                await c.check({"tenant": "a"})
        asyncio.run(main())
        self.assertEqual(_Recorder.seen[0].get("traceparent"), TP)

    def test_bad_traceparent(self) -> None:
        for bad in ["", "00-xyz", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TP.upper()]:
            with self.assertRaises(ValueError):
                with sluice_client.trace(bad):
                    pass


if __name__ == "__main__":
    unittest.main()
