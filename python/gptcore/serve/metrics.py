"""The server's Prometheus metrics, in a registry of their own (``GET /metrics`` serves it in
Prometheus' text format).

- ``gptcore_requests_total{endpoint, status}``: answered requests by endpoint and HTTP status;
- ``gptcore_prompt_tokens_total``, ``gptcore_completion_tokens_total``: tokens in and out;
- ``gptcore_queue_depth``: sequences waiting for a place in the batch;
- ``gptcore_running_sequences``: the running batch size;
- ``gptcore_time_to_first_token_seconds``: from a sequence's arrival to its first token;
- ``gptcore_inter_token_seconds``: between a sequence's consecutive tokens;
- ``gptcore_steps_total``, ``gptcore_step_tokens``, ``gptcore_step_sequences``: model steps,
  and the tokens and sequences in each;
- ``gptcore_sequence_errors_total``: sequences ended by an error (answered 500);
- ``gptcore_cancelled_total``: sequences dropped because their client went away.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["Metrics", "CONTENT_TYPE_LATEST"]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5,
                    5.0, 10.0, 30.0)
_STEP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class Metrics:
    """The metrics of one server (see the module)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("gptcore_requests", "Answered requests by endpoint and HTTP status",
                                ["endpoint", "status"], registry=r)
        self.prompt_tokens = Counter("gptcore_prompt_tokens", "Prompt tokens of accepted requests", registry=r)
        self.completion_tokens = Counter("gptcore_completion_tokens", "Tokens generated", registry=r)
        self.queue_depth = Gauge("gptcore_queue_depth", "Sequences waiting for a place in the batch", registry=r)
        self.running = Gauge("gptcore_running_sequences", "Sequences in the running batch", registry=r)
        self.ttft = Histogram("gptcore_time_to_first_token_seconds", "From a sequence's arrival to its first token",
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.inter_token = Histogram("gptcore_inter_token_seconds", "Between consecutive tokens of a sequence",
                                     buckets=_LATENCY_BUCKETS, registry=r)
        self.steps = Counter("gptcore_steps", "Model steps run", registry=r)
        self.step_rows = Histogram("gptcore_step_tokens", "Tokens fed to the model per step", buckets=_STEP_BUCKETS,
                                   registry=r)
        self.step_sequences = Histogram("gptcore_step_sequences", "Sequences in one model step",
                                        buckets=_STEP_BUCKETS, registry=r)
        self.sequence_errors = Counter("gptcore_sequence_errors", "Sequences ended by an error", registry=r)
        self.cancelled = Counter("gptcore_cancelled", "Sequences dropped because their client went away",
                                 registry=r)

    def render(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)
