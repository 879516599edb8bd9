// An execution's page: its plan as a timeline, its thread, budget, interruptions, a codon's
// conversation, changed files and sentinel outputs, and live events from the dashboard's
// event stream (server-sent events whose id is the journal seq: a reconnect resumes there).
"use strict";

const ident = decodeURIComponent(location.pathname.split("/").pop());
const api = `/api/executions/${ident}`;
const RELEVANT = /^(codon|run|interruption|checkpoint|rollback|budget|sentinel|execution|state)\./;
const page = {data: null, budget: null, selected: null, tab: "conversation", seq: 0,
              refreshTimer: null, budgetTimer: null, source: null, events: 0,
              cards: new Map()};

function byId(id) { return document.getElementById(id); }

// ----- loading -----

async function refresh() {
  try {
    page.data = await getJSON(api);
    showError(byId("error"), null);
    render();
  } catch (problem) {
    showError(byId("error"), `Cannot load this execution: ${problem.message}`);
    if (!page.data) notLoaded();
  }
}

// Nothing to show: no section keeps saying "loading…", and the way back is offered.
function notLoaded() {
  for (const section of document.querySelectorAll("main > section")) section.hidden = true;
  byId("title").textContent = "no such execution";
  byId("notice").hidden = false;
  byId("notice").replaceChildren("The dashboard lists the executions it can show: ",
    el("a", {href: "/", text: "back to the list"}), ".");
}

async function refreshBudget() {
  try {
    page.budget = await getJSON(`${api}/budget`);
    renderBudget();
    renderTimeline();
  } catch (problem) {
    byId("budget").replaceChildren(el("span", {class: "error", text: `Cannot load the budget: ${problem.message}`}));
  }
}

function soon(kind) {
  // Bursts of events (a codon's log lines) cause one reload, not one each.
  const key = kind === "budget" ? "budgetTimer" : "refreshTimer";
  if (page[key]) return;
  page[key] = setTimeout(() => {
    page[key] = null;
    (kind === "budget" ? refreshBudget : refresh)();
  }, kind === "budget" ? 500 : 120);
}

// ----- rendering -----

function render() {
  const data = page.data;
  const execution = data.execution;
  document.title = `hankweave · ${data.title} · ${data.name}`;
  byId("title").replaceChildren(data.title, " ",
    el("span", {class: "muted", title: data.path, text: data.replayOf ? `${data.name} · replay of ${data.replayOf}` : data.name}));
  byId("status").replaceWith(Object.assign(badge(data.badge.kind, data.badge.text), {id: "status"}));
  byId("live").hidden = !data.live;
  byId("unlock").hidden = !data.controlAvailable;
  byId("unlock").textContent = controlKey() ? "Lock control" : "Unlock control";
  renderSummary();
  renderFamily();
  renderNextStep();
  renderControls();
  renderInterruptions();
  renderTimeline();
  renderRuns();
  if (page.selected) renderDetailTitle();
}

const SHOWN = {waiting: "waiting for you", answered: "answered", stopped: "stopped"};

function renderSummary() {
  const {execution, tokens: used, currentCodon, runs, spent} = page.data;
  const fact = (label, value, title) => el("div", {class: "fact", title: title || ""},
    el("span", {class: "label", text: label}), el("span", {class: "value", text: value}));
  byId("summary").replaceChildren(
    fact("Cost", money(spent.dollars), `what the budget counts${execution.sentinelCost ? `; sentinels ${money(execution.sentinelCost)} besides` : ""}`),
    fact("Tokens in / out", `${tokens(used.input)} / ${tokens(used.output)}`, `cache read ${used.cacheRead}, cache write ${used.cacheWrite}`),
    fact("Codons", `${execution.finishedCodons} / ${page.data.plan.length}`),
    fact("Current", currentCodon || "–"),
    fact("Runs", String(runs.length)),
    fact("Time", seconds(spent.seconds), "the runs' time, as the budget counts it (not the time between runs)"),
    fact("Data", execution.dataPath || "–", execution.dataPath || ""),
    ...(execution.hankSource ? [hankSourceFact(execution.hankSource, fact)] : []),
  );
}

