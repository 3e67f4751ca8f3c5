// The local workspace's page: asks the server for news, draws it, and sends what you do.
"use strict";

const { el } = Blocks;
const $ = (id) => document.getElementById(id);

const view = {
  user: localStorage.getItem("opsgate.user") || "",
  channel: localStorage.getItem("opsgate.channel") || "ops",
  thread: null,
  home: false,
  state: null,
  version: 0,
  generation: 0,
  modalDrawn: null,
};

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ user: view.user, ...body }),
  });
  if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
  return response.json();
}

// -- news ------------------------------------------------------------------------------------

async function poll() {
  for (;;) {
    const generation = view.generation;
    try {
      const epoch = view.state ? view.state.epoch : "";
      const query = `user=${encodeURIComponent(view.user)}&after=${view.version}&epoch=${epoch}`;
      const response = await fetch(`/workspace/state?${query}`);
      if (!response.ok) throw new Error(String(response.status));
      const state = await response.json();
      if (generation !== view.generation) continue; // the person changed meanwhile
      view.state = state;
      view.version = state.version;
      draw();
    } catch (error) {
      document.body.dataset.offline = "true";
      await new Promise((resolve) => setTimeout(resolve, 1000)); // the server restarts: retry
      continue;
    }
    delete document.body.dataset.offline;
  }
}

function refresh() {
  view.generation += 1;
  view.version = 0;
  fetch(`/workspace/state?user=${encodeURIComponent(view.user)}&after=0`)
    .then((r) => r.json())
    .then((state) => {
      view.state = state;
      view.version = state.version;
      draw();
    });
}

// -- drawing ---------------------------------------------------------------------------------

function draw() {
  const s = view.state;
  if (!s) return;
  drawPeople(s);
  drawSidebar(s);
  const note = $("model-note");
  note.hidden = !s.model_note;
  note.textContent = s.model_note || "";
  const current = s.channels.find((c) => c.name === view.channel) || s.channels[0];
  $("title").textContent = view.home ? "Home" : current.label;
  $("send-alert").hidden = view.home || current.name !== "alerts";
  $("messages").hidden = view.home;
  $("composer").hidden = view.home;
  $("home").hidden = !view.home;
  $("composer").querySelector("textarea").placeholder = `Message ${current.label} — try “@OpsGate run: df -h”, or /opsgate help`;
  if (view.home) drawHome(s);
  else drawChannel(s, current);
  drawThread(s);
  drawModal(s);
  document.body.dataset.version = String(s.version);
}

function drawPeople(s) {
  const select = $("user");
  if (select.options.length !== s.people.length) {
    select.replaceChildren(
      ...s.people.map((p) => el("option", { value: p.id, text: `${p.name} (${p.role})` })),
    );
  }
  select.value = view.user;
}

// What is on screen stays the same nodes while it does not change: a person (or a test) who
// found a link or a button can click it after a redraw.
let sidebarDrawn = null;

function drawSidebar(s) {
  const key = JSON.stringify([s.channels, view.channel, view.home]);
  if (key === sidebarDrawn) return;
  sidebarDrawn = key;
  const link = (c) =>
    el("a", {
      href: `#${c.name}`,
      class: "nav" + (!view.home && c.name === view.channel ? " active" : ""),
      "data-channel": c.name,
      text: c.name === "dm" ? `@ ${c.label}` : c.label,
    });
  $("channels").replaceChildren(...s.channels.filter((c) => c.name !== "dm").map(link));
  $("dms").replaceChildren(...s.channels.filter((c) => c.name === "dm").map(link));
  document.querySelector("[data-home]").classList.toggle("active", view.home);
}

function author(m, s) {
  if (m.bot_id === s.bot.bot_id) return [s.bot.name, true];
  if (m.bot_id) return [(m.bot_profile && m.bot_profile.name) || m.username || m.bot_id, true];
  return [s.names[m.user] || m.user, false];
}

