// The run explorer of report.html: the evolution tree by island (SVG), the MAP-Elites grid, the migrations,
// and the panel of the candidate clicked (code, diff from its parent, diagnosis, prompt, reply, verdict).
// Reads the JSON of <script id="explorer-data">; builds every element with the DOM API (no innerHTML), so
// nothing from the run store is ever parsed as markup. No network, no library.
(function () {
  "use strict";
  var holder = document.getElementById("explorer-data");
  var section = document.getElementById("explorer");
  var treeSvg = document.getElementById("ex-tree");
  if (!holder || !section || !treeSvg) { return; }
  var data = JSON.parse(holder.textContent);
  var strings = data.strings;
  var nodes = data.nodes;
  var byId = new Map();
  var kids = new Map();
  nodes.forEach(function (n) { byId.set(n.id, n); kids.set(n.id, []); });
  nodes.forEach(function (n) {
    n.parents.forEach(function (p) { if (kids.has(p)) { kids.get(p).push(n.id); } });
  });
  var SVG_NS = "http://www.w3.org/2000/svg";
  var state = { selected: null, colour: "verdict", island: "all", failing: true, migrations: true,
                tab: "code", gx: "tile", gy: "warps", cell: null };

  // -- small DOM helpers ---------------------------------------------------------------------------
  function setAttrs(e, attrs) {
    Object.keys(attrs || {}).forEach(function (k) {
      var v = attrs[k];
      if (v === null || v === undefined || v === false) { return; }
      if (k === "text") { e.textContent = String(v); }
      else if (k.slice(0, 2) === "on") { e.addEventListener(k.slice(2), v); }
      else { e.setAttribute(k, v === true ? "" : String(v)); }
    });
    return e;
  }
  function append(e, children) {
    children.forEach(function (c) {
      if (c === null || c === undefined || c === false) { return; }
      if (Array.isArray(c)) { append(e, c); return; }
      e.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
    });
    return e;
  }
  function h(tag, attrs) {
    return append(setAttrs(document.createElement(tag), attrs), Array.prototype.slice.call(arguments, 2));
  }
  function s(tag, attrs) {
    return append(setAttrs(document.createElementNS(SVG_NS, tag), attrs), Array.prototype.slice.call(arguments, 2));
  }
  function clear(e) { while (e.firstChild) { e.removeChild(e.firstChild); } return e; }
  function text(index) { return index === null || index === undefined ? null : strings[index]; }

  // -- numbers -------------------------------------------------------------------------------------
  function x3(v) { return v === null || v === undefined ? "n/a" : Number(v).toPrecision(3) + "x"; }
  function num(v, digits, unit) {
    return v === null || v === undefined ? "-" : Number(v).toPrecision(digits || 3) + (unit || "");
  }
  function failing(n) { return n.status !== "ok" && n.status !== "in flight" && n.status !== "not evaluated"; }
  function speedText(n) {
    if (n.status !== "ok") { return n.status; }
    return n.speedup === null ? "correct, not timed" : x3(n.speedup) + " vs eager";
  }

  // -- colours -------------------------------------------------------------------------------------
  var STATUS_COLOUR = { compile_error: "#7b1fa2", runtime_error: "#c62828", wrong_output: "#f06292",
                        cheating: "#212121", timeout: "#795548", crash: "#546e7a" };
  var UNTIMED = "#80cbc4", PENDING = "#ffffff";
  var PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf"];
  var experts = Array.from(new Set(nodes.map(function (n) { return n.expert; }))).sort();
  var timedLogs = nodes.filter(function (n) { return n.status === "ok" && n.speedup > 0; })
    .map(function (n) { return Math.log2(n.speedup); });
  var maxLog = Math.max.apply(null, [1].concat(timedLogs));
  function rgb(hex) { return [1, 3, 5].map(function (i) { return parseInt(hex.slice(i, i + 2), 16); }); }
  function mix(a, b, t) {
    var p = rgb(a), q = rgb(b);
    return "rgb(" + p.map(function (v, i) { return Math.round(v + (q[i] - v) * t); }).join(",") + ")";
  }
  // below 1x: yellow (0.5x or slower) to pale; above: pale to green to blue (the run's best)
  function speedColour(speedup) {
    var l = Math.log2(speedup);
    if (l < 0) { return mix("#fff59d", "#fbc02d", Math.min(1, -l)); }
    var t = l / maxLog;
    return t < 0.5 ? mix("#f1f8e9", "#43a047", t * 2) : mix("#43a047", "#0d47a1", (t - 0.5) * 2);
  }
  function colour(n) {
    if (state.colour === "expert") { return PALETTE[experts.indexOf(n.expert) % PALETTE.length]; }
    if (n.status === "ok") { return n.speedup > 0 ? speedColour(n.speedup) : UNTIMED; }
    return STATUS_COLOUR[n.status] || PENDING;
  }

  // -- the tree ------------------------------------------------------------------------------------
  var COL = 54, ROW = 24, LEFT = 78, TOP = 28, R = 7;
  function columnWidth(gens) {  // wide enough to read, and wide enough to fill the view when there are few generations
    var room = (treeSvg.parentNode.clientWidth || 900) - LEFT - 40;
    return Math.max(54, Math.min(140, Math.floor(room / Math.max(1, gens))));
  }
  function visible(n) {
    return (state.island === "all" || String(n.island) === state.island) && (state.failing || !failing(n));
  }
  function shownMoves(islands) {
    if (!state.migrations) { return []; }
    return data.migrations.filter(function (m) { return islands.indexOf(m.to) >= 0 && byId.has(m.id); });
  }
  function layout() {
    var shown = nodes.filter(visible);
    var islands = data.islands.filter(function (i) { return state.island === "all" || String(i) === state.island; });
    var gens = shown.map(function (n) { return n.generation; });
    var moves = shownMoves(islands);
    moves.forEach(function (m) { if (m.generation !== null) { gens.push(m.generation); } });
    var gmin = gens.length ? Math.min.apply(null, gens) : 0, gmax = gens.length ? Math.max.apply(null, gens) : 0;
    COL = columnWidth(gmax - gmin);
    var slots = new Map();
    shown.forEach(function (n) {
      var key = n.island + "/" + n.generation;
      if (!slots.has(key)) { slots.set(key, []); }
      slots.get(key).push(n);
    });
    var lanes = [], y = TOP, pos = new Map();
    islands.forEach(function (island) {
      var incoming = moves.filter(function (m) { return m.to === island; });
      var rows = 1;
      slots.forEach(function (list, key) { if (key.split("/")[0] === String(island)) { rows = Math.max(rows, list.length); } });
      var extra = incoming.length ? 1 : 0;
      var lane = { island: island, top: y, height: (rows + extra) * ROW + 8, ghostY: y + 4 + ROW / 2 };
      slots.forEach(function (list, key) {
        var parts = key.split("/");
        if (parts[0] !== String(island)) { return; }
        list.sort(function (a, b) { return a.id - b.id; });
        list.forEach(function (n, i) {
          pos.set(n.id, { x: LEFT + (n.generation - gmin) * COL, y: y + 4 + (i + extra) * ROW + ROW / 2 });
        });
      });
      lanes.push(lane);
      y += lane.height + 6;
    });
    return { shown: shown, lanes: lanes, pos: pos, moves: moves, gmin: gmin, gmax: gmax, height: y + 6,
             width: LEFT + (gmax - gmin) * COL + 40 };
  }
  function related(id) {
    var up = new Set(), down = new Set(), stack = [id];
    while (stack.length) {
      var n = byId.get(stack.pop());
      if (!n) { continue; }
      n.parents.forEach(function (p) { if (!up.has(p)) { up.add(p); stack.push(p); } });
    }
    stack = [id];
    while (stack.length) {
      (kids.get(stack.pop()) || []).forEach(function (c) { if (!down.has(c)) { down.add(c); stack.push(c); } });
    }
    return { up: up, down: down };
  }
  function inCell(n) {
    if (!state.cell || n.status !== "ok") { return false; }
    return n.cell[fIndex(state.gx)] === state.cell[0] && n.cell[fIndex(state.gy)] === state.cell[1];
  }
  function shape(n, p, fill, cls) {
    var title = s("title", { text: "candidate " + n.id + " - " + n.expert + " (" + n.origin + ") - " + speedText(n) +
      " - island " + n.island + ", generation " + n.generation });
    var attrs = { "class": cls, fill: fill, "data-id": n.id, tabindex: 0, role: "button",
                  "aria-label": "candidate " + n.id + ": " + speedText(n) };
    if (n.origin === "migrant") {
      attrs.points = [[p.x, p.y - R - 2], [p.x + R + 2, p.y], [p.x, p.y + R + 2], [p.x - R - 2, p.y]].join(" ");
      return s("polygon", attrs, title);
    }
    if (failing(n)) {
      return s("rect", Object.assign(attrs, { x: p.x - R + 1, y: p.y - R + 1, width: 2 * R - 2, height: 2 * R - 2 }), title);
    }
    return s("circle", Object.assign(attrs, { cx: p.x, cy: p.y, r: R }), title);
  }
  function drawTree() {
    var L = layout();
    clear(treeSvg);
    setAttrs(treeSvg, { width: L.width, height: L.height, viewBox: "0 0 " + L.width + " " + L.height });
    var rel = state.selected !== null ? related(state.selected) : null;
    L.lanes.forEach(function (lane, i) {
      treeSvg.appendChild(s("rect", { "class": "ex-lane" + (i % 2 ? " odd" : ""), x: 0, y: lane.top, width: L.width,
                                      height: lane.height }));
      treeSvg.appendChild(s("text", { "class": "ex-lane-label", x: 8, y: lane.top + 16, text: "island " + lane.island }));
    });
    for (var g = L.gmin; g <= L.gmax; g++) {
      treeSvg.appendChild(s("text", { "class": "ex-gen", x: LEFT + (g - L.gmin) * COL, y: 16, "text-anchor": "middle",
                                      text: "gen " + g }));
    }
    var edges = s("g", { "class": "ex-edges" });
    L.shown.forEach(function (n) {
      var b = L.pos.get(n.id);
      n.parents.forEach(function (pid) {
        var a = L.pos.get(pid), parent = byId.get(pid);
        if (!a || !parent) { return; }
        var cls = "ex-edge";
        if (parent.island !== n.island) { cls += " cross"; }
        if (n.lineage && parent.lineage) { cls += " lin"; }
        if (rel) {
          cls += (n.id === state.selected || rel.up.has(n.id) || rel.down.has(n.id)) &&
                 (pid === state.selected || rel.up.has(pid) || rel.down.has(pid)) ? " sel" : " dim";
        }
        var mid = (a.x + b.x) / 2;
        edges.appendChild(s("path", { "class": cls, d: "M" + a.x + "," + a.y + " C" + mid + "," + a.y + " " + mid + "," +
                                      b.y + " " + b.x + "," + b.y }));
      });
    });
    treeSvg.appendChild(edges);
    var migrations = s("g", { "class": "ex-moves" });
    L.moves.forEach(function (m) {
      var lane = L.lanes.filter(function (l) { return l.island === m.to; })[0];
      var migrant = byId.get(m.id);
      var gen = m.generation === null ? migrant.generation + 1 : m.generation;
      var gx = LEFT + (gen - L.gmin) * COL - COL / 2, gy = lane.ghostY;
      var from = L.pos.get(m.id);
      if (from) {
        migrations.appendChild(s("path", { "class": "ex-move" + (rel && m.id !== state.selected ? " dim" : ""), d: "M" + from.x + "," + from.y + " L" + gx + "," + gy }));
      }
      migrations.appendChild(s("polygon", {
        "class": "ex-ghost" + (m.id === state.selected ? " selected" : ""), "data-id": m.id, "data-move": "1",
        points: [[gx, gy - 6], [gx + 6, gy], [gx, gy + 6], [gx - 6, gy]].join(" "), fill: colour(migrant) },
        s("title", { text: "candidate " + m.id + " migrated from island " + m.from + " to island " + m.to +
                           " (generation " + gen + ")" })));
    });
    treeSvg.appendChild(migrations);
    var layer = s("g", { "class": "ex-nodes" });
    L.shown.forEach(function (n) {
      var p = L.pos.get(n.id);
      var cls = "ex-node";
      if (n.populations.length) { cls += " alive"; }
      if (n.best) { cls += " best"; }
      if (n.id === state.selected) { cls += " selected"; }
      if (rel && n.id !== state.selected && !rel.up.has(n.id) && !rel.down.has(n.id)) { cls += " faded"; }
      if (inCell(n)) { cls += " incell"; }
      layer.appendChild(shape(n, p, colour(n), cls));
      if (n.best) {
        layer.appendChild(s("text", { "class": "ex-star", x: p.x + R + 2, y: p.y - R + 1, text: "\u2605" }));
      }
    });
    treeSvg.appendChild(layer);
  }
  treeSvg.addEventListener("click", function (event) {
    var target = event.target.closest ? event.target.closest("[data-id]") : null;
    if (target) { select(Number(target.getAttribute("data-id"))); }
  });
  treeSvg.addEventListener("keydown", function (event) {
    var target = event.target.closest ? event.target.closest("[data-id]") : null;
    if (target && (event.key === "Enter" || event.key === " ")) {
      event.preventDefault();
      select(Number(target.getAttribute("data-id")));
    }
  });

  function drawLegend() {
    var box = clear(document.getElementById("ex-legend"));
    function swatch(fill, label, square) {
      var sw = h("span", { "class": "ex-swatch" + (square ? " sq" : "") });
      sw.style.background = fill;
      return h("span", { "class": "ex-key" }, sw, label);
    }
    if (state.colour === "expert") {
      experts.forEach(function (e) { box.appendChild(swatch(PALETTE[experts.indexOf(e) % PALETTE.length], e)); });
    } else {
      if (timedLogs.length) {
        var slow = h("span", { "class": "ex-gradient short" }), fast = h("span", { "class": "ex-gradient" });
        slow.style.background = "linear-gradient(to right, " + speedColour(0.5) + ", " + speedColour(0.71) + ", " + speedColour(1) + ")";
        fast.style.background = "linear-gradient(to right, " + [0, 0.25, 0.5, 0.75, 1].map(function (t) {
          return speedColour(Math.pow(2, t * maxLog));
        }).join(", ") + ")";
        box.appendChild(h("span", { "class": "ex-key" }, "vs eager: 0.5x", slow, "1x", fast, x3(Math.pow(2, maxLog))));
      }
      box.appendChild(swatch(UNTIMED, "correct, not timed"));
      Object.keys(STATUS_COLOUR).forEach(function (st) {
        if (nodes.some(function (n) { return n.status === st; })) { box.appendChild(swatch(STATUS_COLOUR[st], st, true)); }
      });
      if (nodes.some(function (n) { return n.status === "in flight" || n.status === "not evaluated"; })) {
        box.appendChild(swatch(PENDING, "not evaluated"));
      }
    }
    box.appendChild(h("span", { "class": "ex-key" }, "\u2605 the report's best"));
  }

  // -- the panel -----------------------------------------------------------------------------------
  var panel = document.getElementById("ex-panel");
  var TABS = [["code", "Code"], ["diff", "Diff from parent"], ["diagnosis", "Diagnosis"], ["prompt", "Prompt"],
              ["reply", "Reply"], ["verdict", "Verdict"]];
  function link(id, label) {
    return h("a", { href: "#candidate-" + id, "class": "ex-link", "data-go": id, text: label || "#" + id });
  }
  function lines(source, marks, kind) {
    var box = h("div", { "class": "ex-lines " + kind });
    source.replace(/\n$/, "").split("\n").forEach(function (line, i) {
      var cls = "ex-l";
      if (kind === "diff") {
        var c = line.charAt(0);
        cls += line.slice(0, 3) === "+++" || line.slice(0, 3) === "---" ? " head" :
          c === "+" ? " add" : c === "-" ? " del" : c === "@" ? " hunk" : "";
      }
      var mark = marks && marks.get(i + 1);
      if (mark) { cls += " mark"; }
      var row = h("div", { "class": cls, id: kind === "code" ? "ex-line-" + (i + 1) : null, title: mark || null });
      if (kind === "code") { row.appendChild(h("span", { "class": "ln", text: String(i + 1) })); }
      row.appendChild(h("span", { "class": "tx", text: line }));
      box.appendChild(row);
    });
    return box;
  }
  function codeTab(n) {
    var marks = new Map();
    ((n.diagnosis || {}).findings || []).forEach(function (f) {
      if (f.line) { marks.set(f.line, (marks.has(f.line) ? marks.get(f.line) + "; " : "") + f.severity + ": " + f.title); }
    });
    return [marks.size ? h("p", { "class": "note", text: "Highlighted: the lines the diagnosis points at." }) : null,
            lines(text(n.code), marks, "code")];
  }
  function diffTab(n) {
    if (n.diff_parent === null) { return h("p", { "class": "note", text: "A first candidate: it has no parent to compare with." }); }
    var head = h("p", {}, "From its parent ", link(n.diff_parent), n.parents.length > 1 ? " (first of " + n.parents.length + " parents)" : "", ".");
    if (n.same_as_parent) { return [head, h("p", { "class": "note", text: "The same code as its parent." })]; }
    return [head, lines(text(n.diff), null, "diff")];
  }
  function diagnosisTab(n) {
    var d = n.diagnosis;
    if (!d) { return h("p", { "class": "note", text: "No diagnosis recorded for this candidate." }); }
    var table = h("table", { "class": "data" },
      h("tr", {}, h("th", { text: "severity" }), h("th", { text: "category" }), h("th", { text: "finding" }),
        h("th", { text: "where" }), h("th", { text: "next step" })));
    d.findings.forEach(function (f) {
      var where = f.line ? h("a", { href: "#ex-line-" + f.line, "class": "ex-link", "data-line": f.line, text: "line " + f.line }) : "";
      table.appendChild(h("tr", { "class": "sev-" + f.severity },
        h("td", { text: f.severity }), h("td", { text: f.category }),
        h("td", {}, h("div", { text: f.title }), f.evidence.length ? h("div", { "class": "note", text: f.evidence.join("; ") }) : null),
        h("td", {}, where, f.where ? h("div", { "class": "note mono", text: f.where }) : null),
        h("td", { text: f.direction })));
    });
    var summary = d.summary && !/[.!?]$/.test(d.summary.trim()) ? d.summary.trim() + "." : d.summary;
    return [h("p", { "class": "ex-diag-summary" }, summary,
              d.bound ? h("span", {}, " Bound: ", h("b", { text: d.bound }), ".") : null,
              " Next focus: ", h("b", { text: d.focus || "none" }), "."),
            d.findings.length ? table : h("p", { "class": "note", text: "No findings." })];
  }
  function callMeta(c, i, n) {
    var parts = [c.model || c.provider || "unknown model"];
    parts.push("tokens " + (c.input_tokens === null ? "unknown" : c.input_tokens) + " in / " +
               (c.output_tokens === null ? "unknown" : c.output_tokens) + " out");
    parts.push(c.cost_usd === null ? "cost unknown" : "$" + Number(c.cost_usd).toFixed(4));
    if (c.latency_s !== null) { parts.push(num(c.latency_s, 3, " s")); }
    var role = i === 0 ? "the call that made it" : "a later call that proposed the same code";
    return h("p", { "class": "ex-call" }, h("b", { text: "LLM call " + c.call }), " (" + role + ", " + c.expert + "): " + parts.join(" \u00b7 "));
  }
  function noCall(n) {
    return h("p", { "class": "note", text: "Made by the " + n.expert + " expert (" + n.origin + ") without an LLM call" +
      (n.reason ? ": " + n.reason : "") + "." });
  }
  function promptParts(prompt) {
    if (prompt.text !== undefined) { return [h("pre", { "class": "ex-text", text: text(prompt.text) })]; }
    var system = text(prompt.system);
    return [h("details", { "class": "ex-system" },
              h("summary", { text: "system prompt (" + system.length.toLocaleString("en") + " characters; the same in each call of an expert)" }),
              h("pre", { "class": "ex-text", text: system })),
            h("div", { "class": "ex-part", text: "user prompt" }), h("pre", { "class": "ex-text", text: text(prompt.user) })];
  }
  function promptTab(n) {
    if (!n.calls.length) { return noCall(n); }
    return n.calls.map(function (c, i) {
      var body = c.prompt !== null ? [h("p", { "class": "note", text: c.prompt_file })].concat(promptParts(c.prompt)) :
        h("p", { "class": "note", text: "No file in the run's prompts/ matches this call's prompt hash (" +
                 (c.prompt_hash || "none") + "): the prompt was not kept." });
      return h("div", { "class": "ex-callbox" }, callMeta(c, i, n), body);
    });
  }
  function replyTab(n) {
    if (!n.calls.length) { return noCall(n); }
    return n.calls.map(function (c, i) {
      var body = c.reply !== null ? h("pre", { "class": "ex-text", text: text(c.reply) }) :
        h("p", { "class": "note", text: c.failure ? "No reply: " + c.failure : "No reply text stored." });
      return h("div", { "class": "ex-callbox" }, callMeta(c, i, n), body);
    });
  }
  function verdictTab(n) {
    var e = n.evaluation;
    if (!e) { return h("p", { "class": "note", text: "Not evaluated (" + n.status + ")." }); }
    var rows = [
      ["verdict", n.status + (e.phase ? " (phase " + e.phase + ")" : "")], ["message", e.message],
      ["runtime", num(e.runtime_ms, 4, " ms") + (e.timing_reason ? " (" + e.timing_reason + ")" : "")],
      ["eager / torch.compile", num(e.eager_ms, 4, " ms") + " / " + num(e.compile_ms, 4, " ms")],
      ["speedup vs eager / compile", x3(n.speedup) + " / " + x3(n.speedup_compile)],
      ["correctness trials", e.trials === null ? "-" : e.trials_passed + " of " + e.trials + " passed"],
      ["max abs error", num(e.max_abs_error, 3) + (e.tolerance !== null && e.tolerance !== undefined ? " (tolerance " + e.tolerance + ", " + (e.precision || "") + ")" : "")],
      ["error", e.error || "-"], ["warnings", e.warnings.length ? e.warnings.join("; ") : "-"],
      ["evaluation attempts", e.attempts]];
    return h("table", { "class": "data" }, rows.map(function (r) {
      return h("tr", {}, h("th", { text: r[0] }), h("td", { "class": r[0] === "error" ? "mono" : null, text: r[1] }));
    }));
  }
  var RENDER = { code: codeTab, diff: diffTab, diagnosis: diagnosisTab, prompt: promptTab, reply: replyTab, verdict: verdictTab };
  function cellText(n) {
    return data.features.map(function (f, i) { return f.label + " " + n.cell[i]; }).join(" \u00b7 ");
  }
  function drawPanel() {
    var n = byId.get(state.selected);
    clear(panel);
    if (!n) { panel.hidden = true; return; }
    panel.hidden = false;
    panel.setAttribute("data-candidate", n.id);
    var badges = [];
    if (n.best) { badges.push(h("span", { "class": "ex-badge best", text: "the report's best" })); }
    if (n.lineage && !n.best) { badges.push(h("span", { "class": "ex-badge", text: "an ancestor of the best" })); }
    if (n.populations.length) {
      badges.push(h("span", { "class": "ex-badge", text: n.populations.length > 1 ?
        "in the final populations of islands " + n.populations.join(" and ") :
        "in the final population of island " + n.populations[0] }));
    }
    data.migrations.forEach(function (m) {
      if (m.id === n.id) { badges.push(h("span", { "class": "ex-badge move", text: "migrated to island " + m.to + " (gen " + m.generation + ")" })); }
    });
    var children = kids.get(n.id) || [];
    var statusCls = n.status === "ok" ? "status-ok" : failing(n) ? "status-bad" : "";
    panel.appendChild(h("div", { "class": "ex-head" },
      h("h3", {}, "Candidate " + n.id + " ", h("span", { "class": statusCls, text: speedText(n) }), " ", badges),
      h("p", {}, "By the ", h("b", { text: n.expert }), " expert (" + n.origin + "), island " + n.island +
        ", generation " + n.generation + (n.order ? ", verdict #" + n.order + " of the run" : "") + ". Parents: ",
        n.parents.length ? n.parents.map(function (p, i) { return [i ? ", " : "", link(p)]; }) : "none",
        ". Children: ", children.length ? children.map(function (c, i) { return [i ? ", " : "", link(c)]; }) : "none", "."),
      n.reason ? h("p", { "class": "note", text: "Why this expert: " + n.reason }) : null,
      h("p", { "class": "note", text: "MAP-Elites cell: " + cellText(n) })));
    var tabs = h("div", { "class": "ex-tabs", role: "tablist" });
    TABS.forEach(function (t) {
      tabs.appendChild(h("button", { type: "button", role: "tab", "class": "ex-tab" + (t[0] === state.tab ? " active" : ""),
                                     "data-tab": t[0], "aria-selected": t[0] === state.tab ? "true" : "false", text: t[1] }));
    });
    panel.appendChild(tabs);
    panel.appendChild(append(h("div", { "class": "ex-tab-body", id: "ex-tab-body", "data-tab": state.tab }), [RENDER[state.tab](n)]));
  }
  panel.addEventListener("click", function (event) {
    var tab = event.target.closest("[data-tab]");
    if (tab && tab.tagName === "BUTTON") { state.tab = tab.getAttribute("data-tab"); drawPanel(); return; }
    var go = event.target.closest("[data-go]");
    if (go) { event.preventDefault(); select(Number(go.getAttribute("data-go"))); return; }
    var line = event.target.closest("[data-line]");
    if (line) {
      event.preventDefault();
      state.tab = "code";
      drawPanel();
      var row = document.getElementById("ex-line-" + line.getAttribute("data-line"));
      if (row) { row.scrollIntoView({ block: "center" }); row.classList.add("flash"); }
    }
  });

  // -- the MAP-Elites grid -------------------------------------------------------------------------
  function fIndex(key) { for (var i = 0; i < data.features.length; i++) { if (data.features[i].key === key) { return i; } } return 0; }
  function better(a, b) {  // the cell's champion: the faster verified one, the earlier among equals
    if (!b) { return true; }
    var sa = a.speedup === null ? -1 : a.speedup, sb = b.speedup === null ? -1 : b.speedup;
    return sa > sb || (sa === sb && a.id < b.id);
  }
  function values(key, present) {
    var order = data.features[fIndex(key)].order;
    return order.filter(function (v) { return present.has(v); })
      .concat(Array.from(present).filter(function (v) { return order.indexOf(v) < 0; }).sort());
  }
  function drawGrid() {
    var table = clear(document.getElementById("ex-grid"));
    var xi = fIndex(state.gx), yi = fIndex(state.gy);
    var correct = nodes.filter(function (n) { return n.status === "ok" && (state.island === "all" || String(n.island) === state.island); });
    var xs = new Set(), ys = new Set(), cells = new Map(), full = new Set();
    correct.forEach(function (n) {
      xs.add(n.cell[xi]); ys.add(n.cell[yi]); full.add(n.cell.join("|"));
      var key = n.cell[xi] + "\u0000" + n.cell[yi];
      var c = cells.get(key) || { count: 0, best: null };
      c.count += 1;
      if (better(n, c.best)) { c.best = n; }
      cells.set(key, c);
    });
    var note = document.getElementById("ex-grid-note");
    if (!correct.length) { note.textContent = "No correct candidate: the grid is empty (only working candidates enter an island's MAP-Elites cells)."; return; }
    var cols = values(state.gx, xs), rows = values(state.gy, ys);
    var sel = byId.get(state.selected);
    table.appendChild(h("tr", {}, h("th", { text: data.features[yi].label + " \\ " + data.features[xi].label }),
      cols.map(function (c) { return h("th", { text: c }); })));
    rows.forEach(function (r) {
      table.appendChild(h("tr", {}, h("th", { text: r }), cols.map(function (c) {
        var cell = cells.get(c + "\u0000" + r);
        if (!cell) { return h("td", { "class": "empty", text: "\u00b7" }); }
        var cls = "filled";
        if (state.cell && state.cell[0] === c && state.cell[1] === r) { cls += " chosen"; }
        if (sel && sel.status === "ok" && sel.cell[xi] === c && sel.cell[yi] === r) { cls += " current"; }
        var td = h("td", { "class": cls, "data-x": c, "data-y": r, "data-id": cell.best.id, tabindex: 0,
                           title: cell.count + " correct candidate(s); the best: candidate " + cell.best.id },
          h("b", { text: "#" + cell.best.id }), h("br"), x3(cell.best.speedup), h("br"),
          h("span", { "class": "note", text: cell.count + " cand." }));
        td.style.background = colour(cell.best);
        if (cell.best.speedup !== null && Math.log2(cell.best.speedup) > maxLog * 0.6) { td.classList.add("dark"); }
        return td;
      })));
    });
    note.textContent = "Each cell: the best correct candidate among those whose " + data.features[xi].label + " and " +
      data.features[yi].label + " fall in it (" + (state.island === "all" ? "all islands" : "island " + state.island) +
      "). The search's cells use all six features: " + full.size + " of them hold " + correct.length +
      " correct candidate(s). Click a cell to select its best and mark its members on the tree.";
  }
  function gridClick(event) {
    var td = event.target.closest("td[data-id]");
    if (!td) { return; }
    var key = [td.getAttribute("data-x"), td.getAttribute("data-y")];
    state.cell = state.cell && state.cell[0] === key[0] && state.cell[1] === key[1] ? null : key;
    select(Number(td.getAttribute("data-id")));
  }
  var gridTable = document.getElementById("ex-grid");
  gridTable.addEventListener("click", gridClick);
  gridTable.addEventListener("keydown", function (event) { if (event.key === "Enter") { gridClick(event); } });
  ["ex-grid-x", "ex-grid-y"].forEach(function (id, axis) {
    var select_ = document.getElementById(id);
    data.features.forEach(function (f) { select_.appendChild(h("option", { value: f.key, text: f.label })); });
    select_.value = axis ? state.gy : state.gx;
    select_.addEventListener("change", function () {
      if (axis) { state.gy = select_.value; } else { state.gx = select_.value; }
      state.cell = null;
      redraw();
    });
  });

  // -- migrations ----------------------------------------------------------------------------------
  function drawMigrations() {
    var table = clear(document.getElementById("ex-migrations"));
    var note = document.getElementById("ex-migrations-note");
    if (!data.migrations.length) {
      note.textContent = data.islands.length > 1 ? "No migration recorded in this run (islands migrate every few generations; a run stopped earlier has none)."
                                                 : "One island: nothing migrates.";
      return;
    }
    table.appendChild(h("tr", {}, ["gen", "candidate", "from \u2192 to", "speedup", "children there", "best child"].map(function (t) {
      return h("th", { text: t });
    })));
    var used = 0, beat = 0;
    data.migrations.forEach(function (m) {
      var migrant = byId.get(m.id);
      var offspring = (kids.get(m.id) || []).map(function (c) { return byId.get(c); })
        .filter(function (c) { return c.island === m.to; });
      var best = null;
      offspring.forEach(function (c) { if (c.status === "ok" && better(c, best)) { best = c; } });
      if (offspring.length) { used += 1; }
      if (best && migrant.speedup !== null && best.speedup !== null && best.speedup > migrant.speedup) { beat += 1; }
      table.appendChild(h("tr", { "class": m.id === state.selected ? "chosen" : null, "data-go": m.id },
        h("td", { text: m.generation === null ? "-" : m.generation }), h("td", {}, link(m.id)),
        h("td", { text: m.from + " \u2192 " + m.to }), h("td", { text: migrant.status === "ok" ? x3(migrant.speedup) : migrant.status }),
        h("td", { text: offspring.length }), h("td", {}, best ? [link(best.id), " " + x3(best.speedup)] : "-")));
    });
    note.textContent = data.migrations.length + " migration(s). " + used + " migrant(s) had children on their new island; " +
      beat + " of them a child faster than itself there.";
  }
  document.getElementById("ex-migrations").addEventListener("click", function (event) {
    var go = event.target.closest("[data-go]");
    if (go) { event.preventDefault(); select(Number(go.getAttribute("data-go"))); }
  });

  // -- selection, controls, keyboard -----------------------------------------------------------------
  function redraw() { drawTree(); drawLegend(); drawGrid(); drawMigrations(); drawPanel(); }
  function select(id) {
    if (!byId.has(id)) { return false; }
    state.selected = id;
    var n = byId.get(id);
    if (!visible(n)) { state.island = "all"; state.failing = true; syncControls(); }
    redraw();
    try { history.replaceState(null, "", "#candidate-" + id); } catch (e) { /* a file: page may refuse */ }
    var shape_ = treeSvg.querySelector(".ex-node[data-id=\"" + id + "\"]");
    if (shape_ && shape_.scrollIntoView) { shape_.scrollIntoView({ block: "nearest", inline: "nearest" }); }
    return true;
  }
  function syncControls() {
    document.getElementById("ex-island").value = state.island;
    document.getElementById("ex-failing").checked = state.failing;
  }
  document.getElementById("ex-colour").addEventListener("change", function (e) { state.colour = e.target.value; redraw(); });
  document.getElementById("ex-island").addEventListener("change", function (e) { state.island = e.target.value; state.cell = null; redraw(); });
  document.getElementById("ex-failing").addEventListener("change", function (e) { state.failing = e.target.checked; redraw(); });
  document.getElementById("ex-show-migrations").addEventListener("change", function (e) { state.migrations = e.target.checked; redraw(); });
  document.getElementById("ex-find").addEventListener("change", function (e) {
    var id = Number(e.target.value);
    document.getElementById("ex-find-note").textContent = select(id) ? "" : "no candidate " + e.target.value;
  });
  document.addEventListener("keydown", function (event) {
    var tag = (event.target.tagName || "").toLowerCase();
    if (state.selected === null || tag === "input" || tag === "select" || tag === "textarea") { return; }
    if (event.target !== document.body && !section.contains(event.target)) { return; }
    var n = byId.get(state.selected);
    if (event.key === "ArrowLeft" && n.parents.length) { event.preventDefault(); select(n.parents[0]); }
    if (event.key === "ArrowRight" && (kids.get(n.id) || []).length) { event.preventDefault(); select(kids.get(n.id)[0]); }
  });

  var summary = document.getElementById("ex-summary");
  var correctCount = nodes.filter(function (n) { return n.status === "ok"; }).length;
  var gens = nodes.map(function (n) { return n.generation; });
  summary.textContent = nodes.length + " candidate(s) on " + data.islands.length + " island(s) over " +
    (gens.length ? Math.max.apply(null, gens) + 1 : 0) + " generation(s), " + correctCount + " correct; " +
    data.migrations.length + " migration(s)" + (data.orphan_calls ? "; " + data.orphan_calls + " LLM call(s) made no candidate" : "") + ".";
  var start = /^#candidate-(\d+)$/.exec(location.hash || "");
  redraw();
  if (start) { select(Number(start[1])); }
  section.setAttribute("data-explorer", "ready:" + nodes.length);
})();
