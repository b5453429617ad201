// politerm web monitor: the overview, the event stream and live panes.
// Agent text is only ever set as textContent (never HTML); the pane bytes go to xterm.js.
"use strict";

const CONFIG = JSON.parse(document.body.dataset.config);
const PAGE = document.body.dataset.page;
const WS_BASE = (location.protocol === "https:" ? "wss://" : "ws://") + location.host;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function when(ts) {
  if (!ts) return "-";
  return new Date(ts * 1000).toLocaleTimeString([], { hour12: false });
}

function setStatus(text) {
  document.getElementById("status").textContent = text;
}

// What each drawn row was drawn from: a row whose data did not change is left as it is.
const DRAWN = new WeakMap();

// Draws rows of data into the table `id`, touching only the rows whose data changed: with
// hundreds of agents, one agent's change redraws one row, not every row of every table.
function table(id, columns, rows, cells) {
  const node = document.getElementById(id);
  if (!node) return;
  const wanted = [{ key: "head:" + JSON.stringify(columns), draw: () => {
    const head = el("tr");
    for (const c of columns) head.appendChild(el("th", c));
    return head;
  } }];
  if (!rows.length) {
    wanted.push({ key: "none", draw: () => {
      const tr = el("tr");
      const td = el("td", "none");
      td.colSpan = columns.length;
      tr.appendChild(td);
      return tr;
    } });
  }
  for (const row of rows) {
    // The cells (and their buttons' handlers) are a function of the row's data alone.
    wanted.push({ key: JSON.stringify(row), draw: () => {
      const tr = el("tr");
      for (const cell of cells(row)) {
        tr.appendChild(cell instanceof Node ? wrap(cell) : el("td", cell));
      }
      return tr;
    } });
  }
  redraw(node, wanted);
}

// Children of ``node`` as ``wanted`` says ({key, draw}), drawing only those whose key changed.
function redraw(node, wanted) {
  const drawn = [...node.children];
  wanted.forEach((want, i) => {
    const old = drawn[i];
    if (old && DRAWN.get(old) === want.key) return;
    const tr = want.draw();
    DRAWN.set(tr, want.key);
    if (old) node.replaceChild(tr, old);
    else node.appendChild(tr);
  });
  for (const extra of drawn.slice(wanted.length)) extra.remove();
}

function wrap(node) {
  if (node.tagName === "TD") return node;
  const td = el("td");
  td.appendChild(node);
  return td;
}

async function act(path, body) {
  const res = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Poli-Token": CONFIG.token },
    body: JSON.stringify(body),
  });
  const data = await res.json().catch(() => ({}));
  setStatus(res.ok ? data.message : "refused: " + (data.error || res.status));
  return res.ok;
}

function button(label, cls, onClick) {
  const b = el("button", label, cls);
  b.disabled = !CONFIG.actions;
  b.title = CONFIG.actions ? label : "read-only (start poli web --allow-actions)";
  b.addEventListener("click", async () => {
    b.disabled = true;
    await onClick();
  });
  return b;
}

// One tap on an action asks here first; only "yes" sends it (a stray tap on a phone is not
// an answer).
function confirmThen(text, label, run) {
  const box = document.getElementById("confirm");
  box.replaceChildren();
  box.appendChild(el("p", text));
  const yes = el("button", label, "yes");
  const no = el("button", "cancel", "no");
  yes.addEventListener("click", async () => {
    yes.disabled = true;
    box.hidden = true;
    await run();
  });
  no.addEventListener("click", () => { box.hidden = true; });
  box.append(yes, no);
  box.hidden = false;
  yes.focus();
}

function asking(label, cls, text, run) {
  const b = el("button", label, cls);
  b.disabled = !CONFIG.actions;
  b.title = CONFIG.actions ? label : "read-only (start poli web --allow-actions)";
  b.addEventListener("click", () => confirmThen(text(), label, run));
  return b;
}

