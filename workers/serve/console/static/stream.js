// Following a Run's events: fetch() streaming (an EventSource cannot send the bearer
// header) with a small Server-Sent Events parser, reconnecting with Last-Event-ID so that
// nothing is lost or repeated.

import { ApiError, apiBase, authHeaders, runPath } from "./api.js";

/** Parses an event stream (the WHATWG format) fed as text chunks. */
export class SseParser {
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buffer = "";
    this.reset();
    this.lastId = null;
  }

  reset() {
    this.event = "";
    this.data = [];
    this.sawData = false;
  }

  feed(chunk) {
    this.buffer += chunk;
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this.buffer);
      if (!match) break;
      // A CR at the very end may be the first half of a CRLF split across chunks.
      if (match[0] === "\r" && match.index === this.buffer.length - 1) break;
      const line = this.buffer.slice(0, match.index);
      this.buffer = this.buffer.slice(match.index + match[0].length);
      this.line(line);
    }
  }

  /** The stream ended: a CR held back as a possible CRLF half is a line end after all. */
  close() {
    if (this.buffer.endsWith("\r")) this.feed("\n");
  }

  line(line) {
    if (line === "") {
      if (this.sawData) {
        this.onEvent({ event: this.event || "message", data: this.data.join("\n"), id: this.lastId });
      }
      this.reset();
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") {
      this.data.push(value);
      this.sawData = true;
    } else if (field === "id" && !value.includes("\0")) this.lastId = value;
  }
}

/** An `error` event's problem that reconnecting from the same position meets again. */
export function isRefusal(problem) {
  const status = problem?.status;
  return typeof status === "number" && status >= 400 && status < 500 && status !== 401;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Follow a Run's events until its `end` event or stop(). `on.event({event, data, id})`
 * gets each event with its data parsed; `on.connection(text)` says whether it is live;
 * `on.fatal(error)` gets a refusal that reconnecting cannot cure (401, 404 at the opening;
 * an `error` event refusing the stream's position, `unknown-event-id`, which the same
 * Last-Event-ID would get again: only an expired token's 401 event is worth reconnecting).
 */
export function follow(runId, on, { after = null } = {}) {
  let lastId = after;
  let stopped = false;
  let ended = false;
  let refused = null;
  let controller = null;

  async function connect() {
    controller = new AbortController();
    const headers = authHeaders({ Accept: "text/event-stream" });
    if (lastId !== null) headers["Last-Event-ID"] = lastId;
    const response = await fetch(new URL(runPath(runId, "/events"), apiBase), {
      headers,
      signal: controller.signal,
      cache: "no-store",
    });
    if (!response.ok) {
      const text = await response.text();
      let problem = null;
      try {
        problem = JSON.parse(text);
      } catch {
        problem = null;
      }
      throw new ApiError(response.status, problem, text);
    }
    on.connection("live");
    const parser = new SseParser((raw) => {
      if (raw.id !== null) lastId = raw.id;
      let data = null;
      try {
        data = raw.data ? JSON.parse(raw.data) : null;
      } catch {
        data = raw.data;
      }
      if (raw.event === "end") ended = true;
      if (raw.event === "error" && isRefusal(data)) refused = new ApiError(data.status, data, raw.data);
      on.event({ event: raw.event, data, id: raw.id });
    });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    while (!ended) {
      const { value, done } = await reader.read();
      if (done) {
        parser.close();
        break;
      }
      parser.feed(value);
    }
    if (ended) await reader.cancel().catch(() => {});
  }

  (async () => {
    let delay = 500;
    while (!stopped && !ended) {
      try {
        await connect();
        if (refused !== null && !stopped) {
          on.fatal(refused);
          return;
        }
        delay = 500;
      } catch (error) {
        if (stopped) break;
        if (error instanceof ApiError && error.status >= 400 && error.status < 500) {
          on.fatal(error);
          return;
        }
        on.connection(`reconnecting: ${error.message ?? error}`);
      }
      if (stopped || ended) break;
      await sleep(delay);
      delay = Math.min(delay * 2, 8000);
    }
    if (ended) on.connection("ended");
  })();

  return {
    stop() {
      stopped = true;
      controller?.abort();
    },
  };
}
