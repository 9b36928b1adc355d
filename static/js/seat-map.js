// The booking page's seat map: the event's seats drawn as a map (zoom and pan by
// pinch, drag and the +/- buttons) and listed as listboxes for keyboards and
// screen readers. Both only tick the form's own checkboxes: the form works without
// this script and stays what is sent. The layout is fetched once (the browser
// keeps it); the seats' states every second while the page is visible, so that a
// seat taken meanwhile shows taken and leaves the buyer's choice, which is said.
(function () {
  "use strict";
  const configElement = document.getElementById("seat-config");
  if (!configElement || !window.fetch) return;
  const cfg = JSON.parse(configElement.textContent);
  const S = cfg.strings;
  const SVG = "http://www.w3.org/2000/svg";
  const FREE = 0;
  const STATES = ["free", "held", "sold", "blocked"]; // 2 bits a seat, in this order
  const TAP_SLOP = 8; // px a pointer may move and still be a tap, not a drag
  const CLOSEST = 6; // map units across at the closest zoom: about six seats

  const $ = (id) => document.getElementById(id);
  const fmt = (template, values) =>
    template.replace(/%\((\w+)\)s/g, (_, k) => (k in values ? values[k] : ""));
  const form = document.querySelector("form.book");
  const svg = $("seat-svg");

  const sections = new Map(); // code -> {code, name, price, numbered, box, rows, seats, radio, left, leftText}
  const seats = new Map(); // id -> {id, section, row, label, x, y, order, state, box, shape, option}
  const picked = new Set(); // the seats ticked, kept with the checkboxes

  // ---- Words and money -------------------------------------------------------

  // As ticketing/money.py shows amounts: "154,000 KRW", "55.00 USD".
  function money(amount) {
    const digits = cfg.exponent;
    const major = (amount / 10 ** digits).toLocaleString("en-US", {
      minimumFractionDigits: digits, maximumFractionDigits: digits });
    return major + " " + cfg.currency;
  }

  function sectionTitle(section) {
    return section.price ? section.name + " · " + money(section.price) : section.name;
  }

  function seatName(seat) {
    const state = seat.state === FREE ? S.free : S[STATES[seat.state]];
    const values = { row: seat.row, seat: seat.label, price: money(seat.section.price), state: state };
    return fmt(seat.section.price ? S.seat : S.seatNoCharge, values);
  }

  // A polite word for screen readers (role=status), shown too. Emptied first so
  // that the same words said twice are announced twice.
  function say(text) {
    const news = $("seat-news");
    news.textContent = "";
    setTimeout(() => { news.textContent = text; }, 50);
  }

  // ---- The layout, matched with the page's checkboxes ------------------------

  // The layout, or null when it cannot be had (offline, refused): the plain form
  // stays then, and works.
  async function fetchLayout(cache) {
    try {
      const resp = await fetch(cfg.layoutUrl, { headers: { Accept: "application/json" }, cache: cache });
      return resp.ok ? (await resp.json()).data : null;
    } catch (e) {
      return null;
    }
  }

  // The model of sections and seats; false when the layout is not the page's (the
  // browser's copy predates a new map), so that the caller can ask again.
  function build(layout) {
    sections.clear();
    seats.clear();
    if (!layout) return false;
    const boxes = new Map();
    form.querySelectorAll('input[name="seats"]').forEach((box) => boxes.set(box.value, box));
    let order = 0;
    for (const spec of layout.sections) {
      const section = {
        code: spec.id, name: spec.name, price: spec.price, numbered: spec.numbered, box: spec.box,
        rows: [], seats: [], radio: $("section-" + spec.id),
        left: form.querySelector('[data-left="' + spec.id + '"]'), leftText: null,
      };
      if (!section.radio) return false;
      for (const row of spec.rows) {
        const inRow = [];
        for (let i = 0; i < row.labels.length; i++) {
          const id = spec.id + "-" + row.row + "-" + row.labels[i];
          const box = boxes.get(id);
          if (!box) return false;
          const seat = { id: id, section: section, row: row.row, label: row.labels[i], x: row.xs[i], y: row.y,
            order: order++, state: Number(box.dataset.state), box: box, shape: null, option: null };
          inRow.push(seat);
          section.seats.push(seat); // index order: a seat's bits in the section's state
          seats.set(id, seat);
        }
        section.rows.push({ row: row.row, y: row.y, seats: inRow });
      }
      sections.set(section.code, section);
    }
    return seats.size === boxes.size;
  }

  // ---- The choice -------------------------------------------------------------

  function paint(seat) {
    const look = seat.box.checked ? "chosen" : STATES[seat.state];
    if (seat.shape) seat.shape.setAttribute("class", "seat " + look);
    const option = seat.option;
    if (!option) return;
    option.className = "option " + look + (option.classList.contains("active") ? " active" : "");
    option.setAttribute("aria-selected", String(seat.box.checked));
    option.setAttribute("aria-disabled", String(seat.state !== FREE));
    option.setAttribute("aria-label", seatName(seat));
  }

  function mark(seat, on) {
    seat.box.checked = on;
    if (on) picked.add(seat); else picked.delete(seat);
    paint(seat);
  }

  // Lets go of the seats not in `keep`'s section: one booking, one section.
  function keepOneSection(keep) {
    const others = [...picked].filter((seat) => seat.section !== keep);
    if (!others.length) return;
    others.forEach((seat) => mark(seat, false));
    say(fmt(S.otherSection, { section: others[0].section.name }));
  }

  function toggle(seat) {
    if (seat.state !== FREE) return;
    if (seat.box.checked) {
      mark(seat, false);
    } else {
      keepOneSection(seat.section);
      if (picked.size >= cfg.most) { say(S.most); return; }
      mark(seat, true);
      seat.section.radio.checked = true; // the form's section is the seats' own
    }
    summarize();
  }

  function summarize() {
    const chosen = [...picked].sort((a, b) => a.order - b.order);
    $("seat-clear").hidden = !chosen.length;
    if (!chosen.length) { $("seat-choice").textContent = S.chosenNone; return; }
    const total = chosen.reduce((sum, seat) => sum + seat.section.price, 0);
    const words = fmt(S.chosen, { seats: chosen.map((seat) => seat.id).join(", ") });
    $("seat-choice").textContent = total ? words + " · " + fmt(S.total, { total: money(total) }) : words;
  }

  // ---- The map ----------------------------------------------------------------

  function shape(name, attributes, text) {
    const node = document.createElementNS(SVG, name);
    for (const key in attributes) node.setAttribute(key, attributes[key]);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // The smallest of many numbers (a stadium's section is too many for Math.min(...)).
  function least(values) {
    return values.reduce((a, b) => Math.min(a, b), Infinity);
  }

  function drawSection(layer, section) {
    const box = section.box;
    if (!box && !section.numbered) return; // places without an area: the sections' list has them
    if (box) {
      layer.append(shape("rect", { x: box.x, y: box.y, width: box.width, height: box.height, rx: 0.3,
        class: section.numbered ? "area" : "area places", "data-section": section.code }));
    }
    const at = box ? { x: box.x + 0.3, y: box.y + 0.9 }
      : { x: least(section.seats.map((seat) => seat.x)) - 0.5, y: least(section.rows.map((row) => row.y)) - 1 };
    layer.append(shape("text", { x: at.x, y: at.y, class: "title" }, sectionTitle(section)));
    if (!section.numbered) {
      section.leftText = shape("text", { x: at.x, y: at.y + 0.9, class: "left" }, section.left.textContent);
      layer.append(section.leftText);
    }
    for (const row of section.rows) {
      const first = least(row.seats.map((seat) => seat.x));
      layer.append(shape("text", { x: first - 0.8, y: row.y, class: "row" }, row.row));
      for (const seat of row.seats) {
        seat.shape = shape("circle", { cx: seat.x, cy: seat.y, r: 0.4, "data-seat": seat.id });
        layer.append(seat.shape);
        paint(seat);
      }
    }
  }

  // The whole map in view, and the view now: x, y, width, height in map units.
  const view = { full: null, now: null };

  function drawMap() {
    const layer = shape("g", {});
    svg.append(layer);
    sections.forEach((section) => drawSection(layer, section));
    const b = layer.getBBox(); // drawn (the map is shown by now): labels included
    const margin = 0.5;
    view.full = { x: b.x - margin, y: b.y - margin, w: b.width + 2 * margin, h: b.height + 2 * margin };
    // As tall as the map's shape asks, up to the CSS max-height: a long train is
    // then shown whole, small, and zoomed into.
    svg.style.aspectRatio = view.full.w + " / " + view.full.h;
    setView(view.full);
  }

  // The narrowest view: a few seats across, or the whole of a map narrower still.
  function narrowest() {
    return Math.min(view.full.w, CLOSEST);
  }

  function setView(next) {
    const full = view.full;
    const w = Math.min(full.w, Math.max(next.w, narrowest()));
    const h = w * full.h / full.w;
    // Never panned off the map: the view stays within the whole.
    const x = Math.min(Math.max(next.x, full.x), full.x + full.w - w);
    const y = Math.min(Math.max(next.y, full.y), full.y + full.h - h);
    view.now = { x: x, y: y, w: w, h: h };
    svg.setAttribute("viewBox", [x, y, w, h].map((n) => +n.toFixed(3)).join(" "));
  }

  // Zoom by `factor` (below 1: closer) keeping the map point `at` where it is.
  function zoom(factor, at) {
    const now = view.now;
    const point = at || { x: now.x + now.w / 2, y: now.y + now.h / 2 };
    const w = Math.min(view.full.w, Math.max(now.w * factor, narrowest()));
    const scale = w / now.w;
    setView({ x: point.x - (point.x - now.x) * scale, y: point.y - (point.y - now.y) * scale, w: w });
  }

  // Map units per screen pixel (the SVG keeps its aspect ratio, so one scale).
  function unitsPerPixel() {
    const rect = svg.getBoundingClientRect();
    return Math.max(view.now.w / rect.width, view.now.h / rect.height);
  }

  function toMap(clientX, clientY) {
    const point = new DOMPoint(clientX, clientY).matrixTransform(svg.getScreenCTM().inverse());
    return { x: point.x, y: point.y };
  }

  // Pointers on the map: one drags the view, two pinch it; a tap (a pointer that
  // barely moved, alone) on a seat toggles it, on a section's area chooses it.
  const pointers = new Map(); // pointerId -> {x, y} on screen
  let travelled = 0;
  let pressed = null; // the element the first pointer went down on

  function middle() {
    const [a, b] = [...pointers.values()];
    return { x: (a.x + b.x) / 2, y: (a.y + b.y) / 2, d: Math.hypot(a.x - b.x, a.y - b.y) || 1 };
  }

  function onPointerDown(event) {
    // A primary pointer is the first of a gesture: any other still noted went up
    // elsewhere (a mouse released off the map).
    if (event.isPrimary) pointers.clear();
    if (!pointers.size) { travelled = 0; pressed = event.target; }
    pointers.set(event.pointerId, { x: event.clientX, y: event.clientY });
  }

  function onPointerMove(event) {
    const p = pointers.get(event.pointerId);
    if (!p) return;
    const before = pointers.size === 2 ? middle() : null;
    const dx = event.clientX - p.x;
    const dy = event.clientY - p.y;
    p.x = event.clientX;
    p.y = event.clientY;
    travelled += Math.hypot(dx, dy);
    if (travelled < TAP_SLOP) return;
    if (pointers.size === 1) {
      const s = unitsPerPixel();
      setView({ x: view.now.x - dx * s, y: view.now.y - dy * s, w: view.now.w });
      try { svg.setPointerCapture(event.pointerId); } catch (e) { /* a pointer already gone */ }
    } else if (before) {
      const after = middle();
      const s = unitsPerPixel();
      setView({ x: view.now.x - (after.x - before.x) * s, y: view.now.y - (after.y - before.y) * s, w: view.now.w });
      zoom(before.d / after.d, toMap(after.x, after.y));
    }
  }

  function onPointerUp(event) {
    if (!pointers.has(event.pointerId)) return;
    const alone = pointers.size === 1;
    pointers.delete(event.pointerId);
    if (event.type !== "pointerup" || !alone || travelled >= TAP_SLOP || !pressed) return;
    const target = pressed.closest("[data-seat], [data-section]");
    if (!target) return;
    if (target.dataset.seat) toggle(seats.get(target.dataset.seat));
    else chooseSection(sections.get(target.dataset.section));
  }

  function chooseSection(section) {
    if (!section || section.radio.disabled) return;
    section.radio.checked = true;
    keepOneSection(section);
    summarize();
  }

  function watchMap() {
    svg.addEventListener("pointerdown", onPointerDown);
    svg.addEventListener("pointermove", onPointerMove);
    ["pointerup", "pointercancel", "lostpointercapture"].forEach((type) => svg.addEventListener(type, onPointerUp));
    $("seat-map").querySelectorAll("[data-zoom]").forEach((button) => {
      button.addEventListener("click", () => {
        const how = button.dataset.zoom;
        if (how === "reset") setView(view.full);
        else zoom(how === "in" ? 1 / 1.5 : 1.5);
      });
    });
  }

  // ---- The lists: one listbox per numbered section ----------------------------

  function buildList(section, fieldset) {
    const title = document.createElement("p");
    title.className = "list-title";
    title.id = "list-" + section.code;
    title.textContent = sectionTitle(section);
    const list = document.createElement("div");
    list.className = "listbox";
    list.tabIndex = 0;
    list.setAttribute("role", "listbox");
    list.setAttribute("aria-multiselectable", "true");
    list.setAttribute("aria-labelledby", title.id);
    for (const row of section.rows) {
      const group = document.createElement("div");
      group.className = "list-row";
      group.setAttribute("role", "group");
      group.setAttribute("aria-label", fmt(S.row, { row: row.row }));
      const name = document.createElement("span");
      name.className = "row-name";
      name.setAttribute("aria-hidden", "true");
      name.textContent = row.row;
      group.append(name);
      for (const seat of row.seats) {
        seat.option = document.createElement("div");
        seat.option.id = "option-" + seat.id;
        seat.option.setAttribute("role", "option");
        seat.option.dataset.seat = seat.id;
        seat.option.textContent = seat.label;
        group.append(seat.option);
        paint(seat);
      }
      list.append(group);
    }
    const options = section.seats.map((seat) => seat.option);
    list.addEventListener("keydown", (event) => onListKey(event, list, options));
    list.addEventListener("focus", () => {
      if (!list.getAttribute("aria-activedescendant")) activate(list, firstOption(section));
    });
    list.addEventListener("click", (event) => {
      const option = event.target.closest("[role=option]");
      if (!option) return;
      activate(list, option);
      toggle(seats.get(option.dataset.seat));
    });
    fieldset.before(title, list);
    fieldset.hidden = true; // still in the form, and what it sends
  }

  function firstOption(section) {
    const seat = section.seats.find((s) => s.box.checked) || section.seats.find((s) => s.state === FREE);
    return (seat || section.seats[0]).option;
  }

  function activate(list, option) {
    const current = list.querySelector(".option.active");
    if (current) current.classList.remove("active");
    option.classList.add("active");
    list.setAttribute("aria-activedescendant", option.id);
    option.scrollIntoView({ block: "nearest", inline: "nearest" });
  }

  // Arrows move, Home and End go to the ends, Space ticks, Enter sends the form
  // (as Enter in a text field does).
  function onListKey(event, list, options) {
    const active = document.getElementById(list.getAttribute("aria-activedescendant"));
    let i = Math.max(0, options.indexOf(active));
    switch (event.key) {
      case "ArrowDown": case "ArrowRight": i = Math.min(i + 1, options.length - 1); break;
      case "ArrowUp": case "ArrowLeft": i = Math.max(i - 1, 0); break;
      case "Home": i = 0; break;
      case "End": i = options.length - 1; break;
      case " ":
        event.preventDefault();
        if (active) toggle(seats.get(active.dataset.seat));
        return;
      case "Enter":
        event.preventDefault();
        form.requestSubmit();
        return;
      default: return;
    }
    event.preventDefault();
    activate(list, options[i]);
  }

  // ---- The seats' states, refreshed ---------------------------------------------

  let since = cfg.since; // the page's own copy: older answers are not news
  let timer = null;
  let asking = false;
  let failures = 0;

  function showLeft(section, free) {
    const words = free > 0 ? fmt(S.left, { n: free }) : S.soldOut;
    if (section.left) section.left.textContent = words;
    if (section.leftText) section.leftText.textContent = words;
    section.radio.disabled = free <= 0;
  }

  // A section's seats from its state: 2 bits a seat, a byte's first in its high bits.
  function applySeats(section, encoded, lost) {
    const bytes = atob(encoded);
    section.seats.forEach((seat, i) => {
      const state = (bytes.charCodeAt(i >> 2) >> (6 - 2 * (i & 3))) & 3;
      if (state === seat.state) return;
      seat.state = state;
      seat.box.disabled = state !== FREE;
      if (state !== FREE && seat.box.checked) {
        mark(seat, false);
        lost.push(seat.id);
      } else {
        paint(seat);
      }
    });
  }

  function apply(data) {
    if (data.refreshedAt < since) return; // a copy older than what the page shows
    since = data.refreshedAt;
    const lost = [];
    for (const now of data.sections) {
      const section = sections.get(now.id);
      if (!section) continue;
      showLeft(section, now.free);
      if (section.numbered && now.state) applySeats(section, now.state, lost);
    }
    if (lost.length) {
      say(fmt(S.takenNow, { seats: lost.join(", ") }));
      summarize();
    }
  }

  async function refresh() {
    if (asking || document.hidden) return;
    asking = true;
    try {
      const resp = await fetch(cfg.seatsUrl, { headers: { Accept: "application/json" } });
      if (!resp.ok) throw new Error("seats: HTTP " + resp.status);
      apply((await resp.json()).data);
      failures = 0;
      $("seat-stale").hidden = true;
    } catch (e) {
      failures += 1;
      $("seat-stale").hidden = failures < 3; // a blip is not worth a word
    } finally {
      asking = false;
      later();
    }
  }

  // Every pollMs while the page is seen; backing off while answers fail.
  function later() {
    clearTimeout(timer);
    timer = null;
    if (document.hidden) return;
    timer = setTimeout(refresh, Math.min(10000, cfg.pollMs * 2 ** Math.min(failures, 4)));
  }

  function watchVisibility() {
    document.addEventListener("visibilitychange", () => {
      if (document.hidden) { clearTimeout(timer); timer = null; } else { refresh(); }
    });
  }

  // ---- Start --------------------------------------------------------------------

  function watchForm() {
    sections.forEach((section) => {
      section.radio.addEventListener("change", () => { keepOneSection(section); summarize(); });
    });
    $("seat-clear").addEventListener("click", () => {
      [...picked].forEach((seat) => mark(seat, false));
      summarize();
    });
  }

  async function start() {
    // The browser's copy of the layout may be of a map replaced since: then it is
    // asked for again, fresh. Without one that fits, the plain form is the page.
    if (!build(await fetchLayout("default")) && !build(await fetchLayout("no-cache"))) return;
    seats.forEach((seat) => { if (seat.box.checked) picked.add(seat); });
    // A map of places without areas has nothing to draw: the sections' list is it.
    if ([...sections.values()].some((section) => section.box || section.numbered)) {
      $("seat-map").hidden = false;
      drawMap();
      watchMap();
    }
    sections.forEach((section) => {
      const fieldset = form.querySelector('fieldset.seat-boxes[data-section="' + section.code + '"]');
      if (fieldset) buildList(section, fieldset);
    });
    watchForm();
    watchVisibility();
    $("seat-choice-box").hidden = false;
    summarize();
    later();
  }

  start();
})();
