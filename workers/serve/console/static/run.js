// One Run followed live: its state (status, totals, pending items with their forms), its
// records as they arrive, the text of the model call in flight, and tabs for the
// transcript and a workflow's steps.

import { actionKeys, api, runPath } from "./api.js";
import { el, fill, short, visible, when } from "./dom.js";
import { renderPending } from "./pending.js";
import { describe } from "./records.js";
import { follow, isRefusal } from "./stream.js";
import { renderSteps, renderTranscript } from "./views.js";

// Records after which the Run's state (status, pending items, totals) is read again.
const STATE_CHANGES = new Set([
  "turn_started", "model_call_finished", "tool_call_finished", "suspended", "resumed",
  "suspension_expired", "step_finished", "child_settled", "run_settled",
]);

function recordNode(record) {
  const { label, text, body, tone } = describe(record);
  const long = body && body.length > 600;
  return el(
    "li",
    { class: `record ${tone}`, "data-kind": record.kind, "data-seq": record.seq },
    el("span", { class: "seq" }, `#${record.seq}`),
    el("span", { class: "label" }, label),
    el("span", { class: "text" }, text),
    el("time", { class: "muted", datetime: record.at }, when(record.at)),
    body && !long ? el("pre", { class: "body" }, body) : null,
    long ? el("details", {}, el("summary", {}, short(body, 120)), el("pre", { class: "body" }, body)) : null,
  );
}

// While a child Run works (a subagent, a spawned Run, a workflow's step), what it waits
// for reaches this Run's state by a signal that writes no record here: the state is read
// this often too, so a child's approval or question appears (and goes) without a reload.
const CHILD_READ_MS = 3000;

/** The child Runs a record starts or ends (`open`: their ids, or the call that waits on
 * them: a `delegate`, a `wait_children`), for the reads above. */
function trackChildren(open, record) {
  if (record.kind === "suspended" && record.pending?.reason === "children") open.add(`call ${record.pending.call_id}`);
  else if (record.kind === "tool_call_finished") open.delete(`call ${record.call_id}`);
  else if ((record.kind === "child_spawned" || record.kind === "step_started") && record.run) open.add(record.run);
  else if ((record.kind === "child_settled" || record.kind === "step_finished") && record.run) open.delete(record.run);
  else if (record.kind === "run_settled") open.clear();
}

// How `visible` shows a lone CR.
const ESCAPED_CR = visible("\r");

// Each delta is shown as it comes, so the text on the page is always `visible` of the
// whole text so far. One character's meaning spans two deltas: a CR that ends a delta is
// lone (shown `\x0d`) until the next text begins with LF, which makes it a line ending:
// that CR is then put back. Nothing waits for the next delta, which may never come.
function appendText(block, text) {
  if (block.loneCR && text.startsWith("\n")) block.last.data = `${block.last.data.slice(0, -ESCAPED_CR.length)}\r`;
  block.last = document.createTextNode(visible(text));
  block.text.append(block.last);
  block.loneCR = text.endsWith("\r");
}

