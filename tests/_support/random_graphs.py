"""Random graphs, policies and mode sets from a seed, and the oracle that judges them.

The generator builds a LangGraph graph out of producers (hand-built messages, LLM calls,
`create_agent` agents with a tool, compiled subgraphs added as nodes, subgraphs invoked
from a node, Send fan-out, an interrupt), scatters visibility declarations over every level
(add_node metadata, model constructor, call config, an invoke's call config, run tags, agent
names) and writes a policy with patterns over the paths it made.

Ground truth never comes from lg_visibility: while building, the generator decides for each
producer whether it is internal, by the README's precedence ("Paths, patterns and
precedence"), with its own pattern matcher, and writes that producer's content with a
SECRET_<n> or VISIBLE_<n> marker. It also records every node path's and namespace's
visibility. The oracle then derives the expected enforced stream from the raw one: raw
minus internal events, internal messages (and internal tool calls) redacted, same order.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated, Any, TypedDict

from langchain.agents import create_agent
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
)
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import StructuredTool
from langgraph.cache.base import BaseCache
from langgraph.cache.memory import InMemoryCache
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import CachePolicy, Command, Interrupt, Send, interrupt
from pydantic import BaseModel

from lg_visibility import VisibilityPolicy
from lg_visibility.testing import FakeChatModel
from tests._support.cases import ALL_MODES
from tests._support.oracle import (
    all_text,
    canon,
    event_parts,
    event_parts_of,
    expected_snapshot,
    interrupts_only,
    message_text,
    snapshot_pointers,
    snapshot_text,
    with_interrupts,
)
from tests._support.oracle import run_stream as oracle_run_stream

__all__ = [
    "ALL_FEATURES",
    "CountingCache",
    "Example",
    "Truth",
    "TruthCase",
    "cached_graph",
    "canon",
    "check_cached_example",
    "check_events",
    "check_example",
    "check_state_reads",
    "content_key",
    "describe",
    "expected_stream",
    "make_example",
    "run_stream",
    "state_reads",
]

ALL_FEATURES = frozenset(
    {
        "prompt_into_subgraph",  # defect A: an invoke node passes a message it built
        "agent_rules",  # defect B/C: agents={...} rules and internal agent models
        "call_declarations",  # defect B: an invoke's call config declares / tags
        "fixed_ids",  # defect E: a hand-built message reusing an id (next turn)
        "summed_chunks",  # defect D: a node sums a model's chunks itself
        "lcel",  # defect F: with_config declarations inside `prompt | model`
        "interrupt",
        "fanout",
        "message_forms",  # a hand-built message written as a dict or a (role, content) pair
        "in_place",  # an internal root node appends to its input's own list, no write of it
    }
)


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


# -- ground truth ------------------------------------------------------------------------


def _pattern_prefix(pattern: Sequence[str], path: Sequence[str]) -> int:
    """Longest prefix of `path` that `pattern` matches whole (`*` one segment, `**` any)."""
    best = -1

    def walk(i: int, j: int) -> None:
        nonlocal best
        if i == len(pattern):
            best = max(best, j)
            return
        seg = pattern[i]
        if seg == "**":
            walk(i + 1, j)
            if j < len(path):
                walk(i, j + 1)
        elif j < len(path) and seg in ("*", path[j]):
            walk(i + 1, j + 1)

    walk(0, 0)
    return best


@dataclasses.dataclass
class Rules:
    """The policy as the generator writes it, and its own reading of it."""

    internal: list[str] = dataclasses.field(default_factory=list)
    user_visible: list[str] = dataclasses.field(default_factory=list)
    default: str = "user_visible"
    agents: dict[str, str] = dataclasses.field(default_factory=dict)
    tags: dict[str, str] = dataclasses.field(default_factory=dict)

    def for_path(self, path: str) -> str:
        segments = path.split("/") if path else []
        best: tuple[int, int, int] | None = None
        result = self.default
        for patterns, vis in ((self.internal, "internal"), (self.user_visible, "user_visible")):
            for text in patterns:
                seg = text.split("/")
                literals = sum(1 for s in seg if s not in ("*", "**"))
                while seg and seg[-1] == "**":
                    seg = seg[:-1]
                length = _pattern_prefix(seg, segments)
                if length < 0:
                    continue
                rank = (length, literals, vis == "internal")
                if best is None or rank > best:
                    best, result = rank, vis
        return result

    def policy(self) -> VisibilityPolicy:
        return VisibilityPolicy(
            internal=list(self.internal),
            user_visible=list(self.user_visible),
            default=self.default,  # type: ignore[arg-type]
            agents=dict(self.agents),
            tags=dict(self.tags),
        )


@dataclasses.dataclass(frozen=True)
class Ctx:
    """What a run at `path` inherits: declarations (outer first), run tags, agent name.

    `unwrapped`: inside a graph a node invokes that nobody wrapped, whose `add_node`
    declarations LangChain passes on under `visibility` itself; `vis_key`: the innermost
    declaration passed on so (there, or on an invoke's call config), which the README says
    overrides a model's `with_config` declaration inside `prompt | model`.
    """

    path: str = ""
    decls: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    agent: str | None = None
    vis_key: str | None = None
    unwrapped: bool = False
    node_decls: tuple[str, ...] = ()
    """`decls` without those made on an invoke's call config: what a state read knows."""

    def child(self, name: str, decl: str | None = None, agent: str | None = None) -> Ctx:
        return Ctx(
            f"{self.path}/{name}" if self.path else name,
            self.decls + ((decl,) if decl else ()),
            self.tags,
            agent or self.agent,
            decl if decl and self.unwrapped else self.vis_key,
            self.unwrapped,
            self.node_decls + ((decl,) if decl else ()),
        )


class Mark:
    """A producer's content marker, resolved once the policy is final."""

    def __init__(self, truth: Truth, n: int, internal: Callable[[], bool]) -> None:
        self.truth, self.n, self._internal = truth, n, internal

    @property
    def internal(self) -> bool:
        return self._internal()

    @property
    def text(self) -> str:
        return f"{'SECRET' if self.internal else 'VISIBLE'}_{self.n}X"


@dataclasses.dataclass
class Truth:
    """Which producers are internal, by the generator's own reading of the README."""

    rules: Rules
    node_ctx: dict[str, Ctx] = dataclasses.field(default_factory=dict)
    marks: list[Mark] = dataclasses.field(default_factory=list)
    calls: dict[str, Callable[[], bool]] = dataclasses.field(default_factory=dict)
    # path of an invoke node -> the context its invoked graph runs in (the call's tags and
    # declaration added): that graph's snapshots are under the node's namespace
    invoked: dict[str, Ctx] = dataclasses.field(default_factory=dict)

    def decide(self, ctx: Ctx, own: str | None = None, *, lcel: bool = False) -> bool:
        """Internal? `own`: a declaration of the producer itself (model or call); `lcel`:
        made with `with_config` on a model inside `prompt | model`."""
        if lcel and ctx.vis_key:
            return ctx.vis_key == "internal"  # the README's limit for unwrapped graphs
        if own:
            return own == "internal"
        if ctx.decls:
            return ctx.decls[-1] == "internal"
        for tag in ctx.tags:
            if tag in self.rules.tags:
                return self.rules.tags[tag] == "internal"
        if ctx.agent is not None and ctx.agent in self.rules.agents:
            return self.rules.agents[ctx.agent] == "internal"
        return self.rules.for_path(ctx.path) == "internal"

    def node(self, ctx: Ctx) -> Callable[[], bool]:
        previous = self.node_ctx.setdefault(ctx.path, ctx)
        assert previous == ctx, f"one path, two contexts: {ctx.path}"
        return lambda: self.decide(ctx)

    def marker(self, internal: Callable[[], bool]) -> Mark:
        mark = Mark(self, len(self.marks) + 1, internal)
        self.marks.append(mark)
        return mark

    def path_internal(self, path: str) -> bool:
        ctx = self.node_ctx.get(path)
        if ctx is not None:
            return self.decide(ctx)
        return self.rules.for_path(path) == "internal"

    @property
    def internal_calls(self) -> set[str]:
        return {call for call, internal in self.calls.items() if internal()}

    @property
    def internal_markers(self) -> list[str]:
        return [m.text for m in self.marks if m.internal]

    @property
    def visible_markers(self) -> list[str]:
        return [m.text for m in self.marks if not m.internal]


# -- the generator -------------------------------------------------------------------------


@dataclasses.dataclass
class Example:
    seed: int
    build: Callable[[], StateGraph]
    truth: Truth
    policy: VisibilityPolicy
    inputs: list[Any]
    stream_mode: Any
    subgraphs: bool
    version: str
    sync: bool
    description: list[str]


class _Gen:
    def __init__(self, seed: int, features: frozenset[str]) -> None:
        self.rnd = random.Random(seed)
        # drawn apart, so that the rest of a seed's graph is as it was before the feature
        self.forms = random.Random(f"forms-{seed}")
        self.places = random.Random(f"in-place-{seed}")
        self.features = features
        self.rules = Rules()
        self.truth = Truth(self.rules)
        self.names = 0
        self.asks = 0
        self.lines: list[str] = []
        self.paths: list[str] = []

    def name(self, kind: str) -> str:
        self.names += 1
        return f"{kind}{self.names}"

    def maybe_decl(self, p: float = 0.2) -> str | None:
        if self.rnd.random() < p:
            return self.rnd.choice(["internal", "user_visible"])
        return None

    def log(self, ctx: Ctx, text: str) -> None:
        self.lines.append(f"{'  ' * ctx.path.count('/')}{ctx.path or '(root)'}: {text}")

    # Each `node_*` returns (name, add): `add(builder)` adds the node. It runs at build
    # time, after the policy is final, and builds fresh models, so that the raw and the
    # enforced graph are equal and independent.

    def graph(self, parent: Ctx, depth: int, allow_ask: bool) -> Callable[[], StateGraph]:
        """A StateGraph: a chain of 1-3 steps, a step being one node or two parallel ones."""
        steps: list[list[tuple[str, Callable[[StateGraph], None]]]] = []
        for _ in range(self.rnd.randint(1, 3)):
            width = 2 if self.rnd.random() < 0.2 else 1
            if width == 1:
                steps.append([self.node(parent, depth, allow_ask)])
            else:
                # parallel nodes are simple ones that run one after another in a fixed
                # order (`_InOrder`), so that the raw and the enforced run see their
                # events in the same order
                steps.append(
                    [
                        getattr(self, f"node_{self.rnd.choice(['hand', 'llm'])}")(
                            parent, depth, turn=i
                        )
                        for i in range(width)
                    ]
                )

        def build() -> StateGraph:
            builder = StateGraph(State)
            prev = [START]
            for step in steps:
                # one order per parallel step of this build (raw and enforced have their own)
                order = _InOrder(count=len(step)) if len(step) > 1 else None
                for name, add in step:
                    add(builder, order) if order is not None else add(builder)
                    for p in prev:
                        builder.add_edge(p, name)
                # a fan node routes to its workers with Send; the next step waits for them
                prev = [f"{n}_worker" if n.startswith("fan") else n for n, _ in step]
            return builder

        return build

    def node(
        self, parent: Ctx, depth: int, allow_ask: bool
    ) -> tuple[str, Callable[[StateGraph], None]]:
        kinds = ["hand", "llm", "agent"]
        if depth < 2:
            kinds += ["sub", "sub", "invoke", "invoke"] if depth == 0 else ["sub", "invoke"]
        if "fanout" in self.features:
            kinds += ["fan"]
        if "interrupt" in self.features and allow_ask and self.asks == 0:
            kinds += ["ask"]
        kind = self.rnd.choice(kinds)
        return getattr(self, f"node_{kind}")(parent, depth)

    def _patterns_for(self, path: str) -> None:
        """Sometimes add a pattern naming `path` (or a wildcard over it) to the policy."""
        self.paths.append(path)
        if self.rnd.random() < 0.3:
            segs = path.split("/")
            if len(segs) > 1 and self.rnd.random() < 0.3:
                segs[self.rnd.randrange(len(segs) - 1)] = "*"
            if len(segs) > 1 and self.rnd.random() < 0.15:
                segs = ["**", segs[-1]]
            text = "/".join(segs)
            if text in self.rules.internal or text in self.rules.user_visible:
                return
            if self.rnd.random() < 0.5:
                self.rules.internal.append(text)
            else:
                self.rules.user_visible.append(text)

    def node_hand(
        self, parent: Ctx, depth: int, turn: int | None = None
    ) -> tuple[str, Callable[..., None]]:
        name = self.name("hand")
        decl = self.maybe_decl()
        # An in-place writer: `state["messages"].append(m)`, then `{}` (nothing written:
        # the list is saved only if a later node writes) or `{"messages": []}` (a write of
        # nothing: saved with `m`). At the root only: its loop's checkpoints are copied, a
        # subgraph's are not (README, known gaps). In a parallel step (`turn` given) it is
        # declared internal: a visible node's in-place append while an internal node that
        # holds the list has started is taken as internal (fail closed, known gaps).
        in_place = None
        if "in_place" in self.features and not parent.path and self.places.random() < 0.4:
            in_place = self.places.choice(["nothing", "empty write"])
            if turn is not None:
                decl = "internal"
        ctx = parent.child(name, decl)
        self._patterns_for(ctx.path)
        mark = self.truth.marker(self.truth.node(ctx))
        fixed = "fixed_ids" in self.features and self.rnd.random() < 0.3
        form = "object"
        if "message_forms" in self.features:
            form = self.forms.choice(["object", "object", "dict", "pair"])
            if fixed and form == "pair":
                form = "dict"  # a pair has no id
        if in_place:
            fixed, form = False, "object"  # (a dict or pair appended in place is not tagged)
        # (a visible writer drawn "nothing" writes an empty list: see `ends` below)
        place = f"{in_place} if internal, else empty write" if in_place == "nothing" else in_place
        self.log(
            ctx, f"hand decl={decl} fixed_id={fixed} form={form} in_place={place} mark={mark.n}"
        )

        def add(builder: StateGraph, order: _InOrder | None = None) -> None:
            turns = iter(range(1000))
            # A visible one writes nothing-but-a-write: with nothing written, what it
            # appended is saved only if a later node writes, and raw LangGraph may save it
            # anyway when its background save runs late (a race; the enforced graph's
            # saves hold the state of their step), so the next turn could differ by timing.
            ends = "empty write" if in_place and not mark.internal else in_place

            def hand(state: State) -> dict[str, Any]:
                # a fixed id runs again next turn: a new message reusing the id (defect E)
                with _turn(order, turn or 0):
                    mid = f"fixed-{name}" if fixed else None
                    text = f"{mark.text} turn{next(turns)}"
                    if form == "dict":
                        written: Any = {"role": "assistant", "content": text}
                        if mid:
                            written["id"] = mid
                    elif form == "pair":
                        written = ("ai", text)
                    else:
                        written = AIMessage(text, id=mid)
                    if ends:
                        state["messages"].append(written)
                        return {} if ends == "nothing" else {"messages": []}
                    return {"messages": [written]}

            builder.add_node(name, hand, metadata=_meta(decl))

        return name, add

    def node_llm(self, parent: Ctx, depth: int, turn: int = 0) -> tuple[str, Callable[..., None]]:
        name = self.name("llm")
        decl = self.maybe_decl()
        ctx = parent.child(name, decl)
        self._patterns_for(ctx.path)
        self.truth.node(ctx)
        where = self.rnd.choice(["none", "none", "constructor", "call", "binding"])
        if where == "binding" and "lcel" in self.features and self.rnd.random() < 0.5:
            where = "lcel"
        own = self.rnd.choice(["internal", "user_visible"]) if where != "none" else None
        summed = "summed_chunks" in self.features and self.rnd.random() < 0.25
        mark = self.truth.marker(lambda: self.truth.decide(ctx, own, lcel=where == "lcel"))
        self.log(ctx, f"llm decl={decl} own={own}@{where} summed={summed} mark={mark.n}")

        def add(builder: StateGraph, order: _InOrder | None = None) -> None:
            model = FakeChatModel(
                responses=[f"{mark.text} answer"],
                metadata=_meta(own) if where == "constructor" else None,
            )
            runnable: Any = model
            call: dict[str, Any] | None = None
            if where == "call":
                call = {"metadata": {"visibility": own}}
            elif where in ("binding", "lcel"):
                runnable = model.with_config(metadata={"visibility": own})
                if where == "lcel":
                    runnable = _prompt() | runnable

            def llm(state: State) -> dict[str, Any]:
                with _turn(order, turn):
                    msgs: Any = state if where == "lcel" else state["messages"]
                    if summed:
                        total = None
                        for chunk in runnable.stream(msgs, call):
                            total = chunk if total is None else total + chunk
                        return {"messages": [total]}
                    return {"messages": [runnable.invoke(msgs, call)]}

            builder.add_node(name, llm, metadata=_meta(decl))

        return name, add

    def node_agent(self, parent: Ctx, depth: int) -> tuple[str, Callable[[StateGraph], None]]:
        name = self.name("agent")
        decl = self.maybe_decl()
        agent_name = name if self.rnd.random() < 0.7 else None
        if agent_name and "agent_rules" in self.features and self.rnd.random() < 0.5:
            self.rules.agents[agent_name] = self.rnd.choice(["internal", "user_visible"])
        # the node hosting the agent runs with the agent's lc_agent_name, as its insides do
        ctx = parent.child(name, decl, agent=agent_name)
        self._patterns_for(ctx.path)
        self.truth.node(ctx)
        own = None
        if "agent_rules" in self.features and self.rnd.random() < 0.3:
            own = self.rnd.choice(["internal", "user_visible"])  # on the model's constructor
        model_ctx, tools_ctx = ctx.child("model"), ctx.child("tools")
        self._patterns_for(model_ctx.path)
        self._patterns_for(tools_ctx.path)
        self.truth.node(model_ctx)
        tools_node = self.truth.node(tools_ctx)

        def model_internal() -> bool:
            return self.truth.decide(model_ctx, own)

        def call_internal() -> bool:
            return model_internal() or tools_node()

        args = self.truth.marker(model_internal)
        result = self.truth.marker(call_internal)
        final = self.truth.marker(model_internal)
        call_id = f"call_{name}"
        self.truth.calls[call_id] = call_internal
        self.log(ctx, f"agent decl={decl} name={agent_name} own={own} marks={args.n}-{final.n}")

        def add(builder: StateGraph) -> None:
            def look(query: str) -> str:
                return f"{result.text} for it"

            tool = StructuredTool.from_function(look, name="look", description="Look it up.")
            call = {"name": "look", "args": {"query": f"{args.text} q"}, "id": call_id}
            model = FakeChatModel(
                responses=[AIMessage("", tool_calls=[call]), f"{final.text} done"],
                tool_args_chunk_size=1000,
                metadata=_meta(own),
            )
            agent = create_agent(model, [tool], name=agent_name)
            builder.add_node(name, agent, metadata=_meta(decl))

        return name, add

    def node_sub(self, parent: Ctx, depth: int) -> tuple[str, Callable[[StateGraph], None]]:
        name = self.name("sub")
        decl = self.maybe_decl()
        ctx = parent.child(name, decl)
        self._patterns_for(ctx.path)
        self.truth.node(ctx)
        self.log(ctx, f"subgraph node decl={decl}")
        inner = self.graph(ctx, depth + 1, allow_ask=True)

        def add(builder: StateGraph) -> None:
            builder.add_node(name, inner().compile(), metadata=_meta(decl))

        return name, add

    def node_invoke(self, parent: Ctx, depth: int) -> tuple[str, Callable[[StateGraph], None]]:
        name = self.name("invoke")
        decl = self.maybe_decl()
        ctx = parent.child(name, decl)
        self._patterns_for(ctx.path)
        node_internal = self.truth.node(ctx)
        call_decl = None
        tags: tuple[str, ...] = ()
        if "call_declarations" in self.features:
            call_decl = self.maybe_decl(0.3)
            if self.rnd.random() < 0.25:
                tag = f"tag_{name}"
                self.rules.tags[tag] = self.rnd.choice(["internal", "user_visible"])
                tags = (tag,)
        prompt = None
        if "prompt_into_subgraph" in self.features and self.rnd.random() < 0.5:
            prompt = self.truth.marker(node_internal)  # built by this node: its visibility
        # the invoked graph's nodes: this node's context, then the call's declaration/tags
        inner_ctx = Ctx(
            ctx.path,
            ctx.decls + ((call_decl,) if call_decl else ()),
            ctx.tags + tags,
            ctx.agent,
            call_decl or ctx.vis_key,
            unwrapped=True,
            node_decls=ctx.node_decls,
        )
        self.log(ctx, f"invoke decl={decl} call_decl={call_decl} tags={tags} prompt={prompt}")
        self.truth.invoked[ctx.path] = inner_ctx
        inner = self.graph(inner_ctx, depth + 1, allow_ask=False)

        def add(builder: StateGraph) -> None:
            graph = inner().compile()

            def invoke(state: State, config: RunnableConfig) -> dict[str, Any]:
                sent = list(state["messages"])
                if prompt is not None:
                    sent = [HumanMessage(f"{prompt.text} please")]
                cfg: dict[str, Any] = dict(config)
                if call_decl:
                    cfg["metadata"] = {**(config.get("metadata") or {}), "visibility": call_decl}
                if tags:
                    cfg["tags"] = [*(config.get("tags") or []), *tags]
                out = graph.invoke({"messages": sent}, cfg)
                known = {m.id for m in sent}  # add_messages gave the prompt its id in place
                return {"messages": [m for m in out["messages"] if m.id not in known]}

            builder.add_node(name, invoke, metadata=_meta(decl))

        return name, add

    def node_fan(self, parent: Ctx, depth: int) -> tuple[str, Callable[[StateGraph], None]]:
        name = self.name("fan")
        decl = self.maybe_decl()
        ctx = parent.child(name, decl)
        self._patterns_for(ctx.path)
        self.truth.node(ctx)
        worker = f"{name}_worker"
        wdecl = self.maybe_decl()
        wctx = parent.child(worker, wdecl)
        self._patterns_for(wctx.path)
        winternal = self.truth.node(wctx)
        count = self.rnd.randint(2, 3)
        marks = [self.truth.marker(winternal) for _ in range(count)]
        self.log(ctx, f"fan x{count} worker decl={wdecl} marks={[m.n for m in marks]}")

        def add(builder: StateGraph) -> None:
            order = _InOrder()

            def fan(state: State) -> dict[str, Any]:
                order.reset()
                return {}

            builder.add_node(name, fan, metadata=_meta(decl))

            def work(arg: dict[str, Any]) -> dict[str, Any]:
                order.wait_turn(arg["i"])  # one after another, in Send order
                try:
                    return {"messages": [AIMessage(f"{marks[arg['i']].text} part")]}
                finally:
                    order.finished(arg["i"])

            builder.add_node(worker, work, metadata=_meta(wdecl))
            builder.add_conditional_edges(
                name, lambda s: [Send(worker, {"i": i}) for i in range(count)], [worker]
            )

        return name, add

    def node_ask(self, parent: Ctx, depth: int) -> tuple[str, Callable[[StateGraph], None]]:
        self.asks += 1
        name = self.name("ask")
        decl = self.maybe_decl()
        ctx = parent.child(name, decl)
        self._patterns_for(ctx.path)
        mark = self.truth.marker(self.truth.node(ctx))
        self.log(ctx, f"ask decl={decl} mark={mark.n}")

        def add(builder: StateGraph) -> None:
            def ask(state: State) -> dict[str, Any]:
                answer = interrupt({"question": f"approve {name}?"})
                return {"messages": [AIMessage(f"{mark.text} got {answer}")]}

            builder.add_node(name, ask, metadata=_meta(decl))

        return name, add


class _InOrder:
    """Parallel tasks (Send fan-out workers, parallel branches: each in a thread of its
    own) that finish in a fixed order whatever the machine's load: task i starts once task
    i-1's body has returned, then waits `gap` more, so that i-1's end events (made after
    its function returns) come first. A fixed delay per task alone was beaten by a thread
    starting late on a busy 2-core CI machine. `reset` (the fan node) starts each run's
    order again; given `count`, the last of `count` tasks finishing does."""

    def __init__(self, gap: float = 0.04, count: int | None = None) -> None:
        self._cond = threading.Condition()
        self._done = 0
        self._gap = gap
        self._count = count

    def reset(self) -> None:
        with self._cond:
            self._done = 0

    def wait_turn(self, i: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._done >= i, timeout=5)
        if i:
            time.sleep(self._gap)

    def finished(self, i: int) -> None:
        with self._cond:
            self._done = 0 if i + 1 == self._count else max(self._done, i + 1)
            self._cond.notify_all()


@contextmanager
def _turn(order: _InOrder | None, i: int) -> Iterator[None]:
    """Run a parallel branch's body in its turn `i` of `order` (none: at once)."""
    if order is None:
        yield
        return
    order.wait_turn(i)
    try:
        yield
    finally:
        order.finished(i)


def _meta(decl: str | None) -> dict[str, Any] | None:
    return {"visibility": decl} if decl else None


def _prompt() -> Any:
    return RunnableLambda(lambda s: s["messages"])


def make_example(seed: int, features: Iterable[str] = ALL_FEATURES) -> Example:
    """A random graph, policy, mode set and way of running it, all from `seed`."""
    gen = _Gen(seed, frozenset(features))
    rnd = gen.rnd
    if rnd.random() < 0.2:
        gen.rules.default = "internal"
    build_root = gen.graph(Ctx(), 0, allow_ask=True)
    # a pattern over a whole top-level subtree, besides the per-path ones
    for path in rnd.sample(gen.paths, k=min(len(gen.paths), rnd.randint(0, 2))):
        top = path.split("/")[0]
        if top not in gen.rules.internal and top not in gen.rules.user_visible:
            (gen.rules.internal if rnd.random() < 0.5 else gen.rules.user_visible).append(top)
    modes = rnd.choice(
        [
            ["messages", "values"],
            ["messages", "values", "updates"],
            ["updates"],
            ["tasks"],
            ["debug"],
            ["checkpoints", "messages"],
            ["messages", "custom", "values", "updates", "tasks", "tools"],
            list(ALL_MODES),
            "values",
            "messages",
        ]
    )
    inputs: list[Any] = [{"messages": [HumanMessage("user question", id="u1")]}]
    if gen.asks:
        inputs.append(Command(resume="ok"))
    if rnd.random() < 0.3:
        inputs.append({"messages": [HumanMessage("second turn", id="u2")]})
        if gen.asks:
            inputs.append(Command(resume="ok"))
    return Example(
        seed=seed,
        build=build_root,
        truth=gen.truth,
        policy=gen.rules.policy(),
        inputs=inputs,
        stream_mode=modes,
        subgraphs=rnd.random() < 0.75,
        version=rnd.choice(["v1", "v2"]),
        sync=rnd.random() < 0.5,
        description=gen.lines,
    )


# -- running and the oracle -----------------------------------------------------------------


def run_stream(graph: Any, ex: Example, *, as_read: bool = False) -> list[tuple]:
    """Stream the example's inputs one after another on one thread, as (ns, mode, payload).

    Parallel tasks (Send fan-out, parallel branches) are simple nodes that run one after
    another in a fixed order (`_InOrder`: fan-out workers in Send order), so
    that a raw and an enforced run can be compared event by event.

    `as_read`: each item's lists (and the dicts and tuples holding them) copied as it
    arrives. A raw part holds the state's own lists, which a node appending in place (the
    `in_place` feature) changes later; copied, it is the part as a consumer read it. The
    root's parts are read before the next step's nodes run, so for the root this is the
    state as it was when the part was made. (The enforced parts are kept as they come:
    they must hold that state however late they are read.)
    """
    items = oracle_run_stream(
        graph,
        ex.inputs,
        thread_id="t",
        sync=ex.sync,
        stream_mode=ex.stream_mode,
        subgraphs=ex.subgraphs,
        version=ex.version,
        on_arrival=_as_read if as_read else None,
    )
    return [event_parts(i, ex.stream_mode, ex.subgraphs, ex.version) for i in items]


def _as_read(value: Any, depth: int = 0) -> Any:
    if depth > 12:
        return value
    if isinstance(value, list):
        return [_as_read(v, depth + 1) for v in value]
    if type(value) is tuple:
        return tuple(_as_read(v, depth + 1) for v in value)
    if type(value) is dict:
        return {k: _as_read(v, depth + 1) for k, v in value.items()}
    return value


_DROP = object()
_SECRET = re.compile(r"SECRET_\d+X")
_VISIBLE = re.compile(r"VISIBLE_\d+X")


def _ns_path(ns: Iterable[str]) -> str:
    return "/".join(seg.split(":", 1)[0] for seg in ns if ":" in seg)


def _walk_messages(value: Any, depth: int = 0) -> Iterable[BaseMessage]:
    if depth > 8:
        return
    if isinstance(value, BaseMessage):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _walk_messages(v, depth + 1)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _walk_messages(v, depth + 1)
    elif isinstance(value, BaseModel):
        for k in type(value).model_fields:
            yield from _walk_messages(getattr(value, k), depth + 1)


class Oracle:
    """The expected enforced stream of an example, from its raw stream and its truth."""

    def __init__(self, truth: Truth, raw: list[tuple]) -> None:
        self.truth = truth
        # ids of messages whose content carries an internal marker (chunks summed per id)
        texts: dict[str, str] = {}
        for _, _, payload in raw:
            for m in _walk_messages(payload):
                if m.id:
                    texts[m.id] = texts.get(m.id, "") + " " + message_text(m)
        self.internal_ids = {i for i, t in texts.items() if _SECRET.search(t)}

    def message_internal(self, m: BaseMessage) -> bool:
        return bool(_SECRET.search(message_text(m))) or (m.id in self.internal_ids)

    def tool_call_internal(self, value: dict[str, Any]) -> bool:
        return value.get("type") == "tool_call" and (
            value.get("id") in self.truth.internal_calls or bool(_SECRET.search(repr(value)))
        )

    def redact(self, value: Any, depth: int = 0) -> Any:
        if isinstance(value, BaseMessage):
            return _DROP if self.message_internal(value) else value
        if depth > 8 or isinstance(value, Interrupt):
            return value
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return type(value)(
                *(None if (v := self.redact(x, depth + 1)) is _DROP else v for x in value)
            )
        if isinstance(value, list | tuple):
            kept = [self.redact(v, depth + 1) for v in value]
            kept = [v for v in kept if v is not _DROP]
            return kept if isinstance(value, list) else tuple(kept)
        if isinstance(value, dict):
            if self.tool_call_internal(value):
                return _DROP
            out = {
                k: (v if k == "__interrupt__" else self.redact(v, depth + 1))
                for k, v in value.items()
            }
            return {k: v for k, v in out.items() if v is not _DROP}
        if isinstance(value, BaseModel):
            update = {
                k: self.redact(getattr(value, k), depth + 1) for k in type(value).model_fields
            }
            return value.model_copy(
                update={k: (None if v is _DROP else v) for k, v in update.items()}
            )
        return value

    def node_internal(self, ns: tuple[str, ...], name: str) -> bool:
        path = _ns_path(ns)
        return self.truth.path_internal(f"{path}/{name}" if path else name)

    def ns_internal(self, ns: tuple[str, ...]) -> bool:
        """A snapshot's namespace: internal if its node is, or if it is the namespace of a
        graph an invoke node ran, and that graph's run is internal (the call's tag or
        declaration: the README's rule for a graph a node's function invokes)."""
        if not ns:
            return False
        path = _ns_path(ns)
        inner = self.truth.invoked.get(path)
        return self.truth.path_internal(path) or (inner is not None and self.truth.decide(inner))

    def expected(self, raw: list[tuple]) -> list[tuple]:
        out: list[tuple] = []
        for ns, mode, payload in raw:
            new = self.event(ns, mode, payload)
            if new is not _DROP:
                out.append((ns, mode, new))
        return out

    def event(self, ns: tuple[str, ...], mode: str, payload: Any) -> Any:
        if mode == "messages":
            return _DROP if self.message_internal(payload[0]) else payload
        if mode == "custom":
            return payload
        if mode in ("values", "checkpoints") or (
            mode == "debug" and payload.get("type") == "checkpoint"
        ):
            return _DROP if self.ns_internal(ns) else self.redact(payload)
        if mode == "updates":
            if not isinstance(payload, dict):
                return self.redact(payload)
            if "__interrupt__" in payload:
                return payload
            kept = {
                name: self.redact(value)
                for name, value in payload.items()
                if name != "__metadata__" and not self.node_internal(ns, name)
            }
            kept = {k: v for k, v in kept.items() if v is not _DROP}
            if not kept:
                return _DROP
            if "__metadata__" in payload:
                kept["__metadata__"] = payload["__metadata__"]
            return kept
        if mode in ("tasks", "debug"):
            task = payload["payload"] if mode == "debug" else payload
            if self.node_internal(ns, task["name"]):
                if task.get("interrupts") and "result" in task:
                    return interrupts_only(payload)  # interrupts always get through
                return _DROP
            return with_interrupts(self.redact(payload), payload)
        if mode == "tools":
            call_id = payload.get("tool_call_id")
            if self.ns_internal(ns) or call_id in self.truth.internal_calls:
                return _DROP
            return payload
        return payload


def expected_stream(truth: Truth, raw: list[tuple]) -> list[tuple]:
    return Oracle(truth, raw).expected(raw)


def _first_difference(a: list[Any], b: list[Any]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"event {i}:\n  enforced {x!r:.1500}\n  expected {y!r:.1500}"
    return f"lengths {len(a)} (enforced) vs {len(b)} (expected)"


def check_example(ex: Example, wrap: Callable[[Any, VisibilityPolicy], Any]) -> list[str]:
    """Problems found running `ex` raw and through `wrap`: [] if the oracle is satisfied."""
    raw_graph = ex.build().compile(checkpointer=InMemorySaver())
    raw = run_stream(raw_graph, ex, as_read=True)
    enforced_graph = wrap(ex.build().compile(checkpointer=InMemorySaver()), ex.policy)
    enforced = run_stream(enforced_graph, ex)
    return _stream_problems(ex.truth, enforced, raw)


def _stream_problems(truth: Truth, enforced: list[tuple], raw: list[tuple]) -> list[str]:
    """The oracle: `enforced` must be `raw` minus internal output (`expected_stream`), in
    the same order within each mode, with no internal marker and no visible one lost."""
    problems: list[str] = []
    text = "\n".join(repr(p) for _, _, p in enforced) + "\n".join(
        "/".join(ns) for ns, _, _ in enforced
    )
    leaked = sorted(set(_SECRET.findall(text)))
    if leaked:
        where = sorted({m for ns, m, p in enforced if _SECRET.search(repr(p))})
        problems.append(f"leak: {leaked} in modes {where}")
    expected = expected_stream(truth, raw)
    want = set(_VISIBLE.findall("\n".join(repr(p) for _, _, p in expected)))
    lost = sorted(want - set(_VISIBLE.findall(text)))
    if lost:
        problems.append(f"visible content lost: {lost}")
    # Same order within each mode. Across modes LangGraph's own interleaving depends on
    # threads (a `tools` event from a worker thread against the loop's `values`), so the
    # modes are compared one by one; ids are numbered per mode.
    for mode in sorted({m for _, m, _ in enforced} | {m for _, m, _ in expected}):
        a = canon([e for e in enforced if e[1] == mode])
        b = canon([e for e in expected if e[1] == mode])
        if a != b:
            problems.append(
                f"{mode} stream differs from raw minus internal: " + _first_difference(a, b)
            )
    return problems


# -- a node cache shared by raw and enforced runs --------------------------------------------


class CountingCache(InMemoryCache):  # type: ignore[type-arg]
    """An `InMemoryCache` that records, by node name, each entry it hands back (a hit).
    (`aget` and a `ScopedCache` over it read through `get`.)"""

    def __init__(self) -> None:
        super().__init__()
        self.hits: list[str] = []

    def get(self, keys: Sequence[Any]) -> dict[Any, Any]:
        found = super().get(keys)
        self.hits += [ns[2] if len(ns) > 2 else repr(ns) for ns, _ in found]
        return found


def content_key(value: Any) -> str:
    """A node input's cache key from what its messages say (type, content, tool calls),
    not their ids nor how their objects pickle. LangGraph's default key pickles the input:
    a message that came back from the cache pickles unlike the one the node made (its
    pydantic fields-set differs) and a message the graph gave an id has a new random one
    in each run, so after `__start__` a node's input would rarely match the writer run's."""
    return repr(_key_parts(value))


def _key_parts(value: Any, depth: int = 0) -> Any:
    if depth > 12:
        return repr(value)
    if isinstance(value, BaseMessage):
        return (type(value).__name__, message_text(value))
    if isinstance(value, dict):
        return tuple(sorted((repr(k), _key_parts(v, depth + 1)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_key_parts(v, depth + 1) for v in value)
    return repr(value)


def cached_graph(ex: Example, cache: BaseCache[Any], key_func: Callable[..., Any]) -> Any:
    """A fresh build of `ex` on a fresh saver and `cache`, every root task cacheable: the
    compiled graph's `cache_policy` is the loop's default for a task whose node has none
    (langgraph 1.2.24: `Pregel.cache_policy`, read in `prepare_single_task`; there is no
    compile argument). Subgraphs' own nodes are not cached (their Pregel has no policy);
    a hit on a subgraph node at the root runs none of it."""
    graph = ex.build().compile(checkpointer=InMemorySaver(), cache=cache)
    graph.cache_policy = CachePolicy(key_func=key_func)
    return graph


def check_cached_example(
    ex: Example,
    wrap: Callable[[Any, VisibilityPolicy], Any],
    *,
    key_func: Callable[..., Any] = content_key,
    hits: dict[str, list[str]] | None = None,
) -> list[str]:
    """Problems found running `ex` four times on one node cache, each run a fresh build
    on a fresh saver: a raw writer, a raw reader (answered by the writer's entries where
    LangGraph hits), an enforced writer (`wrap`), an enforced reader.

    The enforced writer must not be answered by a raw entry: it is judged against the raw
    writer (same oracle as `check_example`), and hits no more entries than the raw writer
    did (only those it wrote itself earlier in the run: a later input's node with the
    same input). The enforced reader is judged against the raw reader, and hits as many
    entries as it did: enforced runs under one policy share entries as raw runs do.
    `hits` (given): each run's hits by node name."""
    cache = CountingCache()
    streams: dict[str, list[tuple]] = {}
    found: dict[str, list[str]] = {}
    for run, enforced in (
        ("raw writer", False),
        ("raw reader", False),
        ("enforced writer", True),
        ("enforced reader", True),
    ):
        graph = cached_graph(ex, cache, key_func)
        cache.hits = []
        if enforced:
            streams[run] = run_stream(wrap(graph, ex.policy), ex)
        else:
            streams[run] = run_stream(graph, ex, as_read=True)
        found[run] = cache.hits
    if hits is not None:
        hits.update(found)
    problems: list[str] = []
    for role in ("writer", "reader"):
        enforced, raw = streams[f"enforced {role}"], streams[f"raw {role}"]
        problems += [f"{role}: {p}" for p in _stream_problems(ex.truth, enforced, raw)]
    if len(found["enforced writer"]) > len(found["raw writer"]):
        problems.append(
            f"writer: answered by entries it did not write: {found['enforced writer']}, "
            f"raw writer {found['raw writer']}"
        )
    if sorted(found["enforced reader"]) != sorted(found["raw reader"]):
        problems.append(
            f"reader: hits {sorted(found['enforced reader'])}, raw reader "
            f"{sorted(found['raw reader'])}"
        )
    return problems


def describe(ex: Example) -> str:
    return "\n".join(
        [
            f"seed={ex.seed} modes={ex.stream_mode} subgraphs={ex.subgraphs} "
            f"version={ex.version} sync={ex.sync} inputs={len(ex.inputs)}",
            f"policy={ex.policy}",
            *ex.description,
        ]
    )


# -- the other ways out: state reads and astream_events -------------------------------------


@dataclasses.dataclass(frozen=True)
class TruthCase:
    """An example's truth where the fixed graphs' oracle reads a `Case`: markers, and node
    paths judged by the generator's own decisions."""

    truth: Truth
    internal_keys: tuple[str, ...] = ()
    static: bool = False
    """Judge node paths without run-time tags and declarations (what a state read knows)."""
    agents: bool = False
    """With `static`: keep the agent names, which a node hosting a named agent has in its
    own config (the static tree reads it there, where it finds the agent's graph)."""

    @property
    def internal_markers(self) -> tuple[str, ...]:
        return tuple(self.truth.internal_markers)

    @property
    def visible_markers(self) -> tuple[str, ...]:
        return tuple(self.truth.visible_markers)

    def path_internal(self, path: str) -> bool:
        """A node's own decision; a path the generator made no node for (a graph's
        `__start__` task) is judged as a child of the nearest node above it, whose
        declarations it inherits."""
        node_ctx = self.truth.node_ctx
        segments = path.split("/")
        for depth in range(len(segments), 0, -1):
            ctx = node_ctx.get("/".join(segments[:depth]))
            if ctx is not None:
                for name in segments[depth:]:
                    ctx = ctx.child(name)
                if self.static:
                    agent = ctx.agent if self.agents else None
                    ctx = dataclasses.replace(ctx, decls=ctx.node_decls, tags=(), agent=agent)
                return self.truth.decide(ctx)
        return self.truth.path_internal(path)


def _thread(ns: str | None = None) -> dict[str, Any]:
    configurable = {"thread_id": "t"}
    if ns:
        configurable["checkpoint_ns"] = ns
    return {"configurable": configurable}


def state_reads(graph: Any, *, sync: bool, pointers: Sequence[str] = ()) -> dict[str, Any]:
    """Every state read a client can make of thread "t", by name, each a list of snapshots:
    the latest, with its subgraphs, the history, and the same at each of `pointers`."""
    calls: list[tuple[str, Any, bool, bool]] = [
        ("get_state", _thread(), False, False),
        ("get_state(subgraphs)", _thread(), True, False),
        ("get_state_history", _thread(), False, True),
    ]
    for ns in pointers:
        calls += [(f"get_state@{ns}", _thread(ns), False, False)]
        calls += [(f"history@{ns}", _thread(ns), False, True)]
    # A read LangGraph refuses (a pointer into a graph a node's function invoked: older
    # langgraph releases cannot find it) is kept as the error's type, to compare as such.
    if sync:
        out: dict[str, Any] = {}
        for name, config, subgraphs, history in calls:
            try:
                out[name] = (
                    list(graph.get_state_history(config))
                    if history
                    else [graph.get_state(config, subgraphs=subgraphs)]
                )
            except ValueError as exc:
                out[name] = type(exc).__name__
        return out

    async def collect() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, config, subgraphs, history in calls:
            try:
                if history:
                    out[name] = [s async for s in graph.aget_state_history(config)]
                else:
                    out[name] = [await graph.aget_state(config, subgraphs=subgraphs)]
            except ValueError as exc:
                out[name] = type(exc).__name__
        return out

    return asyncio.run(asyncio.wait_for(collect(), timeout=60))


def check_state_reads(
    ex: Example, wrap: Callable[[Any, VisibilityPolicy], Any], *, static: list[str] | None = None
) -> list[str]:
    """Problems found reading the state of `ex`'s thread through `wrap` after each input:
    every read must be the raw read (a raw graph on the same checkpointer) with internal
    messages removed by marker, internal namespaces' values emptied and internal tasks'
    results removed (`expected_snapshot`); no internal marker anywhere.

    A state read has no run: it judges namespaces and tasks by the `add_node` declarations
    and the patterns, not by what a run was given (a tag rule's tag, an agent name, a
    declaration on an invoke's call config; README, known gaps). A read that differs from
    the expected one but equals it judged so (`TruthCase(static=True)`, with or without the
    agent names a node hosting an agent has in its own config) is not a problem;
    it is named in `static`, if given. No internal marker may leave in any case."""
    saver = InMemorySaver()
    graph = wrap(ex.build().compile(checkpointer=saver), ex.policy)
    raw_reader = ex.build().compile(checkpointer=saver)
    case: Any = TruthCase(ex.truth)
    static_cases: list[Any] = [
        TruthCase(ex.truth, static=True),
        TruthCase(ex.truth, static=True, agents=True),
    ]
    problems: list[str] = []
    for turn, value in enumerate(ex.inputs):
        oracle_run_stream(
            graph,
            [value],
            thread_id="t",
            sync=ex.sync,
            stream_mode=ex.stream_mode,
            subgraphs=ex.subgraphs,
            version=ex.version,
        )
        raw = state_reads(raw_reader, sync=True)
        pointers = snapshot_pointers([*raw["get_state_history"], *raw["get_state(subgraphs)"]])
        # (the root's reads never raise: a graph reads its own thread)
        raw = state_reads(raw_reader, sync=True, pointers=pointers)
        got = state_reads(graph, sync=ex.sync, pointers=pointers)
        for read, snapshots in got.items():
            where = f"turn {turn}, {read}"
            if isinstance(raw[read], str) or isinstance(snapshots, str):
                if snapshots != raw[read]:
                    problems.append(f"{where}: {snapshots!r:.80}, raw {raw[read]!r:.80}")
                continue
            if len(snapshots) != len(raw[read]):
                problems.append(f"{where}: {len(snapshots)} snapshots, raw {len(raw[read])}")
                continue
            text = "\n".join(snapshot_text(s) for s in snapshots)
            leaked = sorted(set(_SECRET.findall(text)))
            if leaked:
                problems.append(f"leak: {leaked} in {where}")
            expected = [expected_snapshot(case, s) for s in raw[read]]
            a = canon([((), read, s) for s in snapshots])
            b = canon([((), read, s) for s in expected])
            if a != b and any(
                a == canon([((), read, expected_snapshot(static_case, s)) for s in raw[read]])
                for static_case in static_cases
            ):
                if static is not None:
                    static.append(where)
            elif a != b:
                difference = _first_difference(a, b)
                problems.append(f"{where} differs from raw minus internal: {difference}")
    return problems


def check_events(ex: Example, wrap: Callable[[Any, VisibilityPolicy], Any]) -> list[str]:
    """Problems found running `ex`'s inputs through `wrap` with `astream_events` (v1 and v2
    as the example's version says): no internal marker in any event, and every visible
    marker of the thread's final state (read raw, redacted by marker) in some event."""
    saver = InMemorySaver()
    graph = wrap(ex.build().compile(checkpointer=saver), ex.policy)
    events: list[dict[str, Any]] = []

    async def collect() -> None:
        for value in ex.inputs:
            async for event in graph.astream_events(value, _thread(), version=ex.version):
                events.append(event)

    asyncio.run(asyncio.wait_for(collect(), timeout=60))
    problems: list[str] = []
    text = all_text(event_parts_of(events))
    leaked = sorted(set(_SECRET.findall(text)))
    if leaked:
        kinds = sorted(
            {e["event"] for e in events if _SECRET.search(all_text(event_parts_of([e])))}
        )
        problems.append(f"leak: {leaked} in events {kinds}")
    final = ex.build().compile(checkpointer=saver).get_state(_thread())
    shown = snapshot_text(expected_snapshot(TruthCase(ex.truth), final))  # type: ignore[arg-type]
    lost = sorted(set(_VISIBLE.findall(shown)) - set(_VISIBLE.findall(text)))
    if lost:
        problems.append(f"visible content of the final state in no event: {lost}")
    return problems
