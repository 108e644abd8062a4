"""Sub-agents as nodes: what a sub-agent sees, and what it hands back to its parent.

`as_subagent(graph, ...)` wraps any compiled graph (a `create_agent` agent, a compiled
`StateGraph`) as a node of a parent graph. Two switches decide what crosses the boundary:

* `include_contents` -- does the sub-agent see the parent's messages, or only its instruction?
* `return_reasoning` -- does the parent receive every message the sub-agent produced, or only
  its final answer?

The sub-agent runs as a real subgraph of the node that wraps it: it gets its own checkpoint
namespace (`<node>:<task_id>`), so its reasoning stays inspectable with
`get_state(subgraphs=True)` without ever entering the parent's state, interrupts raised inside
it surface at the parent and resume there, and its streamed tokens carry its own path for a
visibility policy to decide on. Messages are handed back as the very objects the sub-agent
produced, so ids and `response_metadata` (including a visibility tag) travel with them.
"""

from __future__ import annotations

import dataclasses
import re
import string
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda

# The task's channel reader, for SubagentNode._check_output_key. (langgraph 1.2.24)
from langgraph.channels import LastValue
from langgraph.graph import StateGraph
from langgraph.pregel import Pregel
from pydantic import BaseModel

from lg_visibility._compat import fields_with_values, task_has_channel
from lg_visibility._rules import DECLARATION_KEY
from lg_visibility.errors import VisibilityConfigError
from lg_visibility.policy import Visibility

__all__ = ["Instruction", "SubagentNode", "add_subagent", "as_subagent"]

Instruction: TypeAlias = (
    str | Callable[[Mapping[str, Any]], str | BaseMessage | Sequence[BaseMessage]]
)
"""A `str.format` template over the parent state's keys, or a callable that builds the
instruction from the parent state: text (sent as a `HumanMessage`), a message, or a sequence
of messages (e.g. a `SystemMessage` and a `HumanMessage`), sent in that order."""

_MESSAGES = "messages"
# The instruction is a prompt the graph wrote for the sub-agent, not something the user said,
# so it is declared internal (a declaration the visibility handler honours; inert without it).
_INSTRUCTION_VISIBILITY: Visibility = "internal"
_INSTRUCTION_TYPES = (
    "it must return the instruction text (str), a message (e.g. HumanMessage) or a sequence"
    " of messages (e.g. [SystemMessage(...), HumanMessage(...)])"
)
_StateGraphT = TypeVar("_StateGraphT", bound=StateGraph[Any, Any, Any, Any])
# Instruction ids are derived from the task's checkpoint namespace so that a re-run of the
# node after an interrupt names the same instruction the sub-agent checkpointed.
_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://pypi.org/project/lg-visibility/subagent")


