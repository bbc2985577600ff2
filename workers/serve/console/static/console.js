// The console's entry: sign-in (an API key kept in sessionStorage for this tab) and the
// routes `#/runs[?filters]` and `#/runs/<run id>`.

import { api, credential } from "./api.js";
import { el, fill, visible } from "./dom.js";
import { showRun } from "./run.js";
import { showRuns } from "./runs.js";

const main = document.getElementById("main");
const signOut = document.getElementById("sign-out");
let stopFollowing = () => {};

function signIn(reason = "") {
  stopFollowing();
  credential.clear();
  signOut.hidden = true;
  const key = el("input", { id: "api-key", name: "api-key", type: "password", autocomplete: "off", required: true });
  const message = el("p", { class: reason ? "bad" : "muted", role: "status" }, reason || "Paste an API key of your tenant.");
  const onsubmit = async (event) => {
    event.preventDefault();
    credential.set(key.value.trim());
    try {
      await api("runs?limit=1");
      route();
    } catch (error) {
      credential.clear();
      message.className = "bad";
      message.textContent = visible(error.message);
    }
  };
  fill(
    main,
    el("h1", {}, "Sign in"),
    el("form", { class: "sign-in", onsubmit }, el("label", {}, "API key ", key), el("button", { type: "submit", class: "primary" }, "Sign in")),
    message,
  );
  key.focus();
}

const refused = (error) => signIn(`Signed out: ${error.message}`);

function route() {
  stopFollowing();
  stopFollowing = () => {};
  if (!credential.get()) {
    signIn();
    return;
  }
  signOut.hidden = false;
  const hash = location.hash.replace(/^#/, "") || "/runs";
  const run = /^\/runs\/([^?]+)$/.exec(hash);
  if (run) {
    let runId = null;
    try {
      runId = decodeURIComponent(run[1]);
    } catch {
      // A mistyped or cut link: said so, rather than leaving the last page up as if it
      // were the Run the address names.
      fill(
        main,
        el("p", {}, el("a", { href: "#/runs" }, "← Runs")),
        el("p", { id: "run-problem", class: "bad" }, `This address names no Run (its escapes are malformed): ${run[1]}`),
      );
      return;
    }
    stopFollowing = showRun(main, runId, refused);
  } else {
    const query = hash.startsWith("/runs?") ? hash.slice(6) : "";
    showRuns(main, query, refused);
  }
}

signOut.addEventListener("click", () => signIn());
window.addEventListener("hashchange", route);
route();
