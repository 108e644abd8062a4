"""What leaves `astream_events(version="v1"|"v2")` of an enforced graph.

LangChain builds these events from its own callback handler, beside LangGraph's stream, so
the handler swap that enforces `astream` never sees them (langchain-core 1.8.3,
`tracers/event_stream.py`). They are judged here, one event at a time, as
`_VisibleGraph.astream_events` yields them:

- the root run (the graph itself): its `on_chain_stream` events are the enforced `astream`'s
  own output and pass unchanged; its other events have internal messages redacted;
- every other run is decided once, on its first event, from the metadata and tags the event
  carries, by the handlers' own `Decider.decide` (the same inputs and rule chain as the
  messages handler), except a run the handler decided internal where its metadata does
  not say so: a tool run answering an internal call, a run inside an internal tool
  (`RunState.internal_runs`); later events of the run cost one dict lookup;
- an internal run's events are dropped, a visible run's `data` is redacted of internal
  messages by tag and id (the output filter's redaction, `_EventRedaction`), and a chat
  model's prompt (`data.input` of its start and end events) is removed;
- in a `RunnableSequence`, every step after an internal model but a model, and what such
  a step runs but a model, is made of the model's output (`with_structured_output`'s
  parser): the handler decides it internal (`_run._Pipes`, `RunState.derived_runs`); a
  sequence, not a node, whose last step is internal so loses its output
  (`RunState.internal_outputs`: its stream events are dropped, its end event keeps no
  `output`);
- `on_custom_event` follows the `custom` stream mode: it passes unless the policy sets
  `filter_custom` and the graph that dispatched it is internal, or the run that dispatched
  it is one the handler decided internal (a tool answering an internal call, a run inside
  an internal tool; a chain a visible node ran with an internal run-time tag, a run inside
  it); one dispatched in an internal tool's body with the config injected into it (which
  names the tools node's run) the handler never builds.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any
from uuid import UUID

from langchain_core.messages import BaseMessage, ToolMessage

from lg_visibility._compat import NS_SEP
from lg_visibility._output_filter import DROP, OutputFilter
from lg_visibility._rules import DECLARATION_KEY, INTERNAL, NODE_DECLARATION_KEY
from lg_visibility._run import Decider, RunState

__all__ = ["EventFilter"]

# What to do with a run's events, decided on its first event.
_ROOT = 0  # the graph's own run
_DROP_RUN = 1  # an internal run
_MODEL = 2  # a visible chat model or LLM run: its tokens pass, its prompt does not
_VISIBLE = 3  # any other visible run: its data is redacted

_MODEL_EVENTS = frozenset(
    {
        "on_chat_model_start",
        "on_chat_model_stream",
        "on_chat_model_end",
        "on_llm_start",
        "on_llm_stream",
        "on_llm_end",
        "on_llm_error",
    }
)


class EventFilter:
    """Filter the events of one `astream_events` call of an enforced graph.

    Args:
        run: the run's shared state, the one its enforced `astream` decides into (internal
            message ids, tool calls, task decisions).
        root_run_id: the run id of the graph's own run (`config["run_id"]`).
    """

    __slots__ = ("_actions", "_decider", "_redactor", "_root", "_run")

    def __init__(self, run: RunState, root_run_id: str) -> None:
        self._run = run
        self._root = root_run_id
        self._decider = Decider(run.policy, run)
        self._redactor = _EventRedaction(run)
        # run id -> action; kept for the whole call so that a child without LangGraph
        # metadata of its own can take its parent's decision.
        self._actions: dict[str, int] = {}

    def __call__(self, event: dict[str, Any]) -> Any:
        """The event to deliver (the same object or a redacted copy), or DROP."""
        run_id = event["run_id"]
        action = self._actions.get(run_id)
        if action is None:
            action = self._actions[run_id] = self._first(event)
        kind = event["event"]
        if kind == "on_custom_event":
            return self._custom(event)
        if action == _DROP_RUN:
            return DROP
        if action == _MODEL:
            if kind == "on_chat_model_stream" or kind == "on_llm_stream":
                return event  # a visible run's token: nothing to redact
            data = event.get("data") or {}
            # The prompt: system prompt, context, every message the model was shown.
            data = {k: v for k, v in data.items() if k != "input"}
            return self._with_data(event, data)
        if action == _ROOT and kind == "on_chain_stream":
            return event  # exactly what the enforced astream yielded
        data = event.get("data")
        outputs = self._run.internal_outputs
        if outputs and run_id in outputs:
            # A sequence whose last step is internal (`with_structured_output` of an
            # internal model): its output is that step's.
            if kind == "on_chain_stream":
                return DROP
            data = {k: v for k, v in (data or {}).items() if k != "output"}
        if data and event["name"] == (event.get("metadata") or {}).get("langgraph_node"):
            # A node's run: its input is its task's, the state object of its graph, and so
            # may its output be (a node returning its state).
            data = self._redactor.state_at(self._redactor.state_at(data, "input"), "output")
        return self._with_data(event, data)

    def _first(self, event: dict[str, Any]) -> int:
        if event["run_id"] == self._root:
            return _ROOT
        run_id = event["run_id"]
        if run_id in self._run.internal_runs or run_id in self._run.derived_runs:
            # decided internal by the handler (the call it answers, its tool; made of an
            # internal model's output)
            return _DROP_RUN
        metadata = event.get("metadata") or {}
        if "langgraph_checkpoint_ns" not in metadata and not (
            DECLARATION_KEY in metadata or NODE_DECLARATION_KEY in metadata
        ):
            # No LangGraph task metadata of its own (v2 names its parents): the nearest
            # decided parent's action. A tag rule still beats it, as in the handler.
            for parent in reversed(event.get("parent_ids") or ()):
                inherited = self._actions.get(parent)
                if inherited is None or inherited == _ROOT:
                    continue
                tags = event.get("tags") or ()
                rules = self._run.policy.tags
                if inherited == _DROP_RUN and not any(t in rules for t in tags):
                    return _DROP_RUN
                break
        vis = self._decider.decide(metadata, event.get("tags"))
        if vis == INTERNAL:
            return _DROP_RUN
        return _MODEL if event["event"] in _MODEL_EVENTS else _VISIBLE

    def _custom(self, event: dict[str, Any]) -> Any:
        if not self._run.policy.filter_custom:
            return event  # explicit pushes pass, as in the `custom` stream mode
        if event["run_id"] in self._run.internal_runs:
            # Dispatched by a run the handler decided internal where no namespace says so
            # (a tool answering an internal call, a run inside an internal tool).
            return DROP
        chains = self._run.internal_chain_runs
        if chains and UUID(event["run_id"]) in chains:
            # Dispatched in the body of a chain a visible node ran with an internal tag.
            return DROP
        metadata = event.get("metadata") or {}
        # Dispatched by a task decided internal, as the `custom` mode judges a write.
        task = metadata.get("langgraph_checkpoint_ns")
        if isinstance(task, str) and self._run.task_decisions.get(task) == INTERNAL:
            return DROP
        ns = metadata.get("checkpoint_ns") or ""
        # The namespace of the graph that dispatched it, as the `custom` mode judges.
        if self._redactor._ns_internal(tuple(ns.split(NS_SEP)) if ns else ()):
            return DROP
        return event

    def _with_data(self, event: dict[str, Any], data: Any) -> Any:
        original = event.get("data")
        new = self._redactor.redact(data) if data else data
        if new is DROP:
            new = {}
        if new is original:
            return event
        return {**event, "data": new}


class _EventRedaction(OutputFilter):
    """The output filter's redaction, which also drops a tool's answer to an internal call
    by the call's id, as the `tools` mode does (`RunState.internal_tool_calls`).

    A node's `on_chain_stream` event carries what the node returns before the node's end
    tags it (`Decider._tag_of_new`): the `ToolMessage` a hand-written tools node builds
    for an internal model's call, or `ToolNode`'s error message, is untagged there. The
    stream's modes never see it so: LangGraph emits a node's writes after its end."""

    __slots__ = ()

    def _internal(self, message: BaseMessage) -> bool:
        calls = self._run.internal_tool_calls
        return super()._internal(message) or (bool(calls) and _answers(message, calls))

    def _redact(self, value: Any, depth: int) -> Any:
        calls = self._run.internal_tool_calls
        if (
            calls
            and type(value) is dict
            and "content" in value
            and value.get("tool_call_id") in calls
        ):
            return DROP  # the answer written as a dict
        return super()._redact(value, depth)

    def _redact_sequence(self, value: list[Any] | tuple[Any, ...], depth: int) -> Any:
        out = super()._redact_sequence(value, depth)
        calls = self._run.internal_tool_calls
        if not calls:
            return out
        kept = [item for item in out if not _answers(item, calls)]
        if len(kept) == len(out):
            return out
        return kept if isinstance(out, list) else tuple(kept)


def _answers(item: Any, calls: Set[str]) -> bool:
    """Whether `item` is a `ToolMessage` answering one of `calls`."""
    return isinstance(item, ToolMessage) and item.tool_call_id in calls
