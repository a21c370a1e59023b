// idemgate console (docs/console.md). Plain browser JavaScript, no build
// step, nothing fetched from elsewhere. Every value from the API reaches
// the page through textContent or an attribute, never as markup.
"use strict";

(() => {
  const TOKEN_KEY = "idemgate.admin.token";
  /** Rows shown of the inbox backlog; the count covers up to QUEUED_LIMIT. */
  const BACKLOG_ROWS = 20;
  const QUEUED_LIMIT = 500;
  const PAGE_LIMIT = 50;

  const $ = (id) => document.getElementById(id);

  /** An element with text children and properties; strings become text nodes. */
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(props || {})) {
      if (value === undefined || value === null) continue;
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = String(value);
      else if (name === "data") Object.assign(node.dataset, value);
      else if (name === "on") for (const [ev, fn] of Object.entries(value)) node.addEventListener(ev, fn);
      else node.setAttribute(name, String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  /** A refusal or failure of an admin API call. */
  class ApiError extends Error {
    constructor(status, reason, detail) {
      super(`${status ? "HTTP " + status : "network error"}${reason ? " " + reason : ""}${detail ? ": " + detail : ""}`);
      this.status = status;
      this.reason = reason;
      this.detail = detail;
    }
  }

  /** One admin API call; `token` false sends none. Resolves to the JSON answer (null for 204). */
  async function api(method, path, token = sessionStorage.getItem(TOKEN_KEY)) {
    const headers = { Accept: "application/json" };
    if (token) headers.Authorization = "Bearer " + token;
    let response;
    try {
      response = await fetch(path, { method, headers, cache: "no-store", credentials: "omit" });
    } catch (error) {
      throw new ApiError(0, null, String(error));
    }
    if (response.status === 204) return null;
    const text = await response.text();
    let body = null;
    try { body = JSON.parse(text); } catch (_) { body = null; }
    if (!response.ok) {
      throw new ApiError(response.status, body && body.reason, (body && (body.detail || body.title)) || text.trim());
    }
    return body;
  }

  const enc = encodeURIComponent;

  function duration(ms) {
    if (ms === undefined || ms === null) return "–";
    const s = Math.floor(ms / 1000);
    if (s < 1) return `${ms} ms`;
    if (s < 60) return `${s} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} min ${s % 60} s`;
    const h = Math.floor(m / 60);
    if (h < 48) return `${h} h ${m % 60} min`;
    return `${Math.floor(h / 24)} d ${h % 24} h`;
  }

  function hashCell(hash) {
    return el("td", { class: "hash", title: hash }, hash ? hash.slice(0, 16) + "…" : "–");
  }

  function message(text, kind) {
    const box = $("message");
    box.textContent = text;
    box.className = kind || "info";
    box.hidden = !text;
  }

  function showLogin(text, kind) {
    message(text, kind);
    $("login").hidden = false;
    $("routes").replaceChildren();
    for (const id of ["refresh", "sign-out"]) $(id).hidden = true;
    $("instance").textContent = "";
    $("updated").textContent = "";
    $("token").focus();
  }

  /** What an API error means to the operator, and whether the console can go on. */
  function explain(error) {
    if (error.reason === "admin_api_disabled") {
      return "The admin API is disabled on this instance (admin_api_disabled): set [admin] token in its configuration to use the console.";
    }
    if (error.status === 401 || error.reason === "unauthorized") {
      return "The token was refused (401 unauthorized): enter the [admin] token of this instance.";
    }
    return `The admin API answered ${error.message}`;
  }

  function fatal(error) {
    if (error.reason === "admin_api_disabled") {
      $("login").hidden = true;
      $("routes").replaceChildren();
      message(explain(error), "error");
      return;
    }
    if (error.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin(explain(error), "error");
      return;
    }
    message(explain(error), "error");
  }

  // ---- detail dialog and actions -------------------------------------

  /**
   * What a purge does to a record in each state the API shows, asked
   * before it is sent; the request carries the state shown
   * (`expect_state`), so the API refuses it if the record moved on.
   */
  const PURGE_ASK = {
    completed: "This record is COMPLETED: the handler already did this delivery. Purging it makes the next copy of this key run AGAIN. Purge only to have the handler do it a second time.",
    inbox: "This inbox delivery was DELIVERED: the handler already did it. Purging it makes the next copy of this key run AGAIN.",
    in_flight: "This claim is IN FLIGHT: the delivery is being handled right now. Purging it lets a copy run beside it.",
    unknown: "The outcome is UNKNOWN: the handler may or may not have acted. Check the backend first: if it did the work, a purge lets it happen twice. The next delivery of this key is forwarded.",
    unknown_owner_lost: "The claim's owner stopped renewing it: the handler may or may not have acted. Check the backend first: if it did the work, a purge lets it happen twice. The next delivery of this key is forwarded.",
  };

  const ACTIONS = {
    purge: {
      label: "Purge",
      method: "DELETE",
      path: (route, hash, state) => `/admin/records/${enc(route)}?hash=${enc(hash)}` +
        (state ? `&expect_state=${enc(state)}` : ""),
      ask: (state) => state
        ? `${PURGE_ASK[state] || "Purge the record: the next delivery of this key is forwarded."}\n\nIt shows state ${state}.`
        : "There is no record under this key any more: the purge resolves its entity's pending change (it never happened).",
      done: "Record purged: the next delivery of this key will be forwarded.",
    },
    retry: {
      label: "Retry",
      method: "POST",
      path: (route, hash, state) => `/admin/inbox/${enc(route)}/retry?hash=${enc(hash)}&expect_state=${enc(state)}`,
      ask: () => "Retry the delivery: it is queued for one more attempt now.",
      done: "Delivery queued for one more attempt.",
    },
    drop: {
      label: "Drop",
      method: "POST",
      path: (route, hash, state) => `/admin/inbox/${enc(route)}/drop?hash=${enc(hash)}&expect_state=${enc(state)}`,
      ask: () => "Drop the delivery: it is resolved without being sent; copies still get the acknowledgement.",
      done: "Delivery dropped.",
    },
  };

  /** The state the record API shows for `hash` now, `null` when there is no record. */
  async function recordState(route, hash) {
    try {
      return (await api("GET", `/admin/records/${enc(route)}?hash=${enc(hash)}`)).state;
    } catch (error) {
      if (error.status === 404) return null;
      throw error;
    }
  }

  /**
   * Runs action `kind` on `hash`; a purge carries the record's state as
   * shown (`state`), looked up first where the page did not show one (an
   * entity's pending delivery).
   */
  async function act(kind, route, hash, state) {
    const action = ACTIONS[kind];
    let outcome;
    try {
      if (kind === "purge" && state === undefined) state = await recordState(route, hash);
      if (!window.confirm(`${action.ask(state)}\n\nRoute ${route}\nKey hash ${hash}`)) return;
      await api(action.method, action.path(route, hash, state));
      outcome = [`${action.done} (route ${route}, key hash ${hash})`, "info"];
    } catch (error) {
      if (error.status === 401) return fatal(error);
      outcome = [`${action.label} failed: ${explain(error)}`, "error"];
    }
    if ($("detail").open) $("detail").close();
    // Redrawn first, then told: the message means the page shows the result.
    await load();
    message(...outcome);
  }

  /** Whether the signed-in token may only read (`/admin/info` says): no action is offered then. */
  let readOnly = false;

  /** Buttons for `kinds` on `hash`; `state`: the record state the page shows. None for a read-only token. */
  function actionButtons(kinds, route, hash, state) {
    if (readOnly) return [];
    return kinds.map((kind) => el("button", {
      type: "button",
      class: kind === "retry" ? null : "danger",
      data: { action: kind },
      on: { click: () => act(kind, route, hash, state) },
    }, ACTIONS[kind].label));
  }

  /** Fields that count milliseconds; every other `*_ms` is a Unix time. */
  const DURATIONS = new Set(["age_ms", "ttl_ms", "uptime_ms"]);

  /** `[name, value]` rows of a JSON object, nested objects as dotted names. */
  function fields(value, prefix = "") {
    const rows = [];
    for (const [name, item] of Object.entries(value || {})) {
      const full = prefix + name;
      if (item && typeof item === "object" && !Array.isArray(item)) rows.push(...fields(item, full + "."));
      else if (DURATIONS.has(name) && typeof item === "number") rows.push([full, `${item} (${duration(item)})`]);
      else if (name.endsWith("_ms") && typeof item === "number") rows.push([full, `${item} (${new Date(item).toISOString()})`]);
      else rows.push([full, item === null ? "–" : typeof item === "string" ? item : JSON.stringify(item)]);
    }
    return rows;
  }

  async function showDetail(kind, route, hash) {
    const path = kind === "delivery"
      ? `/admin/inbox/${enc(route)}/delivery?hash=${enc(hash)}`
      : `/admin/records/${enc(route)}?hash=${enc(hash)}`;
    let view;
    try {
      view = await api("GET", path);
    } catch (error) {
      if (error.status === 401) return fatal(error);
      message(`Detail failed: ${explain(error)}`, "error");
      return;
    }
    $("detail-title").textContent = kind === "delivery" ? "Inbox delivery" : "Record";
    const body = $("detail-table").tBodies[0];
    body.replaceChildren(...fields(view).map(([name, value]) =>
      el("tr", { data: { field: name } }, el("th", { text: name }), el("td", { text: value }))));
    let kinds = ["purge"];
    if (kind === "delivery") kinds = view.state === "dead" || view.state === "unknown" ? ["retry", "drop"] : ["drop"];
    // An inbox delivery still owed is dropped, never purged (the API refuses it).
    if (kind === "record" && view.state === "inbox" && view.inbox_stage !== "delivered") kinds = [];
    $("detail-actions").replaceChildren(...actionButtons(kinds, route, hash, view.state));
    $("detail-extra").replaceChildren();
    if (!$("detail").open) $("detail").showModal();
  }

  /**
   * An entity of an entity route (`/admin/entities/{route}?id=` or
   * `?hash=`: `named` is `{ id }` or `{ hash }`): its fields, then its transitions newest
   * first; below, the corrections an operator may make, each judged by the
   * API against the state and pending change shown here.
   */
  async function showEntity(route, named) {
    let view;
    try {
      view = await api("GET", named.hash === undefined
        ? `/admin/entities/${enc(route)}?id=${enc(named.id)}`
        : `/admin/entities/${enc(route)}?hash=${enc(named.hash)}`);
    } catch (error) {
      if (error.status === 401) return fatal(error);
      message(`Entity lookup failed: ${explain(error)}`, "error");
      return;
    }
    const { history, ...rest } = view;
    $("detail-title").textContent = "Entity";
    $("detail-table").tBodies[0].replaceChildren(...fields(rest).map(([name, value]) =>
      el("tr", { data: { field: name } }, el("th", { text: name }), el("td", { text: value }))));
    const rows = (history || []).map((t) =>
      el("tr", { data: { kind: t.kind, delivery: t.delivery } },
        el("td", { text: t.kind }), el("td", { text: t.from === null ? "–" : t.from }), el("td", { text: t.to }),
        el("td", { class: "hash", text: t.delivery }), el("td", { text: new Date(t.at_ms).toISOString() })));
    $("detail-extra").replaceChildren(el("h3", { text: "History (newest first)" }),
      rows.length ? el("table", { id: "entity-history" },
        el("thead", {}, el("tr", {}, ["kind", "from", "to", "delivery", "at"].map((h) => el("th", { text: h })))),
        el("tbody", {}, rows))
        : el("p", { class: "note" }, "No transitions."));
    const buttons = readOnly ? [] : [
      el("button", { type: "button", class: "danger", data: { action: "entity-set" }, on: { click: () => correctEntity(route, view, false) } }, "Set state…"),
      el("button", { type: "button", class: "danger", data: { action: "entity-clear" }, on: { click: () => correctEntity(route, view, true) } }, "Clear state"),
    ];
    if (view.pending) buttons.push(...actionButtons(["purge"], route, view.pending.delivery));
    $("detail-actions").replaceChildren(...buttons);
    if (!$("detail").open) $("detail").showModal();
  }

  /**
   * An operator's correction of `view`'s entity: set its state (asked for)
   * or clear it. The request carries the state and pending change shown,
   * so the API refuses it (409 entity_changed) if the entity moved since.
   */
  async function correctEntity(route, view, clear) {
    const pending = view.pending ? view.pending.delivery : "";
    const seen = `It shows state ${view.state === null ? "(none)" : view.state}, pending ${pending || "(none)"}.`;
    let state = "";
    if (clear) {
      if (!window.confirm(`Clear the entity's state: the next notice is judged as a first one, and the pending change is resolved.\n\n${seen}`)) return;
    } else {
      state = window.prompt(`Set the entity's state, only if the handler's books say so: the pending change is resolved (a handler that did apply it is not asked again) and held notices are judged against the new state.\n\n${seen}\n\nNew state:`) || "";
      if (!state) return;
    }
    const shown = view.state === null ? "" : view.state;
    const path = clear
      ? `/admin/entities/${enc(route)}?hash=${enc(view.entity)}&expect_state=${enc(shown)}&expect_pending=${enc(pending)}`
      : `/admin/entities/${enc(route)}?hash=${enc(view.entity)}&state=${enc(state)}&expect_state=${enc(shown)}&expect_pending=${enc(pending)}`;
    let outcome;
    try {
      await api(clear ? "DELETE" : "PUT", path);
      outcome = [clear ? `Entity ${view.entity} cleared.` : `Entity ${view.entity} set to ${state}.`, "info"];
    } catch (error) {
      if (error.status === 401) return fatal(error);
      outcome = [`Correction refused: ${explain(error)}`, "error"];
    }
    if ($("detail").open) $("detail").close();
    await load();
    message(...outcome);
  }

  /** Entities something holds: a change pending, or notices waiting behind it. */
  async function heldPanel(route) {
    const box = panel("held", "Held entities", true);
    await listing(box, `/admin/entities/${enc(route)}?state=held&limit=${PAGE_LIMIT}`,
      ["entity", "state", "pending change", "notices waiting", ""],
      (item) => el("tr", { data: { kind: "held", entity: item.entity } },
        hashCell(item.entity),
        el("td", { text: item.state === null ? "–" : item.state }),
        el("td", { text: item.pending ? `→ ${item.pending.to}` : "–" }),
        el("td", { text: (item.held || []).length }),
        el("td", { class: "actions" }, el("button", {
          type: "button", data: { action: "entity-detail" },
          on: { click: () => showEntity(route, { hash: item.entity }) },
        }, "Details"))),
      "No entity is held.").catch((error) => failed(box, error));
    return box;
  }

  /** The entity lookup of an entity route: an id in, the entity's detail out. */
  function entityPanel(route) {
    const box = panel("entity", "Entity lookup");
    const input = el("input", { type: "text", name: "entity-id", "aria-label": "Entity id", placeholder: "entity id" });
    const form = el("form", { class: "entity-lookup", autocomplete: "off" }, input,
      el("button", { type: "submit", data: { action: "entity" } }, "Look up"));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (input.value) showEntity(route, { id: input.value });
    });
    box.append(form);
    return box;
  }

  function detailButton(kind, route, hash) {
    return el("button", { type: "button", data: { action: "detail" }, on: { click: () => showDetail(kind, route, hash) } }, "Details");
  }

  // ---- panels ---------------------------------------------------------

  function table(headings, rows) {
    return el("table", {},
      el("thead", {}, el("tr", {}, headings.map((h) => el("th", { text: h })))),
      el("tbody", {}, rows));
  }

  function panel(name, title, trouble) {
    return el("div", { class: "panel" + (trouble ? " trouble" : ""), data: { panel: name } }, el("h3", { text: title }));
  }

  function failed(box, error) {
    box.append(el("p", { class: "note error" }, explain(error)));
  }

  /**
   * Fills `box` with the pages of a listing from `first`, one table, a
   * "More" button while a next_cursor is given. `row(item)` builds a row
   * or null to leave the item out. An item a page repeats (a Redis
   * keyspace shrinking during the walk) is shown once. "Nothing" is said
   * only of a finished walk: while a cursor remains and nothing was found,
   * a note says the walk goes on.
   */
  async function listing(box, first, headings, row, empty) {
    const rows = [];
    const shown = new Set();
    let cursor = null;
    const more = el("button", { type: "button", data: { action: "more" } }, "More");
    const unfinished = el("p", { class: "note", data: { walk: "unfinished" } },
      "None found in the part of the store walked so far; the walk is not finished (More goes on).");
    const tbody = el("tbody");
    const found = el("table", {}, el("thead", {}, el("tr", {}, headings.map((h) => el("th", { text: h })))), tbody);
    const fetchPage = async () => {
      const page = await api("GET", cursor === null ? first : `${first}&cursor=${enc(String(cursor))}`);
      for (const item of page.items || []) {
        const id = item.key_hash || item.entity || item.id;
        if (id !== undefined && shown.has(id)) continue;
        shown.add(id);
        const tr = row(item);
        if (tr) { rows.push(tr); tbody.append(tr); }
      }
      cursor = page.next_cursor === undefined ? null : page.next_cursor;
      more.hidden = cursor === null;
      unfinished.hidden = !(rows.length === 0 && cursor !== null);
      found.hidden = rows.length === 0;
      return page;
    };
    more.addEventListener("click", () => fetchPage().catch((error) => failed(box, error)));
    // A store walk may end a page early (fewer items, a next_cursor):
    // follow a few pages before showing what was found.
    let page = await fetchPage();
    for (let i = 0; i < 10 && rows.length === 0 && cursor !== null; i += 1) page = await fetchPage();
    if (rows.length === 0 && cursor === null) box.append(el("p", { class: "note" }, empty));
    else box.append(unfinished, found, more);
    return page;
  }

  /** Why a listed record needs a person, in words. */
  const WHY = {
    unknown: "outcome unknown",
    unknown_owner_lost: "in flight past its lease (owner lost)",
    in_flight: "in flight",
  };

  /** A pending probe of the handler ([route.probe]), in words. */
  function probeWords(probe) {
    if (probe.spent === true) return `probes spent (${probe.attempts}): ${probe.last || "no answer"}`;
    const next = typeof probe.next_attempt_at_ms === "number" ? `, next in ${duration(Math.max(0, probe.next_attempt_at_ms - Date.now()))}` : "";
    return `probe: ${probe.attempts} asked${next}`;
  }

  function recordRow(route, kind, item) {
    const why = el("td", { text: WHY[item.state] || item.state || "–" });
    if (item.past_lease === true && item.state === "in_flight") why.append(" ", el("span", { class: "badge bad", text: "past lease" }));
    if (item.probe) why.append(" ", el("span", { class: "badge probe", text: probeWords(item.probe) }));
    return el("tr", { data: { kind, hash: item.key_hash, state: item.state || "" } },
      hashCell(item.key_hash),
      el("td", { class: "mono", text: item.key === null || item.key === undefined ? "–" : item.key }),
      why,
      el("td", { text: item.age_ms === undefined ? "–" : duration(item.age_ms) }),
      el("td", { text: item.ttl_ms === null || item.ttl_ms === undefined ? "–" : duration(item.ttl_ms) }),
      el("td", { class: "mono", text: item.trace_id || "–" }),
      el("td", { class: "actions" }, detailButton("record", route, item.key_hash),
        // A claim within its lease is being handled: no purge offered.
        kind === "unknown" || item.past_lease === true ? actionButtons(["purge"], route, item.key_hash, item.state) : []));
  }

  const RECORD_HEADINGS = ["key hash", "key", "state", "age", "expires in", "first trace", ""];

  /** Unknown outcomes and claims whose owner stopped renewing them: both block their key until an operator acts. */
  async function unknownPanel(route) {
    const box = panel("unknown", "Unknown outcomes and deliveries in flight past their lease", true);
    await listing(box, `/admin/records/${enc(route)}?state=unknown&limit=${PAGE_LIMIT}`, RECORD_HEADINGS,
      (item) => recordRow(route, "unknown", item),
      "No unknown outcomes.").catch((error) => failed(box, error));
    return box;
  }

  /** Claims within their lease: being handled now, shown for context. */
  async function inFlightPanel(route) {
    const box = panel("in_flight", "In flight", false);
    await listing(box, `/admin/records/${enc(route)}?state=in_flight&limit=${PAGE_LIMIT}`, RECORD_HEADINGS,
      (item) => recordRow(route, "in_flight", item),
      "Nothing in flight.").catch((error) => failed(box, error));
    return box;
  }

  async function deadPanel(route) {
    const box = panel("dead", "Dead deliveries", true);
    await listing(box, `/admin/inbox/${enc(route)}?state=dead&limit=${PAGE_LIMIT}`,
      ["key hash", "attempts", "last error", "age", ""],
      (item) => el("tr", { data: { kind: "dead", hash: item.key_hash } },
        hashCell(item.key_hash),
        el("td", { text: item.attempts === undefined ? "–" : `${item.attempts}/${item.attempt_limit}` }),
        el("td", { text: item.last_error || item.state || "–" }),
        el("td", { text: duration(item.age_ms) }),
        el("td", { class: "actions" }, detailButton("delivery", route, item.key_hash),
          item.state === "dead" ? actionButtons(["retry", "drop"], route, item.key_hash, item.state) : [])),
      "No dead deliveries.").catch((error) => failed(box, error));
    return box;
  }

  async function backlogPanel(route) {
    const box = panel("queued", "Inbox backlog", false);
    try {
      const page = await api("GET", `/admin/inbox/${enc(route)}?state=queued&limit=${QUEUED_LIMIT}`);
      const items = page.items || [];
      const count = page.next_cursor === null || page.next_cursor === undefined ? `${items.length}` : `more than ${items.length}`;
      const oldest = items.length ? `; oldest waiting ${duration(items[0].age_ms)}` : "";
      box.append(el("p", { class: "summary", data: { count: items.length } }, `${count} queued${oldest}`));
      if (items.length) {
        box.append(table(["key hash", "attempts", "next attempt in", "age", ""],
          items.slice(0, BACKLOG_ROWS).map((item) => el("tr", { data: { kind: "queued", hash: item.key_hash } },
            hashCell(item.key_hash),
            el("td", { text: item.attempts === undefined ? "–" : `${item.attempts}/${item.attempt_limit}` }),
            el("td", { text: item.next_due_ms ? duration(Math.max(0, item.next_due_ms - Date.now())) : "–" }),
            el("td", { text: duration(item.age_ms) }),
            el("td", { class: "actions" }, detailButton("delivery", route, item.key_hash))))));
        if (items.length > BACKLOG_ROWS) box.append(el("p", { class: "note" }, `… and ${items.length - BACKLOG_ROWS} more`));
      }
    } catch (error) {
      failed(box, error);
    }
    return box;
  }

  function hotPanel(route, hot) {
    const box = panel("hot", "Hot keys", false);
    if (hot instanceof ApiError) {
      box.append(el("p", { class: "note" }, hot.reason === "hot_keys_disabled" ? "Hot keys are off ([hot_keys] enabled = false)." : explain(hot)));
      return box;
    }
    const keys = (hot.get(route) || []).filter((key) => key.duplicates > 0);
    if (!keys.length) {
      box.append(el("p", { class: "note" }, "No key had duplicates in the window."));
      return box;
    }
    box.append(table(["key hash", "deliveries", "duplicates", "last outcome", "last seen", ""],
      keys.map((key) => el("tr", { data: { kind: "hot", hash: key.key } },
        hashCell(key.key),
        el("td", { text: key.deliveries }),
        el("td", { text: key.duplicates }),
        el("td", { text: key.last_outcome + (key.last_reason ? ` (${key.last_reason})` : "") }),
        el("td", { text: duration(Date.now() - key.last_seen_unix_ms) + " ago" }),
        el("td", { class: "actions" }, detailButton("record", route, key.key))))));
    return box;
  }

  async function routeSection(route, hot) {
    const methods = (route.methods || []).join(", ") || "any method";
    const panels = [unknownPanel(route.name), inFlightPanel(route.name)];
    if (route.inbox) panels.push(deadPanel(route.name), backlogPanel(route.name));
    if (route.entity) panels.push(heldPanel(route.name), entityPanel(route.name));
    const boxes = await Promise.all(panels);
    boxes.push(hotPanel(route.name, hot));
    return el("section", { class: "route", data: { route: route.name } },
      el("h2", { text: route.name }),
      el("p", { class: "about muted" }, `${methods} ${route.path_prefix} → ${route.upstream}${route.inbox ? " · inbox" : ""}${route.entity ? " · entity state" : ""}`),
      boxes);
  }

  /** The audit trail: the last operator actions, done or refused, newest first (GET /admin/audit). */
  async function auditSection() {
    const box = panel("audit", "Operator actions (audit trail)", false);
    const states = (item) => `${item.before || "–"} → ${item.after || "–"}` +
      (item.expected && item.expected !== item.before ? ` (saw ${item.expected})` : "");
    await listing(box, `/admin/audit?limit=${PAGE_LIMIT}`, ["when", "token", "action", "route", "target", "state", "outcome"],
      (item) => el("tr", { data: { kind: "audit", id: item.id, outcome: item.outcome } },
        el("td", { text: new Date(item.at_ms).toLocaleString() }),
        el("td", { text: item.token }),
        el("td", { text: item.action }),
        el("td", { text: item.route }),
        el("td", { class: "mono", text: item.target || "–" }),
        el("td", { text: states(item) }),
        el("td", { class: item.outcome === "done" ? "" : "muted", text: item.outcome })),
      "No operator actions recorded.").catch((error) => failed(box, error));
    return el("section", { class: "audit", data: { section: "audit" } }, el("h2", { text: "Audit trail" }), box);
  }

  // ---- the whole page -----------------------------------------------------

  async function load() {
    if (!sessionStorage.getItem(TOKEN_KEY)) {
      // No token yet: ask, unless the API is off altogether.
      try {
        await api("GET", "/admin/info", null);
      } catch (error) {
        if (error.reason === "admin_api_disabled") return fatal(error);
      }
      return showLogin("Enter the admin token to open the console.", "info");
    }
    let info;
    try {
      info = await api("GET", "/admin/info");
    } catch (error) {
      return fatal(error);
    }
    $("login").hidden = true;
    for (const id of ["refresh", "sign-out"]) $(id).hidden = false;
    readOnly = Boolean(info.token && info.token.scope === "read");
    const who = info.token ? ` · token ${info.token.name}${readOnly ? " (read only: no actions)" : ""}` : "";
    $("instance").textContent = `idemgate ${info.version} · ${info.store.kind} store ${info.store.ready ? "ready" : "NOT READY"}${who}`;
    if (!info.store.ready) message(`The store is not ready: ${info.store.problem}`, "error");
    let hot;
    try {
      const answer = await api("GET", "/admin/hot-keys");
      hot = new Map((answer.routes || []).map((r) => [r.route, r.keys || []]));
    } catch (error) {
      hot = error instanceof ApiError ? error : new ApiError(0, null, String(error));
    }
    const sections = await Promise.all((info.routes || []).map((route) => routeSection(route, hot)).concat(auditSection()));
    $("routes").replaceChildren(...sections);
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    // How many times the routes were drawn: tests wait for the next one.
    document.body.dataset.loads = String(Number(document.body.dataset.loads || 0) + 1);
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("login").addEventListener("submit", (event) => {
      event.preventDefault();
      const token = $("token").value;
      $("token").value = "";
      if (!token) return;
      sessionStorage.setItem(TOKEN_KEY, token);
      message("", "info");
      load();
    });
    $("refresh").addEventListener("click", () => load());
    $("sign-out").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin("Token forgotten.", "info");
    });
    $("detail-close").addEventListener("click", () => $("detail").close());
    load();
  });
})();