function messageNode(m, s, channel, inThread) {
  const [name, isApp] = author(m, s);
  const time = new Date(parseFloat(m.ts) * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  const node = el("article", {
    class: "message" + (m.ephemeral_for ? " ephemeral" : "") + (m.streaming ? " streaming" : ""),
    "data-ts": m.ts,
    "data-thread-ts": inThread ? m.thread_ts || m.ts : null,
    "data-conversation": channel.name,
    "data-streaming": m.streaming ? "true" : null,
  });
  const head = el("div", { class: "head" }, el("strong", { text: name }));
  if (isApp) head.append(el("span", { class: "badge", text: "APP" }));
  head.append(el("span", { class: "time", text: time }));
  if (m.ephemeral_for) head.append(el("span", { class: "only-you", text: "Only visible to you" }));
  node.append(head);
  const ctx = { names: s.names };
  const drawn = m.blocks && m.blocks.some((b) => b.type !== "rich_text");
  const streamed = "chunks" in m; // a streamed answer: its text, its timeline, then its blocks
  const line = Blocks.timeline(m.chunks, s.names);
  if (line) node.append(line);
  if (m.text && (streamed || !drawn)) node.append(Blocks.mrkdwn(m.text, s.names));
  if (drawn) node.append(Blocks.render(m.blocks, ctx));
  for (const a of m.attachments || []) {
    const box = el("div", { class: "attachment" });
    box.style.borderColor = a.color || "#ccc";
    if (a.title) box.append(el("strong", { text: a.title }));
    if (a.text) box.append(Blocks.mrkdwn(a.text, s.names));
    node.append(box);
  }
  for (const f of m.files || []) {
    node.append(el("details", { class: "file" }, el("summary", { text: `File: ${f.title || f.name}` }), el("pre", { text: f.content || "" })));
  }
  if (m.reactions && m.reactions.length) {
    const r = el("div", { class: "reactions" });
    for (const x of m.reactions) r.append(el("span", { class: "reaction", "data-reaction": x.name, text: `${Blocks.emoji(`:${x.name}:`)} ${x.count}` }));
    node.append(r);
  }
  return node;
}

// Drawn messages by where and what they are: a message that did not change keeps its node, so
// a redraw neither flickers nor takes a button from under a click.
const drawn = new Map();

function cached(key, content, build) {
  const found = drawn.get(key);
  if (found && found.content === content) return found.node;
  const node = build();
  drawn.set(key, { content, node });
  return node;
}

function drawChannel(s, channel) {
  const all = s.messages[channel.name] || [];
  const top = all.filter((m) => !m.thread_ts || m.thread_ts === m.ts);
  const nodes = top.map((m) => {
    const replies = all.filter((r) => r.thread_ts === m.ts && r.ts !== m.ts);
    const content = JSON.stringify([m, replies.length, s.user]);
    return cached(`main:${channel.name}:${m.ts}`, content, () => {
      const node = messageNode(m, s, channel, false);
      const label = replies.length ? `${replies.length} repl${replies.length === 1 ? "y" : "ies"}` : "Reply in thread";
      node.append(el("a", { href: "#", class: "open-thread", "data-open-thread": m.ts, text: label }));
      return node;
    });
  });
  if (!nodes.length) nodes.push(el("p", { class: "empty", text: "No messages yet. Mention @OpsGate to ask it something." }));
  replaceKeepingScroll($("messages"), nodes);
}

function drawThread(s) {
  const pane = $("thread");
  if (!view.thread) {
    pane.hidden = true;
    return;
  }
  pane.hidden = false;
  const channel = s.channels.find((c) => c.name === view.thread.channel);
  const all = (channel && s.messages[channel.name]) || [];
  const thread = all.filter((m) => m.ts === view.thread.ts || m.thread_ts === view.thread.ts);
  replaceKeepingScroll($("thread-messages"), thread.map((m) =>
    cached(`thread:${channel.name}:${m.ts}`, JSON.stringify([m, s.user]), () => {
      const node = messageNode(m, s, channel, true);
      node.setAttribute("data-thread-ts", view.thread.ts);
      return node;
    }),
  ));
}

function replaceKeepingScroll(box, nodes) {
  const atEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  const same = box.children.length === nodes.length && nodes.every((n, i) => box.children[i] === n);
  if (!same) box.replaceChildren(...nodes);
  if (atEnd) box.scrollTop = box.scrollHeight;
}

function drawHome(s) {
  const box = $("home");
  if (!s.home) {
    box.replaceChildren(el("p", { class: "empty", text: "Loading the Home tab…" }));
    return;
  }
  const content = cached(`home:${s.user}`, JSON.stringify(s.home), () => {
    const node = Blocks.render(s.home.blocks, { names: s.names });
    node.dataset.viewId = s.home.id;
    return node;
  });
  if (box.firstChild !== content) box.replaceChildren(content);
}

function drawModal(s) {
  const root = $("modal-root");
  const modal = s.modal;
  const key = modal ? `${modal.id}:${modal.view.hash}:${JSON.stringify(modal.errors || {})}` : null;
  if (key === view.modalDrawn) return;
  view.modalDrawn = key;
  if (!modal) {
    root.replaceChildren();
    return;
  }
  const v = modal.view;
  const form = el("form", { class: "modal", "data-callback-id": v.callback_id || "", "data-view-id": modal.id });
  form.append(el("h2", { text: (v.title && v.title.text) || "" }));
  form.append(Blocks.render(v.blocks, { names: s.names, errors: modal.errors || {} }));
  const buttons = el("div", { class: "modal-buttons" });
  buttons.append(el("button", { type: "button", class: "btn", "data-close": "", text: (v.close && v.close.text) || "Cancel" }));
  if (v.submit) buttons.append(el("button", { type: "submit", class: "btn primary", text: v.submit.text }));
  form.append(buttons);
  root.replaceChildren(el("div", { class: "backdrop" }, form));
}

// -- doing -----------------------------------------------------------------------------------

function send(form, thread) {
  const box = form.querySelector("textarea[name=message]");
  const text = box.value.trim();
  if (!text) return;
  box.value = "";
  const channel = thread ? thread.channel : view.channel;
  post("/workspace/message", { channel, text, thread_ts: thread ? thread.ts : null }).then((answer) => {
    if (!thread && answer.ts && /@opsgate/i.test(text) && channel !== "dm") openThread(channel, answer.ts);
  });
}

function openThread(channel, ts) {
  view.thread = { channel, ts };
  draw();
}

function modalValues(form) {
  const values = {};
  for (const wrap of form.querySelectorAll(".input[data-block-id]")) {
    const field = wrap.querySelector("[name]");
    if (!field) continue;
    const checked = wrap.querySelector("input[type=radio]:checked");
    values[wrap.dataset.blockId] = field.type === "radio" ? (checked ? checked.value : null) : field.value;
  }
  return values;
}

function click(button) {
  const message = button.closest("[data-ts]");
  const viewRoot = button.closest("[data-view-id]");
  const body = {
    action_id: button.dataset.actionId,
    block_id: button.dataset.blockId,
    value: button.dataset.value,
    text: button.textContent,
  };
  if (message) post("/workspace/action", { ...body, channel: message.dataset.conversation, ts: message.dataset.ts });
  else if (viewRoot) post("/workspace/action", { ...body, view_id: viewRoot.dataset.viewId });
}

function confirmThen(button) {
  const confirm = JSON.parse(button.dataset.confirm);
  const t = (o, d) => (o && o.text) || d;
  const dialog = el("form", { class: "modal confirm", "data-confirm-dialog": "" });
  dialog.append(el("h2", { text: t(confirm.title, "Are you sure?") }), Blocks.mrkdwn(t(confirm.text, ""), {}));
  const no = el("button", { type: "button", class: "btn", "data-confirm-answer": "no", text: t(confirm.deny, "Cancel") });
  const yes = el("button", { type: "submit", class: "btn primary", "data-confirm-answer": "yes", text: t(confirm.confirm, "Yes") });
  dialog.append(el("div", { class: "modal-buttons" }, no, yes));
  $("confirm-root").replaceChildren(el("div", { class: "backdrop" }, dialog));
  no.addEventListener("click", () => $("confirm-root").replaceChildren());
  dialog.addEventListener("submit", (event) => {
    event.preventDefault();
    $("confirm-root").replaceChildren();
    click(button);
  });
}

document.addEventListener("click", (event) => {
  const target = event.target.closest("a.nav[data-channel], [data-home], [data-open-thread], [data-action-id], [data-close], #close-thread, #send-alert");
  if (!target || target.closest("#modal-root form") && !target.matches("[data-close]")) return;
  if (target.matches("a.nav[data-channel]")) {
    event.preventDefault();
    view.channel = target.dataset.channel;
    view.home = false;
    view.thread = null;
    localStorage.setItem("opsgate.channel", view.channel);
    draw();
  } else if (target.matches("[data-home]")) {
    event.preventDefault();
    view.home = true;
    view.thread = null;
    draw();
    post("/workspace/home", {});
  } else if (target.matches("[data-open-thread]")) {
    event.preventDefault();
    openThread(target.closest("[data-conversation]").dataset.conversation, target.dataset.openThread);
  } else if (target.matches("[data-action-id]")) {
    if (target.dataset.url) window.open(target.dataset.url, "_blank", "noopener");
    if (target.dataset.confirm) confirmThen(target);
    else click(target);
  } else if (target.matches("[data-close]")) {
    post("/workspace/close", { view_id: target.closest("form").dataset.viewId });
  } else if (target.id === "close-thread") {
    view.thread = null;
    draw();
  } else if (target.id === "send-alert") {
    post("/workspace/alert", {});
  }
});

document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form.id === "composer") send(form, null);
  else if (form.id === "thread-composer") send(form, view.thread);
  else if (form.matches("#modal-root form")) {
    post("/workspace/submit", { view_id: form.dataset.viewId, values: modalValues(form) });
  } else return;
  event.preventDefault();
});

document.addEventListener("keydown", (event) => {
  const box = event.target;
  if (event.key === "Enter" && !event.shiftKey && box.matches("textarea[name=message]")) {
    event.preventDefault();
    box.form.requestSubmit();
  }
});

$("user").addEventListener("change", (event) => {
  view.user = event.target.value;
  localStorage.setItem("opsgate.user", view.user);
  view.modalDrawn = null;
  refresh();
  if (view.home) post("/workspace/home", {});
});

fetch("/workspace/state?after=0&user=" + encodeURIComponent(view.user || "U0RILEY"))
  .then((r) => (r.ok ? r.json() : fetch("/workspace/state?after=0&user=U0RILEY").then((x) => x.json())))
  .then((state) => {
    if (!state.people.some((p) => p.id === view.user)) view.user = state.people[0].id;
    view.state = state;
    view.version = state.version;
    draw();
    poll();
  });
