// A suspended Run's pending items with their arguments, and the forms that answer them:
// approve or deny with a note, answer a question, complete an external wait, open the
// consent page of an MCP server.

import { actionKeys, api, runPath } from "./api.js";
import { el, pretty, visible, when } from "./dom.js";
import { pendingText } from "./records.js";

function resultLine() {
  return el("p", { class: "result", role: "status" });
}

// A child's item (a workflow step's agent, a subagent) is answered through this Run naming
// its holder: its id may be pending in this Run too, whose own item would be taken first.
const held = (item, body) => (item.run ? { ...body, held_by: item.run } : body);

async function send(runId, action, body, result, buttons, done, keys) {
  for (const button of buttons) button.disabled = true;
  result.className = "result";
  result.textContent = "sending…";
  try {
    const idempotencyKey = keys.keyFor(action, body);
    const answer = await api(runPath(runId, `/${action}`), { method: "POST", body, idempotencyKey });
    keys.succeeded();
    result.textContent = answer?.outcome ? visible(`${answer.outcome} (${answer.id})`) : "sent";
    result.classList.add("ok");
    done.read();
  } catch (error) {
    if (error.status === 401) {
      done.refused(error); // signed out, as a read's 401 does: saying why
      return;
    }
    result.textContent = visible(error.message);
    result.classList.add("bad");
    for (const button of buttons) button.disabled = false;
  }
}

function approvalForm(runId, item, done) {
  const note = el("textarea", { name: "note", rows: 2, placeholder: "note (optional)" });
  const result = resultLine();
  const approve = el("button", { type: "submit", name: "approve", class: "primary" }, "Approve");
  const deny = el("button", { type: "button", name: "deny", class: "danger" }, "Deny");
  const keys = actionKeys();
  const body = () => held(item, note.value.trim() ? { call_id: item.id, note: note.value } : { call_id: item.id });
  deny.addEventListener("click", () => send(runId, "deny", body(), result, [approve, deny], done, keys));
  return el(
    "form",
    { onsubmit: (event) => { event.preventDefault(); send(runId, "approve", body(), result, [approve, deny], done, keys); } },
    el("label", {}, "Note", note),
    el("div", { class: "buttons" }, approve, deny),
    result,
  );
}

function answerForm(runId, item, done) {
  const text = el("textarea", { name: "answer", rows: 2, required: true, placeholder: "your answer" });
  const result = resultLine();
  const submit = el("button", { type: "submit", name: "answer", class: "primary" }, "Answer");
  const keys = actionKeys();
  return el(
    "form",
    { onsubmit: (event) => { event.preventDefault(); send(runId, "answer", held(item, { call_id: item.id, text: text.value }), result, [submit], done, keys); } },
    el("label", {}, "Answer", text),
    el("div", { class: "buttons" }, submit),
    result,
  );
}

function completeForm(runId, item, done) {
  const payload = el("textarea", { name: "payload", rows: 3, placeholder: '{"status": "done"}' });
  const result = resultLine();
  const submit = el("button", { type: "submit", name: "complete", class: "primary" }, "Complete");
  const keys = actionKeys();
  const onsubmit = (event) => {
    event.preventDefault();
    let parsed = null;
    try {
      parsed = payload.value.trim() ? JSON.parse(payload.value) : null;
    } catch (error) {
      result.className = "result bad";
      result.textContent = visible(`the payload is not JSON: ${error.message}`);
      return;
    }
    send(runId, "complete", held(item, { token: item.id, payload: parsed }), result, [submit], done, keys);
  };
  return el("form", { onsubmit }, el("label", {}, "Payload (JSON)", payload), el("div", { class: "buttons" }, submit), result);
}

/** The address a person opens to consent, when it is a web address (it comes from the
 * MCP server's authorization server: any other scheme is shown, never linked). */
function webAddress(text) {
  try {
    const url = new URL(text ?? "");
    return url.protocol === "https:" || url.protocol === "http:" ? url.href : null;
  } catch {
    return null;
  }
}

// The consent page is another site's: opened in its own tab, told nothing of this page.
// psych's OAuth callback, where it redirects, resumes the Run; this page then shows it.
function consentLink(runId, item) {
  const href = webAddress(item.question);
  if (!href) return el("p", { class: "bad" }, `not a web address, so not linked: ${item.question ?? "(none given)"}`);
  return el(
    "p",
    {},
    el("a", { class: "consent", href, target: "_blank", rel: "noopener noreferrer" }, "Open the consent page"),
    " (a new tab): the Run resumes once you consent. ",
    el("code", { class: "url" }, href),
  );
}

const FORMS = { approval: approvalForm, question: answerForm, external: completeForm, authorization: consentLink };

/** The pending items of a Run, each with the form that answers it; `done.read()` after an
 * action is taken, `done.refused(error)` when the API refused the credential (401). */
export function renderPending(runId, items, done) {
  return items.map((item) => {
    const form = FORMS[item.reason];
    return el(
      "article",
      { class: "pending-item", "data-id": item.id, "data-reason": item.reason, "data-run": item.run },
      el("h3", {}, `Waiting for ${pendingText(item)}`),
      el(
        "p",
        { class: "muted" },
        `${item.reason} · id ${item.id} · call ${item.call_id} · expires ${when(item.expires_at)}`,
        item.run ? el("span", {}, " · in ", el("a", { href: `#/runs/${encodeURIComponent(item.run)}` }, item.run)) : null,
      ),
      item.arguments ? el("pre", { class: "arguments" }, pretty(item.arguments)) : null,
      form ? form(runId, item, done) : null,
    );
  });
}