// The fork family (docs/fork.md): the execution this one was forked from (and its sources),
// and its forks, each linked when the dashboard serves it, with a link that compares it with
// this one.
function renderFamily() {
  const family = page.data.family;
  byId("family-section").hidden = !family;
  if (!family) return;
  const sources = family.ancestors.map((member, index) => el("div", {class: "relative source", dataset: {path: member.path}},
    index === 0 ? "Forked from " : "which was forked from ", relative(member), forkPoint(member),
    index === 0 && member.id ? compareLink(member.id, ident, "compare with it") : null));
  const forks = family.forks.length ? [el("div", {class: "relative-head", text: family.forks.length === 1 ? "1 fork" : `${family.forks.length} forks`}),
    el("ul", {class: "forks"}, ...family.forks.map((member) => el("li", {class: "relative fork", dataset: {path: member.path}},
      relative(member), forkPoint(member),
      el("span", {class: "muted", text: ` · ${when(member.forkedAt)}`}),
      member.id ? compareLink(ident, member.id, "compare") : null)))] : [];
  byId("family").replaceChildren(...sources, ...forks);
}

// A relative by its directory's name, linked to its page when the dashboard serves it, else
// its path as plain text; one that was deleted or moved is "(gone)".
function relative(member) {
  const name = member.id ? el("a", {href: `/executions/${member.id}`, title: member.path, text: member.name})
    : el("span", {class: "mono", title: member.path, text: member.path});
  return [name, member.exists ? null : el("span", {class: "gone muted", text: " (gone)"})];
}

function forkPoint(member) {
  return [" after codon ", el("code", {text: member.codon}),
    " (checkpoint ", el("code", {title: member.checkpoint, text: member.checkpoint.slice(0, 12)}), ")"];
}

function compareLink(a, b, text) {
  return [" ", el("a", {class: "compare-link", href: `/compare?${new URLSearchParams({a, b})}`, text})];
}

// Where the hank came from when it is not a hank directory: a verified bundle, or a remote
// repository at a commit (docs/bundles.md, docs/remote-hanks.md).
function hankSourceFact(source, fact) {
  if (source.remote) {
    const remote = source.remote;
    return fact("Hank from", `${remote.ref || "commit"} @ ${remote.commit.slice(0, 12)}`,
      `${remote.url}${remote.path ? ` · ${remote.path}` : ""}`);
  }
  return fact("Hank from", `bundle ${source.bundleHash.slice(0, 12)}`,
    `${source.bundlePath} · bundleHash ${source.bundleHash}`);
}

// What to do next when nothing runs the execution: the command to paste, with what it does.
function renderNextStep() {
  const notice = byId("notice");
  const command = page.data.resumeCommand;
  notice.hidden = !command;
  if (!command) return;
  const kind = page.data.badge.kind;
  const why = kind === "waiting" ? "It waits for your answer below. Once answered, go on with:"
    : kind === "rolled-back" ? `It was ${page.data.badge.text}. Nothing runs it now; go on from there with:`
    : page.data.execution.status === "failed" || page.data.execution.status === "crashed"
      ? "Nothing runs it now. To retry from where it stopped:"
      : "Nothing runs it now. To go on:";
  notice.replaceChildren(...(page.answered ? [el("div", {text: page.answered})] : []),
    el("div", {text: why}), commandLine(command));
}

function renderControls() {
  const show = page.data.live && page.data.controlAvailable && Boolean(controlKey());
  byId("controls").hidden = !show;
  const choice = byId("codon-choice");
  const current = choice.value;
  choice.replaceChildren(...page.data.plan.map((entry) =>
    el("option", {value: entry.codonId, text: `${entry.codonId} (${entry.status})`})));
  if (current) choice.value = current;
}

