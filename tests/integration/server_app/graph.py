"""The graphs `langgraph dev` serves in tests/integration/test_langgraph_server.py.

- `graph`: the incident graph (`lg_visibility.demo.graphs.incident_builder`, scripted fake
  models) wrapped by `with_visibility`.
- `raw_graph`: the same builder compiled without it; it leaks every internal marker, which
  shows the test can tell a filtered stream from an unfiltered one.
- `recorded_graph`: `graph` under a subclass that also appends each `astream` call the
  server makes (class, stream modes, keyword arguments) as a JSON line to the file named by
  `$LGV_ASTREAM_LOG`, then delegates unchanged.

No checkpointer: the server supplies its own.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.runnables import RunnableConfig

from lg_visibility import VisibilityPolicy, with_visibility
from lg_visibility.demo.graphs import incident_builder

# The incident graph's internal producers (see the table in lg_visibility.demo.graphs): the
# router subgraph, the knowledge agent (tool call, tool result, JSON answer), the query
# expansion and the insight draft. The cards the insight subgraph pushes through the
# custom stream pass (filter_custom defaults to False).
POLICY = VisibilityPolicy(
    internal=[
        "router_subgraph",
        "knowledge_subgraph/knowledge_agent",
        "knowledge_subgraph/expand_queries",
        "insight_subgraph/make_cards",
    ],
    user_visible_keys=["question", "scenario"],
)

raw_graph = incident_builder().compile()
graph = with_visibility(incident_builder().compile(), POLICY)


class _RecordingGraph(type(graph)):  # type: ignore[misc]
    """`graph`'s class, recording the server's `astream` calls (class attribute only:
    the server's `graph.copy()` drops instance attributes)."""

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        log = os.environ.get("LGV_ASTREAM_LOG")
        if log:
            mode = kwargs.get("stream_mode")
            record = {
                "mro": [cls.__name__ for cls in type(self).__mro__[:4]],
                "stream_mode": [mode] if isinstance(mode, str) else sorted(mode or []),
                "subgraphs": kwargs.get("subgraphs"),
                "version": kwargs.get("version"),
                "kwargs": sorted(kwargs),
            }
            with open(log, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        async for item in super().astream(input, config, **kwargs):
            yield item


recorded_graph = _RecordingGraph(**graph.__dict__)
