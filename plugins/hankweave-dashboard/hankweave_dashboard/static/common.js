// Shared helpers of the dashboard's pages. Data is always rendered as text (textContent),
// never as HTML: nothing an agent wrote can run in the page.
"use strict";

const KEY_STORAGE = "hankweave.controlKey";

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (name === "style") node.style.cssText = value;  // CSSOM: allowed by the page's CSP
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function money(value, complete = true) {
  if (value === null || value === undefined) return "–";
  const text = value >= 1 ? `$${value.toFixed(2)}` : `$${value.toFixed(4)}`;
  return complete ? text : `≥${text}`;
}

function tokens(count) {
  if (!count) return "0";
  if (count >= 1e6) return `${(count / 1e6).toFixed(1)}M`;
  if (count >= 1e3) return `${(count / 1e3).toFixed(1)}k`;
  return String(count);
}

function seconds(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (value < 60) return `${value.toFixed(1)}s`;
  const minutes = Math.floor(value / 60);
  if (minutes < 60) return `${minutes}m ${Math.round(value % 60)}s`;
  return `${Math.floor(minutes / 60)}h ${minutes % 60}m`;
}

function bytes(count) {
  if (count === null || count === undefined) return "–";
  if (count < 1024) return `${count} B`;
  if (count < 1024 * 1024) return `${(count / 1024).toFixed(1)} KiB`;
  return `${(count / 1024 / 1024).toFixed(1)} MiB`;
}

// A unified diff as preformatted text, each line a span whose class says what it is: added
// (add), removed (del), a hunk header (hunk) or a file header (head).
function diffBlock(text) {
  const lines = text.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  const kind = (line) => line.startsWith("+++ ") || line.startsWith("--- ") ? "head"
    : line.startsWith("+") ? "add" : line.startsWith("-") ? "del"
    : line.startsWith("@@") ? "hunk" : "";
  return el("pre", {class: "diff"}, ...lines.map((line) => el("span", {class: kind(line), text: `${line}\n`})));
}

// A meter of used against limit, labelled.
function bar(used, limit, label) {
  if (!limit) return null;
  const ratio = Math.min(used / limit, 1);
  return el("div", {class: `meter${used >= limit ? " over" : ratio > 0.8 ? " near" : ""}`, title: label},
    el("div", {class: "fill", style: `width:${(ratio * 100).toFixed(1)}%`}),
    el("span", {class: "meter-label", text: label}));
}

// An amount in a budget ceiling's currency: dollars, seconds or tokens.
function quantity(value, currency) {
  if (currency === "cost") return money(value);
  if (currency === "duration") return seconds(value);
  const kind = currency === "outputTokens" ? "output" : "context";
  return `${Math.round(value).toLocaleString()} ${kind} tokens`;
}

// The ceiling a budget interruption asks to raise (its `budget`): whose, how much of it was
// used, and where it came from.
function ceilingLine(budget) {
  const owner = budget.scope === "loop" ? `loop ${budget.loopId}` : budget.scope;
  const label = `${owner} ceiling: ${quantity(budget.used, budget.currency)} used of ${quantity(budget.limit, budget.currency)}`;
  return el("div", {class: "ceiling", dataset: {scope: budget.scope, currency: budget.currency}},
    bar(budget.used, budget.limit, label), el("span", {class: "muted small", text: `from ${budget.source}`}));
}

function span(start, end) {
  if (!start) return null;
  const finish = end ? Date.parse(end) : Date.now();
  return (finish - Date.parse(start)) / 1000;
}

function when(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  const ago = (Date.now() - date.getTime()) / 1000;
  const clock = date.toLocaleString();
  if (ago < 0) return clock;
  if (ago < 90) return `${Math.round(ago)}s ago`;
  if (ago < 5400) return `${Math.round(ago / 60)}m ago`;
  return clock;
}

function badge(kind, text) {
  return el("span", {class: `badge status-${kind}`, text: text || kind});
}

// A command to paste, with a button that copies it (the text is selectable as well).
function commandLine(command) {
  const done = el("span", {class: "muted", role: "status"});
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(command);
      done.textContent = "copied";
    } catch (problem) {
      done.textContent = "select the command and copy it";
    }
  };
  return el("div", {class: "command"}, el("code", {text: command}),
    el("button", {type: "button", class: "copy", text: "Copy", onclick: copy}), done);
}

async function getJSON(url) {
  const response = await fetch(url, {headers: {Accept: "application/json"}});
  const body = await response.json().catch(() => ({error: `${response.status} ${response.statusText}`}));
  if (!response.ok) throw new Error(body.error || `${response.status}`);
  return body;
}

// withKey: false for what carries its own credential (an action link's token).
async function postJSON(url, data, {withKey = true} = {}) {
  const headers = {"Content-Type": "application/json"};
  if (withKey) headers["X-Hankweave-Key"] = controlKey() || "";
  const response = await fetch(url, {method: "POST", headers, body: JSON.stringify(data || {})});
  const body = await response.json().catch(() => ({error: `${response.status} ${response.statusText}`}));
  if (!response.ok) throw Object.assign(new Error(body.error || `${response.status}`), {status: response.status});
  return body;
}

function controlKey() { return sessionStorage.getItem(KEY_STORAGE); }
function setControlKey(key) {
  if (key) sessionStorage.setItem(KEY_STORAGE, key); else sessionStorage.removeItem(KEY_STORAGE);
}

function showError(node, error) {
  node.textContent = error ? String(error.message || error) : "";
  node.hidden = !error;
}
