// Building DOM nodes from data: text always goes in as text nodes, never as HTML, and
// `visible`: model-written text is shown so that it cannot reorder the page around it nor
// hide in it. Text set directly (`textContent`: a problem the API answered, which may quote
// what a model or a caller wrote; the stream's state) goes through `visible` too.

// What a terminal or the page would act on is shown as its escape (`\x1b`, `\u202e`), as
// psych's terminal output does (specs/_printable.py, the same set; a test holds the two
// equal): C0 controls but tab and newline (and a carriage return ending a line), DEL and C1
// controls (ESC, NUL, a lone CR: invisible, or moving what follows), and the bidirectional
// embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069; CVE-2021-42574), which
// reorder the text shown after them. The data keeps them (the API's JSON).
const UNPRINTABLE = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]|\r(?!\n)/g;

function escaped(c) {
  const code = c.charCodeAt(0);
  return code < 0x100
    ? `\\x${code.toString(16).padStart(2, "0")}`
    : `\\u${code.toString(16).padStart(4, "0")}`;
}

/** `text` with each control character (but tab and newline) and each bidirectional
 * embedding, override or isolate written as its escape. */
export function visible(text) {
  return String(text).replace(UNPRINTABLE, escaped);
}

/** An element with properties (attributes, `class`, `on<event>` handlers) and children. */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      node.addEventListener(name.slice(2), value);
    } else if (name === "class") {
      node.className = value;
    } else if (name in node && typeof value !== "string") {
      node[name] = value;
    } else {
      node.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else if (child instanceof Node) node.append(child);
    else node.append(document.createTextNode(visible(child)));
  }
}

/** Replace a node's children. */
export function fill(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

/** JSON text pretty-printed when it parses, else as it is. */
export function pretty(text) {
  if (typeof text !== "string") return JSON.stringify(text, null, 2);
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/** A timestamp in the reader's locale; empty for none. */
export function when(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? String(iso) : date.toLocaleString();
}

/** Cut a text to one line of at most `max` characters. */
export function short(text, max = 160) {
  const line = String(text ?? "").replace(/\s+/g, " ").trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}
