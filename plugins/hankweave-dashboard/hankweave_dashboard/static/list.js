// The home page: every execution, sortable and filterable, refreshed every two seconds.
"use strict";

const listState = {rows: [], sort: "lastActivity", descending: true};

function sortValue(row, key) {
  if (key === "progress") return row.codons ? row.finishedCodons / row.codons : 0;
  if (key === "duration") return row.seconds || 0;
  if (key === "hank") return row.title || "";
  if (key === "live") return row.live ? 1 : 0;
  const value = row[key];
  return value === null || value === undefined ? "" : value;
}

function renderList() {
  const filter = document.getElementById("filter").value.trim().toLowerCase();
  const liveOnly = document.getElementById("live-only").checked;
  const rows = listState.rows.filter((row) => {
    if (liveOnly && !row.live) return false;
    if (!filter) return true;
    return [row.title, row.hank, row.data, row.status, row.badge && row.badge.text, row.replayOf, row.currentCodon, row.path, row.name]
      .some((value) => value && String(value).toLowerCase().includes(filter));
  });
  const {sort, descending} = listState;
  rows.sort((a, b) => {
    const x = sortValue(a, sort), y = sortValue(b, sort);
    const order = x < y ? -1 : x > y ? 1 : 0;
    return descending ? -order : order;
  });
  const body = document.querySelector("#executions tbody");
  body.replaceChildren(...rows.map((row) => el("tr", {dataset: {id: row.id}, class: row.live ? "is-live" : ""},
    el("td", {title: row.live ? "a runtime runs it now" : ""}, row.live ? el("span", {class: "dot live", text: "●"}) : ""),
    el("td", {}, el("a", {href: `/executions/${row.id}`, text: row.title || row.name}),
      el("span", {class: "muted subtitle", title: row.path, text: row.name})),
    row.replayOf
      ? el("td", {class: "path", title: row.data || "", text: `replay of ${row.replayOf}`})
      : el("td", {class: "path", title: row.data || "", text: row.data ? row.data.split("/").slice(-2).join("/") : "–"}),
    el("td", {}, badge(row.badge.kind, row.badge.text), row.pendingInterruptions && row.badge.kind !== "waiting" ? el("span", {class: "badge status-waiting", text: `${row.pendingInterruptions} waiting`}) : "", row.error ? el("div", {class: "error small", text: row.error}) : ""),
    el("td", {text: row.currentCodon || "–"}),
    el("td", {}, el("progress", {max: String(row.codons || 1), value: String(row.finishedCodons || 0)}), ` ${row.finishedCodons}/${row.codons}`),
    el("td", {class: "num", text: money(row.cost)}),
    el("td", {class: "num", title: "the runs' time, as the budget counts it", text: seconds(row.seconds)}),
    el("td", {title: row.lastActivity || "", text: when(row.lastActivity)}),
  )));
  document.getElementById("empty").hidden = listState.rows.length > 0;
  document.getElementById("count").textContent = `${rows.length} of ${listState.rows.length}`;
  for (const th of document.querySelectorAll("th[data-sort]")) {
    th.setAttribute("aria-sort", th.dataset.sort === sort ? (descending ? "descending" : "ascending") : "none");
  }
}

async function refreshList() {
  const error = document.getElementById("error");
  try {
    const data = await getJSON("/api/executions");
    listState.rows = data.executions;
    document.getElementById("roots").textContent = data.roots.join(", ");
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    showError(error, null);
    renderList();
  } catch (problem) {
    showError(error, `Cannot list the executions: ${problem.message}`);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  for (const th of document.querySelectorAll("th[data-sort]")) {
    th.addEventListener("click", () => {
      const key = th.dataset.sort;
      listState.descending = listState.sort === key ? !listState.descending : true;
      listState.sort = key;
      renderList();
    });
  }
  document.getElementById("filter").addEventListener("input", renderList);
  document.getElementById("live-only").addEventListener("change", renderList);
  refreshList();
  setInterval(refreshList, 2000);
});