/** Render the Run `runId` into `main`; returns a function that stops following it. */
export function showRun(main, runId, onAuthFailure) {
  const records = [];
  const seen = new Set();
  const inflight = new Map();
  let reading = false;
  let again = false;
  // The newest record that changed the state: a read answered before it (in flight when
  // it arrived) is stale, and is not shown; the read it asked for follows.
  let changeSeq = 0;
  let tab = "live";
  const children = new Set();
  let childReads = null;

  const status = el("span", { id: "run-status", class: "badge" }, "…");
  const facts = el("span", { id: "run-facts", class: "muted" });
  const connection = el("span", { id: "connection", class: "muted" }, "connecting…");
  const answer = el("section", { id: "answer", hidden: true });
  const problem = el("p", { id: "run-problem", class: "bad", hidden: true });
  const pendingHeading = el("h2", { hidden: true }, "Pending");
  const pending = el("section", { id: "pending" }, pendingHeading);
  const pendingNodes = new Map();
  const list = el("ol", { id: "records", class: "records" });
  const live = el("ol", { id: "inflight", class: "records" });
  const panel = el("div", { id: "panel" });
  const tabs = el("nav", { class: "tabs" });

  function showProblem(error) {
    if (error.status === 401) onAuthFailure(error);
    problem.hidden = false;
    problem.textContent = visible(error.message);
  }

  function showState(state) {
    status.textContent = visible(state.status);
    status.className = `badge status-${state.status}`;
    const totals = state.totals ?? {};
    const usage = totals.usage ?? {};
    fill(
      facts,
      `${state.kind} ${state.agent} · turn ${state.turn} · ${totals.model_calls ?? 0} model calls, `,
      `${totals.tool_calls ?? 0} tool calls · ${usage.input_tokens ?? 0} in / ${usage.output_tokens ?? 0} out tokens`,
      state.step ? ` · step ${state.step}` : "",
      state.reason ? ` · ${state.reason}` : "",
    );
    if (state.answer) showAnswer(state.answer);
    showPending(state.pending ?? []);
  }

  // Items are added and removed, never redrawn: a note being typed into one survives
  // every state read. One id may be pending in this Run and in a child: the holder is
  // part of the key.
  const pendingKey = (item) => JSON.stringify([item.reason, item.run ?? null, item.id]);
  function showPending(items) {
    const keys = new Set(items.map(pendingKey));
    for (const [key, node] of pendingNodes) {
      if (!keys.has(key)) {
        node.remove();
        pendingNodes.delete(key);
      }
    }
    for (const item of items) {
      const key = pendingKey(item);
      if (pendingNodes.has(key)) continue;
      const [node] = renderPending(runId, [item], { read: readState, refused: onAuthFailure });
      pendingNodes.set(key, node);
      pending.append(node);
    }
    pendingHeading.hidden = items.length === 0;
  }

  // Drawn once per distinct answer: every later state read leaves the node in place, so a
  // reader (a person selecting the text, a test holding the element) keeps it.
  let shownAnswer = null;
  function showAnswer(text) {
    if (text === shownAnswer) return;
    shownAnswer = text;
    answer.hidden = false;
    fill(answer, el("h2", {}, "Answer"), el("pre", { class: "answer-text" }, text));
  }

  // One read at a time; records that arrive meanwhile ask for one more read after it, so
  // a burst of records costs two queries, not one each.
  async function readState() {
    if (reading) {
      again = true;
      return;
    }
    reading = true;
    try {
      do {
        again = false;
        try {
          const state = await api(runPath(runId));
          problem.hidden = true;
          if (state.last_seq >= changeSeq) showState(state);
        } catch (error) {
          showProblem(error);
        }
      } while (again);
    } finally {
      reading = false;
    }
  }

  function dropInflight(turn) {
    for (const [call, block] of inflight) {
      if (block.turn === turn) {
        block.node.remove();
        inflight.delete(call);
      }
    }
  }

  function onRecord(record) {
    if (seen.has(record.seq)) return;
    seen.add(record.seq);
    records.push(record);
    list.append(recordNode(record));
    if (record.kind === "model_call_finished" || record.kind === "model_call_failed") dropInflight(record.turn);
    if (record.kind === "run_settled") {
      live.replaceChildren();
      inflight.clear();
      status.textContent = visible(record.status);
      status.className = `badge status-${record.status}`;
      if (record.answer) showAnswer(record.answer);
      showPending([]); // a settled Run waits for nothing
    }
    if (STATE_CHANGES.has(record.kind)) {
      changeSeq = Math.max(changeSeq, record.seq);
      readState();
    }
    trackChildren(children, record);
    if (children.size && !childReads) childReads = setInterval(readState, CHILD_READ_MS);
    else if (!children.size && childReads) {
      clearInterval(childReads);
      childReads = null;
    }
    if (tab === "steps" && record.kind.startsWith("step_")) renderTab();
  }

  function onDelta(delta) {
    let block = inflight.get(delta.call);
    if (!block) {
      const text = el("pre", { class: "delta-text" });
      const tools = el("pre", { class: "delta-tools" });
      const node = el(
        "li",
        { class: "record inflight", "data-call": delta.call },
        el("span", { class: "seq" }, "…"),
        el("span", { class: "label" }, "writing"),
        el("span", { class: "text" }, `turn ${delta.turn}`),
        text,
        tools,
      );
      block = { turn: delta.turn, node, text, tools, pieces: [], last: null, loneCR: false };
      inflight.set(delta.call, block);
      live.append(node);
    }
    if (delta.text) appendText(block, delta.text);
    const piece = delta.tool_call;
    if (piece) {
      const call = (block.pieces[piece.index] ??= { name: "", arguments: "" });
      if (piece.name) call.name = piece.name;
      call.arguments += piece.arguments ?? "";
      block.tools.textContent = visible(block.pieces.filter(Boolean).map((c) => `${c.name}(${c.arguments})`).join("\n"));
    }
  }

  function onDropped(dropped) {
    const block = inflight.get(dropped.call);
    block?.node.remove();
    inflight.delete(dropped.call);
    live.append(el("li", { class: "record muted dropped" }, el("span", { class: "label" }, "dropped"), `turn ${dropped.turn}: ${dropped.reason}`));
  }

  function renderTab() {
    for (const button of tabs.children) button.setAttribute("aria-selected", String(button.dataset.tab === tab));
    if (tab === "live") fill(panel, list, live);
    else if (tab === "steps") fill(panel, renderSteps(records));
    else {
      fill(panel, el("p", { class: "muted" }, "loading the transcript…"));
      api(runPath(runId, "/transcript"))
        .then((data) => tab === "transcript" && fill(panel, renderTranscript(data)))
        .catch((error) => {
          if (error.status === 401) onAuthFailure(error);
          else if (tab === "transcript") fill(panel, el("p", { class: "bad" }, error.message));
        });
    }
  }

  for (const [name, title] of [["live", "Live"], ["transcript", "Transcript"], ["steps", "Steps"]]) {
    tabs.append(el("button", { type: "button", "data-tab": name, onclick: () => { tab = name; renderTab(); } }, title));
  }

  fill(
    main,
    el("p", {}, el("a", { href: "#/runs" }, "← Runs")),
    el("h1", {}, "Run ", el("code", {}, runId)),
    el("p", { class: "facts" }, status, " ", facts, " ", connection),
    problem,
    answer,
    pending,
    controls(runId, readState, onAuthFailure),
    tabs,
    panel,
  );
  renderTab();
  readState();

  const following = follow(runId, {
    event: ({ event, data }) => {
      if (event === "record") onRecord(data);
      else if (event === "delta") onDelta(data);
      else if (event === "deltas_dropped") onDropped(data);
      else if (event === "error") {
        // follow() reconnects after all but a refusal of the position (then it is fatal).
        const again = isRefusal(data) ? "" : "; reconnecting";
        connection.textContent = visible(`stream failed: ${data?.detail ?? data}${again}`);
      }
    },
    connection: (text) => {
      connection.textContent = visible(text);
    },
    fatal: showProblem,
  });
  return () => {
    following.stop();
    clearInterval(childReads);
  };
}

