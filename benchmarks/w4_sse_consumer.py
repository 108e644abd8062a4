"""W4: W2 behind a consumer that does a real SSE server's work per event.

Every part the stream delivers is mapped to chat events by `lg_visibility.chat._mapper`'s
`ChatStreamMapper` (the chain variant maps its own output the same way), each event is
encoded to SSE bytes, and the consumer awaits `asyncio.sleep(0)` per encoded event, as an
ASGI `send` yields to the loop. The models also yield to the loop per token (a
network-fed stream), so the runner and the consumer interleave as they do in a server.
"""

from __future__ import annotations

from benchmarks._graphs import Workload
from benchmarks.w2_subgraphs import pipeline_workload

__all__ = ["DEFAULT_TOKENS", "build"]

DEFAULT_TOKENS = 500


def build(n_tokens: int = DEFAULT_TOKENS) -> Workload:
    """W4 with `n_tokens` tokens per call."""
    return pipeline_workload(f"W4-N{n_tokens}", "W4", n_tokens, network=True, consumer="sse")