function renderInterruptions() {
  const items = page.data.interruptions;
  const waiting = items.filter((item) => item.status === "pending");
  const answered = items.filter((item) => item.status !== "pending");
  byId("interruptions-section").hidden = waiting.length === 0;
  // A card stays the same node while its interruption waits, so what is typed survives the
  // page's refreshes.
  const cards = new Map();
  for (const item of waiting) cards.set(item.id, page.cards.get(item.id) || interruptionCard(item));
  page.cards = cards;
  byId("interruptions").replaceChildren(...cards.values());
  byId("answered-section").hidden = answered.length === 0;
  byId("answered").replaceChildren(...answered.map((item) => el("div", {class: "card answered"},
    el("div", {class: "muted", text: `${item.kind} · ${item.codonId} · ${item.id}`}),
    el("div", {text: item.question}),
    el("div", {}, el("strong", {text: "Answer: "}), answerText(item),
      el("span", {class: "muted", text: ` — ${item.answeredBy || "?"}, ${when(item.answeredAt)}`})))));
}

function answerText(item) {
  const answer = item.answer;
  if (answer && typeof answer === "object" && "extend" in answer) {
    return `extend by ${quantity(answer.extend, item.budget ? item.budget.currency : "cost")}`;
  }
  return typeof answer === "string" ? answer : JSON.stringify(answer);
}

// A budget ask (`onExceeded: "ask"`): raise its ceiling by an amount in the ceiling's unit, or
// reject. The amount offered first is half the ceiling, as the message's links offer.
function extendRow(item, send, result) {
  const currency = item.budget ? item.budget.currency : "cost";
  const half = item.budget ? item.budget.limit / 2 : 1;
  const amount = el("input", {type: "number", class: "amount", min: "0", "aria-label": "Extend by",
    step: currency === "cost" ? "0.01" : "1",
    value: currency === "cost" ? Math.max(0.01, half).toFixed(2) : String(Math.max(1, Math.round(half)))});
  const unit = {cost: "dollars", duration: "seconds"}[currency] || "tokens";
  const extend = () => Number(amount.value) > 0 ? send({extend: amount.value})
    : (result.textContent = `Give a positive amount of ${unit}`);
  return el("div", {class: "row"},
    el("label", {}, "Extend by ", amount, ` ${unit}`),
    el("button", {type: "button", class: "approve", text: "Extend", onclick: extend}),
    el("button", {type: "button", class: "reject", text: "Reject", onclick: () => send({reject: true})}));
}

function interruptionCard(item) {
  const result = el("p", {class: "muted result"});
  const send = async (body) => {
    if (!await ensureUnlocked()) return;
    try {
      const reply = await postJSON(`${api}/interruptions/${encodeURIComponent(item.id)}/answer`, body);
      result.textContent = reply.message;
      // The card goes with the refresh: the notice keeps what happened, and what to do next.
      page.answered = reply.forwarded ? null : `Your answer to ${item.id} is recorded: the next run goes on with it.`;
      soon("page");
    } catch (problem) {
      result.textContent = problem.message;
      result.className = "error result";
    }
  };
  const card = el("div", {class: "card pending", dataset: {interruption: item.id}},
    el("div", {class: "muted", text: `${item.kind} · codon ${item.codonId} · asked ${when(item.createdAt)}` + (item.deadline ? ` · default at ${new Date(item.deadline).toLocaleString()}` : "")}),
    el("p", {class: "question", text: item.question}));
  if (item.toolName) {
    card.append(el("pre", {class: "code", text: `${item.toolName} ${JSON.stringify(item.toolInput || {}, null, 2)}`}));
  }
  if (item.budget) card.append(ceilingLine(item.budget));
  const options = item.options || [];
  if (item.kind === "budget") {
    card.append(extendRow(item, send, result));
  } else if (item.kind !== "question" || (options.length === 2 && options.includes("approve") && options.includes("reject"))) {
    card.append(el("div", {class: "row"},
      el("button", {type: "button", class: "approve", text: "Approve", onclick: () => send({approve: true})}),
      el("button", {type: "button", class: "reject", text: "Reject", onclick: () => send({reject: true})})));
  } else if (options.length) {
    card.append(el("div", {class: "row"}, ...options.map((option) =>
      el("button", {type: "button", text: option, onclick: () => send({answer: option})}))));
  } else {
    const box = el("textarea", {rows: "3", placeholder: "Your answer", "aria-label": "Answer"});
    card.append(box, el("div", {class: "row"}, el("button", {type: "button", text: "Send answer",
      onclick: () => box.value.trim() ? send({answer: box.value}) : (result.textContent = "Write an answer first")})));
  }
  card.append(result);
  return card;
}

