// care report: renders the embedded data. Every string that came from a dialogue or a record is
// inserted with textContent (never innerHTML), so replies render as text.
(function () {
  "use strict";
  const STARTED = performance.now();
  const DATA = JSON.parse(document.getElementById("care-data").textContent);
  const DIMS = DATA.dims, TURNS = DATA.turns, DLG = DATA.dialogues, STR = DATA.strings, OV = DATA.overview;
  const PAGE_DIALOGUES = 10, PAGE_TURNS = 25, MESSAGE_CHUNK = 40;
  const DEFAULTS = { view: "dialogues", status: "all", dim: "any", flag: "any", min: "", max: "", q: "",
    sort: "order", page: "1", d: "", hl: "" };

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function add(parent, ...children) { for (const c of children) if (c) parent.appendChild(c); return parent; }
  function fmt(x, digits) { return x === null || x === undefined ? "–" : Number(x).toFixed(digits === undefined ? 3 : digits); }
  function hue(r) { return "hsl(" + Math.round(120 * r) + ", 55%, 40%)"; }
  function link(text, state) {
    const a = el("a", null, text);
    a.href = "#" + new URLSearchParams(state).toString();
    return a;
  }
  function topDims(w) {
    if (!w) return [];
    const best = Math.max(...w);
    return DIMS.map((_, i) => i).filter((i) => w[i] >= best - 1e-9);
  }

  // -- state in the URL hash: every filter is shareable and scriptable ----------------------------
  function readState() {
    const s = Object.assign({}, DEFAULTS);
    for (const [k, v] of new URLSearchParams(location.hash.replace(/^#/, ""))) if (k in DEFAULTS) s[k] = v;
    return s;
  }
  function setState(changes) {
    const s = Object.assign(readState(), changes);
    if (!("page" in changes)) s.page = "1";
    if (!("hl" in changes)) s.hl = "";
    const p = new URLSearchParams();
    for (const k in DEFAULTS) if (s[k] !== DEFAULTS[k] && s[k] !== "") p.set(k, s[k]);
    const hash = "#" + p.toString();
    if (hash === location.hash || (hash === "#" && !location.hash)) render();
    else location.hash = hash;
  }

  function matches(t, s) {
    if (s.d !== "" && t.d !== Number(s.d)) return false;
    if (s.status === "failed" && t.r !== null) return false;
    if (s.status === "scored" && t.r === null) return false;
    if (s.dim !== "any" && !topDims(t.w).includes(DIMS.indexOf(s.dim))) return false;
    if (s.flag !== "any" && !t.f.includes(s.flag)) return false;
    if (s.min !== "" && !(t.r !== null && t.r >= Number(s.min))) return false;
    if (s.max !== "" && !(t.r !== null && t.r <= Number(s.max))) return false;
    if (s.q) {
      const q = s.q.toLowerCase();
      const hay = String(DLG[t.d].id).toLowerCase() + "\n" + String(t.e || "").toLowerCase();
      if (!hay.includes(q)) return false;
    }
    return true;
  }

  function sortKey(sort, t) {
    // smaller sorts first; failures (no reward) go last in reward orders
    if (sort === "reward-asc") return t.r === null ? 2 : t.r;
    if (sort === "reward-desc") return t.r === null ? 2 : -t.r;
    if (sort === "failed-first") return t.r === null ? 0 : 1;
    if (sort.startsWith("w-")) return t.w ? -t.w[DIMS.indexOf(sort.slice(2))] : 2;
    if (sort.startsWith("s-")) { const v = t.ds ? t.ds[DIMS.indexOf(sort.slice(2))] : null; return v === null ? 2 : v; }
    return 0;
  }

  // -- one assistant turn: its reply and annotation --------------------------------------------
  function weightBar(w, big) {
    const bar = el("div", "wbar" + (big ? " big" : ""));
    if (!w) return bar;
    const total = w.reduce((a, b) => a + b, 0) || 1;
    w.forEach((v, i) => {
      const part = el("span", DIMS[i], big && v / total > 0.12 ? DIMS[i] + " " + Math.round((100 * v) / total) + "%" : null);
      part.style.width = (100 * v) / total + "%";
      part.title = DIMS[i] + " " + fmt(v);
      bar.appendChild(part);
    });
    return bar;
  }
  function badge(r) {
    const b = el("span", "badge" + (r === null ? " failed" : ""), r === null ? "failed" : fmt(r));
    if (r !== null) b.style.background = hue(r);
    return b;
  }
  function producerText(p) {
    const by = DATA.producers[p] || {};
    if (!by.evaluator && !by.generator) return "";
    const parts = [];
    if (by.generator) parts.push("generator " + by.generator);
    if (by.evaluator) parts.push("evaluator " + by.evaluator);
    return parts.join(" · ");
  }
  function big(n) { return n >= 10000 ? (n / 1000).toFixed(1) + "k" : fmt(n, 0); }
  function tokens(p, c) {
    return p === null && c === null ? null : fmt(p || 0, 0) + " + " + fmt(c || 0, 0);
  }
  function costText(c) {
    // [calls, prompt tokens, completion tokens, seconds, source, rubric hash, shared by]: this reply's share
    const parts = [];
    if (c[5] !== null) parts.push("rubric " + STR[c[5]] + " (" + c[4] + (c[6] > 1 ? ", shared by " + c[6] + " replies" : "") + ")");
    const cost = [fmt(c[0], 2) + " calls"];
    const tk = tokens(c[1], c[2]);
    if (tk) cost.push(tk + " tokens");
    cost.push(fmt(c[3], 3) + " s");
    parts.push("cost " + cost.join(", "));
    return parts.join(" · ");
  }
  function annotation(ti, open) {
    const t = TURNS[ti];
    const det = el("details", "annot");
    det.open = open;
    const sum = add(el("summary"), badge(t.r), weightBar(t.w, false));
    for (const f of t.f) sum.appendChild(el("span", "chip" + (f === "failed" ? " failed" : ""), f));
    det.appendChild(sum);
    const inner = el("div", "inner");
    if (t.e) inner.appendChild(el("div", "error", t.e));
    if (t.w) inner.appendChild(weightBar(t.w, true));
    DIMS.forEach((dim, k) => {
      const crit = t.s.filter((x) => x[0] === k);
      if (!crit.length && !t.w) return;
      const g = el("div", "dimgroup");
      const head = add(el("div", "dh"), el("i", dim), el("span", null, dim));
      head.appendChild(el("span", "w", "weight " + fmt(t.w ? t.w[k] : null, 2) +
        (t.ds && t.ds[k] !== null ? " · score " + fmt(t.ds[k], 2) : "")));
      g.appendChild(head);
      for (const c of crit) {
        const row = el("div", "crit");
        const sc = el("span", "score", fmt(c[2], Number.isInteger(c[2]) ? 0 : 1));
        sc.style.background = hue((c[2] - 1) / 4);
        add(row, sc, el("span", null, STR[c[1]]));
        g.appendChild(row);
      }
      inner.appendChild(g);
    });
    const by = producerText(t.p);
    if (by) inner.appendChild(el("div", "producer mono", by));
    if (t.c) inner.appendChild(el("div", "producer mono cost", costText(t.c)));
    det.appendChild(inner);
    return det;
  }
  function message(role, text, label) {
    return add(el("div", "msg " + role), el("div", "who", label || role), el("div", "text", text));
  }
  function turnBlock(ti, isMatch, reply, s) {
    const t = TURNS[ti];
    const box = el("div", "turn " + (isMatch ? "match" : "nomatch") + (t.r === null ? " failed" : ""));
    box.dataset.turn = String(t.t);
    box.dataset.index = String(ti);
    box.id = "t" + ti;
    if (s.hl !== "" && Number(s.hl) === ti) box.classList.add("hl");
    if (reply !== null) box.appendChild(message("assistant", reply, "assistant · turn " + t.t));
    else box.appendChild(el("div", "note", "turn " + t.t + (DLG[t.d].m ? " (no assistant message at this index in the dialogue file)" : "")));
    box.appendChild(annotation(ti, isMatch));
    return box;
  }

  // -- dialogue view --------------------------------------------------------------------------------
  function dialogueSection(di, matchSet, s) {
    const dlg = DLG[di];
    const sec = el("section", "dialogue");
    sec.id = "d" + di;
    const scored = dlg.turns.filter((i) => TURNS[i].r !== null).map((i) => TURNS[i].r);
    const mean = scored.length ? scored.reduce((a, b) => a + b, 0) / scored.length : null;
    const head = add(el("div", "head"), el("span", "id", dlg.id),
      el("span", "meta", dlg.turns.length + " scored turns · mean reward " + fmt(mean) + " · " +
        (dlg.turns.length - scored.length) + " failed"));
    if (s.d === "") head.appendChild(link("show only this dialogue", { d: String(di) }));
    sec.appendChild(head);
    const body = el("div", "body");
    sec.appendChild(body);
    const byIndex = new Map(dlg.turns.map((i) => [TURNS[i].t, i]));
    if (!dlg.m) {
      body.appendChild(el("div", "note", "Message texts are not in the scores file; pass --dialogues to show the conversation."));
      for (const ti of dlg.turns) body.appendChild(turnBlock(ti, matchSet[ti] === 1, null, s));
      return sec;
    }
    const shown = new Set();
    let target = MESSAGE_CHUNK;
    if (s.hl !== "" && TURNS[Number(s.hl)] && TURNS[Number(s.hl)].d === di) target = Math.max(target, TURNS[Number(s.hl)].t + 5);
    function renderRange(from, to) {
      for (let k = from; k < to; k++) {
        const [role, content] = dlg.m[k];
        const ti = role === "assistant" ? byIndex.get(k) : undefined;
        if (ti !== undefined) { shown.add(ti); body.appendChild(turnBlock(ti, matchSet[ti] === 1, content, s)); }
        else body.appendChild(message(role, content));
      }
    }
    renderRange(0, Math.min(target, dlg.m.length));
    if (target < dlg.m.length) {
      let next = target;
      const more = el("button", "plain more");
      const label = () => { more.textContent = "show " + Math.min(MESSAGE_CHUNK, dlg.m.length - next) + " more of " + (dlg.m.length - next) + " remaining messages"; };
      label();
      more.addEventListener("click", () => {
        more.remove();
        const end = Math.min(next + MESSAGE_CHUNK, dlg.m.length);
        renderRange(next, end);
        next = end;
        if (next < dlg.m.length) { label(); body.appendChild(more); }
      });
      body.appendChild(more);
    }
    for (const ti of dlg.turns) {
      if (!shown.has(ti) && TURNS[ti].t >= dlg.m.length) body.appendChild(turnBlock(ti, matchSet[ti] === 1, null, s));
    }
    return sec;
  }

  // -- turn view -----------------------------------------------------------------------------------
  function turnCard(ti, s) {
    const t = TURNS[ti], dlg = DLG[t.d];
    const sec = el("section", "dialogue");
    const head = add(el("div", "head"), el("span", "id", dlg.id), el("span", "meta", "turn " + t.t),
      link("open in dialogue", { d: String(t.d), hl: String(ti) }));
    sec.appendChild(head);
    const body = el("div", "body");
    let reply = null;
    if (dlg.m && dlg.m[t.t] && dlg.m[t.t][0] === "assistant") {
      reply = dlg.m[t.t][1];
      if (t.t > 0) body.appendChild(message(dlg.m[t.t - 1][0], dlg.m[t.t - 1][1], dlg.m[t.t - 1][0] + " (previous message)"));
    }
    body.appendChild(turnBlock(ti, true, reply, s));
    sec.appendChild(body);
    return sec;
  }

  // -- controls, list, pager -----------------------------------------------------------------------
  function select(name, label, options, value) {
    const l = el("label", null, label);
    const sel = el("select");
    sel.name = name;
    for (const [v, text] of options) { const o = el("option", null, text); o.value = v; sel.appendChild(o); }
    sel.value = value;
    sel.addEventListener("change", () => setState({ [name]: sel.value }));
    l.appendChild(sel);
    return l;
  }
  function input(name, label, type, value, extra) {
    const l = el("label", null, label);
    const i = el("input");
    i.type = type; i.name = name; i.value = value;
    Object.assign(i, extra || {});
    i.addEventListener("change", () => setState({ [name]: i.value }));
    l.appendChild(i);
    return l;
  }
  function renderControls(s) {
    const c = document.getElementById("controls");
    c.replaceChildren();
    const seg = el("div", "seg");
    for (const [v, text] of [["dialogues", "Dialogues"], ["turns", "Turns"]]) {
      const b = el("button", s.view === v ? "on" : "", text);
      b.addEventListener("click", () => setState({ view: v }));
      seg.appendChild(b);
    }
    const flags = [...new Set(TURNS.flatMap((t) => t.f))].sort();
    const sorts = [["order", "input order"], ["reward-asc", "reward, lowest first"], ["reward-desc", "reward, highest first"],
      ["failed-first", "failures first"]];
    for (const d of DIMS) sorts.push(["w-" + d, d + " weight, highest first"]);
    for (const d of DIMS) sorts.push(["s-" + d, d + " score, lowest first"]);
    add(c, seg,
      select("status", "status", [["all", "all turns"], ["scored", "scored"], ["failed", "failed"]], s.status),
      select("dim", "top-weighted dimension", [["any", "any"], ...DIMS.map((d) => [d, d])], s.dim),
      select("flag", "flag", [["any", "any"], ...flags.map((f) => [f, f])], s.flag),
      input("min", "reward ≥", "number", s.min, { min: 0, max: 1, step: 0.05 }),
      input("max", "reward ≤", "number", s.max, { min: 0, max: 1, step: 0.05 }),
      input("q", "dialogue id or error", "search", s.q, { placeholder: "search" }),
      select("sort", "sort", sorts, s.sort));
    const reset = el("button", "plain", "reset");
    reset.addEventListener("click", () => { location.hash = ""; render(); });
    c.appendChild(reset);
  }
  function renderPager(pages, page) {
    for (const id of ["pager-top", "pager-bottom"]) {
      const p = document.getElementById(id);
      p.replaceChildren();
      if (pages <= 1) continue;
      const prev = el("button", "plain", "‹ previous"), next = el("button", "plain", "next ›");
      prev.disabled = page <= 1; next.disabled = page >= pages;
      prev.addEventListener("click", () => setState({ page: String(page - 1) }));
      next.addEventListener("click", () => setState({ page: String(page + 1) }));
      add(p, prev, el("span", null, "page " + page + " of " + pages), next);
    }
  }
  function render() {
    const s = readState();
    renderControls(s);
    const matchSet = new Uint8Array(TURNS.length);
    const hits = [];
    TURNS.forEach((t, i) => { if (matches(t, s)) { matchSet[i] = 1; hits.push(i); } });
    const list = document.getElementById("list");
    list.replaceChildren();
    let items, size;
    if (s.view === "turns") {
      items = hits.slice();
      if (s.sort !== "order") items.sort((a, b) => sortKey(s.sort, TURNS[a]) - sortKey(s.sort, TURNS[b]) || a - b);
      size = PAGE_TURNS;
    } else {
      const keys = new Map();
      for (const i of hits) {
        const k = sortKey(s.sort, TURNS[i]);
        const d = TURNS[i].d;
        if (s.sort === "failed-first") keys.set(d, (keys.get(d) || 0) - (TURNS[i].r === null ? 1 : 0));
        else keys.set(d, Math.min(keys.has(d) ? keys.get(d) : Infinity, k));
      }
      items = [...keys.keys()].sort((a, b) => (s.sort === "order" ? 0 : keys.get(a) - keys.get(b)) || a - b);
      size = PAGE_DIALOGUES;
    }
    const pages = Math.max(1, Math.ceil(items.length / size));
    const page = Math.min(pages, Math.max(1, Number(s.page) || 1));
    const shown = items.slice((page - 1) * size, page * size);
    const what = s.view === "turns" ? "turns" : "dialogues";
    document.getElementById("result").textContent = hits.length + " matching turns in " +
      new Set(hits.map((i) => TURNS[i].d)).size + " dialogues · showing " + what + " " +
      (shown.length ? (page - 1) * size + 1 : 0) + "–" + ((page - 1) * size + shown.length) + " of " + items.length;
    if (!shown.length) list.appendChild(el("p", "empty", "No turn matches these filters."));
    for (const x of shown) list.appendChild(s.view === "turns" ? turnCard(x, s) : dialogueSection(x, matchSet, s));
    renderPager(pages, page);
    document.body.dataset.matching = String(hits.length);
    if (s.hl !== "") { const t = document.getElementById("t" + s.hl); if (t) t.scrollIntoView({ block: "center" }); }
  }

  // -- overview (rendered once) ---------------------------------------------------------------------
  function stat(value, label, bad) {
    return add(el("div", "card stat" + (bad ? " bad" : "")), el("div", "v", value), el("div", "k", label));
  }
  function turnList(indices) {
    if (!indices.length) return el("p", "empty", "no scored turns");
    const table = el("table");
    add(table, add(el("tr"), el("th", null, "reward"), el("th", null, "dialogue"), el("th", null, "turn"), el("th", null, "top dimension")));
    for (const i of indices) {
      const t = TURNS[i];
      const row = add(el("tr"), add(el("td", "num"), badge(t.r)));
      add(row, add(el("td"), link(DLG[t.d].id, { d: String(t.d), hl: String(i) })), el("td", "num", t.t),
        el("td", null, topDims(t.w).map((k) => DIMS[k]).join(", ")));
      table.appendChild(row);
    }
    return table;
  }
  function renderOverview() {
    const sources = Object.entries(DATA.sources).filter(([, v]) => v).map(([k, v]) => k + ": " + v);
    const meta = Object.entries(DATA.meta).map(([k, v]) => k + " " + v);
    document.getElementById("subtitle").textContent = sources.concat(meta).join(" · ");
    add(document.getElementById("stats"), stat(OV.dialogues, "dialogues"), stat(OV.turns, "assistant turns"),
      stat(OV.scored, "scored"), stat(OV.failed, "failed", OV.failed > 0), stat(fmt(OV.mean_reward), "mean reward"),
      stat(fmt(OV.median_reward), "median reward"));
    if (OV.cost) {  // what the turns that record a provenance cost together
      const c = OV.cost, stats = document.getElementById("stats");
      const of = c.turns < OV.turns ? " (" + c.turns + " of " + OV.turns + " turns recorded it)" : "";
      add(stats, stat(fmt(c.calls, 0), "backend calls" + of), stat(fmt(c.seconds, 1), "backend seconds"));
      if (c.prompt_tokens !== null || c.completion_tokens !== null) {
        const p = c.prompt_tokens || 0, k = c.completion_tokens || 0;
        stats.appendChild(stat(big(p + k), "tokens: " + big(p) + " prompt + " + big(k) + " completion"));
      }
      const n = Object.fromEntries(c.sources);
      stats.appendChild(stat(String(n.generated), "rubrics written, " + n.cached + " cached" + (n.fixed ? ", " + n.fixed + " fixed" : "")));
    }
    document.getElementById("reward-legend").textContent = OV.scored + " scored turns in " + OV.histogram.length + " bins over [0, 1]";
    for (const lg of document.querySelectorAll(".dims-legend")) {
      DIMS.forEach((d, k) => add(lg, add(el("span"), el("i", d), document.createTextNode(d + (OV.mean_weights ? " " + fmt(OV.mean_weights[k], 2) : "")))));
    }
    const fail = document.getElementById("failures");
    if (!OV.failures.length) fail.appendChild(el("p", "empty", "none: every turn got a reward"));
    else {
      const table = add(el("table"), add(el("tr"), el("th", null, "reason"), el("th", null, "turns"), el("th", null, "examples")));
      for (const [reason, count, examples] of OV.failures) {
        const ex = el("td");
        examples.forEach((i, n) => { if (n) ex.appendChild(document.createTextNode(", ")); ex.appendChild(link(DLG[TURNS[i].d].id + " #" + TURNS[i].t, { d: String(TURNS[i].d), hl: String(i) })); });
        add(table, add(el("tr"), el("td", null, reason), el("td", "num", count), ex));
      }
      fail.appendChild(table);
      fail.appendChild(link("show all failed turns", { view: "turns", status: "failed" }));
    }
    document.getElementById("lowest").appendChild(turnList(OV.lowest));
    document.getElementById("highest").appendChild(turnList(OV.highest));
    const prod = document.getElementById("producers");
    const cols = ["generator", "evaluator", "fixed_criteria_version", "care_sdk", "weights", "criteria"];
    const table = add(el("table"), add(el("tr"), ...cols.map((c) => el("th", null, c.replaceAll("_", " "))), el("th", null, "turns")));
    for (const producer of DATA.producers) {
      // records written before the key was renamed call the fixed criteria's version prompt_version
      const p = { fixed_criteria_version: producer.prompt_version, ...producer };
      const known = cols.some((c) => p[c]);
      const row = el("tr");
      if (!known) row.appendChild(Object.assign(el("td", "empty", "not recorded in these records (written before care score recorded scored_by)"), { colSpan: cols.length }));
      else for (const c of cols) row.appendChild(el("td", c === "generator" || c === "evaluator" ? "mono" : null, p[c] === null || p[c] === undefined ? "–" : p[c]));
      row.appendChild(el("td", "num", p.turns));
      table.appendChild(row);
    }
    prod.appendChild(table);
    if (DATA.issue_count) {
      const box = document.getElementById("issues");
      box.appendChild(el("h3", null, DATA.issue_count + " unreadable input lines (skipped)"));
      for (const line of DATA.issues) box.appendChild(el("div", "mono", line));
    }
  }

  renderOverview();
  window.addEventListener("hashchange", render);
  render();
  document.body.dataset.readyMs = String(Math.round(performance.now() - STARTED)); // parse + first render
})();
