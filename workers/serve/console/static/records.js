// One line per Record of a Run's log: a label, a one-line text, an optional body shown
// whole (model text, arguments, results), and a tone. A kind this console does not know
// yet is shown by its name and its JSON, never dropped.

import { pretty, short } from "./dom.js";

const tokens = (usage) =>
  usage ? `${usage.input_tokens ?? 0} in / ${usage.output_tokens ?? 0} out tokens` : "";

const calls = (toolCalls) =>
  (toolCalls ?? []).map((call) => `${call.name}(${short(call.arguments, 80)})`).join(", ");

const TOOL_TONES = { ok: "ok", error: "bad", unknown: "warn", refused: "warn", denied: "bad", rejected: "bad", aborted: "warn" };

const SETTLED_TONES = { completed: "ok", stopped: "warn", aborted: "warn", abandoned: "warn" };

/** What a pending item waits on, in words. */
export function pendingText(pending) {
  const who = pending.run ? ` (in ${pending.run})` : "";
  switch (pending.reason) {
    case "approval":
      return `approval of ${pending.tool}${who}`;
    case "question":
      return `an answer: ${pending.question ?? ""}${who}`;
    case "external": // question: what the tool said it waits for
      return `completion of ${pending.tool} (token ${pending.id})${who}${pending.question ? `: ${pending.question}` : ""}`;
    case "children":
      return `child Runs${who}`;
    case "authorization": // question: the URL the person opens
      return `a person's consent for MCP server ${pending.tool}${who}`;
    default:
      return `${pending.reason} ${pending.id}${who}`;
  }
}