function limitOf(codonId) {
  const entry = page.budget && page.budget.entries.find((item) => item.codonId === codonId);
  return entry && entry.limits ? entry : null;
}

function renderTimeline() {
  if (!page.data) return;
  const list = byId("timeline");
  const items = [];
  let group = null;
  for (const entry of page.data.plan) {
    const loopKey = entry.loopId ? `${entry.loopId}#${entry.iteration}` : null;
    if (loopKey && loopKey !== group) {
      items.push(el("li", {class: "loop-head", text: `loop ${entry.loopId} · iteration ${entry.iteration + 1}`}));
    }
    group = loopKey;
    const budget = limitOf(entry.codonId);
    const dollarLimit = budget && budget.limits.maxDollars;
    const selected = page.selected && page.selected.codonId === entry.codonId;
    const duration = span(entry.startTime, entry.endTime || (entry.status === "pending" ? null : undefined));
    items.push(el("li", {class: `codon status-${entry.shown}${selected ? " selected" : ""}${entry.loopId ? " in-loop" : ""}`,
                         dataset: {codon: entry.codonId, status: entry.status},
                         tabindex: entry.runId ? "0" : null,
                         onclick: () => entry.runId && select(entry)},
      el("span", {class: "dot"}),
      el("span", {class: "codon-id", text: entry.codonId}),
      entry.name ? el("span", {class: "muted name", text: entry.name}) : null,
      badge(entry.shown, SHOWN[entry.shown]),
      entry.attempts > 1 ? el("span", {class: "muted", text: `${entry.attempts} attempts`}) : null,
      el("span", {class: "spacer"}),
      el("span", {class: "num", title: "tokens in / out", text: `${tokens(entry.tokens.input)} / ${tokens(entry.tokens.output)}`}),
      el("span", {class: "num", text: entry.startTime ? seconds(duration) : ""}),
      el("span", {class: "num cost", text: money(entry.cost, entry.costComplete)}),
      dollarLimit ? bar(entry.cost, dollarLimit, `${money(entry.cost)} of ${money(dollarLimit)}${budget.limitsKind === "projected" ? " (projected)" : ""}`) : null,
      entry.failure && entry.shown === "failed" ? el("div", {class: "error small wide", text: entry.failure}) : null,
      entry.shown === "waiting" ? el("div", {class: "muted small wide", text: "waits for your answer (above)"}) : null,
      entry.shown === "answered" ? el("div", {class: "muted small wide", text: "answered: the next run goes on from here"}) : null,
    ));
  }
  list.replaceChildren(...items);
}

function renderBudget() {
  const report = page.budget;
  const box = byId("budget");
  const ceiling = report.ceiling || {};
  const parts = [];
  parts.push(bar(report.spentDollars, ceiling.maxDollars, `spent ${money(report.spentDollars)} of ${money(ceiling.maxDollars)}`)
    || el("div", {class: "muted", text: `spent ${money(report.spentDollars)} (no dollar ceiling)`}));
  parts.push(bar(report.elapsedSeconds, ceiling.maxTimeSeconds, `ran ${seconds(report.elapsedSeconds)} of ${seconds(ceiling.maxTimeSeconds)}`)
    || el("div", {class: "muted", text: `ran ${seconds(report.elapsedSeconds)} (no time ceiling)`}));
  for (const loop of report.loops) {
    const limits = loop.limits || {};
    parts.push(bar(loop.actual.dollars, limits.maxDollars, `loop ${loop.loopId}: ${money(loop.actual.dollars)} of ${money(limits.maxDollars)}`));
  }
  box.replaceChildren(...parts.filter(Boolean));
}

