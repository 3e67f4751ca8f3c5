// Block Kit and mrkdwn, drawn as DOM nodes (never as HTML strings: text stays text).
"use strict";

const Blocks = (() => {
  const decode = (s) => s.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const child of children) if (child) node.append(child);
    return node;
  }

  const INLINE = /(<[^<>\s][^<>]*>)|(`[^`\n]+`)|(\*\*[^*\n]+\*\*)|(\*[^*\n]+\*)|(\b_[^_\n]+_\b)|(~[^~\n]+~)/g;

  function inline(text, names, into) {
    let last = 0;
    for (const m of text.matchAll(INLINE)) {
      if (m.index > last) lines(decode(text.slice(last, m.index)), into);
      const t = m[0];
      if (m[1]) into.append(angle(t.slice(1, -1), names));
      else if (m[2]) into.append(el("code", { text: decode(t.slice(1, -1)) }));
      else if (m[3]) into.append(el("strong", { text: decode(t.slice(2, -2)) }));
      else if (m[4]) into.append(el("strong", { text: decode(t.slice(1, -1)) }));
      else if (m[5]) into.append(el("em", { text: decode(t.slice(1, -1)) }));
      else into.append(el("s", { text: decode(t.slice(1, -1)) }));
      last = m.index + t.length;
    }
    if (last < text.length) lines(decode(text.slice(last)), into);
  }

  // Slack's emoji codes the bot writes, as characters; others stay as written.
  const EMOJI = {
    white_check_mark: "✅", heavy_check_mark: "✔️", x: "❌", warning: "⚠️", no_entry: "⛔",
    no_entry_sign: "🚫", hourglass_flowing_sand: "⏳", hourglass: "⌛", lock: "🔒", eyes: "👀",
    scroll: "📜", mag: "🔍", rotating_light: "🚨", bell: "🔔", memo: "📝", stop_sign: "🛑",
    "+1": "👍", "-1": "👎", snowflake: "❄️", unlock: "🔓", sunny: "☀️", pencil2: "✏️",
    octagonal_sign: "🛑", alarm_clock: "⏰",
  };
  const emoji = (text) => text.replace(/:([a-z0-9_+-]+):/g, (all, code) => EMOJI[code] || all);

  function lines(text, into) {
    emoji(text).split("\n").forEach((line, i) => {
      if (i) into.append(el("br"));
      if (line) into.append(document.createTextNode(line));
    });
  }

  function angle(inner, names) {
    const [target, label] = inner.split("|", 2);
    if (target.startsWith("@")) {
      const id = target.slice(1);
      return el("span", { class: "mention", "data-user": id, text: "@" + (names[id] || label || id) });
    }
    if (target.startsWith("#")) {
      const id = target.slice(1);
      return el("span", { class: "mention", text: "#" + (label || names[id] || id) });
    }
    if (target.startsWith("!date^")) return el("time", { text: label || target });
    if (target.startsWith("!")) return el("span", { class: "mention", text: "@" + (label || target.slice(1)) });
    const href = decode(target);
    const safe = /^(https?:|mailto:)/i.test(href) ? href : "#";
    return el("a", { href: safe, target: "_blank", rel: "noopener", text: decode(label || target) });
  }

  // mrkdwn (and the Markdown of streamed answers): code blocks, then inline marks.
  function mrkdwn(text, names) {
    const out = el("div", { class: "mrkdwn" });
    const parts = String(text || "").split(/```/);
    parts.forEach((part, i) => {
      if (i % 2 === 1) out.append(el("pre", { text: decode(part.replace(/^[a-z]*\n/, "")) }));
      else inline(part, names, out);
    });
    return out;
  }

  const textOf = (obj, names) =>
    !obj ? null : obj.type === "mrkdwn" ? mrkdwn(obj.text, names) : el("span", { text: obj.text || "" });

  function button(element, ctx) {
    const b = el("button", {
      type: "button",
      class: "btn block-button" + (element.style ? " " + element.style : ""),
      "data-action-id": element.action_id || "",
      "data-value": element.value || "",
      "data-block-id": ctx.blockId || "",
      "data-confirm": element.confirm ? JSON.stringify(element.confirm) : null,
      text: (element.text && element.text.text) || "",
    });
    if (element.url) b.setAttribute("data-url", element.url);
    return b;
  }

  function feedback(e, ctx) {
    const pair = el("span", { class: "feedback" });
    for (const side of [e.positive_button, e.negative_button]) {
      if (side) pair.append(button({ ...side, action_id: e.action_id, type: "button" }, ctx));
    }
    return pair;
  }

  function element(e, ctx) {
    if (!e) return null;
    if (e.type === "button") return button(e, ctx);
    if (e.type === "feedback_buttons") return feedback(e, ctx);
    if (e.type === "mrkdwn" || e.type === "plain_text") return textOf(e, ctx.names);
    if (e.type === "image") return el("span", { class: "image", text: "🖼 " + (e.alt_text || "") });
    return unknown(e);
  }

  const unknown = (obj) =>
    el("pre", { class: "unknown-block", "data-block-type": obj.type || "?", text: JSON.stringify(obj, null, 2) });

  function input(block, ctx) {
    const e = block.element || {};
    const name = e.action_id || "";
    const wrap = el("label", { class: "input", "data-block-id": block.block_id || "" });
    wrap.append(el("span", { class: "label", text: (block.label && block.label.text) + (block.optional ? " (optional)" : "") }));
    let field;
    if (e.type === "plain_text_input") {
      field = e.multiline
        ? el("textarea", { name, rows: 3, maxlength: e.max_length })
        : el("input", { type: "text", name, maxlength: e.max_length });
      field.value = e.initial_value || "";
      if (e.placeholder) field.placeholder = e.placeholder.text;
    } else if (e.type === "static_select") {
      field = el("select", { name }, el("option", { value: "", text: (e.placeholder && e.placeholder.text) || "—" }));
      for (const o of e.options || []) field.append(el("option", { value: o.value, text: o.text.text }));
      if (e.initial_option) field.value = e.initial_option.value;
    } else if (e.type === "radio_buttons") {
      field = el("div", { class: "radios" });
      for (const o of e.options || []) {
        const checked = e.initial_option && e.initial_option.value === o.value;
        const r = el("input", { type: "radio", name, value: o.value, checked });
        field.append(el("label", { class: "radio" }, r, document.createTextNode(" " + o.text.text)));
      }
    } else {
      field = unknown(e);
    }
    wrap.append(field);
    if (block.hint) wrap.append(el("span", { class: "hint", text: block.hint.text }));
    const error = ctx.errors && ctx.errors[block.block_id];
    if (error) wrap.append(el("span", { class: "error", text: error }));
    return wrap;
  }

  function block(b, ctx) {
    const inner = { ...ctx, blockId: b.block_id };
    switch (b.type) {
      case "header":
        return el("h3", { class: "block-header", text: (b.text && b.text.text) || "" });
      case "divider":
        return el("hr");
      case "section": {
        const s = el("div", { class: "block-section" });
        const body = el("div", { class: "section-body" }, textOf(b.text, ctx.names));
        if (b.fields) {
          const grid = el("div", { class: "fields" });
          for (const f of b.fields) grid.append(textOf(f, ctx.names));
          body.append(grid);
        }
        s.append(body);
        if (b.accessory) s.append(el("div", { class: "accessory" }, element(b.accessory, inner)));
        return s;
      }
      case "context": {
        const c = el("div", { class: "block-context" });
        for (const e of b.elements || []) c.append(element(e, inner));
        return c;
      }
      case "actions":
      case "context_actions": {
        const a = el("div", { class: "block-actions" });
        for (const e of b.elements || []) a.append(element(e, inner));
        return a;
      }
      case "markdown":
        return mrkdwn(b.text, ctx.names);
      case "rich_text":
        return null; // the message's text says the same
      case "input":
        return input(b, inner);
      default:
        return unknown(b);
    }
  }

  function render(blocks, ctx) {
    const out = el("div", { class: "blocks" });
    for (const b of blocks || []) {
      const node = block(b, ctx);
      if (node) out.append(node);
    }
    return out;
  }

  const ICONS = { pending: "○", in_progress: "◐", complete: "●", error: "✕" };

  // The task timeline of a streamed answer: its plan and task updates, latest state of each.
  function timeline(chunks, names) {
    const tasks = new Map();
    let plan = null;
    for (const c of chunks || []) {
      if (c.type === "plan_update") plan = c.title;
      else if (c.type === "task_update") tasks.set(c.id, { ...(tasks.get(c.id) || {}), ...c });
    }
    if (!tasks.size && !plan) return null;
    const out = el("div", { class: "timeline" });
    if (plan) out.append(el("div", { class: "plan", text: plan }));
    for (const t of tasks.values()) {
      const row = el("div", { class: "task " + (t.status || ""), "data-task-status": t.status || "" });
      row.append(el("span", { class: "icon", text: ICONS[t.status] || "○" }), el("span", { text: " " + t.title }));
      for (const more of [t.details, t.output]) {
        if (more) row.append(el("div", { class: "details" }, mrkdwn(more, names || {})));
      }
      out.append(row);
    }
    return out;
  }

  return { el, emoji, mrkdwn, render, timeline, unknown };
})();
