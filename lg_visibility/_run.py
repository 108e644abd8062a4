"""What one run decides: the decider the callback handlers delegate to, and the run's state.

A `Decider` answers once per LLM run, node run and tool run, from the run's metadata and
tags through the rule chain (`_rules`), and tags what the run produced. A `RunState` is what
one enforced run has decided, shared by its handler, its output filter and its event filter.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Set
from itertools import product
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage, convert_to_messages
from langchain_core.outputs import ChatGeneration, LLMResult
from langgraph.types import StateSnapshot

from lg_visibility._compat import (
    NS_SEP,
    added_in_place,
    called_task_graph_ns,
    context_run_id,
    is_pull_task,
    iter_messages,
    last_message,
    message_fields,
    new_messages,
    parent_command,
    received_state,
    sent_inputs,
    sent_message_likes,
    task_state,
    top_lists,
    written_message_dicts,
)
from lg_visibility._provenance import nearest, run_path, runs_inside, without_task_ids
from lg_visibility._rules import DECLARATION_KEY, INTERNAL, Visibility, decide, decide_run

if TYPE_CHECKING:
    from lg_visibility._tree import NodeConfig
    from lg_visibility.policy import VisibilityPolicy

__all__ = [
    "PROVENANCE_KEY",
    "DecidedMeta",
    "Decider",
    "RunState",
    "provenance_of",
    "record_of",
    "visibility_of",
]


NONE_YET: frozenset[Any] = frozenset()
"""What a record of rare runs holds until its first entry (`record_of`)."""

_MAKING = threading.Lock()


def record_of(owner: object, name: str) -> set[Any]:
    """`owner`'s record `name`, a set to add to, made on its first entry: until then it is
    `NONE_YET` (most runs make no entry, and an empty set is 216 bytes of every run's peak
    memory). Made under a lock: the callbacks of parallel tasks run on threads of their
    own, and two first entries must not make two sets (one entry lost would be a leak)."""
    record = getattr(owner, name)
    if type(record) is not set:
        with _MAKING:
            record = getattr(owner, name)
            if type(record) is not set:
                record = set()
                setattr(owner, name, record)
    return record


class DecidedMeta(dict[str, Any]):
    """The metadata of a `messages` part our handler emits: a plain dict to every consumer,
    and the mark by which the output filter tells our parts (decided at the source) from
    parts a node pushed into the stream itself. Made once per run, never per token."""

    __slots__ = ()


PROVENANCE_KEY = "provenance"
"""The `response_metadata` key of a message's producer: {"path": ..., "agent"?: ...}."""


def provenance_of(metadata: Mapping[str, Any], path: str | None = None) -> dict[str, str]:
    """Where a run is: its node path, and its `create_agent(name=...)` where it has one."""
    found = {"path": run_path(metadata) if path is None else path}
    agent = metadata.get("lc_agent_name")
    if isinstance(agent, str):
        found["agent"] = agent
    return found


def visibility_of(message: BaseMessage) -> Visibility | None:
    """The visibility tag a message carries, or None if it has none."""
    value = message.response_metadata.get(DECLARATION_KEY)
    return value if value in ("user_visible", "internal") else None


