// The page of an action link from a message (/act#TOKEN): it shows what the link will do and
// does it only when the person confirms (a chat app that fetches the link to preview it must
// not answer anything). The token is the link's fragment, which the browser never sends: it is
// read here, taken out of the address bar and the history at once, and only ever posted, in a
// JSON body, to /api/act/preview and /api/act.
"use strict";

const link = {token: fragment(), done: false};
if (location.hash) history.replaceState(null, "", location.pathname);

function fragment() {
  try {
    return decodeURIComponent(location.hash.slice(1)).trim();
  } catch (problem) {  // a mangled copy: the server says it is incomplete
    return location.hash.slice(1);
  }
}

function byId(id) { return document.getElementById(id); }

// The link is the credential: no control key goes with it.
function postLink(url) {
  return postJSON(url, {token: link.token}, {withKey: false});
}

async function load() {
  try {
    if (!link.token) throw new Error("This link has no token: open the whole link from the message again (a reloaded page no longer has it).");
    render(await postLink("/api/act/preview"));
  } catch (problem) {
    refuse(problem);
  } finally {
    byId("loading").hidden = true;
    document.body.dataset.ready = "1";
  }
}

function refuse(problem) {
  showError(byId("error"), problem);
  byId("back").hidden = false;
  document.body.dataset.refused = String(problem.status || "");
}

function render(data) {
  const item = data.interruption;
  const execution = data.execution;
  document.title = `hankweave · ${data.summary}`;
  byId("summary").textContent = `${data.summary}?`;
  const fact = (label, value, title) => el("div", {class: "fact", title: title || ""},
    el("span", {class: "label", text: label}), el("span", {class: "value", text: value}));
  byId("facts").replaceChildren(
    fact("Execution", `${execution.title} · ${execution.name}`, execution.path),
    fact("Codon", item.codonName ? `${item.codonId} (${item.codonName})` : item.codonId),
    fact("Waiting since", when(item.createdAt)));
  byId("ask-head").textContent = `${item.kind} · ${item.id}`;
  byId("question").textContent = item.question;
  byId("ceiling").replaceChildren(...(item.budget ? [ceilingLine(item.budget)] : []));
  // A held call in full: what is approved is the call, not the question's first 200 characters.
  const call = byId("call");
  call.hidden = !item.toolName;
  call.textContent = item.toolName ? `${item.toolName} ${JSON.stringify(item.toolInput || {}, null, 2)}` : "";
  const confirm = byId("confirm");
  confirm.textContent = data.summary;
  confirm.className = data.action === "reject" ? "reject" : "approve";
  byId("open").href = `/executions/${execution.id}`;
  byId("expires").textContent = `This link works once, until ${new Date(data.expires).toLocaleString()}.`;
  byId("preview").hidden = false;
}

async function confirmAction() {
  if (link.done) return;
  link.done = true;
  const button = byId("confirm");
  button.disabled = true;
  try {
    const reply = await postLink("/api/act");
    link.token = "";  // used: nothing keeps it
    byId("result-message").textContent = reply.message;
    const resume = reply.resume;
    byId("result-command").replaceChildren(...(resume && !resume.queued ? [commandLine(resume.command)] : []));
    byId("result").hidden = false;
    byId("preview").hidden = true;
    byId("back").hidden = false;
    document.body.dataset.acted = reply.forwarded ? "forwarded" : resume && resume.queued ? "queued" : "recorded";
  } catch (problem) {
    refuse(problem);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  byId("confirm").addEventListener("click", confirmAction);
  load();
});
