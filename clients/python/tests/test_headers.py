"""The provider-header cases shared with the Go and TypeScript parsers."""

import datetime
import json
import os
import unittest

from sluice_client import parse_provider_limits, retry_hint

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "testdata", "provider_headers.json")


class ProviderHeaders(unittest.TestCase):
    def test_fixture(self) -> None:
        with open(FIXTURE) as f:
            fx = json.load(f)
        now = datetime.datetime.fromisoformat(fx["now"].replace("Z", "+00:00")).timestamp()
        self.assertGreaterEqual(len(fx["cases"]), 10)
        for case in fx["cases"]:
            with self.subTest(case["name"]):
                got = [
                    {"dimension": l.dimension, "name": l.name, "limit": l.limit, "remaining": l.remaining,
                     "reset_ms": round(l.reset * 1000, 6), "source": l.source}
                    for l in parse_provider_limits(case["headers"], now)
                ]
                want = [dict(w, reset_ms=round(float(w["reset_ms"]), 6)) for w in case["want"]]
                self.assertEqual(got, want)

    def test_header_shapes(self) -> None:
        d = {"X-RateLimit-Remaining-Tokens": "5"}
        self.assertEqual(parse_provider_limits(d)[0].remaining, 5)
        self.assertEqual(parse_provider_limits([("x-ratelimit-remaining-tokens", "5")])[0].remaining, 5)
        self.assertEqual(parse_provider_limits(None), [])

    def test_retry_hint_longest(self) -> None:
        self.assertEqual(retry_hint({"retry-after-ms": "700"}), 0.7)
        self.assertEqual(retry_hint({"Retry-After": "1", "retry-after-ms": "2500"}), 2.5)
        self.assertEqual(retry_hint({"Retry-After": "2", "RateLimit": '"a";r=0;t=5'}), 5.0)
        self.assertEqual(retry_hint({"RateLimit-Remaining": "0", "RateLimit-Reset": "3", "retry-after-ms": "bogus"}), 3.0)
        self.assertIsNone(retry_hint({"retry-after-ms": "-1"}))
        self.assertIsNone(retry_hint({}))

    def test_garbage_never_raises(self) -> None:
        import random
        rnd = random.Random(7)
        names = ["retry-after", "retry-after-ms", "RateLimit", "RateLimit-Policy", "x-ratelimit-reset-tokens",
                 "anthropic-ratelimit-tokens-reset", "X-RateLimit-Reset", "x-ratelimit-remaining-requests"]
        alphabet = '0123456789.;,="hmsµ-+eZT: abc\\'
        for _ in range(3000):
            h = [(rnd.choice(names), "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(12)))) for _ in range(3)]
            for l in parse_provider_limits(h, 1_800_000_000):
                self.assertTrue(0 <= l.reset <= 86400 and l.limit >= -1 and l.remaining >= -1, (h, l))
            d = retry_hint(h, 1_800_000_000)
            self.assertTrue(d is None or 0 <= d <= 86400, (h, d))


if __name__ == "__main__":
    unittest.main()
