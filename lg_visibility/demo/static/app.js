// lg-visibility chat UI: plain JS, no build step.
// Talks to lg_visibility.chat._router.chat_router: POST a message, read the SSE stream with
// fetch() (EventSource cannot POST), apply the merge rule of the events (token APPENDs to
// its message id, message UPDATEs it with the whole message), and render tool cards,
// custom cards and interrupt forms. All text goes through textContent, never innerHTML.
"use strict";

const API = "/api/chat";
const $ = (selector) => document.querySelector(selector);
const store = window.localStorage;

const state = {
  user: store.getItem("lgv.user") || "demo-user",
  thread: store.getItem("lgv.thread") || null,
  busy: false,
};

// -- small DOM helpers ---------------------------------------------------------------

function el(tag, attrs = {}, text = null) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  if (text !== null) node.textContent = text;
  return node;
}

function scrollDown() {
  const box = $("#messages");
  box.scrollTop = box.scrollHeight;
}

function setStatus(value) {
  const status = $("#status");
  status.dataset.state = value;
  status.textContent = value;
  state.busy = value === "streaming";
  $("#send").disabled = state.busy;
}

function showError(text) {
  const box = $("#error");
  box.textContent = text;
  box.hidden = !text;
}

function setThread(threadId) {
  state.thread = threadId;
  if (threadId) store.setItem("lgv.thread", threadId);
  else store.removeItem("lgv.thread");
  for (const item of document.querySelectorAll("#threads li")) {
    item.classList.toggle("current", item.dataset.threadId === threadId);
  }
}

// -- rendering -----------------------------------------------------------------------

function userBubble(text) {
  const bubble = el("div", { class: "msg user", "data-role": "user" });
  bubble.append(el("span", { class: "text" }, text));
  $("#messages").append(bubble);
  scrollDown();
  return bubble;
}

function assistantBubble(id, source) {
  const bubble = el("div", { class: "msg assistant", "data-role": "assistant", "data-id": id });
  const label = el("span", { class: "source" }, source || "");
  label.hidden = !source;
  bubble.append(label, el("span", { class: "text" }, ""));
  $("#messages").append(bubble);
  return bubble;
}

function setBubbleText(bubble, text, final) {
  bubble.querySelector(".text").textContent = text;
  bubble.hidden = text === "";
  if (final) bubble.classList.add("final");
}

function toolCard(callId, name, source) {
  const card = el("div", { class: "tool", "data-tool-call-id": callId, "data-status": "running" });
  card.append(
    el("span", { class: "tool-status" }, "running…"),
    el("span", { class: "tool-name" }, `Tool: ${name || "?"}`),
    el("span", { class: "source" }, source ? `  (${source})` : ""),
    el("pre", { class: "tool-args" }, ""),
    el("pre", { class: "tool-result" }, ""),
  );
  $("#messages").append(card);
  return card;
}

function finishToolCard(card, status) {
  card.dataset.status = status;
  card.querySelector(".tool-status").textContent = status === "success" ? "done" : status;
}

function customCard(payload) {
  // Live `custom` events and history entries of role "custom" share this shape.
  const data = payload.data;
  const text = data && typeof data === "object" && "text" in data ? String(data.text) : JSON.stringify(data);
  const card = el("div", { class: "card", "data-source": payload.source || "" });
  const label = el("span", { class: "source" }, payload.source || "");
  label.hidden = !payload.source;
  card.append(label, el("span", { class: "text" }, text));
  $("#messages").append(card);
}

function interruptForm(interrupt) {
  const value = interrupt.value;
  const kind = value && typeof value === "object" && value.type ? value.type : "generic";
  const form = el("form", {
    class: "interrupt-form",
    "data-interrupt-id": interrupt.id,
    "data-type": kind,
  });
  if (kind === "missing_data") {
    form.append(el("div", { class: "question" }, value.question || "Some data is missing."));
    for (const field of value.fields || []) {
      const label = el("label", {}, field);
      label.append(el("input", { name: field, required: "", autocomplete: "off" }));
      form.append(label);
    }
    form.append(el("div", { class: "buttons" }));
    form.lastChild.append(el("button", { type: "submit", "data-action": "submit" }, "Send"));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const answer = {};
      for (const input of form.querySelectorAll("input")) answer[input.name] = input.value;
      resume(interrupt.id, answer);
    });
  } else if (kind === "approval") {
    form.append(el("div", { class: "question" }, value.summary || "Approve?"));
    const buttons = el("div", { class: "buttons" });
    for (const decision of ["approve", "reject"]) {
      const button = el("button", { type: "button", "data-decision": decision },
        decision === "approve" ? "Approve" : "Reject");
      button.addEventListener("click", () => resume(interrupt.id, decision));
      buttons.append(button);
    }
    form.append(buttons);
    form.addEventListener("submit", (event) => event.preventDefault());
  } else if (kind === "breakpoint") {
    // A static breakpoint (interrupt_before/after): any answer continues the run.
    const steps = (value.next || []).join(", ");
    form.append(el("div", { class: "question" }, steps ? `Paused before: ${steps}` : "Paused."));
    form.append(el("div", { class: "buttons" }));
    form.lastChild.append(el("button", { type: "submit", "data-action": "continue" }, "Continue"));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      resume(interrupt.id, true);
    });
  } else {
    const question = typeof value === "string" ? value : (value && (value.question || value.summary)) || "The assistant needs an answer.";
    form.append(el("div", { class: "question" }, question));
    const label = el("label", {}, "Answer");
    label.append(el("input", { name: "answer", required: "", autocomplete: "off" }));
    form.append(label, el("div", { class: "buttons" }));
    form.lastChild.append(el("button", { type: "submit", "data-action": "submit" }, "Send"));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      resume(interrupt.id, form.querySelector("input").value);
    });
  }
  $("#interrupts").append(form);
  const first = form.querySelector("input, button");
  if (first) first.focus();
}