class RunState:
    """What one enforced run has decided, shared by its handler and its output filters."""

    __slots__ = (
        "agents",
        "bound",
        "called_internal",
        "called_tasks",
        "declared",
        "derived_runs",
        "handler_built",
        "internal_chain_runs",
        "internal_ids",
        "internal_likes",
        "internal_log",
        "internal_outputs",
        "internal_run_parents",
        "internal_runs",
        "internal_tool_calls",
        "internal_tool_within",
        "internal_within",
        "message_keys",
        "node_decisions",
        "policy",
        "rebased",
        "records_nodes",
        "state_types",
        "task_decisions",
    )

    def __init__(
        self,
        policy: VisibilityPolicy,
        declared: Mapping[str, Visibility] | None = None,
        agents: Mapping[str, str] | None = None,
        message_keys: Mapping[str, frozenset[str]] | None = None,
        state_types: frozenset[type] = frozenset(),
        bound: Mapping[str, tuple[NodeConfig, ...]] | None = None,
    ) -> None:
        self.policy = policy
        # path -> (declaration, tags) in a node's runnable's own config, one for each
        # alternative of a `with_fallbacks` configured differently: given to its runs, not
        # to its task-start event (see `GraphTree.bound`, `start_inputs`)
        self.bound: Mapping[str, tuple[NodeConfig, ...]] = bound or {}
        # the Pydantic and dataclass state schemas of the static tree: the objects whose
        # internal keys the output filter empties (a task's input is the state itself)
        self.state_types = state_types
        # graph path ("" for the root) -> its keys add_messages reduces, for the graphs of
        # the static tree (not one a node's function invokes)
        self.message_keys: Mapping[str, frozenset[str]] = message_keys or {}
        # path -> agent name of a node that runs a named create_agent graph: its task-start
        # event does not carry the name its run will (the graph's own config holds it).
        self.agents: Mapping[str, str] = agents or {}
        # first namespace segment of a graph a node invoked on a thread of its own (its
        # namespaces start again at the root) -> the path of the node that invoked it
        self.rebased: dict[str, str] = {}
        # path -> visibility declared with add_node(..., metadata=...): what decides a node
        # whose event arrives before the node has started (a task-start event).
        self.declared: Mapping[str, Visibility] = declared or {}
        # Set by the enforcing messages handler when LangGraph builds it for this run.
        self.handler_built = False
        self.internal_ids: set[str] = set()
        # internal_ids in the order they came: what the output filter's list memo reads to
        # know whether a verdict it kept still holds
        self.internal_log: list[str] = []
        # ids of tool calls an internal message or node made. (This and the other records
        # of rare runs below are NONE_YET until their first entry: see `record_of`.)
        self.internal_tool_calls: Set[str] = NONE_YET
        # id -> each message an internal node sent as a dict or a pair (a Send's input,
        # never tagged in place: it reaches the receiving node as written), for the filter
        self.internal_likes: dict[int, Any] = {}
        # run ids (as strings) of runs the handler decided internal where their metadata
        # alone does not say so (a tool run answering an internal call, any run inside an
        # internal tool run): the event filter drops their events whole
        self.internal_runs: Set[str] = NONE_YET
        # run ids (as strings) of sequences (`model | parser`, not a node) whose last step
        # is an internal model or made of one's output (`_Pipes`): their output is that
        # step's, so the event filter drops it
        self.internal_outputs: Set[str] = NONE_YET
        # run ids (as strings) of the runs made of an internal model's output (`_Pipes`):
        # their events are dropped; what they write or dispatch is judged as any run's
        self.derived_runs: Set[str] = NONE_YET
        # chain runs a visible node ran with an internal run-time tag or declaration, and
        # every chain or tool run started inside one: what their bodies write (`custom`)
        # or dispatch names only the node, so `filter_custom` judges it by this. Nothing
        # else is: their messages and events are judged by their own decisions.
        self.internal_chain_runs: Set[UUID] = NONE_YET
        # the same runs by their UUID, as callbacks and the context name them -> the run
        # each was started under (its parent); kept after they end, for the tasks they leave
        self.internal_run_parents: dict[UUID, UUID | None] = {}
        # checkpoint namespace of a node task ("a:<id>|b:<id>") -> that node's decision, so
        # that producer declarations also govern the node's snapshots and updates.
        self.task_decisions: dict[str, Visibility] = {}
        # keys of `task_decisions` ("<graph namespace>|<name>:<id>") of `@task`s, decided
        # where their start event was put (`OutputFilter.noting_called_tasks`)
        self.called_tasks: Set[str] = NONE_YET
        # (graph namespace, name) of every `@task` decided internal: their updates name
        # them by name alone, at their graph's namespace, where a node or another task of
        # the same name may be visible
        self.called_internal: Set[tuple[str, str]] = NONE_YET
        # (checkpoint namespace of the graph running it, node name) -> the node's decision,
        # for events that name a node but not its task (updates, tasks, debug): recorded
        # only while `records_nodes`, which a run streaming none of those modes turns off.
        self.node_decisions: dict[tuple[str, str], Visibility] = {}
        self.records_nodes = True
        # namespaces of visible node tasks inside which a chain run was decided internal at
        # run time (a graph the node's function invokes with an internal tag): the graphs
        # such a task runs put their snapshots under its namespace, and which snapshot is
        # which graph's cannot be told from it, so all of them are judged internal.
        self.internal_within: Set[str] = NONE_YET
        # namespaces of tasks in which an internal tool ran a chain (a graph, an agent): its
        # snapshots and its tasks' starts under that namespace are internal
        self.internal_tool_within: Set[str] = NONE_YET

    def note_called_task(self, at: str, graph_ns: str, name: str, vis: Visibility) -> None:
        """Record the decision of a `@task` at its graph's place (`at`, its task key there):
        its start event is judged by it, and an internal one wins over a visible one. Its
        updates, which name it alone: by `called_internal` if internal, else by this
        decision unless a node of the name has one (`node_decisions`)."""
        if vis == INTERNAL or at not in self.called_tasks:
            self.task_decisions[at] = vis
        record_of(self, "called_tasks").add(at)
        if vis == INTERNAL:
            record_of(self, "called_internal").add((graph_ns, name))
        elif self.records_nodes:
            self.node_decisions.setdefault((graph_ns, name), vis)

    def in_internal_tool_run(self) -> bool:
        """Whether the code running now is the body of a run in `internal_runs` (an internal
        tool, a run inside one; see `in_internal_run`), which decides every run it starts."""
        parents = self.internal_run_parents
        return bool(parents) and context_run_id() in parents

    def note_internal_run(self, run_id: UUID, parent_run_id: UUID | None) -> None:
        """Record a run decided internal where its metadata alone does not say so."""
        record_of(self, "internal_runs").add(str(run_id))
        self.internal_run_parents[run_id] = parent_run_id

    def note_internal_calls(self, call_ids: Iterable[str]) -> None:
        """Record tool calls an internal message or node made (`internal_tool_calls`)."""
        for call_id in call_ids:
            record_of(self, "internal_tool_calls").add(call_id)

    def note_internal_within(self, task_ns: str) -> None:
        """Record a visible node's task in which a chain run was decided internal."""
        record_of(self, "internal_within").add(task_ns)

    def note_internal_tool_within(self, task_ns: str) -> None:
        """Record a task in which an internal tool ran a chain."""
        record_of(self, "internal_tool_within").add(task_ns)

    def in_internal_run(self) -> bool:
        """Whether the code running now is the body of a run in `internal_runs` (an internal
        tool, a run inside one), whatever config it passes on, and also after that run
        ended (a task it left running), or of one in `internal_chain_runs`: what a `custom`
        write or a custom event given the tool's injected config is judged by, since
        neither names the run that made it."""
        parents, chains = self.internal_run_parents, self.internal_chain_runs
        if not parents and not chains:
            return False
        run = context_run_id()
        return run in parents or (bool(chains) and run in chains)

    def note_internal_chain(self, run_id: UUID) -> None:
        """Record a run in `internal_chain_runs`."""
        record_of(self, "internal_chain_runs").add(run_id)

    def declared_for(self, path: str) -> Visibility | None:
        """The declaration governing `path`: its node's own, else the nearest enclosing one
        (a node's metadata is inherited by every run inside it)."""
        found = self.declaration_for(path)
        return None if found is None else found[1]

    def path_internal(self, path: str) -> bool:
        """Whether output at `path` is internal by what is known before any run there: the
        rule chain on what its runs are given statically (the declarations and tags in the
        configs of the nodes on the path, the add_node declarations, the agent name); of
        alternatives configured differently, internal if any of them makes it so."""
        segments = path.split("/") if self.bound else ()
        on_path = [
            alts
            for end in range(1, len(segments) + 1)  # an enclosing node's metadata wins
            if (alts := self.bound.get("/".join(segments[:end]))) is not None
        ]
        agent = nearest(self.agents, path) if self.agents else None
        node_declared = self.declaration_for(path)
        for chosen in product(*on_path):
            declared = next((d for d, _ in chosen if d is not None), None)
            tags = sorted({t for _, own in chosen for t in own})
            vis = decide(
                self.policy,
                path,
                declared=declared,
                node_declared=node_declared,
                tags=tags,
                agent=None if agent is None else agent[1],
            ).visibility
            if vis == INTERNAL:
                return True
        return False

    def start_inputs(
        self, path: str, metadata: Mapping[str, Any], tags: Any, agent: Any = None
    ) -> tuple[Any, list[str] | None]:
        """(declaration, tags) a node's run at `path` will have, from its run's (or its
        task-start event's) metadata and tags and what its runnable's own config gives it.
        Of alternatives configured differently (which one runs is known only at run
        time), those of one that makes the run internal, if any does (fail closed)."""
        alternatives = self.bound.get(path)
        if alternatives is None:
            return metadata.get(DECLARATION_KEY), tags
        if agent is None:
            agent = metadata.get("lc_agent_name")
        given = [
            (
                metadata.get(DECLARATION_KEY) or own_declared,
                sorted({*(tags or ()), *own_tags}) if own_tags else tags,
            )
            for own_declared, own_tags in alternatives
        ]
        if len(given) > 1:
            for declared, merged in given:
                if self._decide(path, metadata, declared, merged, agent) == INTERNAL:
                    return declared, merged
        return given[0]

    def start_decision(
        self, path: str, metadata: Mapping[str, Any], tags: Any, agent: Any
    ) -> Visibility:
        """The visibility a node's run at `path` will have, from its task-start event's
        metadata and tags (see `start_inputs`) and the agent it runs in."""
        declared, tags = self.start_inputs(path, metadata, tags, agent)
        return self._decide(path, metadata, declared, tags, agent)

    def _decide(
        self, path: str, metadata: Mapping[str, Any], declared: Any, tags: Any, agent: Any
    ) -> Visibility:
        given = {**metadata, DECLARATION_KEY: declared, "lc_agent_name": agent}
        return decide_run(self.policy, path, given, tags)

    def declaration_for(self, path: str) -> tuple[str, Visibility] | None:
        """(declaring path, visibility) of the nearest declaration on `path`, if any."""
        return nearest(self.declared, path)

    def note_internal_likes(self, likes: list[Any]) -> None:
        """Record messages an internal node sent as dicts or pairs (kept: ids not reused)."""
        for like in likes:
            self.internal_likes[id(like)] = like

    def note_internal(self, message: BaseMessage) -> None:
        if message.id is not None and message.id not in self.internal_ids:
            self.internal_ids.add(message.id)
            self.internal_log.append(message.id)
        if isinstance(message, AIMessage) and message.tool_calls:
            self.note_internal_calls(i for c in message.tool_calls if (i := c.get("id")))

    def note_pending(self, saved: StateSnapshot) -> None:
        """Before a resumed run, from its saved state (`get_state(subgraphs=True)`): in each
        snapshot with tasks to run, nested ones too, every AI message tagged internal with
        a tool call no ToolMessage answers is noted. Its tool calls are then internal
        before the tasks that carry them out start: their task-start events and chain
        starts hold the calls before any tool run says who made them (create_agent's
        tools task is sent bare tool calls)."""
        pending = [saved]
        while pending:
            snap = pending.pop()
            if snap.next:
                messages = list(iter_messages(snap.values))
                answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
                for m in messages:
                    if (
                        isinstance(m, AIMessage)
                        and m.tool_calls
                        and self.is_internal(m)
                        and any(c.get("id") not in answered for c in m.tool_calls)
                    ):
                        self.note_internal(m)
            pending.extend(t.state for t in snap.tasks if isinstance(t.state, StateSnapshot))

    def is_internal(self, message: BaseMessage) -> bool:
        if message.response_metadata.get(DECLARATION_KEY) == "internal":
            return True
        return message.id is not None and message.id in self.internal_ids


