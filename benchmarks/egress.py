"""The other ways out of an enforced graph: `astream_events`, state reads, chat encoders.

Three passes, each interleaved like the workloads (every repetition runs each variant
once, order rotated by one place per repetition; `gc.collect()` before each sample,
outside the timer; process CPU time; ratios paired per repetition, median p25-p75):

- `events_pass`: `astream_events(version="v2")` on W2, the enforced graph against raw
  LangGraph's `astream_events` of the same compiled graph, with an A/A control;
- `state_pass`: `aget_state` and `aget_state_history(limit=10)` on a thread of W3's
  2000-message history plus two turns, the enforced graph's reads against the raw
  graph's (the same saver, the same thread), and for each a floor: the raw read followed
  by reading each message's tag (in every snapshot), the least any judgment by tag does;
- `encoder_pass`: events per second of the chat encoders on W2's enforced stream: our SSE
  schema (`ChatStreamMapper` + `ChatEvent.encode`, the reference), the AI SDK UI message
  stream (`UIStreamEncoder` + `encode_part`) and AG-UI (`ag_ui_langgraph.LangGraphAgent`
  over the enforced `astream_events`/`aget_state`, `ag_ui.encoder.EventEncoder`). Reported,
  not judged.

Each pass first scores one untimed run of each variant against ground truth (internal
markers in the fake models' output and in the history, never lg_visibility's tags):
no internal content in what the enforced variants deliver, the visible content present,
and the raw variant's delivery holds the internal markers (the oracle's control).
"""

from __future__ import annotations

import gc
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain_core.messages import HumanMessage

from benchmarks._fake import INTERNAL_MARKER
from benchmarks._graphs import HISTORY_INTERNAL_MARKER, Workload
from benchmarks.chain import text_content
from benchmarks.harness import _rotate, quantiles
from benchmarks.variants import is_internal_meta

__all__ = ["encoder_pass", "events_pass", "interleave", "state_pass"]

Sample = Callable[[], Awaitable[int]]
"""One timed unit: runs once, returns how many items it delivered."""


async def interleave(
    runners: dict[str, Sample],
    *,
    base: str,
    reps: int,
    target_ms: float,
    after: Callable[[], None] | None = None,
    log: Any = None,
) -> dict[str, dict[str, Any]]:
    """Interleaved CPU-time samples of `runners`, ratios paired against `base`."""
    names = list(runners)
    counts: dict[str, int] = {}
    est = []
    for name in names:  # warm-up, and the size of `inner`
        t0 = time.process_time_ns()
        counts[name] = await runners[name]()
        est.append(time.process_time_ns() - t0)
        if after:
            after()
    inner = max(1, min(20, round(target_ms * 1e6 / max(1, min(est))))) if target_ms else 1
    samples: dict[str, list[float]] = {n: [] for n in names}
    cpu = time.process_time_ns
    for rep in range(reps):
        for name in _rotate(names, rep):
            run = runners[name]
            gc.collect()
            c0 = cpu()
            for _ in range(inner):
                await run()
            used = cpu() - c0
            if after:
                after()
            samples[name].append(used / inner / 1e6)
        if log:
            log(".", end="")
    if log:
        log("")
    out = {}
    for name in names:
        ratios = [s / b for s, b in zip(samples[name], samples[base], strict=True)]
        p25, med, p75 = quantiles(samples[name])
        r25, rmed, r75 = quantiles(ratios)
        out[name] = {
            "median_ms": med,
            "p25_ms": p25,
            "p75_ms": p75,
            "ratio": rmed,
            "ratio_p25": r25,
            "ratio_p75": r75,
            "delivered": counts[name],
            "per_s": counts[name] / (med / 1000),
            "inner": inner,
        }
    return out


# -- astream_events(version="v2") --------------------------------------------------------


def _event_runner(graph: Any, wl: Workload, sink: list[Any] | None = None) -> Sample:
    async def run() -> int:
        config = wl.new_config()
        n = 0
        try:
            async for event in graph.astream_events(wl.make_input(), config, version="v2"):
                n += 1
                if sink is not None:
                    sink.append(event)
        finally:
            wl.cleanup(config)
        return n

    return run


