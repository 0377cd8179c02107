// The agentwatch dashboard: a page over the service's own API (the tools over HTTP, the live attach over SSE).
// Nothing here is rendered by the server: what it shows is what `agent_summary`, `agent_list`, `agent_get` and
// `agent_tail` answer, and it acts through `agent_answer`, `agent_enqueue`, `agent_stop`, `agent_take_over`,
// `agent_hand_back` and `agent_create`, as any other client of the service would.
"use strict";

(() => {
  const WORDS = ["needs_you", "working", "stuck", "failed", "idle", "done"];
  const LABELS = { needs_you: "needs you", working: "working", stuck: "stuck", failed: "failed", idle: "idle", done: "done" };
  const REFRESH_MS = 2000;
  const TAIL_PAGE = 200;
  const LOG_KEPT = 1000;
  const TOKEN_KEY = "agentwatch.token";

  const $ = (id) => document.getElementById(id);
  const state = {
    token: null,
    word: null, // the status word the list is filtered by (null: all)
    q: "",
    selected: null, // the id of the agent shown on the right
    agent: null, // its last `agent_get` answer
    cursor: null, // the last event of it shown in the log
    source: null, // its live stream
    tailing: null, // the `agent_tail` call in flight
    tailAgain: false, // events arrived while it was in flight
    detailTimer: null,
    refreshTimer: null,
    typing: null, // the log line that shows text still streaming
  };

  class ServiceError extends Error {
    constructor(code, message, status) {
      super(message);
      this.code = code;
      this.status = status;
    }
  }

  // -- talking to the service ------------------------------------------------------------------------

  function takeToken() {
    const hash = new URLSearchParams(location.hash.slice(1));
    const given = hash.get("token");
    if (given) {
      sessionStorage.setItem(TOKEN_KEY, given);
      history.replaceState(null, "", location.pathname + location.search); // off the address bar
    }
    state.token = sessionStorage.getItem(TOKEN_KEY);
  }

  async function call(tool, args = {}) {
    const headers = { "content-type": "application/json" };
    if (state.token) headers.authorization = `Bearer ${state.token}`;
    let response;
    try {
      response = await fetch(`/api/tools/${tool}`, { method: "POST", headers, body: JSON.stringify(args) });
    } catch {
      throw new ServiceError("unreachable", "The service does not answer: is `agentwatch serve` still running?", 0);
    }
    let body = null;
    try {
      body = await response.json();
    } catch {
      // not JSON: said below
    }
    if (body && body.error) throw new ServiceError(body.error.code, body.error.message, response.status);
    if (!response.ok || body === null) {
      throw new ServiceError("bad_response", `The service answered HTTP ${response.status}.`, response.status);
    }
    return body;
  }

  function complain(error) {
    if (error.status === 401) {
      askToken();
      return;
    }
    toast(error.message);
  }

  function toast(message) {
    const box = $("toast");
    box.textContent = message;
    box.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { box.hidden = true; }, 8000);
  }

  function askToken() {
    const dialog = $("login");
    if (!dialog.open) dialog.showModal();
  }

  // -- small helpers -------------------------------------------------------------------------------

  function el(tag, attributes = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) {
      if (value === null || value === undefined || value === false) continue;
      if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  function wordBadge(word) {
    return el("span", { class: `word ${word}` }, LABELS[word] || word);
  }

  function ago(iso) {
    if (!iso) return "";
    const seconds = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
    if (seconds < 60) return `${seconds} s ago`;
    if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
    if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
    return `${Math.round(seconds / 86400)} d ago`;
  }

  function clock(iso) {
    return new Date(iso).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  }

  // -- the list of agents --------------------------------------------------------------------------

  async function refresh() {
    try {
      const args = { limit: 100, sort: "newest" };
      if (state.word) args.word = [state.word];
      if (state.q) args.q = state.q;
      const [summary, page] = await Promise.all([call("agent_summary", { words: true }), call("agent_list", args)]);
      showWords(summary.words || {});
      showAgents(page.agents);
      setConnection(true);
    } catch (error) {
      setConnection(false, error);
    } finally {
      clearTimeout(state.refreshTimer); // one timer, however many refreshes were asked for
      state.refreshTimer = setTimeout(refresh, REFRESH_MS);
    }
  }

  function setConnection(ok, error) {
    const box = $("connection");
    box.classList.toggle("offline", !ok);
    if (ok) box.textContent = `live · ${new Date().toLocaleTimeString()}`;
    else if (error.status === 401) {
      box.textContent = "needs the token";
      askToken();
    } else box.textContent = `offline: ${error.message}`;
  }

  function showWords(counts) {
    const nav = $("words");
    const chip = (word, label, count) =>
      el("button", { type: "button", "aria-pressed": String(state.word === word), "data-word": word || "all",
                     onclick: () => { state.word = word; refresh(); } }, `${label} ${count}`);
    const total = Object.values(counts).reduce((a, b) => a + b, 0);
    nav.replaceChildren(chip(null, "all", total), ...WORDS.map((w) => chip(w, LABELS[w], counts[w] || 0)));
  }

  function showAgents(agents) {
    const body = $("agents").tBodies[0];
    const rows = agents.map((agent) => {
      const waiting = agent.oldestRequest ? agent.oldestRequest.summary : null;
      const row = el(
        "tr",
        { tabindex: 0, "data-id": agent.id, "aria-selected": String(agent.id === state.selected),
          onclick: () => select(agent.id), onkeydown: (e) => { if (e.key === "Enter") select(agent.id); } },
        el("td", {}, agent.displayName || agent.name, waiting ? el("span", { class: "sub" }, waiting) : null),
        el("td", {}, agent.role),
        el("td", {}, wordBadge(agent.word)),
        el("td", { class: "muted" }, ago(agent.lastActiveAt)),
      );
      return row;
    });
    body.replaceChildren(...rows);
    const empty = $("agents-empty");
    empty.hidden = agents.length > 0;
    empty.textContent = state.word || state.q
      ? "No agent matches."
      : "No agents yet. Start one below, or with `agentwatch run ROLE \"TASK\"`.";
    const roles = new Set(agents.map((a) => a.role));
    $("roles").replaceChildren(...[...roles].sort().map((role) => el("option", { value: role })));
  }

  // -- one agent, live -------------------------------------------------------------------------------

  async function select(id) {
    if (state.source) state.source.close();
    Object.assign(state, { selected: id, agent: null, cursor: null, source: null, typing: null });
    for (const row of $("agents").tBodies[0].rows) row.setAttribute("aria-selected", String(row.dataset.id === id));
    $("log").replaceChildren();
    $("detail").hidden = false;
    $("pick").hidden = true;
    try {
      await Promise.all([showDetail(), tail()]);
    } catch (error) {
      complain(error);
      return;
    }
    if (state.selected === id) attach(id);
  }

  function attach(id) {
    const query = new URLSearchParams();
    if (state.cursor) query.set("after", state.cursor);
    if (state.token) query.set("token", state.token); // an EventSource cannot send a header
    const source = new EventSource(`/api/agents/${encodeURIComponent(id)}/events?${query}`);
    state.source = source;
    source.addEventListener("event", (message) => {
      if (state.source !== source) return;
      const event = JSON.parse(message.data).event;
      if (event.type === "content.delta") showTyping(event);
      else {
        tail();
        laterDetail();
      }
    });
    source.addEventListener("error", (message) => {
      if (state.source !== source || !message.data) return; // a dropped connection: the browser reconnects
      const error = JSON.parse(message.data).error;
      source.close();
      complain(new ServiceError(error.code, error.message, 0));
    });
  }

  async function tail() {
    if (state.tailing) {
      state.tailAgain = true;
      return state.tailing;
    }
    const id = state.selected;
    state.tailing = (async () => {
      try {
        do {
          state.tailAgain = false;
          let more = true;
          while (more && state.selected === id) {
            const args = { id, maxEvents: TAIL_PAGE };
            if (state.cursor) args.afterId = state.cursor;
            const answer = await call("agent_tail", args);
            if (state.selected !== id) return;
            showLines(answer.events);
            state.cursor = answer.cursor;
            more = Boolean(answer.hasMore);
          }
        } while (state.tailAgain && state.selected === id);
      } finally {
        state.tailing = null;
      }
    })();
    return state.tailing;
  }

  function showLines(lines) {
    if (!lines.length) return;
    const log = $("log");
    const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
    if (state.typing) {
      state.typing.remove();
      state.typing = null;
    }
    for (const line of lines) {
      const kind = line.itemType === "tool_call" || line.itemType === "tool_result" ? "tool" : "";
      log.append(el(
        "li",
        { class: `${kind} ${line.status || ""} ${line.type.replace(/\W/g, "-")}`, "data-type": line.type },
        el("time", { datetime: line.at }, clock(line.at)),
        el("div", {},
          el("span", { class: "title" }, line.title || line.type),
          line.detail && line.detail !== line.title ? el("span", { class: "detail" }, line.detail) : null),
      ));
    }
    while (log.children.length > LOG_KEPT) log.firstElementChild.remove();
    if (atBottom) log.scrollTop = log.scrollHeight;
  }

  function showTyping(event) {
    const delta = event.payload.delta || "";
    if (!state.typing) {
      state.typing = el("li", { class: "typing" }, el("time", { datetime: event.at }, clock(event.at)),
                        el("div", {}, el("span", { class: "title" }, "writing…"), el("span", { class: "detail" }, "")));
      $("log").append(state.typing);
    }
    state.typing.querySelector(".detail").textContent += delta;
    const log = $("log");
    log.scrollTop = log.scrollHeight;
  }

  function laterDetail() {
    clearTimeout(state.detailTimer);
    state.detailTimer = setTimeout(() => showDetail().catch(complain), 150);
  }

  async function showDetail() {
    const id = state.selected;
    const agent = await call("agent_get", { id });
    if (state.selected !== id) return;
    state.agent = agent;
    $("d-name").textContent = agent.displayName || agent.name;
    const tokens = agent.usage ? `${agent.usage.tokens} tokens` : "";
    $("d-meta").textContent = [agent.role, agent.status, agent.modelRef, tokens, agent.id].filter(Boolean).join(" · ");
    $("d-word").replaceWith(Object.assign(wordBadge(agent.word), { id: "d-word" }));
    const held = agent.interception;
    const take = $("take");
    take.textContent = held ? `Hand back (held by ${held.by})` : "Take over";
    take.dataset.held = held ? "yes" : "no";
    $("stop").disabled = !["working", "stuck", "needs_you"].includes(agent.word);
    showNeeds(agent);
  }

  // -- what it waits for ---------------------------------------------------------------------------

  function showNeeds(agent) {
    const box = $("needs");
    const hitl = agent.current && agent.current.pendingHitl;
    if (!hitl) {
      box.hidden = true;
      box.replaceChildren();
      box.dataset.hitl = "";
      return;
    }
    if (box.dataset.hitl === hitl.hitlId) return; // keep what the person is typing
    box.dataset.hitl = hitl.hitlId;
    const summary = (agent.oldestRequest && agent.oldestRequest.summary) || "It waits for an answer.";
    const questions = (hitl.questions || []).filter((q) => q !== summary);
    const parts = [el("h3", {}, `Needs you: ${summary}`), ...questions.map((q) => el("p", {}, q))];
    const answer = (value) => respond(hitl.hitlId, value);
    if (hitl.kind === "approval") {
      const note = el("textarea", { rows: 1, placeholder: "A note for the agent (optional)", "aria-label": "Note" });
      parts.push(note, el("div", { class: "choices" },
        el("button", { type: "button", class: "primary", onclick: () => answer(note.value ? { approved: true, message: note.value } : true) }, "Approve"),
        el("button", { type: "button", class: "danger", onclick: () => answer(note.value ? { approved: false, message: note.value } : false) }, "Deny")));
    } else if (hitl.options && hitl.options.length) {
      if (hitl.multiple) {
        const boxes = hitl.options.map((option) => el("input", { type: "checkbox", value: option, "aria-label": option }));
        parts.push(el("div", { class: "choices" }, ...boxes.map((b) => el("label", {}, b, ` ${b.value}`)),
          el("button", { type: "button", class: "primary",
                         onclick: () => answer(boxes.filter((b) => b.checked).map((b) => b.value)) }, "Answer")));
      } else {
        parts.push(el("div", { class: "choices" },
          ...hitl.options.map((option) => el("button", { type: "button", onclick: () => answer(option) }, option))));
      }
    } else {
      const text = el("textarea", { rows: 2, placeholder: "Your answer", "aria-label": "Your answer" });
      parts.push(text, el("div", { class: "choices" },
        el("button", { type: "button", class: "primary", onclick: () => { if (text.value.trim()) answer(text.value); } }, "Answer")));
    }
    box.replaceChildren(...parts);
    box.hidden = false;
  }

  async function respond(hitlId, value) {
    try {
      await call("agent_answer", { hitlId, answer: value });
      $("needs").dataset.hitl = "";
      await showDetail();
    } catch (error) {
      complain(error);
    }
  }

  // -- acting ----------------------------------------------------------------------------------------

  function wire() {
    $("q").addEventListener("input", (e) => {
      state.q = e.target.value.trim();
      clearTimeout(wire.search);
      wire.search = setTimeout(refresh, 250);
    });
    $("send").addEventListener("submit", async (e) => {
      e.preventDefault();
      const field = e.target.elements.text;
      try {
        await call("agent_enqueue", { agentId: state.selected, prompt: field.value });
        field.value = "";
        laterDetail();
      } catch (error) {
        complain(error);
      }
    });
    $("stop").addEventListener("click", async () => {
      if (!state.agent || !confirm(`Stop ${state.agent.name}'s turn?`)) return;
      try {
        await call("agent_stop", { id: state.selected });
        await showDetail();
      } catch (error) {
        complain(error);
      }
    });
    $("take").addEventListener("click", async (e) => {
      const tool = e.target.dataset.held === "yes" ? "agent_hand_back" : "agent_take_over";
      try {
        await call(tool, { id: state.selected });
        await showDetail();
      } catch (error) {
        complain(error);
      }
    });
    $("create").addEventListener("submit", async (e) => {
      e.preventDefault();
      const form = e.target.elements;
      try {
        const created = await call("agent_create", { role: form.role.value.trim(), prompt: form.prompt.value });
        form.prompt.value = "";
        $("new-agent").open = false;
        await select(created.agentId);
      } catch (error) {
        complain(error);
      }
    });
    $("login-form").addEventListener("submit", () => {
      const token = $("login-form").elements.token.value.trim();
      sessionStorage.setItem(TOKEN_KEY, token);
      state.token = token;
      if (state.selected) select(state.selected);
    });
  }

  takeToken();
  wire();
  refresh();
})();