function clearConversation() {
  $("#messages").replaceChildren();
  $("#interrupts").replaceChildren();
  showError("");
}

// -- the event stream ------------------------------------------------------------------

function makeRun() {
  return { bubbles: new Map(), tools: new Map(), interrupted: false };
}

function handle(run, event, data) {
  switch (event) {
    case "token": {
      let bubble = run.bubbles.get(data.id);
      if (!bubble) {
        bubble = assistantBubble(data.id, data.source);
        run.bubbles.set(data.id, bubble);
      }
      const text = bubble.querySelector(".text");
      setBubbleText(bubble, text.textContent + data.text, false); // APPEND
      break;
    }
    case "message": {
      let bubble = run.bubbles.get(data.id);
      if (!bubble) {
        bubble = assistantBubble(data.id, data.source);
        run.bubbles.set(data.id, bubble);
      }
      setBubbleText(bubble, data.content, true); // UPDATE with the whole message
      break;
    }
    case "tool_start":
      run.tools.set(data.tool_call_id, toolCard(data.tool_call_id, data.name, data.source));
      break;
    case "tool_args": {
      const card = run.tools.get(data.tool_call_id);
      if (card) card.querySelector(".tool-args").textContent += data.delta;
      break;
    }
    case "tool_result": {
      let card = run.tools.get(data.tool_call_id);
      if (!card) {
        card = toolCard(data.tool_call_id, data.name, data.source);
        run.tools.set(data.tool_call_id, card);
      }
      card.querySelector(".tool-result").textContent = data.content;
      break;
    }
    case "tool_end": {
      const card = run.tools.get(data.tool_call_id);
      if (card) finishToolCard(card, data.status);
      break;
    }
    case "custom":
      customCard(data);
      break;
    case "interrupt":
      run.interrupted = true;
      interruptForm(data);
      break;
    case "error":
      $("#messages").append(el("div", { class: "event-error" }, `⚠ ${data.message}`));
      break;
    case "done":
      if (data.thread_id) setThread(data.thread_id);
      setStatus(data.interrupted ? "waiting" : "idle");
      // Still interrupted but nothing asked in this run (the answer was rejected):
      // show the pending question again.
      if (data.interrupted && !run.interrupted) restoreInterrupts();
      break;
    default:
      break; // unknown events are ignored: the schema may grow
  }
  scrollDown();
}

async function readStream(response) {
  const run = makeRun();
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let sawDone = false;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let rest = colon < 0 ? "" : line.slice(colon + 1);
        if (rest.startsWith(" ")) rest = rest.slice(1);
        if (field === "event") event = rest;
        else if (field === "data") data.push(rest);
      }
      if (!data.length) continue;
      if (event === "done") sawDone = true;
      handle(run, event, JSON.parse(data.join("\n")));
    }
  }
  if (!sawDone) {
    showError("The connection closed before the answer finished.");
    setStatus("idle");
  }
}

async function api(method, path, body) {
  const headers = { "X-User-Id": state.user };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(API + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) {
    let text = `${response.status} ${response.statusText}`;
    let code = null;
    try {
      const detail = (await response.json()).detail; // {code, message, field?}
      if (detail && detail.message) text = detail.message;
      if (detail && detail.code) code = detail.code;
    } catch (_) { /* not JSON */ }
    const error = new Error(text);
    error.status = response.status;
    error.code = code;
    throw error;
  }
  return response;
}

// What the user reads when the server refuses a send (the server's own message else).
const REFUSED = {
  interrupt_pending: "The assistant is waiting for your answer to its question above; answer it first.",
  thread_busy: "The assistant is still answering; wait for it to finish, then send again.",
};

// Resolves to true when the stream ran, false when the server refused the request.
async function stream(path, body) {
  showError("");
  setStatus("streaming");
  try {
    const response = await api("POST", path, body);
    const threadId = response.headers.get("X-Thread-Id");
    if (threadId) setThread(threadId);
    await readStream(response);
    return true;
  } catch (error) {
    showError(REFUSED[error.code] || error.message);
    setStatus($("#interrupts").children.length ? "waiting" : "idle");
    return false;
  } finally {
    refreshThreads();
  }
}

