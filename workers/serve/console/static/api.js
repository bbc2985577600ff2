// The HTTP API of `psych serve`, relative to where the console is mounted (<root>/console/
// talks to <root>/v1/), with the signed-in key sent as a bearer credential.

const KEY = "psych.apiKey";

export const apiBase = new URL("../v1/", document.baseURI);

export const credential = {
  get: () => sessionStorage.getItem(KEY),
  set: (key) => sessionStorage.setItem(KEY, key),
  clear: () => sessionStorage.removeItem(KEY),
};

/** A refusal of the API: its status and problem document (RFC 9457). */
export class ApiError extends Error {
  constructor(status, problem, text) {
    super(describeProblem(status, problem, text));
    this.status = status;
    this.problem = problem;
  }
}

function describeProblem(status, problem, text) {
  if (!problem || typeof problem !== "object") return `${status}: ${text || "no answer"}`;
  const parts = [`${status} ${problem.title ?? ""}`.trim()];
  if (problem.detail) parts.push(typeof problem.detail === "string" ? problem.detail : JSON.stringify(problem.detail));
  // A validation problem's detail already names each field; list them only without one.
  for (const item of problem.detail ? [] : (problem.errors ?? [])) {
    const where = Array.isArray(item.loc) ? item.loc.join(".") : (item.field ?? item.loc ?? "");
    parts.push(`${where}: ${item.msg ?? item.message ?? JSON.stringify(item)}`);
  }
  return parts.join(" — ");
}

/** The headers every request carries. */
export function authHeaders(extra = {}) {
  return { Authorization: `Bearer ${credential.get() ?? ""}`, ...extra };
}

/** Call the API; resolves to the parsed JSON answer, rejects with an ApiError. */
export async function api(path, { method = "GET", body, signal, idempotencyKey } = {}) {
  const headers = authHeaders({ Accept: "application/json" });
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (idempotencyKey) headers["Idempotency-Key"] = idempotencyKey;
  const response = await fetch(new URL(path, apiBase), {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
    cache: "no-store",
  });
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) throw new ApiError(response.status, data, text);
  return data;
}

/** The path of one Run's resource. */
export function runPath(runId, rest = "") {
  return `runs/${encodeURIComponent(runId)}${rest}`;
}

/**
 * The Idempotency-Key of one form's actions. A request sent again as it was, after it
 * failed (a 503 says it may still be applied once a worker takes it), goes under the same
 * key, so the Run takes it at most once; another request (other words, the other verdict:
 * a key names one request), or any after a success, gets a new key.
 */
export function actionKeys() {
  let last = null;
  return {
    keyFor(action, body) {
      const request = JSON.stringify([action, body ?? null]);
      if (last?.request !== request) last = { request, key: newKey() };
      return last.key;
    },
    succeeded() {
      last = null;
    },
  };
}

// crypto.getRandomValues, not randomUUID: the page may be served over plain HTTP on a
// network address, which is not a secure context.
function newKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `console-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}
