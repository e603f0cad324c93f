"""What `GET /metrics` reports, in Prometheus' text exposition format (version 0.0.4).

A handful of counters and histograms kept in memory by the one server process; no client library,
since the format is a few lines of text. Names follow Prometheus' conventions: `_total` for
counters, `_seconds` for times, histograms as cumulative `_bucket{le=...}` lines with `_sum` and `_count`.
"""

from __future__ import annotations

import bisect
import collections
from collections.abc import Callable, Sequence

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class Histogram:
    def __init__(self, buckets: Sequence[float]):
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)  # the last one: above every bucket (+Inf only)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str) -> list[str]:
        out, cumulative = [], 0
        for bound, count in zip((*self.buckets, float("inf")), self.counts):
            cumulative += count
            out.append(f'{name}_bucket{{le="{"+Inf" if bound == float("inf") else f"{bound:g}"}"}} {cumulative}')
        return out + [f"{name}_sum {self.sum:.6f}", f"{name}_count {self.count}"]


class Metrics:
    """Requests by endpoint and status, lines and tokens translated, request latency, batch sizes."""

    def __init__(self, queued_lines: Callable[[], int] = lambda: 0):
        self.requests: collections.Counter[tuple[str, int]] = collections.Counter()
        self.lines = 0
        self.output_tokens = 0
        self.latency = Histogram(LATENCY_BUCKETS)
        self.batch_lines = Histogram(BATCH_BUCKETS)
        self.batch_requests = Histogram(BATCH_BUCKETS)
        self.batch_seconds = Histogram(LATENCY_BUCKETS)
        self.queued_lines = queued_lines

    def request(self, endpoint: str, status: int, seconds: float) -> None:
        self.requests[endpoint, status] += 1
        if endpoint in ("/translate", "/nmt/translate"):
            self.latency.observe(seconds)

    def translated(self, lines: int, output_tokens: int) -> None:
        self.lines += lines
        self.output_tokens += output_tokens

    def batch(self, lines: int, requests: int, seconds: float) -> None:
        self.batch_lines.observe(lines)
        self.batch_requests.observe(requests)
        self.batch_seconds.observe(seconds)

    def render(self) -> str:
        out = ["# HELP nmt_requests_total HTTP requests answered, by endpoint and status.", "# TYPE nmt_requests_total counter"]
        out += [f'nmt_requests_total{{endpoint="{endpoint}",status="{status}"}} {n}' for (endpoint, status), n in sorted(self.requests.items())]
        out += ["# HELP nmt_lines_total Lines translated.", "# TYPE nmt_lines_total counter", f"nmt_lines_total {self.lines}",
                "# HELP nmt_output_tokens_total Sentencepiece tokens in the translations.", "# TYPE nmt_output_tokens_total counter",
                f"nmt_output_tokens_total {self.output_tokens}",
                "# HELP nmt_queued_lines Lines waiting for a batch.", "# TYPE nmt_queued_lines gauge", f"nmt_queued_lines {self.queued_lines()}"]
        for name, help_text, histogram in (
            ("nmt_request_duration_seconds", "Time from a translation request's arrival to its answer.", self.latency),
            ("nmt_batch_lines", "Lines per translation call (dynamic batching gathers them across requests).", self.batch_lines),
            ("nmt_batch_requests", "Requests whose lines shared one translation call.", self.batch_requests),
            ("nmt_batch_duration_seconds", "Time of one translation call.", self.batch_seconds),
        ):
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} histogram", *histogram.lines(name)]
        return "\n".join(out) + "\n"
