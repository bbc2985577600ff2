// The transcript (the conversation as the model saw it, as `psych report --transcript`
// prints it) and a workflow's steps, built from the Run's records.

import { el, pretty } from "./dom.js";

function waitLine(wait) {
  const parts = [`${wait.reason}: ${wait.outcome}`];
  if (wait.by) parts.push(`by ${wait.by}`);
  if (wait.question) parts.push(`asked “${wait.question}”`);
  if (wait.detail) parts.push(`— ${wait.detail}`);
  return el("li", {}, parts.join(" "));
}

function message(entry) {
  const meta = [entry.role];
  if (entry.turn) meta.push(`turn ${entry.turn}`);
  if (entry.origin && entry.origin !== entry.role) meta.push(entry.origin);
  if (entry.by) meta.push(`from ${entry.by}`);
  if (entry.model) meta.push(entry.model);
  if (entry.tool) meta.push(`${entry.tool}${entry.tool_call_id ? ` (${entry.tool_call_id})` : ""}`);
  if (entry.status) meta.push(entry.status);
  if (entry.truncated) meta.push(`preview of ${entry.size} bytes, handle ${entry.result_ref}`);
  if (entry.exact === false) meta.push("the model was shown more than this");
  return el(
    "article",
    { class: `message role-${entry.role}` },
    el("header", { class: "muted" }, meta.join(" · ")),
    entry.content ? el("pre", {}, entry.content) : null,
    (entry.tool_calls ?? []).length
      ? el("ul", { class: "calls" }, entry.tool_calls.map((call) => el("li", {}, `${call.name} (${call.id})`, el("pre", {}, pretty(call.arguments)))))
      : null,
    (entry.waits ?? []).length ? el("ul", { class: "waits" }, entry.waits.map(waitLine)) : null,
  );
}

function step(entry) {
  return el(
    "article",
    { class: "step" },
    el("header", {}, `${entry.index}. ${entry.name} (${entry.kind})`, entry.ok == null ? "" : entry.ok ? " ok" : " failed"),
    entry.input == null ? null : el("pre", {}, `input: ${pretty(entry.input)}`),
    entry.output == null ? null : el("pre", {}, `output: ${pretty(entry.output)}`),
    entry.error ? el("p", { class: "bad" }, entry.error) : null,
    entry.child ? el("div", { class: "child" }, renderTranscript(entry.child)) : null,
  );
}

function entryNode(entry) {
  if (entry && typeof entry === "object" && "role" in entry) return message(entry);
  if (entry && typeof entry === "object" && "index" in entry && "name" in entry) return step(entry);
  return el("pre", {}, pretty(entry));
}

/** The transcript answer (`{"entries": [...]}`, or a transcript with messages or steps). */
export function renderTranscript(data) {
  const entries = [...(data?.entries ?? data?.messages ?? []), ...(data?.steps ?? [])];
  const unseen = data?.unseen ?? [];
  if (!entries.length && !unseen.length) return el("p", { class: "muted" }, "The transcript is empty so far.");
  return el(
    "div",
    { class: "transcript" },
    entries.map(entryNode),
    unseen.length ? [el("h3", {}, "Arrived after the model's last call (unseen)"), unseen.map(entryNode)] : null,
  );
}

/** A workflow's steps from its records: each step started, and how it finished. */
export function renderSteps(records) {
  const steps = new Map();
  for (const record of records) {
    if (record.kind === "step_started") steps.set(record.step, { started: record, finished: null });
    else if (record.kind === "step_finished") {
      const known = steps.get(record.step) ?? { started: null, finished: null };
      known.finished = record;
      steps.set(record.step, known);
    }
  }
  if (!steps.size) return el("p", { class: "muted" }, "No steps (an agent Run, or none started yet).");
  const rows = [...steps.values()].map(({ started, finished }) => {
    const run = finished?.run ?? started?.run;
    const state = !finished ? "running" : finished.ok ? "ok" : "failed";
    return el(
      "tr",
      { class: `step-${state}` },
      el("td", {}, started?.index ?? ""),
      el("td", {}, started?.step ?? finished.step),
      el("td", {}, (started ?? finished).step_kind),
      el("td", {}, state, finished?.status ? ` (${finished.status})` : ""),
      el("td", {}, run ? el("a", { href: `#/runs/${encodeURIComponent(run)}` }, run) : ""),
      el("td", {}, finished?.error ?? (finished?.output == null ? "" : el("pre", {}, pretty(finished.output)))),
    );
  });
  return el(
    "table",
    { class: "steps" },
    el("thead", {}, el("tr", {}, ["#", "step", "kind", "state", "child Run", "output"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows),
  );
}