const DESCRIBE = {
  run_admitted: (r) => ({
    label: "admitted",
    text: `${r.spec_kind} ${r.agent} @ ${String(r.version_hash).slice(0, 12)}`,
    body: (r.messages ?? []).join("\n\n"),
  }),
  run_continued: (r) => ({ label: "continued", text: `execution ${r.execution}` }),
  turn_started: (r) => ({ label: "turn", text: `turn ${r.turn}` }),
  model_call_started: (r) => ({ label: "model", text: `${r.model} called (attempt ${r.attempt})`, tone: "muted" }),
  model_call_finished: (r) => ({
    label: "model",
    text: `${r.model}: ${tokens(r.usage)}${r.tool_calls?.length ? ` · calls ${calls(r.tool_calls)}` : ""}`,
    body: r.text,
  }),
  model_call_failed: (r) => ({
    label: "model failed",
    text: `${r.model}${r.status ? ` ${r.status}` : ""}: ${r.message}${r.transient ? ` (transient, ${r.budget_left} retries left)` : ""}`,
    tone: "bad",
  }),
  tool_call_started: (r) => ({ label: "tool", text: `${r.tool} started (${r.call_id})`, body: pretty(r.arguments), tone: "muted" }),
  tool_call_finished: (r) => ({
    label: `tool ${r.status}`,
    text: `${r.tool} (${r.call_id})${r.truncated ? ` · ${r.size} bytes, preview` : ""}`,
    body: pretty(r.content),
    tone: TOOL_TONES[r.status] ?? "",
  }),
  tool_withheld: (r) => ({ label: "withheld", text: `${r.tool} after ${r.failures} failures`, tone: "warn" }),
  mcp_discovered: (r) => ({
    label: "mcp",
    text: `${r.server}: ${r.status}, ${r.tools} tools${r.error ? ` · ${r.error}` : ""}`,
    tone: r.status === "unavailable" ? "warn" : "muted",
  }),
  peer_discovered: (r) => ({
    label: "peer",
    text: `${r.peer}: ${r.status}${r.status === "ok" ? `, ${(r.skills ?? []).length} skills (${r.cached ? "cached" : "fresh"})` : ""}${r.error ? ` · ${r.error}` : ""}`,
    body: (r.skills ?? []).join(", "),
    tone: r.status === "unavailable" ? "warn" : "muted",
  }),
  peer_task_canceled: (r) => ({
    label: "peer cancel",
    text: `${r.peer}: asked to cancel task ${r.task_id} (${r.call_id}): ${r.state ?? `not canceled${r.error ? `: ${r.error}` : ""}`}`,
    tone: r.state === "canceled" ? "muted" : "warn",
  }),
  suspended: (r) => ({
    label: "waiting",
    text: pendingText(r.pending),
    body: r.pending.reason === "authorization" ? `open ${r.pending.question ?? ""}` : r.pending.arguments ? pretty(r.pending.arguments) : "",
    tone: "warn",
  }),
  resumed: (r) => ({
    label: r.outcome,
    text: `${r.reason} ${r.id}${r.by ? ` by ${r.by}` : ""}`,
    body: r.detail ?? "",
    tone: r.outcome === "rejected" ? "bad" : "ok",
  }),
  suspension_expired: (r) => ({ label: "expired", text: `${r.reason} ${r.id}`, tone: "bad" }),
  abort_requested: (r) => ({ label: "abort", text: `${r.reason}${r.by ? ` (by ${r.by})` : ""}`, tone: "warn" }),
  steer_received: (r) => ({ label: r.mode, text: `${r.by ? `${r.by}: ` : ""}${short(r.message)}`, body: r.message }),
  steer_refused: (r) => ({
    label: `${r.mode} not taken`,
    text: `${r.refusal}: ${short(r.reason)}`,
    body: r.message,
    tone: "warn",
  }),
  next_run_started: (r) => ({ label: "next run", text: r.workflow_id, body: r.message }),
  step_started: (r) => ({
    label: "step",
    text: `${r.index}. ${r.step} (${r.step_kind}) started${r.run ? ` · ${r.run}` : ""}`,
    body: r.input == null ? "" : pretty(r.input),
    tone: "muted",
  }),
  step_finished: (r) => ({
    label: r.ok ? "step ok" : "step failed",
    text: `${r.step} (${r.step_kind})${r.status ? ` ${r.status}` : ""}${r.error ? `: ${r.error}` : ""}`,
    body: r.output == null ? "" : pretty(r.output),
    tone: r.ok ? "ok" : "bad",
  }),
  child_settled: (r) => ({ label: "child", text: `${r.agent} (${r.via}) ${r.status}: ${r.reason} · ${r.run}` }),
  child_spawned: (r) => ({ label: "spawned", text: `${r.agent} on ${r.model} · ${r.run}`, body: (r.tools ?? []).join(", ") }),
  tasks_updated: (r) => ({
    label: "tasks",
    text: `${(r.tasks ?? []).length} tasks`,
    body: (r.tasks ?? []).map((task) => `[${task.status}] ${task.title}`).join("\n"),
  }),
  component_shown: (r) => ({ label: "component", text: r.component?.kind ?? "", body: pretty(r.component) }),
  context_provided: (r) => ({
    label: "context",
    text: `${(r.shown ?? []).length} shown, ${(r.skipped ?? []).length} skipped, budget ${r.budget_tokens} tokens`,
    tone: "muted",
  }),
  compaction_applied: (r) => ({
    label: "compacted",
    text: `${r.messages_replaced} messages before turn ${r.cut_turn} summarised by ${r.model}`,
    body: r.summary_preview,
  }),
  compaction_failed: (r) => ({ label: "compaction failed", text: `${r.model}: ${r.error}`, tone: "warn" }),
  run_settled: (r) => ({
    label: r.status,
    text: `${r.reason}${r.totals ? ` · ${tokens(r.totals.usage)}` : ""}`,
    body: r.answer ?? "",
    tone: SETTLED_TONES[r.status] ?? "bad",
  }),
};

/** `{label, text, body, tone}` of one Record. */
export function describe(record) {
  const describeKind = DESCRIBE[record.kind];
  if (!describeKind) return { label: record.kind, text: "", body: pretty(record), tone: "muted" };
  return { body: "", tone: "", ...describeKind(record) };
}