function approveButtons(ask, node) {
  const ref = { ...ask.ref, project: ask.project_key };
  const text = (verb) => () => `${verb} ${ask.agent} (${ask.project}) running:\n${ask.what}`;
  node.appendChild(asking("approve", "approve", text("approve"),
    () => act("/api/approve", ref)));
  node.appendChild(asking("deny", "deny", text("deny"),
    () => act("/api/approve", { ...ref, deny: true })));
}

function inboxItem(item) {
  const li = el("li", null, "item kind-" + item.kind);
  li.dataset.kind = item.kind;
  li.dataset.agent = item.agent;
  const head = el("div", null, "head");
  head.appendChild(el("span", item.kind_words, "kind"));
  const where = el("span", null, "where");
  where.appendChild(document.createTextNode(item.project + " · "));
  where.appendChild(item.pane ? agentLink({ name: item.agent || "-", pane: item.pane })
    : el("span", item.agent || "-"));
  head.appendChild(where);
  head.appendChild(el("span", when(item.since), "since"));
  li.appendChild(head);
  li.appendChild(el("div", item.what, "what"));
  if (item.detail) li.appendChild(el("pre", item.detail, "question"));
  const buttons = el("div", null, "buttons");
  if (item.kind === "approval") approveButtons(item, buttons);
  if (item.kind === "question") {
    const input = el("input");
    input.placeholder = "your answer";
    input.className = "answer";
    buttons.appendChild(input);
    buttons.appendChild(asking("answer", "answer", () => `answer ${item.what}\nwith: ${input.value}`,
      () => act("/api/answer", { ...item.ref, text: input.value, project: item.project_key })));
  }
  if (item.kind === "gate") {
    for (const [key, label] of [["y", "continue"], ["n", "abort"], ["r", "re-run"], ["s", "skip"]]) {
      buttons.appendChild(asking(label, "gate-" + key, () => `${label}: ${item.what}`,
        () => act("/api/gate", { ...item.ref, answer: key, project: item.project_key })));
    }
  }
  if (buttons.childNodes.length) li.appendChild(buttons);
  return li;
}

function inbox(data) {
  const node = document.getElementById("inbox");
  if (!node) return;
  const items = data.inbox || [];
  const projects = (data.projects || []).map((p) => p.name);
  document.getElementById("inbox-title").textContent =
    items.length ? `waiting on you: ${items.length}` : "waiting on you: nothing";
  document.getElementById("projects").textContent =
    (projects.length === 1 ? "project: " : "projects: ") + projects.join(", ");
  // An item unchanged keeps its element, so an answer being typed survives a refresh.
  const wanted = items.map((item) => ({ key: JSON.stringify(item), draw: () => inboxItem(item) }));
  if (!items.length) wanted.push({ key: "none", draw: () => el("li", "nothing waits on you", "none") });
  redraw(node, wanted);
}

function agentLink(a) {
  if (!a.pane) return el("span", a.name);
  const link = el("a", a.name);
  link.href = "/agent/" + encodeURIComponent(a.pane);
  link.dataset.agent = a.name;
  return link;
}

function approvalRows(list) {
  table("approvals", ["agent", "wants to run", "on screen", ""], list, (p) => {
    const cell = el("td");
    if (p.answer) {
      cell.textContent = "answered: " + p.answer;
    } else {
      const ref = { agent: p.agent, asked: p.asked, command: p.command, node: p.node };
      approveButtons({ ...p, ref, project: p.project, project_key: p.project_key }, cell);
    }
    return [p.agent, p.what, el("pre", (p.evidence || []).join("\n"), "question"), cell];
  });
}

function taskActions(tk) {
  const cell = el("td");
  if (tk.state === "waiting_user" && tk.question) {
    const input = el("input");
    input.placeholder = "answer";
    input.className = "answer";
    cell.appendChild(input);
    cell.appendChild(
      button("answer", "answer", () =>
        act("/api/answer", { task: tk.id, question: tk.question, text: input.value }),
      ),
    );
  }
  if (!["done", "failed", "aborted"].includes(tk.state)) {
    cell.appendChild(button("abort", "deny", () => act("/api/abort", { task: tk.id })));
  }
  return cell;
}