async function sendMessage(text) {
  if (state.busy) return;
  const bubble = userBubble(text);
  const body = { message: text };
  if (state.thread) body.thread_id = state.thread;
  if (!(await stream("/stream", body))) {
    // Refused (409, 413, 422...): the message was not sent, so it leaves the chat and
    // goes back into the composer for the user to edit or send later.
    bubble.remove();
    const input = $("#input");
    if (!input.value) input.value = text;
  }
}

async function resume(interruptId, value) {
  if (state.busy || !state.thread) return;
  // Always a map from interrupt id to value: unambiguous when several are pending.
  const form = document.querySelector(`.interrupt-form[data-interrupt-id="${CSS.escape(interruptId)}"]`);
  if (form) form.hidden = true;
  const sent = await stream(`/${encodeURIComponent(state.thread)}/resume`, { resume: { [interruptId]: value } });
  // A refused answer (422: the field is named in the message) keeps the form to fix it.
  if (form) { if (sent) form.remove(); else form.hidden = false; }
}

// -- history ------------------------------------------------------------------------------

async function loadThread(threadId) {
  clearConversation();
  setThread(threadId);
  if (!threadId) { setStatus("idle"); return; }
  let history;
  try {
    history = await (await api("GET", `/${encodeURIComponent(threadId)}/messages`)).json();
  } catch (error) {
    setThread(null);
    setStatus("idle");
    if (error.status !== 404) showError(error.message);
    return;
  }
  const tools = new Map();
  for (const message of history.messages) {
    if (message.role === "user") userBubble(message.content);
    else if (message.role === "assistant") {
      setBubbleText(assistantBubble(message.id, message.source), message.content, true);
      for (const call of message.tool_calls || []) {
        const card = toolCard(call.id, call.name, message.source);
        card.querySelector(".tool-args").textContent = JSON.stringify(call.args);
        tools.set(call.id, card);
      }
    } else if (message.role === "custom") {
      customCard(message);
    } else if (message.role === "tool") {
      let card = tools.get(message.tool_call_id);
      if (!card) card = toolCard(message.tool_call_id, message.name, "");
      card.querySelector(".tool-result").textContent = message.content;
      finishToolCard(card, message.status);
    }
  }
  for (const interrupt of history.interrupts) interruptForm(interrupt);
  setStatus(history.interrupts.length ? "waiting" : "idle");
  scrollDown();
}

async function restoreInterrupts() {
  if (!state.thread) return;
  try {
    const history = await (await api("GET", `/${encodeURIComponent(state.thread)}/messages`)).json();
    for (const interrupt of history.interrupts) {
      const selector = `.interrupt-form[data-interrupt-id="${CSS.escape(interrupt.id)}"]`;
      if (!document.querySelector(selector)) interruptForm(interrupt);
    }
  } catch (error) {
    showError(error.message);
  }
}

async function refreshThreads() {
  let threads = [];
  try {
    threads = (await (await api("GET", "/threads")).json()).threads;
  } catch (_) { /* the list is a convenience */ }
  const list = $("#threads");
  list.replaceChildren();
  for (const thread of threads) {
    const item = el("li", { "data-thread-id": thread.thread_id });
    const title = el("span", { class: "title" }, thread.title || "(untitled)");
    const remove = el("button", {
      type: "button", class: "delete", title: "Delete this conversation",
      "aria-label": `Delete ${thread.title || "conversation"}`,
    }, "×");
    item.append(title, remove);
    item.classList.toggle("current", thread.thread_id === state.thread);
    item.addEventListener("click", () => { if (!state.busy) loadThread(thread.thread_id); });
    remove.addEventListener("click", (event) => {
      event.stopPropagation();
      deleteThread(thread.thread_id);
    });
    list.append(item);
  }
}

async function deleteThread(threadId) {
  if (state.busy) return;
  try {
    await api("DELETE", `/${encodeURIComponent(threadId)}`);
  } catch (error) {
    showError(error.message);
    return;
  }
  if (threadId === state.thread) loadThread(null);
  refreshThreads();
}

// -- wiring ------------------------------------------------------------------------------

function init() {
  const userInput = $("#user-id");
  userInput.value = state.user;
  userInput.addEventListener("change", () => {
    state.user = userInput.value.trim() || "demo-user";
    store.setItem("lgv.user", state.user);
    loadThread(null);
    refreshThreads();
  });
  $("#composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = $("#input");
    const text = input.value.trim();
    if (!text || state.busy) return;
    input.value = "";
    sendMessage(text);
  });
  $("#input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      $("#composer").requestSubmit();
    }
  });
  $("#new-chat").addEventListener("click", () => { if (!state.busy) loadThread(null); });
  loadThread(state.thread);
  refreshThreads();
}

init();