def _state_of(value: Any) -> Any:
    """A node's input, or for a tools node's Send input (create_agent's
    ToolCallWithContext) the state it carries."""
    first = value[0] if isinstance(value, list) and value else value
    if isinstance(first, Mapping) and first.get("__type") == "tool_call_with_context":
        return first.get("state")
    return value


def _last_ai(value: Any) -> AIMessage | None:
    """The last AI message in a node's input (its state's), found from the end; for a tools
    node's Send input (create_agent's ToolCallWithContext), in the state it carries."""
    return last_message(_state_of(value), AIMessage)


def _answered_after(value: Any, last_ai: AIMessage) -> set[str]:
    """The ids of the tool calls a ToolMessage after `last_ai` answers in a node's input."""
    answered = set()
    for message in iter_messages(_state_of(value), reverse=True):
        if message is last_ai:
            break
        if isinstance(message, ToolMessage):
            answered.add(message.tool_call_id)
    return answered


def _tool_call_ids(value: Any, last_ai: AIMessage | None) -> Iterator[str]:
    """Ids of the tool calls a node's input holds: raw tool calls (create_agent's Send
    input, or a ToolCallWithContext), or those of `last_ai`, the last AI message in it,
    that no ToolMessage after it answers (an answered call is not handed on to run: a
    model node handed the history after a visible model's tool round did not make it)."""
    # A state dict holding neither key is no tool call (the common case, read at once).
    plain = type(value) is dict and "__type" not in value and "type" not in value
    items = () if plain else value if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if isinstance(item, Mapping):
            call = item.get("tool_call") if item.get("__type") else item
            if isinstance(call, Mapping) and call.get("type") == "tool_call":
                if isinstance(call_id := call.get("id"), str):
                    yield call_id
                continue
    if last_ai is not None and last_ai.tool_calls:
        answered = _answered_after(value, last_ai)
        for call in last_ai.tool_calls:
            call_id = call.get("id")
            if call_id and call_id not in answered:
                yield call_id


def _is_bare_calls(value: Any) -> bool:
    """Whether a node's input is a list of bare tool calls (create_agent's Send payload to
    its tools node, since langchain 1.5)."""
    return (
        isinstance(value, list)
        and bool(value)
        and isinstance(last := value[-1], Mapping)
        and last.get("type") == "tool_call"
    )


def _maker(state: Mapping[str, Any] | None, call_id: str) -> AIMessage | None:
    """The AI message in `state` that made tool call `call_id`, found from the end."""
    if state is None:
        return None
    for message in iter_messages(state, reverse=True):
        if isinstance(message, AIMessage) and any(
            call.get("id") == call_id for call in message.tool_calls
        ):
            return message
    return None


# How many ended internal runs a decider without a RunState (a long-lived
# VisibilityHandler) keeps for the tasks they left running.
_ENDED_KEPT = 4096

_HANDED = "_lg_visibility_tagged"
"""Set on a `ParentCommand` error once the node that raised it has tagged its command."""

Writes = Literal["state", "parent", "send"] | None
"""What a node's product is, for `Decider._tag_produced`."""