function pipelines(runs) {
  const box = document.getElementById("pipelines");
  if (!box) return;
  box.replaceChildren();
  if (!runs.length) box.appendChild(el("p", "none"));
  for (const run of runs) {
    box.appendChild(el("h3", `run ${run.run_id} · ${run.pipeline} · ${run.status}`));
    const t = el("table");
    t.id = "run-" + run.run_id;
    box.appendChild(t);
    table(t.id, ["step", "agent", "status", "gate", "seconds", "error"], run.steps, (s) => [
      s.num, s.agent, s.status, s.gate, s.seconds ?? "", s.error || "",
    ]);
    const q = run.question;
    if (q) {
      const div = el("div", null, "gate");
      div.appendChild(el("pre", `step ${q.step} asks: ${q.question}`, "question"));
      for (const [key, label] of [["y", "continue"], ["n", "abort"], ["r", "re-run"], ["s", "skip"]]) {
        div.appendChild(
          button(label, "gate-" + key, () =>
            act("/api/gate", { run_id: run.run_id, seq: q.seq, answer: key }),
          ),
        );
      }
      box.appendChild(div);
    }
  }
}

function events(list) {
  const node = document.getElementById("events");
  if (!node) return;
  node.replaceChildren();
  for (const e of list) {
    const who = e.agent ? `[${e.agent}] ` : "";
    const task = e.task ? e.task + " " : "";
    node.appendChild(el("li", `${when(e.ts)} ${task}${e.kind} ${who}${e.detail}`, "kind-" + e.kind));
  }
}

function render(data) {
  const agent = CONFIG.agent;
  const mine = (name) => !agent || name === agent || name.toUpperCase() === agent.toUpperCase();
  const current = (data.agents || []).find((a) => a.pane === agent || mine(a.name));
  const name = current ? current.name : agent;
  if (PAGE === "agent") {
    document.getElementById("agent-name").textContent = name;
    const state = document.getElementById("agent-state");
    state.textContent = current ? current.state_words || current.state : "";
    state.className = current ? "state-" + current.state : "";
    // Whatever workflow asked it: a pipeline step asks as "<run>.step-<n>", found by its pane.
    const pane = current ? current.pane : agent;
    approvalRows((data.approvals || []).filter((p) => (pane && p.pane === pane) || p.agent === name));
    return;
  }
  if (PAGE === "events") {
    events([...(data.events || [])].reverse());
    return;
  }
  inbox(data);
  // A fleet's rows name their node (the agents of every node are listed): one column more.
  const fleet = (data.agents || []).some((a) => a.node);
  table("agents", ["agent", ...(fleet ? ["node"] : []), "project", "state", "session", "pane",
    "profile", "last activity", "tokens", "working on"], data.agents || [], (a) => {
      const state = el("td", a.state_words || a.state, "state-" + a.state.replace(/ /g, "_"));
      return [agentLink(a), ...(fleet ? [a.node || "-"] : []), a.project || "-", state,
        a.session || "-", a.pane || "-", a.profile || "-", when(a.last_activity), a.tokens ?? "-",
        a.turn || "-"];
    });
  table("sessions", ["session", "kind", "where", "panes", "agents"], data.sessions || [], (s) => [
    s.name, s.kind, s.where, s.panes, s.agents.join(", "),
  ]);
  table("tasks", ["task", "state", "round", "request", "question / error / report", ""],
    data.tasks || [], (tk) => [tk.id, tk.state, tk.round, tk.request,
      el("pre", tk.question || tk.error || (tk.report || "").slice(0, 200), "question"),
      taskActions(tk)]);
  table("messages", ["id", "task", "from → to", "type", "state", "attempts", "error"],
    data.messages || [], (m) => [m.id, m.task || "-", `${m.from} → ${m.to}`, m.type, m.state,
      m.attempts, m.error || ""]);
  table("mail", ["id", "kind", "from → to", "state", "attempts", "reason"], data.mail || [],
    (m) => [m.id, m.kind, `${m.from} → ${m.to}`, m.state, m.attempts, m.reason || ""]);
  table("managers", ["project", "state", "agent", "task", "status", "question / error"],
    data.managers || [], (p) => [p.name, p.state, p.agent, p.task_goal || p.goal,
      p.task_status || "-", p.question || p.error || ""]);
  pipelines(data.pipelines || []);
  table("epic_runs", ["run", "epic", "state", "agent", "started"], data.epic_runs || [], (r) => [
    r.id, r.epic, r.state, r.agent, when(r.started),
  ]);
  table("work_items", ["item", "epic", "title", "state", "priority"], data.work_items || [],
    (i) => [i.id, i.epic, i.title, i.state, i.priority]);
  events(data.events || []);
}

