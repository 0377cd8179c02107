// The agentwatch dashboard: a page over the service's own API (the tools over HTTP, the live attach over SSE).
// Nothing here is rendered by the server: what it shows is what `agent_list`, `agent_get` and `agent_tail`
// answer, and it acts through `agent_answer`, `agent_enqueue`, `agent_stop`, `agent_delete`, `agent_take_over`,
// `agent_hand_back` and `agent_create`, as any other client of the service would.
"use strict";

(() => {
  const WORDS = ["needs_you", "working", "stuck", "failed", "idle", "done"];
  const LABELS = { needs_you: "needs you", working: "working", stuck: "stuck", failed: "failed", idle: "idle", done: "done",
                   stopped: "stopped" };
  const REFRESH_MS = 2000;
  const AGENTS_PAGE = 100; // the most `agent_list` answers at once
  const RUNS_PAGE = 50;
  const TAIL_PAGE = 200;
  const MAX_CHARS = 4000; // the most a tail line's detail holds (a longer one ends with its full length)
  const LOG_KEPT = 1000;
  // The tail's default event set, and the runtime's notes beside it (a take-over, a hand-back, a deletion):
  // a person watching wants to see who did what to the agent.
  const LOG_TYPES = ["turn.*", "item.*", "tool.progress", "subtask.*", "hitl.*", "model.reroute", "runtime.*", "observer.report"];
  // The events of the live stream that make what streamed durable (a response's text, its reasoning) or end the turn.
  const STREAM_ENDS = ["message.assistant", "thinking.completed", "turn.ended"];
  // Their tail lines (the response's text or reasoning, as stored, or the turn's end): the "writing…" line of
  // what streamed goes once the log shows one.
  const endsStream = (line) => line.type === "turn.ended" || (line.type === "item.completed" && ["agent_message", "reasoning"].includes(line.itemType));
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
    tailing: null, // the `agent_tail` reads in flight
    tailingFor: null, // the agent they are for
    tailAgain: false, // events arrived while it was in flight
    detailTimer: null,
    refreshTimer: null,
    typing: null, // the log line that shows text still streaming
    ending: new Map(), // by the id of a stream's end (STREAM_ENDS) the live stream brought: its "writing…" line (or
    // null), which goes once the log shows that event
    shownEnds: new Set(), // the ids of the ends the log showed before the live stream brought them
    canAct: true, // false with a read-only token: the page only watches
    view: "agents", // or "runs"
    run: null, // the id of the run shown on the right of the runs view
    refused: false, // the service refused the token the page holds
    names: new Map(), // the names of the agents listed so far, by id (a parent is shown by its name)
    agentPages: 1, // how many pages of agents the list shows ("Show more" adds one; a new filter starts again)
    runPages: 1,
    runFilter: "", // the entity (`workflow:report`) or kind (`heartbeat`) the runs are filtered by ("": any)
    runStatus: "", // the status they are filtered by ("": any)
    entities: new Set(), // the entities and kinds of the runs listed so far (the filter suggests them)
  };

  class ServiceError extends Error {
    constructor(code, message, status, details = {}) {
      super(message);
      this.code = code;
      this.status = status;
      this.details = details; // what the refusal names, structured (`run_list`'s kinds)
    }
  }

  // -- talking to the service ------------------------------------------------------------------------

  function takeToken() {
    const hash = new URLSearchParams(location.hash.slice(1));
    const given = hash.get("token");
    if (given) {
      sessionStorage.setItem(TOKEN_KEY, given);
      hash.delete("token"); // off the address bar (what else it says stays: `#token=...&agent=...`)
      const rest = hash.toString();
      history.replaceState(null, "", location.pathname + location.search + (rest ? `#${rest}` : ""));
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
    if (refusal(body)) throw new ServiceError(body.error.code, body.error.message, response.status, body.error.details);
    if (!response.ok || body === null) {
      throw new ServiceError("bad_response", `The service answered HTTP ${response.status}.`, response.status);
    }
    return body;
  }

  function refusal(body) {
    // A refused call answers `{"error": {"code", "message"}}` and nothing else; an answer may hold an
    // `error` field of its own (`agent_get` of a failed agent).
    return Boolean(body && typeof body.error === "object" && body.error !== null
      && typeof body.error.code === "string" && Object.keys(body).length === 1);
  }

  function complain(error) {
    if (error.status === 401) {
      askToken();
      return;
    }
    toast(error.message);
  }

  // What a person's click (or Enter) does: the buttons of `within` (a button, a form, a box) are disabled while
  // it is in flight, so that a second click does not act twice; a refusal is said. Its answer, or undefined.
  // Once it is done the list is read again (unless `relist` is false: the action reads it itself), so that what
  // it changed (an agent stopped, a request answered) shows in the agent's row at once, as in its header, not
  // at the next refresh.
  async function act(within, action, { relist = true } = {}) {
    if (within.dataset.busy) return undefined;
    within.dataset.busy = "yes";
    const buttons = within.matches("button") ? [within] : [...within.querySelectorAll("button")];
    // A disabled button lets the focus go (to the page's body): it comes back once the buttons are enabled.
    const focused = within.contains(document.activeElement) ? document.activeElement : null;
    for (const button of buttons) button.disabled = true;
    try {
      const answer = await action();
      if (relist) refresh();
      return answer;
    } catch (error) {
      complain(error);
      return undefined;
    } finally {
      delete within.dataset.busy;
      for (const button of buttons) button.disabled = false;
      if (focused && focused.isConnected && document.activeElement === document.body) focused.focus();
    }
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
    // A 401 while the page holds a token: the service refused that one.
    $("login-error").hidden = !state.token;
    if (!dialog.open) dialog.showModal();
  }

  async function checkAccess() {
    // What the token may call (`GET /api/tools` says it per tool): a read-only one only watches.
    const headers = state.token ? { authorization: `Bearer ${state.token}` } : {};
    try {
      const response = await fetch("/api/tools", { headers });
      if (!response.ok) return;
      const { tools } = await response.json();
      const answer = tools.find((tool) => tool.name === "agent_answer");
      state.canAct = Boolean(answer && answer.callable);
    } catch {
      return; // offline: the list says so
    }
    document.body.classList.toggle("read-only", !state.canAct);
    $("mode").hidden = state.canAct;
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

  // A link to a place on the page (`#agent=ID`, `#run=ID`): a real <a href>, so that a keyboard's Enter follows
  // it, and a new tab or a bookmark opens the same place. A plain click acts at once (the address may say it
  // already: another view was shown since).
  function link(text, hash, action) {
    return el("a", { href: hash, onclick: (e) => {
      if (e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return; // (the browser's own)
      e.preventDefault();
      action();
    } }, text);
  }

  const agentHash = (id) => `#agent=${encodeURIComponent(id)}`;
  const runHash = (id) => `#run=${encodeURIComponent(id)}`;

  // The address says what is open, so that a reload or a bookmark shows it again, and Back goes to what was open
  // before.
  function keepPlace() {
    const hash = state.view === "runs"
      ? (state.run ? runHash(state.run) : "#runs")
      : (state.selected ? agentHash(state.selected) : "");
    if (location.hash !== hash) history.pushState(null, "", hash || location.pathname + location.search);
  }

  // What the address says is open, on load and when it changes (Back, an edited address, a followed link).
  function goToPlace() {
    const hash = new URLSearchParams(location.hash.slice(1));
    const agent = hash.get("agent");
    const run = hash.get("run");
    if (run || hash.has("runs")) {
      if (state.view !== "runs") showView("runs");
      if (run && state.run !== run) selectRun(run);
    } else {
      if (state.view !== "agents") showView("agents");
      if (agent && state.selected !== agent) select(agent);
      else if (!agent && state.selected) unselect(); // Back to where no agent was open
    }
  }

  // Near its end (within `slack` pixels): a box that shows its end follows what is added to it; one scrolled back
  // (a person reading) stays where it is.
  const atEnd = (box, slack = 40) => box.scrollHeight - box.scrollTop - box.clientHeight < slack;

  function wordBadge(word) {
    return el("span", { class: `word ${word}` }, LABELS[word] || word);
  }

  // The word an agent (an `agent_list` row, an `agent_get` record) is shown with: its status word, except that an
  // agent whose turn was stopped (`cancelled`: someone's stop) says `stopped`. The API's word for it is `done`
  // (nothing is left for it to do; the "done" chip lists it), but a person who stopped an agent must not read it
  // as one that finished its work.
  function shownWord(agent) {
    return agent.status === "cancelled" && agent.word === "done" ? "stopped" : agent.word;
  }

  // Per status, the word (`shownWord`) that says it already: said beside that word, the status would only repeat it.
  const SAID_BY_THE_WORD = { idle: "idle", running: "working", completed: "done", cancelled: "stopped", failed: "failed" };

  // How an agent stands, in a line of text: its status where it says more than its word (`interrupted · failed`),
  // then its word; `stopped`, not `cancelled · stopped`.
  function standing(agent) {
    const word = shownWord(agent);
    const label = LABELS[word] || word;
    return SAID_BY_THE_WORD[agent.status] === word ? label : `${agent.status} · ${label}`;
  }

  // What `currentItem` says an agent does: `running TOOL`, or what its model does (`thinking`, ...).
  function doing(item) {
    if (!item) return null;
    return item.type === "tool" ? `running ${item.title}` : item.title;
  }

  function ago(iso) {
    if (!iso) return "";
    const seconds = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
    if (seconds < 60) return `${seconds} s ago`;
    if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
    if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
    return `${Math.round(seconds / 86400)} d ago`;
  }

  function when(iso) {
    if (!iso) return "";
    return new Date(iso).toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  }

  // A time of day, written one way on the whole page (the log's lines, the header's last refresh): two digits each,
  // so the log's times line up.
  function clock(moment) {
    return new Date(moment).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  }

  // -- the list of agents --------------------------------------------------------------------------

  // The first `wanted` pages of a listing, as one: the pages a person asked for ("Show more") are read again at
  // each refresh. Its first page's answer, with `items` (every page's) and whether more follow.
  async function pages(tool, args, key, wanted) {
    const first = await call(tool, args);
    const items = [...first[key]];
    let next = first.nextCursor;
    for (let n = 1; n < wanted && next; n += 1) {
      const page = await call(tool, { ...args, cursor: next });
      items.push(...page[key]);
      next = page.nextCursor;
    }
    return { ...first, items, more: Boolean(next) };
  }

  async function refresh() {
    try {
      const args = { limit: AGENTS_PAGE, sort: "newest", counts: true };
      if (state.q) args.q = state.q;
      if (state.view === "runs") {
        const listed = await listRuns();
        showRuns(listed.items, listed.more, listed.entities, listed.kinds);
      } else {
        // The chips count the agents the list shows under each word (the same filter, per agent): a list
        // narrowed to a word counts only that word, so the chips are counted without it.
        const calls = [pages("agent_list", state.word ? { ...args, word: [state.word] } : args, "agents", state.agentPages)];
        if (state.word) calls.push(call("agent_list", { ...args, limit: 1 }));
        const [listed, all = listed] = await Promise.all(calls);
        showWords(all.counts);
        showAgents(listed.items, listed.counts.total, state.word ? [] : await waitingOnYou(listed, args));
      }
      setConnection(true, null, await draining());
    } catch (error) {
      setConnection(false, error);
    } finally {
      clearTimeout(state.refreshTimer); // one timer, however many refreshes were asked for
      state.refreshTimer = setTimeout(refresh, REFRESH_MS);
    }
  }

  // The agents that wait on a person, for the top of the "all" list: past a page of agents active since, they
  // would be out of it. Asked for only when the list's counts say some are not among its rows.
  async function waitingOnYou(listed, args) {
    const shown = listed.items.filter((agent) => agent.word === "needs_you");
    if (shown.length >= (listed.counts.words.needs_you || 0)) return shown;
    const { counts, ...rest } = args; // (counted already)
    return (await call("agent_list", { ...rest, word: ["needs_you"], limit: AGENTS_PAGE })).agents;
  }

  async function draining() {
    // Whether the service was asked to stop (a deploy): it takes no new work, and reads and answers go on.
    try {
      return (await (await fetch("/api/health/live")).json()).status === "draining";
    } catch {
      return false; // a failed call says so by itself
    }
  }

  function setConnection(ok, error, stopping = false) {
    $("connection").classList.toggle("offline", !ok);
    let said = stopping ? "stopping: no new work is taken here" : "live";
    if (!ok && error.status === 401) {
      said = "needs the token";
      askToken();
    } else if (!ok) said = `offline: ${error.message}`;
    // A live region is read out at each change: it says how the page stands, and the time of the last refresh
    // is shown beside it, not read out every 2 seconds.
    if ($("connection-state").textContent !== said) $("connection-state").textContent = said;
    $("connection-time").textContent = ok ? ` · ${clock(Date.now())}` : "";
  }

  function showWords(counts) {
    // Updated in place, never rebuilt: a chip that has the focus keeps it.
    const nav = $("words");
    [[null, "all", counts.total], ...WORDS.map((w) => [w, LABELS[w], counts.words[w] || 0])].forEach(([word, label, count], i) => {
      let chip = nav.children[i];
      if (!chip) {
        chip = el("button", { type: "button", "data-word": word || "all",
                              onclick: () => { state.word = word; state.agentPages = 1; refresh(); } });
        nav.append(chip);
      }
      chip.textContent = `${label} ${count}`;
      if (word === "done") chip.title = "Finished, or stopped by someone (those say stopped)";
      chip.setAttribute("aria-pressed", String(state.word === word));
    });
  }

  function syncRows(table, items, cells, pick, fill, current) {
    // Rows are kept by id and updated in place; a row moves only when its place changed, so the row that has
    // the focus keeps it while the list refreshes.
    const body = table.tBodies[0];
    const kept = new Map([...body.rows].map((row) => [row.dataset.id, row]));
    items.forEach((item, index) => {
      let row = kept.get(item.id);
      kept.delete(item.id);
      if (!row) {
        row = el("tr", { tabindex: 0, "data-id": item.id, onclick: () => pick(item.id),
                         onkeydown: (e) => {
                           if (e.key !== "Enter" && e.key !== " ") return;
                           e.preventDefault();
                           pick(item.id, { focus: true }); // the keyboard goes on to what was picked
                         } },
                 ...cells.map((cls) => el("td", cls ? { class: cls } : {})));
      }
      fill(item, row.cells);
      if (body.rows[index] !== row) body.insertBefore(row, body.rows[index] || null);
    });
    for (const gone of kept.values()) gone.remove();
    markCurrent(table, current);
  }

  function markCurrent(table, id) {
    for (const row of table.tBodies[0].rows) {
      if (row.dataset.id === id) row.setAttribute("aria-current", "true");
      else row.removeAttribute("aria-current");
    }
  }

  // `agents`: the pages listed; `waiting`: the agents that wait on a person, shown first (once each).
  function showAgents(agents, total, waiting = []) {
    const first = new Set(waiting.map((agent) => agent.id));
    const rows = [...waiting, ...agents.filter((agent) => !first.has(agent.id))];
    const extra = rows.length - agents.length; // (waiting ones from past the pages listed)
    syncRows($("agents"), rows, ["", "", "", "muted"], select, fillAgentRow, state.selected);
    // The agent shown, when its row says another word: one that changes with no event of the agent (it went
    // stuck: nothing happened to it) is shown anew from here.
    const shown = rows.find((agent) => agent.id === state.selected);
    if (shown && state.agent && state.agent.id === shown.id && state.agent.word !== shown.word) laterDetail();
    const empty = $("agents-empty");
    const more = total > agents.length;
    empty.hidden = agents.length > 0 && !more;
    const also = extra ? ` (and, first, ${extra} older that need${extra === 1 ? "s" : ""} you)` : "";
    empty.textContent = more
      ? `Showing the ${agents.length} most recently active of ${total}${also}: show more, or filter by status or name.`
      : state.word || state.q
        ? "No agent matches."
        : "No agents yet. Start one below, or with `agentwatch run ROLE \"TASK\"`.";
    $("more-agents").hidden = !more;
    $("more-agents").textContent = `Show ${Math.min(AGENTS_PAGE, total - agents.length)} more`;
  }

  // An agent's row, from its `agent_list` row (or from the `agent_get` record of the agent shown, which says
  // what it does now under `current`).
  function fillAgentRow(agent, [who, role, word, active]) {
    state.names.set(agent.id, agent.displayName || agent.name);
    const held = agent.interception ? `held by ${agent.interception.by}` : null;
    const waiting = agent.oldestRequest ? agent.oldestRequest.summary : null;
    // What a working agent does this moment (the tool that runs, or what its model does), as in its detail: a
    // person watching many agents sees which one is in which tool.
    const now = agent.current ? agent.current.currentItem : agent.currentItem;
    const sub = [held, waiting, doing(now)].filter(Boolean).join(" · ");
    who.replaceChildren(agent.displayName || agent.name, sub ? el("span", { class: "sub", title: sub }, sub) : ""); // (whole on hover)
    role.textContent = agent.role;
    word.replaceChildren(wordBadge(shownWord(agent)));
    active.textContent = ago(agent.lastActiveAt);
  }

  async function showRoles() {
    // The roles the service's engine runs (not only those of the agents listed now), with what each is for.
    try {
      const { roles } = await call("agent_roles", {});
      $("roles").replaceChildren(...roles.map((role) => el("option", { value: role.name, label: role.description || null })));
    } catch (error) {
      complain(error);
    }
  }

  // -- runs ----------------------------------------------------------------------------------------------

  function showView(view) {
    state.view = view;
    for (const button of $("views").children) button.setAttribute("aria-pressed", String(button.dataset.view === view));
    $("agents-view").hidden = view !== "agents";
    $("runs-view").hidden = view !== "runs";
    document.body.classList.toggle("runs", view === "runs");
    refresh();
  }

  // How long a run or span took; while it runs (no duration yet), how long it has run so far.
  function took(item) {
    const running = item.durationMs === null || item.durationMs === undefined;
    const ms = running ? Math.max(0, Date.now() - Date.parse(item.startedAt)) : item.durationMs;
    const text = ms < 120000 ? `${(ms / 1000).toFixed(1)} s` : `${(ms / 60000).toFixed(1)} min`;
    return running ? `${text} so far` : text;
  }

  // Why a run ended as it did: its statusReason, and when that is only a code (`gate_error`), its error's message
  // after it, which says what went wrong (as `agentwatch runs` says it).
  function why(run) {
    const reason = run.statusReason || "";
    const message = run.error && typeof run.error === "object" ? run.error.message : null;
    return message && /^[a-z_]+$/.test(reason) ? `${reason}: ${message}` : reason;
  }

  function spent(item) {
    const cost = item.costUsd === null || item.costUsd === undefined ? "" : ` · $${item.costUsd.toFixed(4)}`;
    return `${item.tokens.toLocaleString()} tokens${cost}`;
  }

  function statusBadge(status) {
    return el("span", { class: `word ${status}` }, status.replace("_", " "));
  }

  // What `run_list` is asked: a filter with a colon names an entity (`workflow:report`), one without a kind.
  function runArgs() {
    const args = { limit: RUNS_PAGE };
    if (state.runFilter) args[state.runFilter.includes(":") ? "entity" : "kind"] = state.runFilter;
    if (state.runStatus) args.status = [state.runStatus];
    return args;
  }

  // The runs the filter lists. A filter that is no kind (`heartbaet`, or `heart` on its way to `heartbeat`) lists
  // none: `run_list` refuses it, naming the kinds closest first (`kinds`), which is an answer, not an outage.
  async function listRuns() {
    try {
      return await pages("run_list", runArgs(), "runs", state.runPages);
    } catch (error) {
      const kinds = error.code === "invalid_argument" && error.details ? error.details.kinds : null;
      if (!Array.isArray(kinds)) throw error;
      return { items: [], more: false, entities: null, kinds };
    }
  }

  // `entities`: when the filter names an entity that has no runs, those that do, closest first (`run_list`);
  // `kinds`: when it names no kind, the kinds, closest first.
  function showRuns(runs, more, entities, kinds) {
    syncRows($("runs"), runs, ["", "", "muted", "", "muted"], selectRun, (run, [name, status, started, time, cost]) => {
      const sub = why(run) || run.id;
      name.replaceChildren(run.entity || run.kind, el("span", { class: "sub", title: sub }, sub)); // (whole on hover)
      status.replaceChildren(statusBadge(run.status));
      started.textContent = ago(run.startedAt);
      time.textContent = took(run);
      cost.textContent = spent(run);
    }, state.run);
    const filtered = Boolean(state.runFilter || state.runStatus);
    $("runs-empty").hidden = runs.length > 0 || filtered;
    $("runs-none").hidden = runs.length > 0 || !filtered;
    $("runs-none").textContent = kinds ? `No run has the kind ${state.runFilter}; the kinds, closest first: ${kinds.join(", ")}.`
      : !entities ? "No run matches."
      : entities.length ? `No run has the entity ${state.runFilter}; those with runs, closest first: ${entities.join(", ")}.`
        : `No run has the entity ${state.runFilter}: no entity has runs yet.`;
    $("more-runs").hidden = !more;
    const known = state.entities.size;
    for (const run of runs) state.entities.add(run.kind).add(run.entity || run.kind);
    for (const entity of [...(entities || []), ...(kinds || [])]) state.entities.add(entity); // (suggested too, as the filter is typed)
    if (state.entities.size !== known) {
      $("entities").replaceChildren(...[...state.entities].sort().map((value) => el("option", { value })));
    }
    const shown = runs.find((run) => run.id === state.run);
    if (shown && shown.status === "running") showRun(state.run).catch(complain); // (an ended trace stays as it is)
  }

  async function selectRun(id) {
    state.run = id;
    keepPlace();
    markCurrent($("runs"), id);
    $("run").hidden = false;
    $("pick-run").hidden = true;
    try {
      await showRun(id);
      const compared = await call("run_compare", { id });
      if (state.run === id) showComparison(compared);
    } catch (error) {
      if (state.run === id && error.code === "not_found") {
        state.run = null;
        markCurrent($("runs"), null);
        notThere($("run"), $("pick-run"), error);
      } else complain(error);
    }
  }

  // An agent or a run the address named that is not there (reaped since, or mistyped): said in its place, with
  // nothing to act on (not an empty detail under a passing message).
  function notThere(detail, pick, error) {
    detail.hidden = true;
    pick.hidden = false;
    pick.textContent = `${error.message}.`;
  }

  async function showRun(id) {
    const trace = await call("run_trace", { id });
    if (state.run !== id) return;
    const run = trace.run;
    $("r-name").textContent = run.entity || run.kind;
    $("r-meta").textContent = [run.id, took(run), spent(run), why(run)].filter(Boolean).join(" · ");
    $("r-status").replaceWith(Object.assign(statusBadge(run.status), { id: "r-status" }));
    const children = new Map();
    for (const span of trace.spans) {
      const siblings = children.get(span.parentSpanId) || [];
      siblings.push(span);
      children.set(span.parentSpanId, siblings);
    }
    const lines = [];
    const walk = (parent, depth) => {
      for (const span of children.get(parent) || []) {
        const attempt = span.attempts > 1 ? ` (attempt ${span.attempt}/${span.attempts})` : "";
        const agent = span.ref && span.ref.agentId && span.kind === "task"
          ? el("span", {}, " ", link("open agent", agentHash(span.ref.agentId), () => openAgent(span.ref.agentId)))
          : null;
        const line = el("li", { "data-kind": span.kind },
          el("span", {}, el("span", { class: "kind" }, span.kind), `${span.label}${attempt}`, agent),
          statusBadge(span.status), el("span", { class: "num" }, took(span)),
          el("span", { class: "num" }, spent(span)));
        line.style.setProperty("--depth", String(depth)); // (through the CSSOM: the page's policy allows no inline style)
        lines.push(line);
        walk(span.id, depth + 1);
      }
    };
    walk(null, 0);
    $("spans").replaceChildren(...lines);
    const honesty = trace.honesty;
    $("r-honesty").textContent = [
      honesty.reapedAgents.length ? `reaped agents: ${honesty.reapedAgents.join(", ")} (timing and cost kept)` : "",
      honesty.costCoverage === "partial" ? "the ledger no longer holds all it billed" : "",
      honesty.truncated ? "more turns than a trace draws" : "",
    ].filter(Boolean).join(" · ");
  }

  function showComparison(compared) {
    const box = $("r-compare");
    if (!compared.against) {
      box.textContent = "No earlier finished run of the same entity to compare with.";
      return;
    }
    const d = compared.deltas;
    const sign = (v, unit) => (v === null || v === undefined ? "?" : `${v >= 0 ? "+" : ""}${v}${unit}`);
    const inputs = compared.input.map((c) => `${c.path}: ${JSON.stringify(c.that)} → ${JSON.stringify(c.this)}`);
    // A run still going: its figures (and the deltas with them) are so far, which the deltas alone do not say.
    const going = compared.stillRunning.map((side) => `${side === "this" ? "this run" : compared.against.id} is still `
      + "running: its figures are so far");
    box.textContent = [`Against ${compared.against.id}: time ${sign(d.durationMs, " ms")}, tokens ${sign(d.tokens, "")}`,
      d.status === "same" ? "" : `status ${d.status}`, ...going, ...inputs].filter(Boolean).join(" · ");
  }

  function openRun(id) {
    showView("runs");
    selectRun(id);
  }

  function openAgent(id) {
    showView("agents");
    select(id, { focus: true });
  }

  // -- one agent, live -------------------------------------------------------------------------------

  // `focus`: once it is shown, the keyboard goes to it (what it waits on, else its name), not back to the list.
  async function select(id, { focus = false } = {}) {
    watchOnly(id);
    keepPlace();
    markCurrent($("agents"), id);
    $("log").replaceChildren();
    $("log-empty").hidden = true; // (said once its first read found nothing)
    $("earlier").hidden = true;
    $("detail").hidden = false;
    $("pick").hidden = true;
    try {
      // The detail after the log, not beside it: what the detail shows is then at least as new as the log's
      // cursor, after which the live stream brings the rest (a request opened between the two reads was in
      // the log and missing from the detail, and no later event refreshed it).
      await tail();
      if (state.selected === id) $("log-empty").hidden = $("log").children.length > 0;
      if (state.selected === id) await showDetail();
    } catch (error) {
      if (state.selected === id && error.code === "not_found") {
        state.selected = null;
        markCurrent($("agents"), null);
        notThere($("detail"), $("pick"), error);
      } else complain(error);
      return;
    }
    if (state.selected !== id) return;
    // On a phone the agent is below the list: scrolled to once it is shown (an empty one is too short to be
    // scrolled to the top of the screen).
    if (window.matchMedia("(max-width: 800px)").matches) $("detail").scrollIntoView();
    if (focus) focusDetail();
    attach(id);
  }

  // What the page keeps of the agent it watches goes with it: `id`'s log starts afresh (null: none is watched).
  function watchOnly(id) {
    if (state.source) state.source.close();
    Object.assign(state, { selected: id, agent: null, cursor: null, source: null, typing: null, ending: new Map(), shownEnds: new Set(), readBack: false });
  }

  function unselect() {
    watchOnly(null);
    markCurrent($("agents"), null);
    $("detail").hidden = true;
    $("pick").hidden = false;
    $("pick").textContent = "Pick an agent to watch it live.";
  }

  // Where the keyboard goes in the detail: what the agent waits on, when that is the person's to do, else its
  // name (after an answer, the box the focus was in is gone).
  function focusDetail() {
    const needs = $("needs");
    const controls = needs.hidden ? [] : [...needs.querySelectorAll("textarea, input, button")];
    const first = controls.find((control) => control.getClientRects().length > 0); // (a read-only token: none)
    (first || $("d-name")).focus();
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
      if (event.type === "runtime.info" && event.payload.source === "deletion") source.close(); // its last event
      if (event.type === "content.delta") showTyping(event);
      else {
        if (STREAM_ENDS.includes(event.type)) streamEnded(event.id);
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
    const id = state.selected;
    if (state.tailing && state.tailingFor === id) {
      state.tailAgain = true;
      return state.tailing;
    }
    state.tailAgain = false;
    state.tailingFor = id;
    const reading = (async () => {
      try {
        do {
          state.tailAgain = false;
          let more = true;
          while (more && state.selected === id) {
            const args = { id, maxEvents: TAIL_PAGE, maxChars: MAX_CHARS, types: LOG_TYPES };
            if (state.cursor) args.afterId = state.cursor;
            const answer = await call("agent_tail", args);
            if (state.selected !== id) return;
            if (!args.afterId) $("earlier").hidden = answer.events.length < TAIL_PAGE; // the newest page: older ones?
            showLines(answer.events);
            state.cursor = answer.cursor;
            more = Boolean(answer.hasMore);
          }
        } while (state.tailAgain && state.selected === id);
      } finally {
        if (state.tailing === reading) state.tailing = null;
      }
    })();
    state.tailing = reading;
    return reading;
  }

  function lineItem(line) {
    const activity = activityLine(line);
    if (activity) return activity;
    const kind = line.itemType === "tool_call" || line.itemType === "tool_result" ? "tool" : "";
    // A sub-agent's line (its detail is the sub-agent's id) opens it.
    const child = line.type.startsWith("subtask.") && line.detail ? line.detail : null;
    const title = line.title || line.type;
    return el(
      "li",
      { class: `${kind} ${line.status || ""} ${line.type.replace(/\W/g, "-")}`, "data-type": line.type, "data-id": line.id },
      el("time", { datetime: line.at }, clock(line.at)),
      el("div", {},
        el("span", { class: "title" }, child ? link(title, agentHash(child), () => openAgent(child)) : title),
        statusLine(line) || fieldsLine(line)
          || (line.detail && line.detail !== line.title && !child ? el("span", { class: "detail" }, line.detail) : null)),
    );
  }

  // The activity an observer is given (an input the engine writes: a `<NAME-activity>` envelope of what the agent
  // it watches did, or several, then the framing it is told with them), as what that agent did: a line a thing,
  // and the framing folded. Text of the agent's that reads as one of these tags was defused in it (`<\`), so only
  // the digest's own tags are read as such. Null for any other line.
  const ENVELOPE = /<([A-Za-z0-9_-]+)-activity>\n([\s\S]*?)(?:\n<\/\1-activity>|$)/g;
  const ACTIVITY_ITEM = new RegExp([
    /<tool-call name="([^"]*)">\n([\s\S]*?)(?:\n<\/tool-call>|$)/.source,
    /<tool-result name="([^"]*)" status="([^"]*)">\n([\s\S]*?)(?:\n<\/tool-result>|$)/.source,
    /<user-message>\n([\s\S]*?)(?:\n<\/user-message>|$)/.source,
    /<turn-ended outcome="([^"]*)"(?: reason="([^"]*)")? tokens="(\d+)" \/>/.source,
  ].join("|"), "g");

  function activityLine(line) {
    const text = line.itemType === "user_message" ? line.detail || "" : "";
    const first = /^<([A-Za-z0-9_-]+)-activity>\n/.exec(text);
    if (!first) return null;
    const done = [];
    let end = 0;
    for (const envelope of text.matchAll(ENVELOPE)) {
      done.push(...activityItems(envelope[2]));
      end = envelope.index + envelope[0].length;
    }
    const told = text.slice(end).trim(); // (the framing; a batch the observer fell behind on says so first)
    return el("li", { class: "digest", "data-type": line.type, "data-id": line.id },
      el("time", { datetime: line.at }, clock(line.at)),
      el("div", {},
        el("span", { class: "title" }, `activity of ${first[1]}`),
        el("dl", { class: "detail fields" }, ...done.flatMap(([what, said]) => [el("dt", {}, what), el("dd", {}, said)])),
        told ? el("details", {}, el("summary", {}, "what it is told with it"), el("p", { class: "detail" }, told)) : null));
  }

  // The items of one envelope's body, as [what, text]: what the agent wrote (the text between the tags), its
  // calls and their results, what it was told, and how its turns ended.
  function activityItems(body) {
    const items = [];
    let at = 0;
    const wrote = (text) => {
      if (text.trim()) items.push(["wrote", text.trim()]);
    };
    for (const m of body.matchAll(ACTIVITY_ITEM)) {
      wrote(body.slice(at, m.index));
      at = m.index + m[0].length;
      if (m[1] !== undefined) items.push([`called ${m[1]}`, m[2]]);
      else if (m[3] !== undefined) items.push([`${m[3]} gave`, m[4] === "ok" ? m[5] : `${m[4]}: ${m[5]}`]);
      else if (m[6] !== undefined) items.push(["was told", m[6]]);
      else {
        const reason = m[8] ? ` (${unescapeAttribute(m[8])})` : "";
        items.push(["turn ended", `${m[7]}${reason} · ${Number(m[9]).toLocaleString()} tokens`]);
      }
    }
    wrote(body.slice(at));
    return items;
  }

  function unescapeAttribute(value) {
    return value.replace(/&quot;/g, "\"").replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
  }

  // A tool call's input or result that is a JSON object (what `observer_report` and most tools answer) as its
  // fields, one a line: each name, and its value as text (a nested one as compact JSON), an agent's or a run's
  // id a link to it. Nothing is left out. Null for any other line (and for a detail cut short: shown as it is).
  function fieldsLine(line) {
    if (!["tool_call", "tool_result"].includes(line.itemType) || !(line.detail || "").startsWith("{")) return null;
    let fields;
    try {
      fields = JSON.parse(line.detail);
    } catch {
      return null;
    }
    const entries = Object.entries(fields);
    if (!entries.length) return null;
    return el("dl", { class: "detail fields" }, ...entries.flatMap(([name, value]) => [el("dt", {}, name), el("dd", {}, shownValue(value))]));
  }

  function shownValue(value) {
    if (typeof value === "string") {
      if (/^ses_\w+$/.test(value)) return link(state.names.get(value) || value, agentHash(value), () => openAgent(value));
      if (/^run_\w+$/.test(value)) return link(value, runHash(value), () => openRun(value));
      return value;
    }
    if (typeof value === "boolean") return value ? "yes" : "no";
    return JSON.stringify(value);
  }

  // A sub-agent's status record (what `agent_task` and `agent_await` answer) as one short line: who (a link), how
  // it stands, and its question or last words; not its JSON. Null for any other line (and for a record cut short).
  function statusLine(line) {
    if (line.itemType !== "tool_call" || line.type !== "item.completed" || !(line.detail || "").startsWith("{")) return null;
    let record;
    try {
      record = JSON.parse(line.detail);
    } catch {
      return null;
    }
    if (typeof record.agentId !== "string" || typeof record.word !== "string") return null;
    const id = record.agentId;
    const hitl = record.pendingHitl;
    const said = hitl ? `asks: ${(hitl.questions || [])[0] || hitl.kind}` : record.error || record.lastAssistantText;
    return el("span", { class: "detail" }, link(record.name || id, agentHash(id), () => openAgent(id)),
              ` · ${standing(record)}`, said ? ` · ${said}` : "");
  }

  function showLines(lines) {
    if (!lines.length) return;
    const log = $("log");
    const atBottom = atEnd(log);
    for (const line of lines) if (endsStream(line)) endShown(line.id); // what streamed is durable now
    log.append(...lines.map(lineItem));
    if (state.typing) log.append(state.typing); // (moved after them: it goes on streaming)
    // The oldest lines are let go (they can be read back), but not those a person just read back.
    const kept = state.readBack ? LOG_KEPT * 5 : LOG_KEPT;
    if (log.children.length > kept) $("earlier").hidden = false;
    while (log.children.length > kept) log.firstElementChild.remove();
    if (atBottom) log.scrollTop = log.scrollHeight;
  }

  async function showEarlier() {
    const id = state.selected;
    const log = $("log");
    const button = $("earlier");
    // The first line's event, or the next one's: a line of a passing event (tool progress) is placed only
    // while the live ring holds it.
    const firsts = [...log.querySelectorAll("li[data-id]")].slice(0, 5);
    if (!firsts.length) return;
    button.disabled = true;
    try {
      let answer = null;
      for (const first of firsts) {
        try {
          answer = await call("agent_tail", { id, beforeId: first.dataset.id, maxEvents: TAIL_PAGE, maxChars: MAX_CHARS, types: LOG_TYPES });
          break;
        } catch (error) {
          if (!(error instanceof ServiceError && error.code === "not_found") || first === firsts[firsts.length - 1]) throw error;
        }
      }
      if (state.selected !== id) return;
      state.readBack = true;
      const height = log.scrollHeight;
      log.prepend(...answer.events.map(lineItem));
      log.scrollTop += log.scrollHeight - height; // what was in view stays where it was
      button.hidden = !answer.hasMore;
    } catch (error) {
      complain(error);
    } finally {
      button.disabled = false;
    }
  }

  function clearTyping() {
    if (state.typing) state.typing.remove();
    state.typing = null;
  }

  // The live stream and the log's reads bring the same events in the same order, each at its own pace: a
  // "writing…" line is taken off by the log's line of its own end (the event's id), never by another one's. The
  // log may be behind (the next response streams on a line of its own meanwhile) or ahead (the stream brings the
  // last words after the log showed them whole).

  // The live stream brought the end of what streams: its line waits for the log to show that event, unless the
  // log showed it first.
  function streamEnded(id) {
    if (state.shownEnds.delete(id)) clearTyping();
    else state.ending.set(id, state.typing);
    state.typing = null; // (what streams next goes on a line of its own)
  }

  // The log shows the end of a stream: the line of what streamed before it goes. When the live stream has not
  // brought that end yet, what streams now is that stream.
  function endShown(id) {
    if (state.ending.has(id)) {
      const typing = state.ending.get(id);
      state.ending.delete(id);
      if (typing) typing.remove();
    } else {
      clearTyping();
      if (state.source) state.shownEnds.add(id); // (a line read before the attach: the stream never brings it)
    }
  }

  function showTyping(event) {
    const delta = event.payload.delta || "";
    const log = $("log");
    const following = atEnd(log);
    if (!state.typing) {
      // Hidden from screen readers: the log is a live region, and a line that grows at every streamed piece
      // would be read out piece by piece; the finished text is read once, as its own line.
      state.typing = el("li", { class: "typing", "aria-hidden": "true" }, el("time", { datetime: event.at }, clock(event.at)),
                        el("div", {}, el("span", { class: "title" }, "writing…"), el("span", { class: "detail" }, "")));
      log.append(state.typing);
    }
    const text = state.typing.querySelector(".detail"); // (a box of its own past a dozen lines)
    const followingText = atEnd(text, 5);
    text.textContent += delta;
    if (followingText) text.scrollTop = text.scrollHeight; // the newest words in view
    if (following) log.scrollTop = log.scrollHeight;
  }

  function laterDetail() {
    clearTimeout(state.detailTimer);
    state.detailTimer = setTimeout(() => showDetail().catch(complain), 150);
  }

  async function showDetail() {
    const id = state.selected;
    const agent = await call("agent_get", { id });
    if (state.selected !== id) return;
    const before = state.agent;
    state.agent = agent;
    followInList(agent, before);
    $("d-name").textContent = agent.displayName || agent.name;
    const spent = agent.usage && agent.usage.costUsd ? ` · $${agent.usage.costUsd.toFixed(4)}` : "";
    const tokens = agent.usage ? `${agent.usage.tokens} tokens${spent}` : "";
    const meta = [agent.role, agent.status, agent.modelRef, tokens, agent.id].filter(Boolean).join(" · ");
    const run = agent.runId
      ? [" · ", link(`run ${agent.runId}`, runHash(agent.runId), () => openRun(agent.runId))]
      : [];
    // What `agentwatch get` shows too: who spawned it, who holds it, what waits in its inbox. An observer was
    // spawned by the agent it watches (its parent), for which it does no work: it is said to watch it.
    const watches = agent.origin && agent.origin.kind === "observer" ? agent.origin.ref : null;
    const kin = watches || agent.parentId;
    const parent = kin
      ? [watches ? " · observer of " : " · sub-agent of ", link(state.names.get(kin) || kin, agentHash(kin), () => openAgent(kin))]
      : [];
    const held = agent.interception;
    const hold = held ? el("strong", {}, ` · held by ${held.by} since ${when(held.since)}`) : "";
    // A deleted agent takes no input and runs no turn: what is in its inbox is never read.
    const inputs = `${agent.pendingInputs} input${agent.pendingInputs === 1 ? "" : "s"}`;
    const inbox = !agent.pendingInputs ? ""
      : agent.deletedAt ? ` · ${inputs} left unread in its inbox`
        : ` · ${inputs} waiting in its inbox`;
    const reported = `${agent.pendingReports} observer report${agent.pendingReports === 1 ? "" : "s"}`;
    const reports = !agent.pendingReports ? ""
      : agent.deletedAt ? ` · ${reported} left unread`
        : ` · ${reported} for its next turn`;
    const deleted = agent.deletedAt
      ? el("strong", { class: "deleted" }, ` · deleted, readable until ${when(agent.reapAt)}`)
      : "";
    $("d-meta").replaceChildren(meta, ...parent, ...run, hold, inbox, reports, deleted);
    // What it does this moment (`current.currentItem`): the tool that runs, or what its model does. The log's last
    // line does not say whether a call it shows still runs.
    const now = agent.current && agent.current.currentItem;
    $("d-now").textContent = now ? `Now: ${doing(now)}` : "";
    $("d-now").hidden = !now;
    // Why it stands still: no engine runs its role, or why its last turn failed (a limit of its role, a model down).
    const problem = agent.roleProblem || (agent.status === "failed" && agent.error) || "";
    $("d-problem").textContent = problem;
    $("d-problem").hidden = !problem;
    showObserver(agent.observer);
    $("d-word").replaceWith(Object.assign(wordBadge(shownWord(agent)), { id: "d-word" }));
    const take = $("take");
    take.textContent = held ? `Hand back (held by ${held.by})` : "Take over";
    take.dataset.held = held ? "yes" : "no";
    take.disabled = Boolean(agent.deletedAt);
    $("stop").disabled = Boolean(agent.deletedAt) || !["working", "stuck", "needs_you"].includes(agent.word);
    $("delete").disabled = Boolean(agent.deletedAt);
    $("send").hidden = Boolean(agent.deletedAt); // a deleted agent takes no input
    showNeeds(agent);
  }

  // The list follows what the page learns of the agent shown from its live stream (`agent_get` after its
  // events): its row says what its header says at once, not at the list's next refresh. When its word changed
  // (it finished, it asks a person), the list is read again too: the chips' counts, and which rows a word's
  // filter lists, changed with it.
  function followInList(agent, before) {
    const row = [...$("agents").tBodies[0].rows].find((r) => r.dataset.id === agent.id);
    if (row) fillAgentRow(agent, row.cells);
    if (before && before.id === agent.id && shownWord(before) !== shownWord(agent)) refresh();
  }

  // The observer agent that watches this one, and what it last reported (the agent reads a report at its next
  // turn: `queued` until then).
  function showObserver(observer) {
    const line = $("d-observer");
    line.hidden = !observer;
    if (!observer) return;
    const type = observer.observerType || "an observer";
    const id = observer.observerSessionId;
    const who = id ? link(type, agentHash(id), () => openAgent(id)) : type;
    const reports = observer.reports || [];
    const last = reports[reports.length - 1];
    line.replaceChildren(
      "Watched by ", who, ` · ${observer.state}`, observer.reason ? ` (${observer.reason})` : "",
      ...(last ? [" · last report: ", el("q", {}, last.report), ` (${last.delivery})`] : []));
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
    const key = `${hitl.hitlId} ${hitl.deliverAt || ""}`;
    if (box.dataset.hitl === key) return; // keep what the person is typing
    box.dataset.hitl = key;
    const asked = (agent.oldestRequest && agent.oldestRequest.summary) || (hitl.questions && hitl.questions[0]);
    const summary = asked || "It waits for an answer.";
    const questions = (hitl.questions || []).filter((q) => q !== summary);
    const answer = (value) => respond(hitl.hitlId, value);
    if (hitl.deliverAt) {
      // Held for its parent agent first: it comes to a person at deliverAt, or now with Escalate.
      box.replaceChildren(
        el("h3", {}, `Asks its parent agent: ${summary}`),
        ...questions.map((q) => el("p", {}, q)),
        el("p", { class: "muted" }, `It comes to you at ${when(hitl.deliverAt)} if the parent has not answered.`),
        el("div", { class: "choices" }, el("button", { type: "button", onclick: () => escalate(hitl.hitlId) }, "Escalate to me now")),
      );
      box.hidden = false;
      return;
    }
    const parts = [el("h3", {}, `Needs you: ${summary}`), ...questions.map((q) => el("p", {}, q))];
    if (hitl.kind === "approval") {
      const note = el("textarea", { rows: 1, placeholder: "A note for the agent (optional)", "aria-label": "Note" });
      parts.push(note, el("div", { class: "choices" },
        el("button", { type: "button", class: "primary", onclick: () => answer(note.value ? { approved: true, message: note.value } : true) }, "Approve"),
        el("button", { type: "button", class: "danger", onclick: () => answer(note.value ? { approved: false, message: note.value } : false) }, "Deny")));
    } else if (hitl.options && hitl.options.length) {
      if (hitl.multiple) {
        const boxes = hitl.options.map((option) => el("input", { type: "checkbox", value: option, "aria-label": option }));
        parts.push(el("div", { class: "choices" }, ...boxes.map((b) => el("label", {}, b, ` ${b.value}`)),
          el("button", { type: "button", class: "primary", onclick: () => {
            const picked = boxes.filter((b) => b.checked).map((b) => b.value);
            if (picked.length) answer(picked);
            else toast("Tick at least one option.");
          } }, "Answer")));
      } else {
        parts.push(el("div", { class: "choices" },
          ...hitl.options.map((option) => el("button", { type: "button", onclick: () => answer(option) }, option))));
      }
    } else {
      const text = el("textarea", { rows: 2, placeholder: "Your answer", "aria-label": "Your answer" });
      parts.push(text, el("div", { class: "choices" },
        el("button", { type: "button", class: "primary", onclick: () => {
          if (text.value.trim()) answer(text.value);
          else toast("Write an answer first.");
        } }, "Answer")));
    }
    if (!state.canAct) parts.push(el("p", { class: "muted" }, "This token only reads: someone with the service's full token can answer."));
    box.replaceChildren(...parts);
    box.hidden = false;
  }

  async function escalate(hitlId) {
    await act($("needs"), async () => {
      await call("agent_escalate", { hitlId });
      await showDetail();
      focusDetail();
    });
  }

  async function respond(hitlId, value) {
    await act($("needs"), async () => {
      await call("agent_answer", { hitlId, answer: value });
      $("needs").dataset.hitl = "";
      await showDetail();
      focusDetail();
    });
  }

  // -- acting ----------------------------------------------------------------------------------------

  function wire() {
    for (const button of $("views").children) {
      button.addEventListener("click", () => {
        showView(button.dataset.view);
        keepPlace();
      });
    }
    window.addEventListener("hashchange", goToPlace);
    $("q").addEventListener("input", (e) => {
      state.q = e.target.value.trim();
      state.agentPages = 1;
      clearTimeout(wire.search);
      wire.search = setTimeout(refresh, 250);
    });
    $("run-entity").addEventListener("input", (e) => {
      state.runFilter = e.target.value.trim();
      state.runPages = 1;
      clearTimeout(wire.runSearch);
      wire.runSearch = setTimeout(refresh, 250);
    });
    $("run-status").addEventListener("change", (e) => {
      state.runStatus = e.target.value;
      state.runPages = 1;
      refresh();
    });
    // The log's first line takes the place of the line that says there is none yet.
    new MutationObserver(() => {
      if ($("log").children.length) $("log-empty").hidden = true;
    }).observe($("log"), { childList: true });
    $("send").addEventListener("submit", async (e) => {
      e.preventDefault();
      const field = e.target.elements.text;
      if (!field.value.trim()) {
        toast("Write a message first.");
        return;
      }
      await act(e.target, async () => {
        await call("agent_enqueue", { agentId: state.selected, prompt: field.value });
        field.value = "";
        laterDetail();
      });
    });
    $("earlier").addEventListener("click", showEarlier);
    for (const [button, table, key] of [["more-agents", "agents", "agentPages"], ["more-runs", "runs", "runPages"]]) {
      $(button).addEventListener("click", () => act($(button), async () => {
        const rows = $(table).tBodies[0].rows;
        const before = rows.length;
        state[key] += 1;
        await refresh();
        // The keyboard goes on to the first row it added (the button is gone after the last page).
        if ($(button).hidden && rows[before]) rows[before].focus();
      }, { relist: false }));
    }
    $("skip").addEventListener("click", (e) => {
      e.preventDefault(); // (the address says which agent is open, not where the focus is)
      if (state.selected) focusDetail();
      else $("q").focus();
    });
    $("stop").addEventListener("click", async () => {
      if (!state.agent || !confirm(`Stop ${state.agent.displayName || state.agent.name}?`)) return;
      // (the detail is shown after, not within: it says whether there is still something to stop)
      const answer = await act($("stop"), () => call("agent_stop", { id: state.selected }));
      if (!answer) return;
      if (!answer.stopped) toast("Nothing to stop: it had already ended.");
      await showDetail().catch(complain);
      if ($("stop").disabled && document.activeElement === $("stop")) focusDetail(); // (nothing left to stop)
    });
    $("delete").addEventListener("click", async () => {
      const name = state.agent && (state.agent.displayName || state.agent.name);
      if (!name || !confirm(`Delete ${name}? Its turn stops, and it stays readable by its id until it is reaped.`)) return;
      if (!(await act($("delete"), () => call("agent_delete", { id: state.selected })))) return;
      await showDetail().catch(complain); // (it says until when it is readable)
      focusDetail();
    });
    $("take").addEventListener("click", async (e) => {
      const tool = e.target.dataset.held === "yes" ? "agent_hand_back" : "agent_take_over";
      if (await act($("take"), () => call(tool, { id: state.selected }))) await showDetail().catch(complain);
    });
    $("create").addEventListener("submit", async (e) => {
      e.preventDefault();
      const form = e.target.elements;
      if (!form.role.value.trim() || !form.prompt.value.trim()) {
        toast(form.role.value.trim() ? "Write its task first." : "Name its role first.");
        return;
      }
      const created = await act(e.target, () => call("agent_create", { role: form.role.value.trim(), prompt: form.prompt.value }));
      if (!created) return;
      form.prompt.value = "";
      $("new-agent").open = false;
      await select(created.agentId, { focus: true });
    });
    $("new-agent").addEventListener("toggle", () => {
      if ($("new-agent").open) showRoles();
    });
    $("login-form").addEventListener("submit", () => {
      const token = $("login-form").elements.token.value.trim();
      sessionStorage.setItem(TOKEN_KEY, token);
      state.token = token;
      checkAccess();
      refresh();
      if (state.selected) select(state.selected);
    });
  }

  // The header's height, for what stays in view under it (style.css: --header); it wraps on a narrow window.
  function keepHeaderHeight() {
    const header = document.querySelector("header.top");
    const keep = () => document.documentElement.style.setProperty("--header", `${header.offsetHeight}px`);
    new ResizeObserver(keep).observe(header);
    keep();
  }

  takeToken();
  keepHeaderHeight();
  wire();
  checkAccess();
  refresh();
  goToPlace();
})();