function controls(runId, done, onAuthFailure) {
  const result = el("p", { class: "result", role: "status" });
  const message = el("input", { name: "message", placeholder: "message for the model", required: true });
  const mode = el("select", { name: "mode" }, ["steer", "follow_up", "next_run"].map((m) => el("option", { value: m }, m)));
  const reason = el("input", { name: "reason", placeholder: "reason (optional)" });
  const keys = actionKeys();
  const act = async (action, body) => {
    result.className = "result";
    result.textContent = `sending ${action}…`;
    try {
      const idempotencyKey = keys.keyFor(action, body);
      await api(runPath(runId, `/${action}`), { method: "POST", body, idempotencyKey });
      keys.succeeded();
      result.textContent = `${action} sent`;
      done();
    } catch (error) {
      if (error.status === 401) {
        onAuthFailure(error); // signed out, as a read's 401 does: saying why
        return;
      }
      result.className = "result bad";
      result.textContent = visible(error.message);
    }
  };
  return el(
    "details",
    { class: "controls" },
    el("summary", {}, "Steer or abort"),
    el("form", { onsubmit: (e) => { e.preventDefault(); act("steer", { message: message.value, mode: mode.value }); } },
      message, mode, el("button", { type: "submit" }, "Steer")),
    el("form", { onsubmit: (e) => { e.preventDefault(); act("abort", reason.value.trim() ? { reason: reason.value } : {}); } },
      reason, el("button", { type: "submit", class: "danger" }, "Abort")),
    result,
  );
}