class SubagentNode(RunnableLambda[Any, dict[str, Any]]):
    """A parent-graph node that runs a compiled graph as a sub-agent; made by `as_subagent`.

    Add it with `builder.add_node(name, node)`, or use `add_subagent`, which also checks the
    options against the parent's state schema while the parent graph is being built.
    """

    graph: Pregel[Any, Any, Any, Any]
    include_contents: bool
    return_reasoning: bool
    output_key: str | None
    instruction: Instruction | None

    def __init__(
        self,
        graph: Pregel[Any, Any, Any, Any],
        *,
        include_contents: bool,
        return_reasoning: bool,
        output_key: str | None,
        instruction: Instruction | None,
    ) -> None:
        self.graph = graph
        self.include_contents = include_contents
        self.return_reasoning = return_reasoning
        self.output_key = output_key
        self.instruction = instruction
        self._template_keys = (
            _template_keys(instruction) if isinstance(instruction, str) else frozenset()
        )
        super().__init__(self._run, afunc=self._arun, name=f"subagent:{graph.get_name()}")

    @property
    def deps(self) -> list[Runnable[Any, Any]]:
        """The wrapped graph, which is how langgraph finds this node's subgraph.

        `langgraph.pregel._utils.find_subgraph_pregel` looks through `RunnableLambda.deps`
        (langgraph 1.2.24; `tests/core/test_compat.py` checks it); that makes
        `get_state(subgraphs=True)`, `get_subgraphs()` and `get_graph(xray=True)` see the
        sub-agent.
        """
        return [self.graph]

    @property
    def lgv_hands_back(self) -> tuple[frozenset[str], str | None]:
        """What the wrap-time key check (`lg_visibility._tree`) knows of this node before a
        run: the state keys it writes besides `messages` (its `output_key`), and the agent
        name its runs carry (the graph's `lc_agent_name`), which the policy's agent rules
        read. Duck-typed there: the core does not import this module."""
        metadata = (getattr(self.graph, "config", None) or {}).get("metadata") or {}
        agent = metadata.get("lc_agent_name")
        keys = frozenset({self.output_key}) if self.output_key else frozenset()
        return keys, agent if isinstance(agent, str) else None

    # RunnableLambda compares by function and so is unhashable; a node is its own identity.
    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:  # type: ignore[override]  # RunnableLambda sets it to None
        return object.__hash__(self)

    def __repr__(self) -> str:
        return (
            f"SubagentNode({self.graph.get_name()!r}, include_contents={self.include_contents},"
            f" return_reasoning={self.return_reasoning}, output_key={self.output_key!r},"
            f" instruction={self.instruction!r})"
        )

    def check_parent(self, builder: StateGraph[Any, Any, Any, Any], name: str) -> None:
        """Check this node against the parent graph it is being added to as node `name`.

        `add_subagent` calls this before adding the node; call it yourself when you add the
        node with `builder.add_node(name, node)` and want the same checks.

        Raises:
            VisibilityConfigError: the parent state has no `messages` key with a reducer,
                `output_key` is not a key of the parent state, or the instruction template
                names a key the parent state does not have.
        """
        state_schema = builder.state_schema
        schema_name = getattr(state_schema, "__name__", repr(state_schema))
        # `builder.schemas` / `builder.channels` are StateGraph attributes (langgraph 1.2.24).
        state_keys = [k for k in builder.schemas.get(state_schema, {}) if not k.startswith("__")]
        channels = builder.channels
        if _MESSAGES not in state_keys or _MESSAGES not in channels:
            raise VisibilityConfigError(
                f"sub-agent node {name!r}: the parent state {schema_name} has no 'messages' key"
                f" (keys: {_keys(state_keys)}), but a sub-agent hands its final message back"
                " under 'messages'. Add `messages: Annotated[list[AnyMessage], add_messages]`"
                f" to {schema_name}, or extend langgraph's MessagesState."
            )
        if isinstance(channels[_MESSAGES], LastValue):
            raise VisibilityConfigError(
                f"sub-agent node {name!r}: 'messages' in the parent state {schema_name} has no"
                " reducer, so each hand-back would replace the whole history. Declare it as"
                " `messages: Annotated[list[AnyMessage], add_messages]`."
            )
        if self.output_key is not None and self.output_key not in channels:
            raise VisibilityConfigError(
                f"sub-agent node {name!r}: output_key={self.output_key!r} is not a key of the"
                f" parent state {schema_name} (keys: {_keys(state_keys)}); langgraph would"
                f" silently drop the write. Add {self.output_key!r} to {schema_name} or pass"
                " one of its keys."
            )
        missing = sorted(self._template_keys - set(state_keys))
        if missing:
            raise VisibilityConfigError(
                f"sub-agent node {name!r}: the instruction template {self.instruction!r} names"
                f" {_keys(missing)}, not a key of the parent state {schema_name} (keys:"
                f" {_keys(state_keys)}). Add the key to {schema_name} or fix the template."
            )

    # -- running -----------------------------------------------------------------------

    # with_visibility / compile_with_visibility call this hook on every node that offers it.
    _lgv_check_parent = check_parent

    def _run(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        sub_input, input_ids = self._prepare(state, config)
        # Invoked with the node's config, the graph runs as a subgraph of this task: its own
        # checkpoint namespace, the parent's checkpointer, interrupts propagated and resumed.
        result = self.graph.invoke(sub_input, config)
        return self._hand_back(result, input_ids)

    async def _arun(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        sub_input, input_ids = self._prepare(state, config)
        result = await self.graph.ainvoke(sub_input, config)
        return self._hand_back(result, input_ids)

    def _prepare(self, state: Any, config: RunnableConfig) -> tuple[dict[str, Any], frozenset[str]]:
        values = _as_mapping(state)
        self._check_output_key(values, config)
        task_ns = str((config.get("configurable") or {}).get("checkpoint_ns") or "")
        messages: list[BaseMessage] = []
        if self.include_contents:
            for index, message in enumerate(_parent_messages(values)):
                if message.id is None:
                    # An id lets the hand-back tell the parent's messages from new ones.
                    message = message.model_copy(update={"id": _stable_id(task_ns, index)})
                messages.append(message)
        if self.instruction is not None:
            messages.extend(self._render_instruction(values, task_ns, config))
        input_ids = frozenset(m.id for m in messages if m.id is not None)
        return {_MESSAGES: messages}, input_ids

    def _check_output_key(self, values: Mapping[str, Any], config: RunnableConfig) -> None:
        """Raise before the sub-agent runs if the graph running this node lacks `output_key`.

        LangGraph drops a write to an unknown key without a word, and the typo would surface
        later as some other node's missing value. `check_parent` catches it when the graph is
        built (through `add_subagent`, `with_visibility`, `compile_with_visibility`), but those
        see only the root builder: here it is caught on every run, in any graph.

        The key is known when the state this node receives has it (a Pydantic or dataclass
        state has every field; a TypedDict state only the keys that hold a value), else when
        the graph running this task has a channel of that name, asked through the channel
        reader langgraph puts in every task's config. Called outside a graph (no reader), the
        node cannot know its parent's keys and does not check.
        """
        key = self.output_key
        if key is None or key in values:
            return
        if task_has_channel(config, key) is not False:
            return
        raise VisibilityConfigError(
            f"sub-agent node {_node_name(config)!r}: output_key={key!r} is not a key of the"
            f" state of the graph this node runs in (keys with a value now:"
            f" {_keys(sorted(values))}); langgraph would silently drop the write. Add {key!r}"
            " to the state schema or pass one of its keys; add the node with add_subagent()"
            " to catch this when the graph is built."
        )

    def _render_instruction(
        self, values: Mapping[str, Any], task_ns: str, config: RunnableConfig
    ) -> list[BaseMessage]:
        instruction = self.instruction
        if isinstance(instruction, str):
            missing = sorted(self._template_keys - set(values))
            if missing:
                raise VisibilityConfigError(
                    f"sub-agent node {_node_name(config)!r}: the instruction template"
                    f" {instruction!r} names {_keys(missing)}, which has no value in the parent"
                    f" state (present: {_keys(sorted(values))}). Set it before this node runs,"
                    " or fix the template; add the node with add_subagent() to catch unknown"
                    " keys when the graph is built."
                )
            made: Any = instruction.format_map(values)
        else:
            assert instruction is not None
            made = instruction(values)
        if isinstance(made, str | BaseMessage):
            return [_as_instruction(made, _stable_id(task_ns, "instruction"))]
        if isinstance(made, Sequence) and not isinstance(made, bytes | bytearray):
            items = list(made)
            for index, item in enumerate(items):
                if not isinstance(item, BaseMessage):
                    raise TypeError(
                        f"sub-agent node {_node_name(config)!r}: the instruction callable"
                        f" {instruction!r} returned a {type(made).__name__} whose item {index}"
                        f" is {type(item).__name__}; {_INSTRUCTION_TYPES}."
                    )
            if not items and not self.include_contents:
                raise VisibilityConfigError(
                    f"sub-agent node {_node_name(config)!r}: the instruction callable"
                    f" {instruction!r} returned no messages and include_contents=False, so the"
                    " sub-agent would start with no messages at all. Return at least one"
                    " message, or pass include_contents=True."
                )
            # One id per position: a re-run of the node (a resume) names the same messages.
            return [
                _as_instruction(item, _stable_id(task_ns, f"instruction/{index}"))
                for index, item in enumerate(items)
            ]
        raise TypeError(
            f"sub-agent node {_node_name(config)!r}: the instruction callable {instruction!r}"
            f" returned {type(made).__name__}; {_INSTRUCTION_TYPES}."
        )

    def _hand_back(self, result: Any, input_ids: frozenset[str]) -> dict[str, Any]:
        values = _as_mapping(result)
        messages = [m for m in values.get(_MESSAGES) or () if isinstance(m, BaseMessage)]
        # What this run produced follows its input. Messages before the input are the
        # sub-agent's memory from earlier runs (a sub-agent compiled with checkpointer=True).
        last_input = max((i for i, m in enumerate(messages) if m.id in input_ids), default=-1)
        produced = [m for m in messages[last_input + 1 :] if m.id not in input_ids]
        handed = produced if self.return_reasoning else _final_turn(produced)
        update: dict[str, Any] = {}
        if handed:
            update[_MESSAGES] = handed
        if self.output_key is not None:
            structured = values.get("structured_response")
            if structured is not None:
                update[self.output_key] = structured
            elif produced:
                update[self.output_key] = str(produced[-1].text)
        return update


def as_subagent(
    graph: Pregel[Any, Any, Any, Any],
    *,
    include_contents: bool = False,
    return_reasoning: bool = False,
    output_key: str | None = None,
    instruction: Instruction | None = None,
) -> SubagentNode:
    """Wrap a compiled graph as a parent-graph node: `builder.add_node(name, as_subagent(g))`.

    Args:
        graph: A compiled graph with a `messages` key: a `create_agent` agent or a compiled
            `StateGraph`. Compile it without a checkpointer: it then uses the parent's, in a
            fresh namespace per run of the node. `checkpointer=True` keeps its messages
            across the parent's runs on a thread; `checkpointer=False` keeps no namespace
            (nothing to inspect, and on resume after an interrupt it reruns from the start,
            repeating its model calls).
        include_contents: Whether the sub-agent sees the parent's messages. If False (the
            default) its only input is the instruction.
        return_reasoning: Whether the parent's `messages` receives every message the
            sub-agent produced. If False (the default) it receives only the final message.
        output_key: A parent state key that also receives the final output: the structured
            response when the sub-agent has one, else the final message's text.
        instruction: A `str.format` template over the parent state (`"Research {topic}"`) or
            a callable from the parent state to the instruction: text, a message, or a
            sequence of messages (e.g. `[SystemMessage(...), HumanMessage(...)]`), appended
            after the parent's messages when `include_contents` is True. Each instruction
            message is declared internal and given a stable id, unless it has its own.

    Raises:
        TypeError: `graph` is not a compiled graph (e.g. an uncompiled `StateGraph`, a chat
            model, a function), or an option has the wrong type.
        VisibilityConfigError: the graph has no `messages` key, the template is malformed,
            `output_key` is `"messages"`, or neither the parent's messages nor an instruction
            would give the sub-agent any input.

    Foot-gun: checks that need the parent's state schema (is `output_key` a key of it? does
    the template name its keys?) cannot run here, since langgraph 1.2 gives a node no hook
    into the graph it is added to. `add_subagent` runs them while the parent is built, and
    `with_visibility` for the nodes of the graph it wraps (not those of its subgraphs).
    Elsewhere the node checks itself on each run, before the sub-agent starts: an
    `output_key` the graph it runs in lacks, or a template key without a value, raises
    `VisibilityConfigError`; an instruction callable returning anything else than text or
    messages raises `TypeError`. Invoked directly, outside a graph, it cannot know its
    parent's keys and does not check `output_key`.
    """
    if not isinstance(graph, Pregel):
        fix = (
            " Compile it first: as_subagent(builder.compile())."
            if isinstance(graph, StateGraph)
            else " Pass a compiled graph, e.g. langchain.agents.create_agent(...) or"
            " StateGraph(...).compile()."
        )
        raise TypeError(
            f"as_subagent() expects a compiled langgraph graph (Pregel); got"
            f" {type(graph).__module__}.{type(graph).__qualname__}.{fix}"
        )
    for option, value in (
        ("include_contents", include_contents),
        ("return_reasoning", return_reasoning),
    ):
        if not isinstance(value, bool):
            raise TypeError(
                f"as_subagent({option}=...) must be True or False; got {value!r}"
                f" ({type(value).__name__})."
            )
    if output_key is not None:
        if not isinstance(output_key, str) or not output_key:
            raise TypeError(
                f"as_subagent(output_key=...) must be a non-empty state key (str) or None;"
                f" got {output_key!r}."
            )
        if output_key == _MESSAGES:
            raise VisibilityConfigError(
                "as_subagent(output_key='messages') collides with the message hand-back, which"
                " already writes 'messages'. Use another key, e.g. output_key='research_data'."
            )
    if instruction is not None and not isinstance(instruction, str) and not callable(instruction):
        raise TypeError(
            f"as_subagent(instruction=...) must be a template string or a callable taking the"
            f" parent state; got {type(instruction).__name__}."
        )
    if isinstance(instruction, str):
        _template_keys(instruction)  # raises on a malformed template
    if not include_contents and instruction is None:
        raise VisibilityConfigError(
            f"as_subagent({graph.get_name()!r}) with include_contents=False and no instruction"
            " would start the sub-agent with no messages at all. Pass an instruction (e.g."
            " instruction='Research {topic}') or include_contents=True."
        )
    if _MESSAGES not in graph.channels or not _outputs_messages(graph):
        raise VisibilityConfigError(
            f"as_subagent() needs a graph whose state has a 'messages' key in its input and"
            f" output; {graph.get_name()!r} has {_keys(_state_keys(graph))}. Use a"
            " create_agent agent or a StateGraph over MessagesState."
        )
    return SubagentNode(
        graph,
        include_contents=include_contents,
        return_reasoning=return_reasoning,
        output_key=output_key,
        instruction=instruction,
    )


def add_subagent(
    builder: _StateGraphT,
    name: str,
    graph: Pregel[Any, Any, Any, Any],
    *,
    include_contents: bool = False,
    return_reasoning: bool = False,
    output_key: str | None = None,
    instruction: Instruction | None = None,
    **node_options: Any,
) -> _StateGraphT:
    """Add `graph` to `builder` as sub-agent node `name`, checking it against the parent state.

    Same options as `as_subagent`; `node_options` (e.g. `retry_policy`, `destinations`) go to
    `builder.add_node`. Returns `builder`, like `add_node`.

    Raises:
        TypeError: as `as_subagent`; also when `builder` is not a `StateGraph` or
            `node_options` has `input_schema` (the node reads the parent's state schema).
        VisibilityConfigError: as `as_subagent`, and as `SubagentNode.check_parent`: the
            parent's state has no `messages` key with a reducer, lacks `output_key`, or lacks
            a key the instruction template names. Raised here, before the parent is compiled,
            and the node is not added.
    """
    if not isinstance(builder, StateGraph):
        raise TypeError(
            f"add_subagent() expects the parent StateGraph builder; got"
            f" {type(builder).__name__}. Call it before builder.compile()."
        )
    if "input_schema" in node_options:
        raise TypeError(
            "add_subagent(input_schema=...) is not supported: a sub-agent node reads the"
            " parent's state schema, which its checks are made against. Drop input_schema and"
            " shape what the sub-agent sees with instruction=... instead."
        )
    node = as_subagent(
        graph,
        include_contents=include_contents,
        return_reasoning=return_reasoning,
        output_key=output_key,
        instruction=instruction,
    )
    node.check_parent(builder, name)
    builder.add_node(name, node, **node_options)
    return builder


def _as_instruction(made: str | BaseMessage, stable_id: str) -> BaseMessage:
    """`made` as an instruction message: with an id, and declared internal unless it says."""
    if isinstance(made, str):
        return HumanMessage(
            content=made,
            id=stable_id,
            response_metadata={DECLARATION_KEY: _INSTRUCTION_VISIBILITY},
        )
    update: dict[str, Any] = {}
    if made.id is None:
        update["id"] = stable_id
    if DECLARATION_KEY not in made.response_metadata:
        update["response_metadata"] = {
            **made.response_metadata,
            DECLARATION_KEY: _INSTRUCTION_VISIBILITY,
        }
    return made.model_copy(update=update) if update else made


def _node_name(config: RunnableConfig) -> str:
    return str((config.get("metadata") or {}).get("langgraph_node", "?"))


def _final_turn(produced: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The final message, or, when the sub-agent ended on tool results (a ToolStrategy
    structured response, a `return_direct` tool), the AI message that called those tools and
    its tool messages, so the parent's history stays valid for chat-model APIs."""
    if not produced:
        return []
    if not isinstance(produced[-1], ToolMessage):
        return [produced[-1]]
    for start in range(len(produced) - 1, -1, -1):
        message = produced[start]
        if isinstance(message, AIMessage) and message.tool_calls:
            return list(produced[start:])
        if not isinstance(message, ToolMessage):
            break
    return [produced[-1]]


def _template_keys(template: str) -> frozenset[str]:
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(template)]
    except ValueError as exc:
        raise VisibilityConfigError(
            f"as_subagent(instruction={template!r}) is not a valid str.format template ({exc})."
            " Name parent state keys in braces, e.g. 'Research {topic}'; write '{{' for a brace."
        ) from None
    keys: set[str] = set()
    for field in fields:
        if field is None:
            continue
        key = re.split(r"[.\[]", field, maxsplit=1)[0]
        if not key.isidentifier():
            raise VisibilityConfigError(
                f"as_subagent(instruction={template!r}) has the field {{{field}}}; fields must"
                " name a parent state key, e.g. 'Research {topic}'."
            )
        keys.add(key)
    return frozenset(keys)


def _as_mapping(state: Any) -> Mapping[str, Any]:
    if isinstance(state, Mapping):
        return state
    if isinstance(state, BaseModel):
        return dict(state)
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return dict(fields_with_values(state, [f.name for f in dataclasses.fields(state)]))
    raise TypeError(
        f"a sub-agent node got state of type {type(state).__name__}; expected a dict, a"
        " pydantic model or a dataclass (a StateGraph state schema)."
    )


def _parent_messages(values: Mapping[str, Any]) -> list[BaseMessage]:
    messages = values.get(_MESSAGES) or []
    return [m for m in messages if isinstance(m, BaseMessage)]


def _outputs_messages(graph: Pregel[Any, Any, Any, Any]) -> bool:
    outputs = graph.output_channels
    return outputs == _MESSAGES if isinstance(outputs, str) else _MESSAGES in outputs


def _state_keys(graph: Pregel[Any, Any, Any, Any]) -> list[str]:
    # Skip langgraph's own channels ('__start__', 'branch:to:<node>', ...).
    return sorted(k for k in graph.channels if not k.startswith("__") and ":" not in k)


def _stable_id(task_ns: str, part: object) -> str:
    if not task_ns:
        return str(uuid.uuid4())
    return str(uuid.uuid5(_ID_NAMESPACE, f"{task_ns}/{part}"))


def _keys(keys: Sequence[str]) -> str:
    return ", ".join(repr(k) for k in keys) if keys else "none"