# A node run under way: its decision, its input, its provenance, its task's namespace, what
# it received from the channels (its input as `received_state` keeps it, by pointer; None
# for a Send's input, which its sender built), and its input as it arrived, kept the same
# way for any state input (a Send's too): what it changes there in place is its own.
_NodeRun = tuple[Visibility, Any, dict[str, str], str, dict[str, Any] | None, dict[str, Any] | None]


class Decider:
    """Decide a run's visibility from its metadata and tag what it produces.

    With a `RunState` (an enforced run) it records decisions for the run's filters; without
    one (a `VisibilityHandler` on a plain graph) it only tags.
    """

    __slots__ = (
        "_entered",
        "_internal_parents",
        "_internal_tools",
        "_llm_messages",
        "_llm_runs",
        "_node_runs",
        "_open_tasks",
        "_pipes",
        "_producers",
        "_rebased",
        "_unanswered_internal_calls",
        "policy",
        "run",
    )

    def __init__(self, policy: VisibilityPolicy, run: RunState | None) -> None:
        self.policy = policy
        self.run = run
        self._llm_runs: dict[UUID, Visibility] = {}
        self._producers: dict[UUID, dict[str, str]] = {}  # LLM run -> its provenance
        self._node_runs: dict[UUID, _NodeRun] = {}
        # checkpoint namespace of a node task under way -> its node run, for the runs inside
        self._open_tasks: dict[str, UUID] = {}
        # a chain run under way inside a node (not a node itself) -> that node's task namespace
        self._entered: dict[UUID, str] = {}
        self._rebased: dict[str, str] = run.rebased if run is not None else {}
        # id of every LLM run's final message -> that run's decision
        self._llm_messages: dict[str, Visibility] = {}
        # Without a run: ids of internal LLM runs' tool calls whose ToolMessage has not been
        # tagged yet (with one, `RunState.internal_tool_calls`).
        self._unanswered_internal_calls: Set[str] = NONE_YET
        # a tool run decided internal, under way -> its provenance (its result is tagged)
        self._internal_tools: dict[UUID, tuple[str, dict[str, str]]] = {}
        # internal tool runs and the runs inside them (a chain, graph, model or tool it
        # runs) -> the run each was started under; kept after they end (a task a tool left
        # running is still the tool's): the run's own, else a bounded one of this decider's
        self._internal_parents: dict[UUID, UUID | None] = (
            run.internal_run_parents if run is not None else {}
        )
        # what flows from internal models along sequences (with a run only: only its
        # event filter reads what it finds)
        self._pipes = _Pipes(run, self._node_runs) if run is not None else None

    def decide(self, metadata: Mapping[str, Any], tags: list[str] | None) -> Visibility:
        """The visibility of a run with this metadata and these tags. A run at a node's
        path is also given its runnable's own config (see `node_inputs`): the node's own
        run and a wrapper around what it binds (a `with_fallbacks`) have none of their own."""
        path = self.path(metadata)
        metadata, tags = self.node_inputs(path, metadata, tags)
        return decide_run(self.policy, path, metadata, tags)

    def node_inputs(
        self, path: str, metadata: Mapping[str, Any], tags: list[str] | None
    ) -> tuple[Mapping[str, Any], list[str] | None]:
        """A node run's metadata and tags with what its runnable has in its own config
        (`with_config`), which LangChain gives the runs inside it but not this one."""
        if self.run is None or path not in self.run.bound:
            return metadata, tags
        declared, tags = self.run.start_inputs(path, metadata, tags)
        if declared is not None and DECLARATION_KEY not in metadata:
            metadata = {**metadata, DECLARATION_KEY: declared}
        return metadata, tags

    def path(self, metadata: Mapping[str, Any]) -> str:
        """A run's path; under a graph a node invoked on its own thread, the node's path
        comes first (that graph's namespaces start again at the root)."""
        path = run_path(metadata)
        if self._rebased:
            first = (metadata.get("langgraph_checkpoint_ns") or "").split(NS_SEP, 1)[0]
            prefix = self._rebased.get(first)
            if prefix is not None:
                return f"{prefix}/{path}" if path else prefix
        return path

    def llm_visibility(self, run_id: UUID) -> Visibility | None:
        """The decision of an LLM run under way, if this decider made one."""
        return self._llm_runs.get(run_id)

    def start_llm(
        self,
        run_id: UUID,
        metadata: Mapping[str, Any] | None,
        tags: list[str] | None,
        parent_run_id: UUID | None = None,
    ) -> Visibility:
        metadata = metadata or {}
        path = self.path(metadata)  # once: the rule chain and the provenance both need it
        if self._within_internal_tool(run_id, parent_run_id):
            vis = INTERNAL
        else:
            vis = decide_run(self.policy, path, metadata, tags)
        if self._pipes is not None and tags:
            self._pipes.model(parent_run_id, tags, internal=vis == INTERNAL)
        self._llm_runs[run_id] = vis
        self._producers[run_id] = provenance_of(metadata, path)
        return vis

    def _within_internal_tool(self, run_id: UUID, parent_run_id: UUID | None) -> bool:
        """Whether a run starts inside an internal tool run: a tool's metadata is its own,
        not inherited, so what it runs is internal by the tool's decision, recorded here
        for the run's end and for the event filter.

        A run the tool starts with the config LangChain injected into it (the tools node's)
        has the node's run for its parent, but starts in the tool's body: the context names
        the tool (`_compat.context_run_id`), also while a visible tool runs beside it. The
        context decides only for a run given the config the tool was itself handed (its
        parent's) or none: a task the tool started and another run later hands work with
        its own config (a shared worker) does that run's work, judged by that run."""
        parents = self._internal_parents
        if not parents:
            return False
        if parent_run_id not in parents:
            context = context_run_id()
            if context is None or context not in parents:
                return False
            if parent_run_id is not None and parent_run_id != parents[context]:
                return False
        self._note_internal(run_id, parent_run_id)
        return True

    def _note_internal(self, run_id: UUID, parent_run_id: UUID | None) -> None:
        if self.run is not None:
            self.run.note_internal_run(run_id, parent_run_id)
            return
        parents = self._internal_parents
        if len(parents) >= _ENDED_KEPT:  # a handler outlives its runs: forget the oldest
            del parents[next(iter(parents))]
        parents[run_id] = parent_run_id

    def start_retriever(
        self, run_id: UUID, parent_run_id: UUID | None, tags: list[str] | None = None
    ) -> None:
        """A retriever run: its documents are no message, so nothing is tagged; inside an
        internal tool it is internal (recorded for the event filter), else its metadata
        decides where its events are judged."""
        self._within_internal_tool(run_id, parent_run_id)
        if self._pipes is not None:
            self._pipes.other(run_id, parent_run_id, tags)

    def forget_llm(self, run_id: UUID) -> None:
        self._llm_runs.pop(run_id, None)
        self._producers.pop(run_id, None)

    def end_llm(self, run_id: UUID, response: LLMResult) -> None:
        vis = self._llm_runs.pop(run_id, None)
        producer = self._producers.pop(run_id, None)
        if vis is None:
            return
        for generations in response.generations:
            for gen in generations:
                if isinstance(gen, ChatGeneration):
                    gen.message.response_metadata[DECLARATION_KEY] = vis
                    gen.message.response_metadata[PROVENANCE_KEY] = producer
                    if gen.message.id is not None:
                        self._llm_messages[gen.message.id] = vis
                    if vis is not INTERNAL:
                        continue
                    if self.run is not None:
                        self.run.note_internal(gen.message)
                    elif isinstance(gen.message, AIMessage):
                        for call in gen.message.tool_calls:
                            if call_id := call.get("id"):
                                record_of(self, "_unanswered_internal_calls").add(call_id)

    def start_node(
        self,
        run_id: UUID,
        inputs: Any,
        tags: list[str] | None,
        metadata: Mapping[str, Any] | None,
        name: Any,
        parent_run_id: UUID | None = None,
    ) -> bool:
        """Decide a node run; False if the chain run is not a node.

        A chain run inside a node that is not a node itself (a graph or agent the node
        invokes, a chain it runs) takes from the node what the node built for it: a message
        in its input that the node did not receive belongs to the node's path.
        """
        self._inherit_internal_chain(run_id, parent_run_id)
        if self._pipes is not None:
            self._pipes.other(run_id, parent_run_id, tags)
        if not metadata:
            return False
        task_ns = metadata.get("langgraph_checkpoint_ns") or ""
        inside = self._within_internal_tool(run_id, parent_run_id)
        if name != metadata.get("langgraph_node"):
            owner = self._open_tasks.get(task_ns)
            if owner is not None:
                self._claim(owner, inputs, INTERNAL if inside else None)
                self._entered[run_id] = task_ns
                if inside and self.run is not None:
                    # A graph an internal tool runs puts its snapshots and task starts
                    # under the tools task's namespace, with nothing in them to say so.
                    self.run.note_internal_tool_within(task_ns)
                elif self.run is not None and self._may_decide_otherwise(metadata, tags):
                    self._note_internal_within(owner, run_id, metadata, tags)
            return False
        outer_ns = self._entered.get(parent_run_id) if parent_run_id is not None else None
        rebased = (
            outer_ns is not None
            and not task_ns.startswith(outer_ns)
            # a `checkpointer=True` graph runs under the node's namespace, task ids removed
            and not without_task_ids(task_ns).startswith(without_task_ids(outer_ns) + NS_SEP)
        )
        if rebased:
            # A graph the node of `outer_ns` invoked on a thread of its own: its namespaces
            # start again at the root, so its runs are placed under that node's path.
            outer = {"langgraph_checkpoint_ns": outer_ns}
            self._rebased[task_ns.split(NS_SEP, 1)[0]] = self.path(outer)
        path = self.path(metadata)
        metadata, tags = self.node_inputs(path, metadata, tags)
        vis = INTERNAL if inside else decide_run(self.policy, path, metadata, tags)
        # The input itself, not its message ids: they are read only if the node's output
        # holds an untagged message with an id, which keeps a long history out of memory.
        arrived = received_state(inputs)
        self._node_runs[run_id] = (
            vis,
            inputs,
            provenance_of(metadata, path),
            task_ns,
            # What it received from the channels, by pointer; a Send's input was built by
            # its sender, so nothing in it counts as received.
            arrived if is_pull_task(metadata) else None,
            arrived,
        )
        self._open_tasks[task_ns] = run_id
        if self.run is not None:
            self.run.task_decisions[task_ns] = vis
            if self.run.records_nodes and not rebased:  # a rebased node is not this graph's
                self.run.node_decisions[(task_ns.rpartition(NS_SEP)[0], name)] = vis
            graph_ns = called_task_graph_ns(metadata, task_ns)
            if graph_ns is not None and task_ns.split(NS_SEP, 1)[0] not in self._rebased:
                # A `@task`: its run is under its caller's namespace, its task events are
                # streamed at its graph's, under its name (not this run's graph's, for a
                # graph a node runs on a thread of its own: see `rebased`).
                key = task_ns.rpartition(NS_SEP)[2]
                at = f"{graph_ns}{NS_SEP}{key}" if graph_ns else key
                self.run.note_called_task(at, graph_ns, name, vis)
            last_ai = _last_ai(inputs)
            if last_ai is not None and visibility_of(last_ai) == INTERNAL:
                # An internal call from an earlier run (answered after a resume, or in the
                # next turn): its tool calls are internal in this run too.
                self.run.note_internal(last_ai)
            if vis == INTERNAL:
                # The tool calls an internal node is handed (a tools node's Send input) are
                # internal before any tool runs: LangGraph's tools handler may queue a
                # tool's first event before our on_tool_start records it.
                self.run.note_internal_calls(_tool_call_ids(inputs, last_ai))
        return True

    def _may_decide_otherwise(self, metadata: Mapping[str, Any], tags: list[str] | None) -> bool:
        """Whether a chain run inside a node may be decided otherwise than the node: what
        it was given at run time (a tag rule's tag, a declaration, an agent's name); its
        path and its node's declaration are the node's."""
        rules = self.policy.tags
        return (
            bool(tags and rules and not rules.keys().isdisjoint(tags))
            or DECLARATION_KEY in metadata
            or "lc_agent_name" in metadata
        )

    def _note_internal_within(
        self, owner: UUID, run_id: UUID, metadata: Mapping[str, Any], tags: list[str] | None
    ) -> None:
        # A graph a visible node's function invokes with an internal tag or declaration
        # (`sub.invoke(state, {"tags": [...]})`) puts its snapshots under the node's task
        # namespace (or its `|1`, `|2`, ... for later graphs), which names no run of its
        # own: recorded before the graph's loop emits anything, deterministically. What
        # the run's body (a graph's or any other chain's) writes or dispatches names only
        # the node: `internal_chain_runs` judges it (`custom`, custom events).
        entry = self._node_runs.get(owner)
        run = self.run
        if entry is None or run is None or entry[0] == INTERNAL:
            return
        if decide_run(self.policy, self.path(metadata), metadata, tags) == INTERNAL:
            run.note_internal_within(entry[3])
            run.note_internal_chain(run_id)

    def _inherit_internal_chain(self, run_id: UUID, parent_run_id: UUID | None) -> None:
        # A chain or tool run started inside one of `internal_chain_runs` is one too.
        run = self.run
        chains = NONE_YET if run is None else run.internal_chain_runs
        if chains and parent_run_id in chains:  # (tested empty first: a UUID's hash is slow)
            record_of(run, "internal_chain_runs").add(run_id)

    def forget_node(self, run_id: UUID) -> None:
        """A chain run ended in an error (an interrupt too): what a node added to its input
        in place is in the state all the same."""
        self._entered.pop(run_id, None)
        entry = self._node_runs.get(run_id)
        if entry is not None:
            self._tag_in_place(entry)  # (still under way meanwhile, for its siblings' ends)
            self._close_node(run_id)

    def fail_node(self, run_id: UUID, error: BaseException) -> None:
        """A chain run ended in `error`. A node that hands its parent graph a `Command`
        (`graph=Command.PARENT`, a handoff) ends so, and the parent applies the update: its
        messages are the node's product, tagged as at a normal end."""
        command = parent_command(error)
        # The same error passes every run on its way up (LangGraph re-raises it at each
        # graph level, naming the next graph in a copy of the command): the node that made
        # the command tags it; the runs it passes through after hand on another's product.
        if command is None or getattr(error, _HANDED, False):
            self.forget_node(run_id)
            return
        if run_id in self._node_runs:
            setattr(error, _HANDED, True)  # on the error: nothing kept after it is handled
        self.end_node(run_id, command, to_parent=True)

    def _task_run(self, task_ns: str) -> _NodeRun | None:
        """The node run under way in the task of `task_ns`, if any."""
        owner = self._open_tasks.get(task_ns)
        return None if owner is None else self._node_runs.get(owner)

    def _close_node(self, run_id: UUID) -> _NodeRun | None:
        entry = self._node_runs.pop(run_id, None)
        if entry is not None and self._open_tasks.get(entry[3]) == run_id:
            del self._open_tasks[entry[3]]  # unless a later run of the task took it over
        return entry

    def start_tool(
        self,
        run_id: UUID,
        metadata: Mapping[str, Any] | None,
        tags: list[str] | None,
        tool_call_id: Any,
        parent_run_id: UUID | None = None,
    ) -> None:
        """Decide a tool run: internal if it runs in an internal node (or is declared
        internal itself), or if it answers an internal call. Its result is then tagged
        internal where the tool returns it (`end_tool`), before any event carries it."""
        self._inherit_internal_chain(run_id, parent_run_id)
        if self._pipes is not None:
            self._pipes.other(run_id, parent_run_id, tags)
        if not metadata:
            return
        run = self.run
        path = self.path(metadata)
        call_id = tool_call_id if isinstance(tool_call_id, str) and tool_call_id else None
        if (
            self._within_internal_tool(run_id, parent_run_id)
            or decide_run(self.policy, path, metadata, tags) == INTERNAL
        ):
            # The `tools` events LangGraph's tool handler emits next are keyed by this id,
            # so the filter drops them.
            if run is not None:
                run.note_internal_calls((call_id or str(run_id),))
        elif call_id is None or not (
            self._answers_known_internal(call_id) or self._made_internal(metadata, call_id)
        ):
            return
        task_ns = metadata.get("langgraph_checkpoint_ns") or ""
        self._internal_tools[run_id] = (task_ns, provenance_of(metadata, path))
        self._note_internal(run_id, parent_run_id)  # its events are dropped whole

    def _made_internal(self, metadata: Mapping[str, Any], call_id: str) -> bool:
        """Whether an internal message made `call_id`, when the tools node running it was
        sent bare tool calls (create_agent's Send): no message in this run says who made
        the call when the run resumed at the tools task. The message that made it is in the
        state the tools node reads. (Our handler runs before LangGraph's tool handler emits
        the tool's first event, and records it for the filter.)"""
        entry = self._task_run(metadata.get("langgraph_checkpoint_ns") or "")
        if entry is None or not _is_bare_calls(entry[1]):
            return False
        made = _maker(task_state(), call_id)
        if made is None or not self._is_internal_message(made):
            return False
        if self.run is not None:
            self.run.note_internal(made)
        else:
            record_of(self, "_unanswered_internal_calls").add(call_id)
        return True

    def end_tool(self, run_id: UUID, output: Any) -> None:
        """Tag what an internal tool run made internal, where the tool returns it, before
        any event carries it: its result, and any message its `Command` adds. What its
        task received (the state's own messages a handoff passes on) is not its own: told
        apart as at a node's end, from the task's input as it arrived, or for a tools node
        sent bare tool calls, from the state it reads."""
        found = self._internal_tools.pop(run_id, None)
        if found is None:
            return
        task_ns, producer = found
        entry = self._task_run(task_ns)
        inputs: Any = None
        received: dict[str, Any] | None = None
        if entry is not None and entry[4] is not None:
            inputs, received = entry[1], entry[4]
        elif entry is not None:
            inputs = task_state()
            received = None if inputs is None else received_state(inputs)
        made = (INTERNAL, inputs, producer, task_ns, received, received)
        self._tag_produced(made, output, writes="state")

    def forget_tool(self, run_id: UUID) -> None:
        self._internal_tools.pop(run_id, None)

    def _answers_known_internal(self, call_id: str) -> bool:
        if self.run is not None:
            return call_id in self.run.internal_tool_calls
        return call_id in self._unanswered_internal_calls

    def _is_internal_message(self, message: BaseMessage) -> bool:
        if self.run is not None:
            return self.run.is_internal(message)
        return visibility_of(message) == INTERNAL

    def _answers_internal_call(self, call_id: str) -> bool:
        if self.run is not None:
            return call_id in self.run.internal_tool_calls
        if call_id not in self._unanswered_internal_calls:
            return False
        # A call is answered once; forgetting it keeps a long-lived handler small.
        record_of(self, "_unanswered_internal_calls").discard(call_id)
        return True

    def end_node(self, run_id: UUID, response: Any, *, to_parent: bool = False) -> None:
        """A chain run ended with `response`; `to_parent`: a node's `Command` to its
        parent graph, whose update that graph applies."""
        task_ns = self._entered.pop(run_id, None)
        entry = self._node_runs.get(run_id)
        if entry is not None:
            # In place first: a message a sibling appended to a list the node returns (or
            # copies into its update) is judged as found in place (`_tag_in_place`). The
            # run counts as under way until both are done, for its siblings' ends.
            self._tag_in_place(entry)
            self._tag_produced(entry, response, writes="parent" if to_parent else "state")
            self._close_node(run_id)
        elif task_ns is not None:
            # A chain run inside a node (a conditional edge's path function): only what it
            # sends is the node's, tagged before the receiving task starts.
            entry = self._task_run(task_ns)
        if entry is not None and type(response) is not dict:  # (a state update sends nothing)
            for send in sent_inputs(response):
                self._tag_produced(entry, send, writes="send", up=int(to_parent))

    def _tag_in_place(self, entry: _NodeRun) -> None:
        """Tag what the node of `entry` put into its input's own sequences in place (an
        append to `state["messages"]` it does not return). LangGraph hands a node its
        channels' values themselves (a reducer's list), so such a message is in the state
        without any write, and no output of the node carries it (a `Send`'s input may hold
        the state's own list too). Told apart from everything its input held as it
        arrived, by pointer (`added_in_place`): what it trims or reorders stays as it was."""
        arrived = entry[5]
        if arrived is None:
            return
        added = added_in_place(entry[1], arrived)
        if not added:
            return
        tagged = (*entry[1:4], arrived, arrived)
        if entry[0] != INTERNAL:
            held = self._held_by_internal_runs(entry[3])
            if held:
                # Also in a list an internal node still running holds: which of the two
                # put it there is not known (fail closed).
                suspect = [m for m in added if id(m) in held]
                self._tag_produced((INTERNAL, *tagged), suspect)
        self._tag_produced((entry[0], *tagged), added)  # (a tag set above is kept)

    def _held_by_internal_runs(self, task_ns: str) -> set[int]:
        """The ids of what the lists at the top level of the inputs of the node runs still
        under way, decided internal, hold now (but for those the task of `task_ns` runs
        inside): a channel's own list, which LangGraph hands every node of a step that
        reads it (and a subgraph whose channel keeps what it is given, its parent's), so
        what one of them appended in place is in all their inputs."""
        held: set[int] = set()
        for other in list(self._node_runs.values()):
            if other[0] == INTERNAL and not runs_inside(task_ns, other[3]):
                for items in top_lists(other[1]):
                    held.update(map(id, items))  # (a list another thread appends to: no error)
        return held

    def _claim(self, owner: UUID, inputs: Any, vis: Visibility | None = None) -> None:
        """Tag what a node hands a chain run it starts as the node's own (`vis`: as made
        by something inside the node decided otherwise, an internal tool run)."""
        entry = self._node_runs.get(owner)
        if entry is not None:
            self._tag_produced(entry if vis is None else (vis, *entry[1:]), inputs)

    def _tag_produced(
        self,
        entry: _NodeRun,
        value: Any,
        *,
        writes: Writes = None,
        up: int = 0,
    ) -> None:
        """Tag the messages in `value` that the node of `entry` produced (not received).

        `writes`: what `value` is, where messages may also be written as dicts, pairs or
        strings: "state", the node's (or an internal tool's) update of its graph's state;
        "parent", a `Command`'s update of its parent graph's; "send", a `Send` (`value`)
        to a node of the graph `up` levels above the node's, whose input reaches that node
        as written (nothing is changed in it), unless that node is a compiled subgraph
        (see `sent_message_likes`)."""
        vis, inputs, producer, _, as_received, _ = entry
        received: dict[str, BaseMessage] | None = None
        run = self.run
        likes: list[dict[str, Any]] = []
        if writes == "send":
            if vis == INTERNAL and run is not None:
                into = self._message_keys(producer, up=up, child=value.node) or ()
                # None: a graph found in a node's function, whose keys are not known
                keys = self._message_keys(producer, up=up)
                exempt = frozenset(run.policy.user_visible_keys) if keys is None else ()
                made, likes = sent_message_likes(value, inputs, as_received, into, keys, exempt)
                run.note_internal_likes(made)
            value = value.arg  # (after: it may be given a copy)
        elif writes is not None:
            # Messages written as dicts, and pairs and strings made dicts first (a dict
            # carries the node's tag: internal, or visible for readers that show only what
            # is tagged visible, the chat history): add_messages makes them objects after
            # the node ends.
            keys = self._message_keys(producer, up=1 if writes == "parent" else 0)
            sent = None if run is None or not run.internal_likes else run.internal_likes
            likes = written_message_dicts(value, as_received, keys, inputs, sent)
        # The very objects it received, where it received them, are not its own: skipped
        # by pointer, so a long history is not read message by message at every node.
        for message in new_messages(value, as_received):
            tag = message.response_metadata.get(DECLARATION_KEY)
            if tag is None:
                came_in = None
                if message.id is not None:
                    if received is None:
                        # As the node received them (its input as it arrived, if kept: a
                        # message it appended to its input in place is its own).
                        at_start = inputs if as_received is None else as_received
                        received = {m.id: m for m in iter_messages(at_start) if m.id is not None}
                    came_in = received.get(message.id)
                    # Passed through: the very message (or an equal copy) the node received.
                    # A new message that reuses an id (add_messages' update by id) is new.
                    if came_in is message or (came_in is not None and came_in == message):
                        continue
                tag = self._tag_of_new(message, vis, came_in)
                message.response_metadata[DECLARATION_KEY] = tag
                message.response_metadata.setdefault(PROVENANCE_KEY, producer)
            if tag == "internal" and run is not None:
                run.note_internal(message)
        for like in likes:
            self._tag_message_dict(like, vis, producer)

    def _message_keys(
        self, producer: Any, up: int = 0, child: str | None = None
    ) -> frozenset[str] | None:
        """The `add_messages` keys of the graph whose node is `producer` (its provenance),
        or `up` levels above it, or of that graph's node `child` if it is a compiled
        subgraph; None if that graph's keys are not known before the run."""
        path = producer.get("path") if isinstance(producer, dict) else None
        run = self.run
        if run is None or not isinstance(path, str):
            return None
        graph = path.rpartition("/")[0]
        for _ in range(up):
            if not graph:
                return None  # above the root
            graph = graph.rpartition("/")[0]
        if child:
            graph = f"{graph}/{child}" if graph else child
        return run.message_keys.get(graph)

    def _tag_message_dict(self, like: dict[str, Any], node: Visibility, producer: Any) -> None:
        """Tag a message the node wrote as a dict, which `add_messages` makes an object of
        after the node ends: in its `response_metadata`, which that object takes over. It
        is judged as the object it will be (`_tag_of_new`)."""
        fields = message_fields(like)
        if fields is None:
            return
        meta = fields.get("response_metadata")
        tag = meta.get(DECLARATION_KEY) if isinstance(meta, dict) else None
        try:
            message = convert_to_messages([like])[0]
        except Exception:  # not a message to add_messages either: it fails there
            return
        if tag is None:
            run = self.run
            # a dict an internal node sent (a Send's input), returned by its receiver
            sent = run is not None and id(like) in run.internal_likes
            tag = INTERNAL if sent else self._tag_of_new(message, node)
            if not isinstance(meta, dict):
                meta = fields["response_metadata"] = {}
            meta[DECLARATION_KEY] = tag
            meta.setdefault(PROVENANCE_KEY, producer)
        if tag == INTERNAL and self.run is not None:
            self.run.note_internal(message)  # its tool calls, and its id if it has one

    def _tag_of_new(
        self, message: BaseMessage, node: Visibility, replaces: BaseMessage | None = None
    ) -> Visibility:
        # Built by the node by hand (or a tool's result): it belongs to the node, unless it
        # answers a tool call that was itself internal, replaces (by id) an internal message
        # the node received, or is an LLM run's message the node rebuilt (e.g. summed from
        # chunks LangGraph did not stream): that run decided.
        if isinstance(message, ToolMessage) and self._answers_internal_call(message.tool_call_id):
            return INTERNAL
        if replaces is not None and visibility_of(replaces) == INTERNAL:
            return INTERNAL
        if message.id is not None:
            llm = self._llm_messages.get(message.id)
            if llm is not None:
                return llm
            if self.run is not None and message.id in self.run.internal_ids:
                return INTERNAL
        return node


