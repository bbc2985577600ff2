// The Runs of the signed-in tenant, filtered by agent, status and whether they wait, a page
// at a time: "More" loads the next page.

import { api } from "./api.js";
import { el, fill, visible, when } from "./dom.js";

const STATUSES = ["", "running", "suspended", "completed", "stopped", "failed", "force_settled", "aborted", "abandoned"];

/** The filters of the list as written in the location (`#/runs?agent=...`). */
export function filtersOf(query) {
  const params = new URLSearchParams(query);
  return {
    agent: params.get("agent") ?? "",
    status: params.get("status") ?? "",
    waiting: params.get("waiting") === "true",
    limit: params.get("limit") ?? "50",
  };
}

function queryOf(filters) {
  const params = new URLSearchParams();
  if (filters.agent) params.set("agent", filters.agent);
  if (filters.status) params.set("status", filters.status);
  if (filters.waiting) params.set("waiting", "true");
  if (filters.limit) params.set("limit", filters.limit);
  return params.toString();
}

function waitingOn(run) {
  const items = (run.pending ?? []).map((item) => `${item.reason} ${item.tool}`);
  if (items.length) return items.join(", ");
  return run.unreadable ? `${run.suspension ?? ""} (${run.unreadable})` : (run.suspension ?? "");
}

/** Render the list of Runs into `main`. */
export async function showRuns(main, query, onAuthFailure) {
  const filters = filtersOf(query);
  const agent = el("input", { name: "agent", value: filters.agent, placeholder: "any agent" });
  const status = el("select", { name: "status" }, STATUSES.map((s) => el("option", { value: s, selected: s === filters.status }, s || "any status")));
  const waiting = el("input", { type: "checkbox", name: "waiting", checked: filters.waiting });
  const limit = el("input", { type: "number", name: "limit", min: 1, max: 1000, value: filters.limit });
  const body = el("tbody", {});
  const note = el("p", { class: "muted", role: "status" }, "loading…");
  const onsubmit = (event) => {
    event.preventDefault();
    const next = `#/runs?${queryOf({ agent: agent.value.trim(), status: status.value, waiting: waiting.checked, limit: limit.value })}`;
    if (location.hash === next) showRuns(main, next.slice(7), onAuthFailure);
    else location.hash = next;
  };
  fill(
    main,
    el("h1", {}, "Runs"),
    el(
      "form",
      { class: "filters", onsubmit },
      el("label", {}, "Agent ", agent),
      el("label", {}, "Status ", status),
      el("label", {}, waiting, " waiting for someone"),
      el("label", {}, "Limit ", limit),
      el("button", { type: "submit" }, "Show"),
    ),
    note,
    el(
      "table",
      { class: "runs" },
      el("thead", {}, el("tr", {}, ["Run", "Agent", "Status", "Waiting on", "Started", "Closed"].map((h) => el("th", {}, h)))),
      body,
    ),
  );
  const more = el("button", { type: "button", name: "more", hidden: true }, "More");
  main.append(el("p", {}, more));
  const row = (run) =>
    el(
      "tr",
      { "data-run": run.workflow_id },
      el("td", {}, el("a", { href: `#/runs/${encodeURIComponent(run.workflow_id)}` }, run.workflow_id)),
      el("td", {}, run.agent ?? ""),
      el("td", {}, el("span", { class: `badge status-${run.status}` }, run.status ?? "")),
      el("td", {}, waitingOn(run)),
      el("td", {}, when(run.started_at)),
      el("td", {}, when(run.closed_at)),
    );
  // Each page goes on from the cursor the one before answered, with the same filters
  // (the server refuses a cursor with others); a Run already shown is not shown again.
  let cursor = null;
  const shown = new Set();
  const load = async () => {
    more.disabled = true;
    try {
      const page = cursor ? `&cursor=${encodeURIComponent(cursor)}` : "";
      const answer = await api(`runs?${queryOf(filters)}${page}`);
      const fresh = answer.runs.filter((run) => !shown.has(run.workflow_id));
      for (const run of fresh) shown.add(run.workflow_id);
      body.append(...fresh.map(row));
      cursor = answer.next_cursor ?? null;
      more.hidden = cursor === null;
      note.className = "muted";
      const count = shown.size ? `${shown.size} Runs` : "No Runs match.";
      fill(note, cursor === null ? count : `${count}, more to load`);
    } catch (error) {
      if (error.status === 401) onAuthFailure(error);
      note.className = "bad";
      note.textContent = visible(error.message);
    } finally {
      more.disabled = false;
    }
  };
  more.addEventListener("click", load);
  await load();
}