def score_events(wl: Workload, events: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Visible / internal model tokens (by the run's node path) and internal markers."""
    visible = internal = markers = 0
    for event in events:
        if event["event"] == "on_chat_model_stream":
            chunk = event["data"]["chunk"]
            if chunk.content:
                if is_internal_meta(event.get("metadata") or {}, wl.internal_paths):
                    internal += 1
                else:
                    visible += 1
        if INTERNAL_MARKER in repr(event.get("data")):
            markers += 1
    return {"events": len(events), "visible": visible, "internal": internal, "markers": markers}


async def check_events(wl: Workload) -> tuple[dict[str, dict[str, int]], list[str]]:
    """One untimed run of raw and enforced `astream_events`, scored."""
    scores: dict[str, dict[str, int]] = {}
    for name, graph in (("raw", wl.graph), ("lgv", wl.lgv_graph())):
        sink: list[Any] = []
        await _event_runner(graph, wl, sink)()
        scores[name] = score_events(wl, sink)
    problems = []
    lgv, raw = scores["lgv"], scores["raw"]
    if lgv["internal"] or lgv["markers"]:
        problems.append(
            f"astream_events: {lgv['internal']} internal tokens, {lgv['markers']} events "
            "with the internal marker delivered"
        )
    if lgv["visible"] != wl.visible_tokens:
        problems.append(f"astream_events: visible tokens {lgv['visible']} != {wl.visible_tokens}")
    if raw["markers"] == 0 or raw["internal"] != wl.internal_tokens:
        problems.append("astream_events: the raw control shows no internal output (oracle broken)")
    return scores, problems


async def events_pass(wl: Workload, reps: int, *, log: Any = None) -> dict[str, Any]:
    """Enforced vs raw `astream_events(version="v2")` on `wl` (W2)."""
    scores, problems = await check_events(wl)
    timing = await interleave(
        {
            "raw": _event_runner(wl.graph, wl),
            "raw_aa": _event_runner(wl.graph, wl),
            "lgv": _event_runner(wl.lgv_graph(), wl),
        },
        base="raw",
        reps=reps,
        target_ms=80.0,
        log=log,
    )
    return {"workload": wl.name, "reps": reps, "sanity": scores, "problems": problems, **timing}


# -- state reads ---------------------------------------------------------------------------


async def _seed_thread(wl: Workload) -> dict[str, Any]:
    """A thread with W3's history and two turns written by the enforced graph."""
    config = {"configurable": {"thread_id": f"state-{uuid.uuid4().hex}"}}
    graph = wl.lgv_graph()
    async for _ in graph.astream(wl.make_input(), config, **wl.stream_kwargs):
        pass
    second = {"messages": [HumanMessage("and again", id="h-again")], "artifacts": {}}
    async for _ in graph.astream(second, config, **wl.stream_kwargs):
        pass
    return config


def _messages(snapshot: Any) -> list[Any]:
    values = snapshot.values if isinstance(snapshot.values, dict) else {}
    return list(values.get("messages") or [])


def _score_snapshots(snaps: Sequence[Any]) -> dict[str, int]:
    internal = visible = 0
    for snap in snaps:
        for m in _messages(snap):
            text = text_content(m.content)
            if HISTORY_INTERNAL_MARKER in text or INTERNAL_MARKER in text:
                internal += 1
            else:
                visible += 1
    return {"snapshots": len(snaps), "internal_messages": internal, "visible_messages": visible}


async def check_state(wl: Workload, config: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Raw and enforced reads of one thread, scored message by message."""
    raw_g, lgv_g = wl.graph, wl.lgv_graph()
    out: dict[str, Any] = {}
    problems: list[str] = []
    for read in ("aget_state", "aget_state_history"):
        snaps: dict[str, list[Any]] = {}
        for name, graph in (("raw", raw_g), ("lgv", lgv_g)):
            if read == "aget_state":
                snaps[name] = [await graph.aget_state(config)]
            else:
                snaps[name] = [s async for s in graph.aget_state_history(config, limit=10)]
        scores = {name: _score_snapshots(s) for name, s in snaps.items()}
        out[read] = scores
        raw, lgv = scores["raw"], scores["lgv"]
        if lgv["internal_messages"]:
            problems.append(f"{read}: {lgv['internal_messages']} internal messages delivered")
        if lgv["visible_messages"] != raw["visible_messages"] or not lgv["visible_messages"]:
            problems.append(
                f"{read}: visible messages {lgv['visible_messages']} != raw's "
                f"{raw['visible_messages']}"
            )
        if not raw["internal_messages"]:
            problems.append(f"{read}: the raw control holds no internal message (oracle broken)")
        if read == "aget_state_history" and raw["snapshots"] != 10:
            problems.append(f"{read}: {raw['snapshots']} snapshots, expected 10")
    return out, problems


async def state_pass(wl: Workload, reps: int, *, log: Any = None) -> dict[str, Any]:
    """Enforced vs raw `aget_state` and `aget_state_history(limit=10)` on one thread."""
    config = await _seed_thread(wl)
    sanity, problems = await check_state(wl, config)
    n_messages = len(_messages(await wl.graph.aget_state(config)))
    raw_g, lgv_g = wl.graph, wl.lgv_graph()

    def get(graph: Any) -> Sample:
        async def run() -> int:
            await graph.aget_state(config)
            return 1

        return run

    def floor() -> Sample:
        async def run() -> int:
            snap = await raw_g.aget_state(config)
            for message in snap.values["messages"]:
                message.response_metadata.get("visibility")
            return 1

        return run

    def hist(graph: Any) -> Sample:
        async def run() -> int:
            n = 0
            async for _ in graph.aget_state_history(config, limit=10):
                n += 1
            return n

        return run

    def hist_floor() -> Sample:
        async def run() -> int:
            n = 0
            async for snap in raw_g.aget_state_history(config, limit=10):
                for message in snap.values.get("messages") or ():
                    message.response_metadata.get("visibility")
                n += 1
            return n

        return run

    out: dict[str, Any] = {
        "thread_messages": n_messages,
        "reps": reps,
        "sanity": sanity,
        "problems": problems,
    }
    out["aget_state"] = await interleave(
        {"raw": get(raw_g), "raw_aa": get(raw_g), "raw_read_tags": floor(), "lgv": get(lgv_g)},
        base="raw",
        reps=reps,
        target_ms=40.0,
        log=log,
    )
    out["aget_state_history"] = await interleave(
        {
            "raw": hist(raw_g),
            "raw_aa": hist(raw_g),
            "raw_read_tags": hist_floor(),
            "lgv": hist(lgv_g),
        },
        base="raw",
        reps=reps,
        target_ms=80.0,
        log=log,
    )
    wl.cleanup(config)
    return out


# -- chat encoders ---------------------------------------------------------------------------


def _sse_runner(wl: Workload, sink: list[bytes] | None) -> Sample:
    from lg_visibility.chat._mapper import ChatStreamMapper

    graph = wl.lgv_graph()

    async def run() -> int:
        config = wl.new_config()
        mapper = ChatStreamMapper()
        n = 0
        try:
            async for part in graph.astream(
                wl.make_input(), config, subgraphs=True, **wl.stream_kwargs
            ):
                for event in mapper.feed(part):
                    data = event.encode()
                    n += 1
                    if sink is not None:
                        sink.append(data)
            mapper.done(thread_id=None).encode()
        finally:
            wl.cleanup(config)
        return n + 1

    return run


def _aisdk_runner(wl: Workload, sink: list[bytes] | None) -> Sample:
    from lg_visibility.chat._aisdk import UIStreamEncoder
    from lg_visibility.chat._mapper import ChatStreamMapper
    from lg_visibility.chat._sse import UI_DONE, encode_part

    graph = wl.lgv_graph()

    async def run() -> int:
        config = wl.new_config()
        mapper = ChatStreamMapper()
        encoder = UIStreamEncoder("m-1")
        n = 0
        try:
            async for part in graph.astream(
                wl.make_input(), config, subgraphs=True, **wl.stream_kwargs
            ):
                for event in mapper.feed(part):
                    for ui_part in encoder.encode(event):
                        data = encode_part(ui_part)
                        n += 1
                        if sink is not None:
                            sink.append(data)
            for ui_part in encoder.encode(mapper.done(thread_id=None)):
                encode_part(ui_part)
                n += 1
            _ = UI_DONE
        finally:
            wl.cleanup(config)
        return n + 1

    return run


def _agui_runner(wl: Workload, sink: list[bytes] | None) -> Sample:
    from ag_ui.core import RunAgentInput, UserMessage
    from ag_ui.encoder import EventEncoder
    from ag_ui_langgraph import LangGraphAgent

    agent = LangGraphAgent(name="bench", graph=wl.lgv_graph())

    async def run() -> int:
        thread_id = f"bench-{uuid.uuid4().hex}"
        run_input = RunAgentInput(
            thread_id=thread_id,
            run_id=f"run-{uuid.uuid4().hex}",
            messages=[UserMessage(id=f"u-{uuid.uuid4().hex}", content="hi")],
            state={},
            tools=[],
            context=[],
            forwarded_props={},
        )
        encoder = EventEncoder()
        n = 0
        try:
            async for event in agent.clone().run(run_input):
                data = encoder.encode(event).encode("utf-8")
                n += 1
                if sink is not None:
                    sink.append(data)
        finally:
            wl.cleanup({"configurable": {"thread_id": thread_id}})
        return n

    return run


_ENCODERS = {"sse": _sse_runner, "aisdk": _aisdk_runner, "agui": _agui_runner}
_TEXT_FRAME = {
    "sse": b"event: token\n",
    "aisdk": b'"type":"text-delta"',
    "agui": b'"type":"TEXT_MESSAGE_CONTENT"',
}


def _frame_text(frame: bytes) -> str:
    """The text a frame streams (our `token.text`, AI SDK / AG-UI `delta`), else ""."""
    for line in frame.decode("utf-8").split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            data = json.loads(line[6:])
            if isinstance(data, dict):
                text = data.get("text", data.get("delta"))
                return text if isinstance(text, str) else ""
    return ""


async def check_encoders(
    wl: Workload, names: Sequence[str]
) -> tuple[dict[str, dict[str, int]], list[str]]:
    """One untimed run of each encoder, scored on the text its frames stream.

    Tokens are 2-6 characters, so no single frame holds a whole marker: the streamed text
    of all frames is joined, then it must hold no internal marker and must equal the
    visible answer (the last model's tokens) exactly.
    """
    scores: dict[str, dict[str, int]] = {}
    problems: list[str] = []
    visible = "".join(wl.models[-1].tokens)
    for name in names:
        sink: list[bytes] = []
        await _ENCODERS[name](wl, sink)()
        text_frames = sum(1 for f in sink if _TEXT_FRAME[name] in f)
        streamed = "".join(_frame_text(f) for f in sink if _TEXT_FRAME[name] in f)
        leaked = streamed.count(INTERNAL_MARKER) + sum(
            1 for f in sink if INTERNAL_MARKER.encode() in f
        )
        scores[name] = {
            "frames": len(sink),
            "text_frames": text_frames,
            "internal": leaked,
            "visible_text_exact": int(streamed == visible),
        }
        if leaked:
            problems.append(f"encoder {name}: the internal marker is in the streamed frames")
        if text_frames != wl.visible_tokens or streamed != visible:
            problems.append(
                f"encoder {name}: {text_frames} text frames (expected {wl.visible_tokens}); "
                f"streamed text {'equals' if streamed == visible else 'differs from'} "
                "the visible answer"
            )
    return scores, problems


def agui_available() -> bool:
    try:
        import ag_ui.encoder  # noqa: F401
        import ag_ui_langgraph  # noqa: F401
    except ImportError:
        return False
    return True


async def encoder_pass(wl: Workload, reps: int, *, log: Any = None) -> dict[str, Any]:
    """Frames per CPU second of each encoder on `wl`'s enforced stream, against our SSE."""
    names = ["sse", "aisdk"] + (["agui"] if agui_available() else [])
    scores, problems = await check_encoders(wl, names)
    timing = await interleave(
        {name: _ENCODERS[name](wl, None) for name in names},
        base="sse",
        reps=reps,
        target_ms=80.0,
        log=log,
    )
    return {
        "workload": wl.name,
        "reps": reps,
        "encoders": names,
        "sanity": scores,
        "problems": problems,
        **timing,
    }