class _Pipes:
    """What flows from an internal model along the pipes of `RunnableSequence`s, for one
    enforced run's `astream_events`.

    LangChain tags each step's run of a sequence `seq:step:<n>` and hands it the output of
    the step before. A step after an internal model is made of that model's output, and so
    is every step after it and everything such a step runs, but a model: a parser
    (`with_structured_output`'s, whatever steps a provider puts between), a lambda, a
    retriever, a tool, a `RunnableParallel`'s branches. Their events are dropped
    (`RunState.derived_runs`: their own; what they write or dispatch is judged as any
    run's, nothing else is judged by it). A model decides
    for itself wherever it is: a visible one's answer is its own, and the steps after it
    are made of that. A sequence's output is its last step's: made of an internal model's,
    the sequence's end keeps no `output` (`RunState.internal_outputs`), and in the
    sequence around it that sequence is such a step. A node's runs are no pipe: its
    function's runs are all its step 1, its writers' and conditional edges' later steps,
    and the node's output is judged by its keys, as in the stream.
    """

    __slots__ = ("_derived", "_nodes", "_run", "_sources", "_step_of")

    def __init__(self, run: RunState, nodes: Mapping[UUID, Any]) -> None:
        self._run = run
        self._nodes = nodes  # the node runs under way
        # a sequence run -> the step of its latest step made of an internal model's output
        self._sources: dict[UUID, int] = {}
        # runs made of an internal model's output (what they run is too, but models)
        self._derived: set[UUID] = set()
        # a sequence's step run -> (that sequence, the step)
        self._step_of: dict[UUID, tuple[UUID, int]] = {}

    def model(self, parent_run_id: UUID | None, tags: list[str], *, internal: bool) -> None:
        """A model run starts: internal, the steps after it are made of its output."""
        step = _sequence_step(tags)
        if step is None or parent_run_id is None or parent_run_id in self._nodes:
            return
        if internal:
            self._source(parent_run_id, step)
        elif self._sources.get(parent_run_id) is not None:
            self._visible(parent_run_id)

    def other(self, run_id: UUID, parent_run_id: UUID | None, tags: list[str] | None) -> None:
        """Any other run starts (a chain, a parser, a lambda, a retriever, a tool)."""
        if parent_run_id is None:
            return
        step = _sequence_step(tags) if tags else None
        if step is not None and parent_run_id in self._nodes:
            step = None  # a node's step: no pipe
        if step is not None:
            self._step_of[run_id] = (parent_run_id, step)
        if not self._sources and not self._derived:
            return  # (no internal model yet: the common case)
        last = self._sources.get(parent_run_id) if step is not None else None
        if parent_run_id in self._derived or (
            last is not None and step is not None and step > last
        ):
            self._derived.add(run_id)
            record_of(self._run, "derived_runs").add(str(run_id))
            if step is not None:
                self._source(parent_run_id, step)

    def _source(self, sequence: UUID, step: int) -> None:
        """`sequence`'s step `step` is made of an internal model's output, and so, for now
        (its last step started), is the sequence's output, and so on outwards."""
        outputs = record_of(self._run, "internal_outputs")
        at: tuple[UUID, int] | None = (sequence, step)
        seen: set[UUID] = set()  # (a run id a caller reused inside its own run)
        while at is not None and at[0] not in seen:
            seen.add(at[0])
            self._sources[at[0]] = at[1]
            outputs.add(str(at[0]))
            at = self._step_of.get(at[0])

    def _visible(self, sequence: UUID) -> None:
        """A visible model is `sequence`'s last step now: its output is that model's, and
        so on outwards, where the sequence was its outer one's last step made so."""
        outputs = record_of(self._run, "internal_outputs")
        at: UUID | None = sequence
        seen: set[UUID] = set()
        while at is not None and at not in seen:
            seen.add(at)
            self._sources.pop(at, None)
            outputs.discard(str(at))
            outer = self._step_of.get(at)
            at = outer[0] if outer is not None and self._sources.get(outer[0]) == outer[1] else None


def _sequence_step(tags: list[str]) -> int | None:
    """The step a run is of its parent `RunnableSequence` (its `seq:step:<n>` tag), if any."""
    for tag in tags:
        if tag.startswith("seq:step:"):
            n = tag[9:]
            return int(n) if n.isdigit() else None
    return None