function follow(path, onMessage, onOpen) {
  const sep = path.includes("?") ? "&" : "?";
  const ws = new WebSocket(WS_BASE + path + sep + "token=" + encodeURIComponent(CONFIG.token));
  ws.binaryType = "arraybuffer";
  ws.onopen = () => { setStatus(""); if (onOpen) onOpen(ws); };
  ws.onmessage = onMessage;
  ws.onclose = () => {
    setStatus("disconnected: reconnecting");
    setTimeout(() => follow(path, onMessage, onOpen), 1000);
  };
  return ws;
}

// The overview as last received: the first frame whole, each later one only what changed
// (ui/web/delta.py): top-level values in `delta`, single rows of long lists in `rows`.
let OVERVIEW = {};

function applyFrame(frame) {
  if (frame.delta === undefined) {
    OVERVIEW = frame;
    return OVERVIEW;
  }
  for (const [key, value] of Object.entries(frame.delta)) OVERVIEW[key] = value;
  for (const [key, patch] of Object.entries(frame.rows || {})) {
    const list = (OVERVIEW[key] || []).slice(0, patch.len);
    for (const [i, row] of Object.entries(patch.at)) list[Number(i)] = row;
    OVERVIEW[key] = list;
  }
  return OVERVIEW;
}

function overview() {
  follow("/ws/overview", (ev) => render(applyFrame(JSON.parse(ev.data))));
}

// The pane's font: the two served with the page first, so box drawing and symbols such as
// ⎿ show on any device; the system's monospace only for what they lack.
const TERM_FONT = '"Poli Mono", "Poli Symbols", "DejaVu Sans Mono", monospace';

async function mirror() {
  // xterm.js measures a cell once, when it opens: the fonts must be there by then (bounded,
  // so a page whose fonts fail still shows the pane in the fallback font).
  await Promise.race([
    Promise.all([document.fonts.load('13px "Poli Mono"'), document.fonts.load('13px "Poli Symbols"', "⎿")]),
    new Promise((resolve) => setTimeout(resolve, 3000)),
  ]).catch(() => {});
  const term = new window.Terminal({
    cols: 80, rows: 24, convertEol: false, scrollback: 5000, disableStdin: true,
    fontFamily: TERM_FONT, fontSize: 13,
  });
  term.open(document.getElementById("terminal"));
  window.poliTerm = term;
  window.poliFrames = 0;
  window.poliLastFrame = 0;
  follow("/ws/pane/" + encodeURIComponent(CONFIG.agent), (ev) => {
    if (typeof ev.data === "string") {
      const msg = JSON.parse(ev.data);
      if (msg.type === "init") {
        term.reset();
        term.resize(msg.cols, msg.rows);
      } else if (msg.type === "error") {
        setStatus(msg.message);
      }
      return;
    }
    const bytes = new Uint8Array(ev.data);
    if (window.poliOnMessage) window.poliOnMessage(bytes);  // benchmarks hook in here
    term.write(bytes, () => {
      window.poliFrames += 1;
      window.poliLastFrame = performance.now();
      if (window.poliOnFrame) window.poliOnFrame();  // benchmarks hook in here
    });
  });
}

document.getElementById("mode").textContent = CONFIG.actions ? "actions allowed" : "read-only";
if (PAGE === "agent") mirror();
overview();
