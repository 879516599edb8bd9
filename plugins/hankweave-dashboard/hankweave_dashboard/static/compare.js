// The compare page: two executions side by side, codon by codon (`hankweave compare`,
// docs/fork.md), from /api/compare. Everything is rendered as text: file names, diffs and
// outputs come from agents.
"use strict";

const wanted = new URLSearchParams(location.search);
const pair = {a: wanted.get("a") || "", b: wanted.get("b") || ""};

function byId(id) { return document.getElementById(id); }

async function load() {
  try {
    render(await getJSON(`/api/compare?${new URLSearchParams(pair)}`));
  } catch (problem) {
    showError(byId("error"), `Cannot compare these executions: ${problem.message}`);
    byId("back").hidden = false;
  } finally {
    byId("loading").hidden = true;
    document.body.dataset.ready = "1";
  }
}

function render(data) {
  document.title = `hankweave · compare ${data.a.name} and ${data.b.name}`;
  byId("title").textContent = `compare ${data.a.name} · ${data.b.name}`;
  byId("sides").replaceChildren(side("A", data.a), side("B", data.b));
  byId("relation").hidden = false;
  byId("relation").textContent = data.relation || "Neither was forked from the other.";
  renderDivergence(data);
  byId("table-section").hidden = false;
  byId("codons").tBodies[0].replaceChildren(...data.codons.map((row) => codonRow(row, data.firstDivergence)));
  const differing = data.codons.filter((row) => row.differences.length);
  byId("details-section").hidden = differing.length === 0;
  byId("details").replaceChildren(...differing.map(details));
}

// One execution's summary: its name (linked to its page), status and totals.
function side(label, summary) {
  const fact = (name, value) => el("div", {class: "fact"},
    el("span", {class: "label", text: name}), el("span", {class: "value", text: value}));
  const origin = summary.forkedFrom;
  return el("div", {class: "card side", dataset: {side: label}},
    el("div", {class: "side-head"}, el("span", {class: "side-label", text: label}),
      el("a", {href: `/executions/${summary.id}`, text: summary.title}),
      el("span", {class: "muted", title: summary.path, text: summary.name}),
      badge(summary.badge.kind, summary.badge.text)),
    el("div", {class: "summary"},
      fact("Cost", money(summary.cost)),
      fact("Tokens in / out", `${tokens(summary.inputTokens)} / ${tokens(summary.outputTokens)}`),
      fact("Codons", String(summary.codons)),
      origin ? fact("Forked from", `${origin.execution.split("/").pop()} after ${origin.codon}`) : null));
}

function renderDivergence(data) {
  const box = byId("divergence");
  box.hidden = false;
  const first = data.codons.find((row) => row.position === data.firstDivergence);
  if (!first) {
    box.replaceChildren("No codon differs: the same statuses, workspaces and outputs.");
    return;
  }
  box.replaceChildren("They diverge at ",
    el("a", {href: `#codon-${first.position}`, text: `#${first.position} ${first.codonId}`}),
    `: ${first.differences.join(", ")}.`);
}

function codonRow(row, firstDivergence) {
  const {a, b} = row;
  const first = row.position === firstDivergence;
  const classes = [row.differences.length ? "differs" : "same", first ? "first-divergence" : "", row.sameCheckpoint ? "shared" : ""];
  const pairOf = (format, key) => `${a ? format(a[key]) : "–"} / ${b ? format(b[key]) : "–"}`;
  return el("tr", {class: classes.filter(Boolean).join(" "), dataset: {position: String(row.position), codon: row.codonId}},
    el("td", {class: "num", text: String(row.position)}),
    el("td", {},
      row.differences.length ? el("a", {class: "codon-id", href: `#codon-${row.position}`, text: row.codonId}) : el("span", {class: "codon-id", text: row.codonId}),
      first ? el("span", {class: "badge first", text: "first divergence"}) : null),
    el("td", {}, a ? badge(a.status) : el("span", {class: "muted", text: "not run"})),
    el("td", {}, b ? badge(b.status) : el("span", {class: "muted", text: "not run"})),
    el("td", {class: "workspace", text: workspace(row)}),
    el("td", {class: "num", text: a ? money(a.cost) : "–"}),
    el("td", {class: "num", text: b ? money(b.cost) : "–"}),
    el("td", {class: "num", text: a ? `${tokens(a.inputTokens)} / ${tokens(a.outputTokens)}` : "–"}),
    el("td", {class: "num", text: b ? `${tokens(b.inputTokens)} / ${tokens(b.outputTokens)}` : "–"}),
    el("td", {class: "num", text: pairOf(seconds, "seconds")}),
    el("td", {class: "num", text: pairOf((turns) => turns === null || turns === undefined ? "–" : String(turns), "turns")}),
    el("td", {class: row.sameOutput === false ? "output differs" : "output", text: row.sameOutput === null || row.sameOutput === undefined ? "–" : row.sameOutput ? "same" : "differs"}));
}

function workspace(row) {
  if (row.sameCheckpoint) return "same (shared)";
  if (row.sameWorkspace) return "same";
  if (row.sameWorkspace === false) return row.files.length === 1 ? "1 file differs" : `${row.files.length} files differ`;
  return "–";
}

// A differing codon: what differs, each file with its diff (or sizes), and the output's diff.
function details(row) {
  const only = row.a ? (row.b ? null : "Only A ran this codon.") : "Only B ran this codon.";
  return el("div", {class: "card codon-diff", id: `codon-${row.position}`, dataset: {codon: row.codonId}},
    el("h3", {}, `#${row.position} `, el("span", {class: "codon-id", text: row.codonId})),
    el("p", {class: "muted", text: only || `Differs: ${row.differences.join(", ")}.`}),
    ...row.files.map(fileDifference),
    row.outputDiff ? el("div", {class: "file output-diff"},
      el("div", {class: "file-head"}, el("span", {class: "change changed", text: "output"}), el("span", {class: "muted", text: "the agent's final answer"})),
      diffBlock(row.outputDiff)) : null);
}

function fileDifference(file) {
  const sizes = file.change === "added" ? `only in B · ${bytes(file.sizeB)}`
    : file.change === "removed" ? `only in A · ${bytes(file.sizeA)}`
    : `${bytes(file.sizeA)} → ${bytes(file.sizeB)}`;
  return el("div", {class: "file", dataset: {path: file.path}},
    el("div", {class: "file-head"},
      el("span", {class: `change ${file.change}`, text: file.change}),
      el("span", {class: "mono", text: file.path}),
      file.mode ? el("span", {class: "muted", text: `now ${file.mode}`}) : null,
      el("span", {class: "muted", text: sizes})),
    file.binary ? el("p", {class: "muted", text: `binary file: ${bytes(file.sizeA)} → ${bytes(file.sizeB)}`}) : null,
    file.diff ? diffBlock(file.diff) : null,
    file.truncated ? el("p", {class: "muted", text: "the diff is cut here (hankweave compare keeps 200 lines a file)"}) : null);
}

document.addEventListener("DOMContentLoaded", load);
