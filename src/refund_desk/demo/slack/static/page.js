// The Slack sandbox page: plain JavaScript, no build step, no network beyond this server.
// Every piece of Slack text becomes DOM text nodes (never innerHTML), so nothing a message
// carries can run as code.
"use strict";

const $ = (id) => document.getElementById(id);
const view = { user: localStorage.getItem("sandbox-user") || "", place: "C0REFUNDS" };
let state = null;
const drawn = {};

// ------------------------------------------------------------------ DOM helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function userName(id) {
  const user = state && state.users.find((u) => u.id === id);
  return user ? user.name : id;
}

function channelName(id) {
  const channel = state && state.channels.find((c) => c.id === id);
  return channel ? channel.name : id;
}

// ------------------------------------------------------------------ mrkdwn

// Slack's short codes, shown as the emoji Slack shows (every code the app writes, and the
// common ones people type); a code Slack does not know stays as typed, as in Slack.
const EMOJI = {
  white_check_mark: "\u2705", heavy_check_mark: "\u2714\ufe0f", ballot_box_with_check: "\u2611\ufe0f",
  x: "\u274c", no_entry: "\u26d4", no_entry_sign: "\u{1F6AB}", octagonal_sign: "\u{1F6D1}",
  warning: "\u26a0\ufe0f", rotating_light: "\u{1F6A8}", bulb: "\u{1F4A1}", memo: "\u{1F4DD}",
  alarm_clock: "\u23f0", hourglass: "\u231b", hourglass_flowing_sand: "\u23f3", stopwatch: "\u23f1\ufe0f",
  arrow_up: "\u2b06\ufe0f", arrow_down: "\u2b07\ufe0f", arrow_right: "\u27a1\ufe0f", arrow_left: "\u2b05\ufe0f",
  arrow_forward: "\u25b6\ufe0f", rewind: "\u23ea", fast_forward: "\u23e9", repeat: "\u{1F501}",
  chart_with_upwards_trend: "\u{1F4C8}", chart_with_downwards_trend: "\u{1F4C9}", bar_chart: "\u{1F4CA}",
  page_facing_up: "\u{1F4C4}", scroll: "\u{1F4DC}", clipboard: "\u{1F4CB}", inbox_tray: "\u{1F4E5}",
  outbox_tray: "\u{1F4E4}", envelope: "\u2709\ufe0f", email: "\u{1F4E7}", lock: "\u{1F512}", unlock: "\u{1F513}",
  key: "\u{1F511}", mag: "\u{1F50D}", mag_right: "\u{1F50E}", stethoscope: "\u{1FA7A}", wrench: "\u{1F527}",
  gear: "\u2699\ufe0f", rocket: "\u{1F680}", ghost: "\u{1F47B}", tada: "\u{1F389}", bell: "\u{1F514}",
  moneybag: "\u{1F4B0}", money_with_wings: "\u{1F4B8}", credit_card: "\u{1F4B3}", receipt: "\u{1F9FE}",
  package: "\u{1F4E6}", truck: "\u{1F69A}", link: "\u{1F517}", pushpin: "\u{1F4CC}", eyes: "\u{1F440}",
  thumbsup: "\u{1F44D}", "+1": "\u{1F44D}", thumbsdown: "\u{1F44E}", "-1": "\u{1F44E}", wave: "\u{1F44B}",
  pray: "\u{1F64F}", raised_hands: "\u{1F64C}", clap: "\u{1F44F}", ok_hand: "\u{1F44C}", point_right: "\u{1F449}",
  smile: "\u{1F604}", slightly_smiling_face: "\u{1F642}", thinking_face: "\u{1F914}", heart: "\u2764\ufe0f",
  fire: "\u{1F525}", sparkles: "\u2728", star: "\u2b50", zap: "\u26a1", question: "\u2753",
  exclamation: "\u2757", information_source: "\u2139\ufe0f", red_circle: "\u{1F534}",
  large_green_circle: "\u{1F7E2}", large_yellow_circle: "\u{1F7E1}", large_blue_circle: "\u{1F535}",
  calendar: "\u{1F4C6}", date: "\u{1F4C5}", hammer_and_wrench: "\u{1F6E0}\ufe0f", shield: "\u{1F6E1}\ufe0f",
};
// Like Slack, *bold*, _italic_ and ~strike~ only start and end at word boundaries; a bare web
// address becomes a link, as Slack makes it one.
const TOKEN = /(<[^<>\n]+>)|(`[^`\n]+`)|((?<![\w*])\*[^*\n]+\*(?![\w*]))|((?<![\w_])_[^_\n]+_(?![\w_]))|((?<![\w~])~[^~\n]+~(?![\w~]))|(:[a-z0-9_+-]+:)|(https?:\/\/[^\s<>]+[^\s<>.,;:!?)'"\u201d])/g;

// ------------------------------------------------------------------ times

// Slack's date formatting (`<!date^EPOCH^{date_short_pretty} {time}|fallback>`), in the
// reader's own time zone, as Slack shows it: "Dec 6, 2026 9:21 PM", "Today 9:21 PM".
const LOCALE = "en-US";

function ordinal(day) {
  const tens = day % 100;
  if (tens >= 11 && tens <= 13) return day + "th";
  return day + ({ 1: "st", 2: "nd", 3: "rd" }[day % 10] || "th");
}

function dayOffset(date) {
  const midnight = (d) => new Date(d.getFullYear(), d.getMonth(), d.getDate()).getTime();
  return Math.round((midnight(date) - midnight(new Date())) / 86400000);
}

function ago(date) {
  const seconds = Math.round((Date.now() - date.getTime()) / 1000);
  const span = Math.abs(seconds);
  const [n, unit] = span < 60 ? [span, "second"] : span < 3600 ? [Math.round(span / 60), "minute"]
    : span < 86400 ? [Math.round(span / 3600), "hour"] : [Math.round(span / 86400), "day"];
  const words = n + " " + unit + (n === 1 ? "" : "s");
  return seconds >= 0 ? words + " ago" : "in " + words;
}

function dateToken(date, token) {
  const part = (options) => new Intl.DateTimeFormat(LOCALE, options).format(date);
  const month = part({ month: "long" });
  const short = part({ month: "short", day: "numeric", year: "numeric" });
  const full = month + " " + ordinal(date.getDate()) + ", " + date.getFullYear();
  const pretty = (fallback) => ({ "-1": "yesterday", 0: "today", 1: "tomorrow" }[dayOffset(date)] || fallback);
  switch (token) {
    case "date_num": return date.getFullYear() + "-" + String(date.getMonth() + 1).padStart(2, "0") + "-" + String(date.getDate()).padStart(2, "0");
    case "date": return full;
    case "date_short": return short;
    case "date_long": return part({ weekday: "long" }) + ", " + full;
    case "date_pretty": return pretty(full);
    case "date_short_pretty": return pretty(short);
    case "date_long_pretty": return pretty(part({ weekday: "long" }) + ", " + full);
    case "time": return part({ hour: "numeric", minute: "2-digit" });
    case "time_secs": return part({ hour: "numeric", minute: "2-digit", second: "2-digit" });
    case "ago": return ago(date);
    default: return null;
  }
}

// A <time> with the moment in ISO 8601 and, on hover, the date with its zone named.
function timeNode(date, shown) {
  const zoned = new Intl.DateTimeFormat(LOCALE, { dateStyle: "full", timeStyle: "long" }).format(date);
  return el("time", { datetime: date.toISOString(), title: zoned }, shown);
}

function slackDate(format, date) {
  const text = format.replace(/\{(\w+)\}/g, (whole, token) => {
    const value = dateToken(date, token);
    return value === null ? whole : value;
  });
  return text.charAt(0).toUpperCase() + text.slice(1);
}

// Every time the page writes itself (a message's, an audit record's) is written the same way.
function when(date, format) {
  return timeNode(date, slackDate(format || "{date_short_pretty} {time}", date));
}

function angle(inner) {
  const [target, label] = inner.split(/\|(.*)/s);
  if (target.startsWith("@")) return el("span", { class: "mention" }, "@" + userName(target.slice(1)));
  if (target.startsWith("#")) return el("span", { class: "mention" }, "#" + (label || channelName(target.slice(1))));
  if (target.startsWith("!subteam^")) return el("span", { class: "mention" }, "@" + (label || target.slice(9)));
  if (target.startsWith("!date^")) {
    const [, stamp, format] = target.split("^");
    const date = new Date(Number(stamp) * 1000);
    return Number.isFinite(date.getTime()) && format ? when(date, format) : (label || "");
  }
  if (target.startsWith("!")) return el("span", { class: "mention" }, "@" + target.slice(1));
  if (/^https?:\/\//.test(target)) {
    return el("a", { href: target, target: "_blank", rel: "noopener noreferrer" }, label || target);
  }
  return label || target;
}

// Slack escapes three characters in text; it shows them as themselves.
function unescape(text) {
  return text.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
}

function inline(text) {
  const out = [];
  let last = 0;
  for (const match of text.matchAll(TOKEN)) {
    out.push(unescape(text.slice(last, match.index)));
    const [whole] = match;
    const inner = whole.slice(1, -1);
    if (match[1]) out.push(angle(inner));
    else if (match[2]) out.push(caseCode(unescape(inner)));
    else if (match[3]) out.push(el("b", {}, inline(inner)));
    else if (match[4]) out.push(el("i", {}, inline(inner)));
    else if (match[5]) out.push(el("s", {}, inline(inner)));
    else if (match[6]) out.push(EMOJI[inner] || whole);
    else out.push(el("a", { href: unescape(whole), target: "_blank", rel: "noopener noreferrer" }, unescape(whole)));
    last = match.index + whole.length;
  }
  out.push(unescape(text.slice(last)));
  return out;
}

// A case id in a message (a backtest's examples) opens that case, as the link under a card does.
function caseCode(text) {
  if (!/^case_[0-9a-f]{8,}$/.test(text)) return el("code", {}, text);
  return el("a", { href: deskLink(text), class: "case-ref", target: "_blank", rel: "noopener" }, el("code", {}, text));
}

function lines(text) {
  return text.split("\n").flatMap((line, i) => (i ? [el("br"), ...inline(line)] : inline(line)));
}

// ```preformatted``` blocks keep their spaces and line breaks, as in Slack.
function mrkdwn(text) {
  const parts = String(text || "").split(/```([\s\S]*?)```/);
  return parts.flatMap((part, i) =>
    i % 2 ? [el("pre", { class: "code" }, unescape(part.replace(/^\n/, "")))] : lines(part));
}

function textObject(obj) {
  if (!obj) return "";
  if (typeof obj === "string") return obj;
  return obj.type === "mrkdwn" ? el("span", {}, mrkdwn(obj.text)) : el("span", {}, obj.text || "");
}

// ------------------------------------------------------------------ Block Kit

function button(element, ctx, blockId) {
  const style = element.style ? " " + element.style : "";
  const node = el("button", { class: "btn" + style, type: "button" }, textObject(element.text));
  node.addEventListener("click", async () => {
    if (!ctx.message) return;
    if (element.confirm && !(await confirmDialog(element.confirm))) return;
    node.disabled = true;
    await act("click", { channel: ctx.message.channel, ts: ctx.message.ts, block_id: blockId, action_id: element.action_id });
    node.disabled = false;
  });
  return node;
}

function inputElement(block, ctx) {
  const element = block.element || {};
  const id = "in-" + block.block_id;
  const kept = ctx.values ? ctx.values[block.block_id] : undefined;
  const placeholder = element.placeholder ? element.placeholder.text : null;
  if (element.type === "static_select") {
    const select = el("select", { id, name: block.block_id }, el("option", { value: "" }, "Choose…"));
    for (const option of element.options || []) {
      select.append(el("option", { value: option.value }, option.text.text));
    }
    if (element.initial_option) select.value = element.initial_option.value;
    if (kept !== undefined) select.value = kept;
    return select;
  }
  const attrs = { id, name: block.block_id, placeholder, maxlength: element.max_length };
  if (element.type === "number_input") Object.assign(attrs, { type: "number", step: element.is_decimal_allowed ? "any" : "1" });
  if (element.type === "email_text_input") attrs.type = "email";
  const input = element.multiline ? el("textarea", { ...attrs, rows: 3 }) : el("input", attrs);
  if (element.initial_value !== undefined) input.value = element.initial_value;
  if (kept !== undefined) input.value = kept;
  return input;
}

function renderBlock(block, ctx) {
  switch (block.type) {
    case "header":
      return el("div", { class: "blk-header" }, textObject(block.text));
    case "divider":
      return el("hr", { class: "blk-divider" });
    case "section": {
      const parts = [];
      if (block.text) parts.push(el("div", {}, textObject(block.text)));
      if (block.fields) parts.push(el("div", { class: "blk-fields" }, block.fields.map((f) => el("div", {}, textObject(f)))));
      if (block.accessory && block.accessory.type === "button") parts.push(button(block.accessory, ctx, block.block_id));
      return el("div", { class: "blk-section" }, parts);
    }
    case "context":
      return el("div", { class: "blk-context" }, (block.elements || []).map((e) => (e.type === "image" ? "" : textObject(e))));
    case "actions":
      return el("div", { class: "blk-actions" }, (block.elements || []).filter((e) => e.type === "button").map((e) => button(e, ctx, block.block_id)));
    case "image":
      return el("div", { class: "blk-image" }, "Image (not loaded in the sandbox): " + (block.alt_text || ""));
    case "input": {
      const error = ctx.errors && ctx.errors[block.block_id];
      return el("div", { class: "field" },
        el("label", { for: "in-" + block.block_id }, block.label.text, block.optional ? el("span", { class: "muted" }, " (optional)") : ""),
        inputElement(block, ctx),
        error ? el("div", { class: "error", "data-testid": "field-error" }, error) : "");
    }
    default:
      return el("div", { class: "blk-context" }, "[" + block.type + " block]");
  }
}

function renderBlocks(blocks, ctx) {
  return (blocks || []).map((b) => renderBlock(b, ctx));
}

// ------------------------------------------------------------------ dialogs

function confirmDialog(confirm) {
  return new Promise((resolve) => {
    const done = (answer) => { $("overlay").hidden = true; $("overlay").replaceChildren(); resolve(answer); };
    const box = el("div", { class: "dialog", role: "dialog", "data-testid": "confirm" },
      el("h3", {}, textObject(confirm.title)),
      el("div", { class: "body" }, textObject(confirm.text)),
      el("div", { class: "foot" },
        el("button", { class: "btn", type: "button", onclick: () => done(false) }, textObject(confirm.deny) || "Cancel"),
        el("button", { class: "btn primary", type: "button", onclick: () => done(true) }, textObject(confirm.confirm) || "OK")));
    $("overlay").replaceChildren(box);
    $("overlay").hidden = false;
  });
}

function drawModal(modal) {
  const overlay = $("overlay");
  if (!modal) {
    if (overlay.querySelector("[data-testid=modal]")) { overlay.hidden = true; overlay.replaceChildren(); }
    return;
  }
  const values = {};
  for (const field of overlay.querySelectorAll("[data-testid=modal] [name]")) values[field.name] = field.value;
  const v = modal.view;
  const form = el("form", { class: "dialog", role: "dialog", "data-testid": "modal" },
    el("h3", {}, textObject(v.title)),
    el("div", { class: "body" }, renderBlocks(v.blocks, { modal, errors: modal.errors, values })),
    el("div", { class: "foot" },
      el("button", { class: "btn", type: "button", onclick: () => act("close", {}) }, textObject(v.close) || "Cancel"),
      v.submit ? el("button", { class: "btn primary", type: "submit" }, textObject(v.submit)) : ""));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const entered = {};
    for (const field of form.querySelectorAll("[name]")) entered[field.name] = field.value;
    await act("submit", { view_id: modal.id, values: entered });
  });
  overlay.replaceChildren(form);
  overlay.hidden = false;
}

// ------------------------------------------------------------------ the channel

function messageNode(m, extraClass) {
  const key = m.channel + "/" + m.ts;
  const caseId = state.shown[key];
  const ctx = { message: m };
  const files = m.files || [];
  const body = m.blocks && m.blocks.length ? renderBlocks(m.blocks, ctx)
    : files.length ? [fileLinks(files)] : [el("div", {}, mrkdwn(m.text))];
  return el("div", { class: "msg " + (extraClass || ""), "data-testid": "message", "data-ts": m.ts, "data-case": caseId || null },
    el("div", {}, el("span", { class: "who" }, "Refund Desk"), el("span", { class: "when" }, when(new Date(Number(m.ts.split(".")[0]) * 1000), "{time}")),
      m.edited ? el("span", { class: "edited" }, " (edited)") : ""),
    body,
    caseId ? el("div", { class: "case-link" }, el("a", { href: deskLink(caseId), target: "_blank", rel: "noopener" }, "Case " + caseId + " · its record on the desk")) : "");
}

// A shared file opens from the message, as in Slack (a backtest's CSV).
function fileLinks(files) {
  return el("div", { class: "files" }, files.map((f) =>
    el("a", { class: "file", "data-testid": "file", href: "/sandbox/files/" + encodeURIComponent(f.id) + "/" + encodeURIComponent(f.name), target: "_blank", rel: "noopener" },
      "\u{1F4C4} " + (f.title || f.name))));
}

function drawChannel() {
  const box = $("messages");
  if (view.place === "home") {
    $("channel-title").textContent = "Refund Desk · App Home";
    const home = state.home;
    box.replaceChildren(home ? el("div", { class: "msg", "data-testid": "home" }, renderBlocks(home.blocks, {})) : el("p", { class: "muted" }, "Loading App Home…"));
    return;
  }
  const channel = state.channels.find((c) => c.id === view.place) || state.channels[0];
  view.place = channel.id;
  $("channel-title").textContent = channel.is_dm ? "Refund Desk (direct messages)" : "#" + channel.name;
  const here = state.messages.filter((m) => m.channel === channel.id);
  const top = here.filter((m) => !m.thread_ts);
  const items = [
    ...top.map((m) => ({ ts: m.ts, node: () => {
      const replies = here.filter((r) => r.thread_ts === m.ts);
      const node = messageNode(m);
      if (replies.length) node.append(el("div", { class: "thread", "data-testid": "thread" }, replies.map((r) => messageNode(r))));
      return node;
    } })),
    ...state.ephemerals.filter((m) => m.channel === channel.id).map((m) => ({ ts: m.ts, node: () =>
      el("div", { class: "msg ephemeral", "data-testid": "ephemeral" }, el("div", { class: "only" }, "Only visible to you"),
        m.blocks && m.blocks.length ? renderBlocks(m.blocks, {}) : el("div", {}, mrkdwn(m.text))) })),
  ].sort((a, b) => Number(a.ts.replace(".", "")) - Number(b.ts.replace(".", "")));
  const stick = box.scrollTop + box.clientHeight >= box.scrollHeight - 40;
  box.replaceChildren(...(items.length ? items.map((i) => i.node()) : [el("p", { class: "muted" }, "No messages yet.")]));
  if (stick) box.scrollTop = box.scrollHeight;
}

function drawSidebar() {
  const entry = (label, place) => el("button", { class: place === view.place ? "active" : "", type: "button", onclick: () => go(place) }, label);
  $("sidebar").replaceChildren(
    el("h4", {}, "Channels"),
    ...state.channels.filter((c) => !c.is_dm).map((c) => entry("# " + c.name, c.id)),
    el("h4", {}, "Apps"),
    entry("Refund Desk · Home", "home"),
    ...state.channels.filter((c) => c.is_dm).map((c) => entry("Refund Desk · Messages", c.id)));
}

function drawPicker() {
  const picker = $("user-picker");
  if (!picker.options.length) {
    for (const u of state.users) picker.append(el("option", { value: u.id }, u.name + " (" + u.role + ")"));
  }
  picker.value = state.user;
  const me = state.users.find((u) => u.id === state.user);
  $("user-role").textContent = me ? me.id + " · " + me.role : "";
}

function drawCases() {
  $("cases").replaceChildren(...state.cases.map((c) =>
    el("a", { class: "case-row", href: deskLink(c.id), target: "_blank", rel: "noopener", "data-testid": "case-row", "data-case": c.id },
      el("span", {}, c.amount),
      el("span", {}, el("span", { class: "chip " + c.status }, c.status.replace("_", " ")), " ", c.rule ? c.rule : "default", c.tier ? " · tier " + c.tier : ""),
      el("span", { class: "muted" }, c.requested_by ? "by " + userName(c.requested_by) : c.source))));
}

// A case's record is the desk's: one record view, signed in with (this sandbox's) Slack.
function deskLink(caseId) {
  return "/desk/cases/" + encodeURIComponent(caseId);
}

// ------------------------------------------------------------------ talking to the server

function notice(text, ok) {
  const box = $("notice");
  box.hidden = !text;
  box.className = "notice" + (ok ? " ok" : "");
  box.textContent = text || "";
}

async function act(kind, body) {
  const response = await fetch("/sandbox/act/" + kind, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ user: view.user, ...body }),
  });
  const answer = await response.json().catch(() => ({}));
  notice(answer.warning || answer.error ? String(answer.warning || answer.error) : "", false);
  await refresh();
  return answer;
}

function go(place) {
  view.place = place;
  if (place === "home") act("home", {});
  drawSidebar();
  drawChannel();
}

function changed(key, value) {
  const text = JSON.stringify(value);
  if (drawn[key] === text) return false;
  drawn[key] = text;
  return true;
}

async function refresh() {
  const response = await fetch("/sandbox/state?user=" + encodeURIComponent(view.user));
  if (!response.ok) return;
  state = await response.json();
  view.user = state.user;
  if (changed("picker", [state.user, state.users])) drawPicker();
  if (changed("sidebar", [state.channels, view.place])) drawSidebar();
  if (changed("channel", [view.place, state.user, state.messages, state.ephemerals, state.home, state.shown])) drawChannel();
  if (changed("modal", state.modal)) drawModal(state.modal);
  if (changed("cases", [state.cases])) {
    drawCases();
  }
}

$("user-picker").addEventListener("change", (event) => {
  view.user = event.target.value;
  localStorage.setItem("sandbox-user", view.user);
  notice("", false);
  if (view.place === "home" || view.place.startsWith("D")) view.place = view.place === "home" ? "home" : "C0REFUNDS";
  if (view.place === "home") act("home", {});
  refresh();
});

$("composer").addEventListener("submit", async (event) => {
  event.preventDefault();
  const input = $("command");
  const text = input.value.trim();
  if (!text) return;
  if (!text.startsWith("/")) { notice("The sandbox only sends slash commands, e.g. /refund", false); return; }
  const channel = view.place === "home" ? "C0REFUNDS" : view.place;
  input.value = "";
  await act("command", { channel, text });
});

refresh();
setInterval(refresh, 1000);