function renderRuns() {
  const rows = page.data.runs.map((run) => {
    const start = run.startingConditions || {};
    const origin = start.type === "continuation"
      ? `continues ${start.source ? start.source.runId || "" : ""}`.trim()
      : start.type || "";
    return el("tr", {},
      el("td", {class: "mono", text: run.runId}),
      el("td", {}, badge(run.status)),
      el("td", {text: when(run.startTime)}),
      el("td", {text: run.endTime ? when(run.endTime) : "–"}),
      el("td", {text: origin}),
      el("td", {text: run.codons.map((codon) => `${codon.codonId}${codon.attempt > 1 ? ` (attempt ${codon.attempt})` : ""}: ${codon.status}`).join(", ") || "–"}),
      el("td", {class: "num", text: money(run.codons.reduce((sum, codon) => sum + codon.cost, 0))}));
  });
  byId("runs").querySelector("tbody").replaceChildren(...rows);
}

// ----- one codon -----

function select(entry) {
  page.selected = {codonId: entry.codonId, runId: entry.runId};
  byId("detail").hidden = false;
  renderDetailTitle();
  renderTimeline();
  loadTab();
}

function renderDetailTitle() {
  const {codonId, runId} = page.selected;
  byId("detail-title").textContent = `${codonId} · run ${runId}`;
}

async function loadTab() {
  const {codonId, runId} = page.selected;
  const base = `${api}/runs/${encodeURIComponent(runId)}/codons/${encodeURIComponent(codonId)}`;
  const body = byId("detail-body");
  for (const tab of document.querySelectorAll(".tabs button")) tab.classList.toggle("active", tab.dataset.tab === page.tab);
  body.replaceChildren(el("span", {class: "muted", text: "loading…"}));
  try {
    if (page.tab === "conversation") body.replaceChildren(...renderConversation(await getJSON(`${base}/log`)));
    else if (page.tab === "files") body.replaceChildren(...renderFiles(await getJSON(`${base}/diff`)));
    else body.replaceChildren(...renderSentinels(await getJSON(`${base}/sentinels`)));
  } catch (problem) {
    body.replaceChildren(el("p", {class: "notice", text: problem.message}));
  }
}

function renderConversation(log) {
  const nodes = log.items.map((item) => {
    if (item.kind === "text") return el("div", {class: "turn assistant"}, el("div", {class: "who", text: "assistant"}), el("div", {class: "text", text: item.text}));
    if (item.kind === "thinking") return el("details", {class: "turn thinking"}, el("summary", {text: "thinking"}), el("div", {class: "text", text: item.text}));
    if (item.kind === "tool_use") return el("div", {class: "turn tool"}, el("div", {class: "who", text: `tool call · ${item.name}`}), el("pre", {class: "code", text: item.input}));
    if (item.kind === "tool_result") return el("div", {class: `turn result${item.error ? " failed" : ""}`}, el("div", {class: "who", text: item.error ? "tool error" : "tool result"}), el("pre", {class: "code", text: item.text}));
    if (item.kind === "result") return el("div", {class: `turn final${item.error ? " failed" : ""}`}, el("div", {class: "who", text: item.error ? `ended with an error (${item.subtype})` : `finished${item.turns ? ` in ${item.turns} turns` : ""}${item.cost !== null && item.cost !== undefined ? ` · ${money(item.cost)}` : ""}`}), item.text ? el("div", {class: "text", text: item.text}) : null);
    return el("div", {class: "turn system muted", text: item.text});
  });
  if (log.note) nodes.unshift(el("p", {class: "muted", text: log.note}));
  if (!nodes.length) nodes.push(el("p", {class: "muted", text: "Nothing in this codon's log yet."}));
  return nodes;
}

function renderFiles(diff) {
  if (!diff.files.length) return [el("p", {class: "muted", text: "This codon changed no files."})];
  return diff.files.map((file) => el("div", {class: "file", dataset: {path: file.path}},
    el("div", {class: "file-head"}, el("span", {class: `change ${file.change}`, text: file.change}), el("span", {class: "mono", text: file.path})),
    file.binary ? el("p", {class: "muted", text: "binary file"}) :
      file.tooLarge ? el("p", {class: "muted", text: "too large to show"}) :
        diffBlock(file.diff)));
}

function renderSentinels(data) {
  const nodes = data.sentinels.map((sentinel) => el("div", {class: "card"},
    el("strong", {text: sentinel.id}), el("span", {class: "muted", text: ` ${sentinel.model} · ${sentinel.totalTriggers} triggers · ${sentinel.llmCallCount} calls · ${money(sentinel.totalCost)}`})));
  for (const output of data.outputs) nodes.push(el("div", {class: "file"}, el("div", {class: "file-head mono", text: `${output.sentinel} · ${output.file}`}), el("pre", {class: "code", text: output.text})));
  if (!nodes.length) nodes.push(el("p", {class: "muted", text: "No sentinel ran on this codon."}));
  return nodes;
}

// ----- live events -----

function connect(afterSeq) {
  page.seq = afterSeq;
  const source = new EventSource(`${api}/events?afterSeq=${afterSeq}`);
  page.source = source;
  source.addEventListener("open", () => { byId("connection").textContent = "connected"; });
  source.addEventListener("error", () => { byId("connection").textContent = "reconnecting…"; });
  source.addEventListener("hankweave", (message) => {
    const event = JSON.parse(message.data);
    if (event.seq <= page.seq) return;
    page.seq = event.seq;
    page.events += 1;
    byId("seq").textContent = `seq ${event.seq}`;
    addActivity(event);
    if (RELEVANT.test(event.type)) soon("page");
    if (/^(budget|codon)\./.test(event.type)) soon("budget");
    document.body.dataset.lastSeq = String(event.seq);
  });
}

function describe(event) {
  const data = event.data || {};
  const bits = [data.codonId, data.status, data.message, data.reason, data.question].filter((bit) => typeof bit === "string");
  return bits.join(" · ");
}

function addActivity(event) {
  const list = byId("activity");
  list.prepend(el("li", {dataset: {seq: String(event.seq), type: event.type}},
    el("span", {class: "mono muted", text: `#${event.seq}`}),
    el("span", {class: "time muted", text: new Date(event.timestamp).toLocaleTimeString()}),
    el("span", {class: "type", text: event.type}),
    el("span", {class: "muted", text: describe(event)})));
  while (list.children.length > 300) list.lastElementChild.remove();
}

// ----- control -----

async function ensureUnlocked() {
  if (controlKey()) return true;
  return unlock();
}

async function unlock() {
  const key = prompt("Control key (printed by `hankweave dashboard`):");
  if (!key) return false;
  setControlKey(key.trim());
  try {
    await postJSON("/api/unlock", {});
    render();
    return true;
  } catch (problem) {
    setControlKey(null);
    showError(byId("error"), problem.message);
    return false;
  }
}

async function act(action) {
  const body = {action};
  if (action === "start" || action === "rollback") body.codonId = byId("codon-choice").value;
  const result = byId("control-result");
  result.textContent = `${action}…`;
  try {
    const reply = await postJSON(`${api}/control`, body);
    result.textContent = reply.message;
    soon("page");
  } catch (problem) {
    result.textContent = problem.message;
    if (problem.status === 403) { setControlKey(null); render(); }
  }
}

document.addEventListener("DOMContentLoaded", async () => {
  byId("unlock").addEventListener("click", async () => {
    if (controlKey()) { setControlKey(null); render(); } else { await unlock(); }
  });
  for (const button of document.querySelectorAll("#controls button[data-action]")) {
    button.addEventListener("click", () => act(button.dataset.action));
  }
  for (const tab of document.querySelectorAll(".tabs button")) {
    tab.addEventListener("click", () => { page.tab = tab.dataset.tab; loadTab(); });
  }
  await refresh();
  if (!page.data) return;
  document.body.dataset.ready = "1";
  refreshBudget();
  connect(Math.max(0, page.data.lastSeq - 50));
});
