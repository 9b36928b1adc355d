// The admin's live page of an event: its numbers every second, and SVG charts of the
// last 30 minutes (waiting; admitted per second and bookings per 10 s, over 10 s
// buckets), from the page's JSON. Its words come translated with the page
// (#live-strings), as the waiting room's do.
(function () {
  "use strict";
  const root = document.getElementById("live");
  const S = JSON.parse(document.getElementById("live-strings").textContent);
  const lang = document.documentElement.lang;
  const SVG = "http://www.w3.org/2000/svg";
  const W = 600, H = 140, TOP = 14, BOTTOM = 16;
  const fmt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString(lang));
  const fill = (template, values) =>
    template.replace(/%\((\w+)\)s/g, (_, k) => (k in values ? values[k] : ""));

  function el(name, attrs, text) {
    const node = document.createElementNS(SVG, name);
    for (const k in attrs) node.setAttribute(k, attrs[k]);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // `values` one per bucket, null where there was no tick; as a line or as bars.
  function draw(svg, values, bars) {
    const max = Math.max(1, ...values.filter((v) => v !== null));
    const n = values.length;
    const x = (i) => (i / Math.max(1, n - 1)) * W;
    const y = (v) => H - BOTTOM - (v / max) * (H - TOP - BOTTOM);
    const shapes = [];
    if (bars) {
      const w = Math.max(1, W / n - 1);
      let d = "";
      values.forEach((v, i) => {
        if (v) d += `M${x(i) - w / 2},${H - BOTTOM}V${y(v)}h${w}V${H - BOTTOM}z`;
      });
      shapes.push(el("path", { class: "bars", d: d }));
    } else {
      let d = "", pen = "M";
      values.forEach((v, i) => {
        if (v === null) { pen = "M"; return; }
        d += `${pen}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
        pen = "L";
      });
      shapes.push(el("path", { class: "line", d: d }));
    }
    const last = [...values].reverse().find((v) => v !== null);
    shapes.push(el("text", { x: 4, y: 11 }, fill(S.max, { n: fmt(max) })));
    shapes.push(el("text", { x: W - 4, y: 11, "text-anchor": "end" }, fill(S.now, { n: fmt(last ?? 0) })));
    shapes.push(el("text", { x: 4, y: H - 4 }, S.start));
    shapes.push(el("text", { x: W - 4, y: H - 4, "text-anchor": "end" }, S.end));
    svg.replaceChildren(...shapes);
  }

  async function refresh() {
    try {
      const resp = await fetch(root.dataset.url, { headers: { Accept: "application/json" } });
      if (!resp.ok) throw new Error(resp.status);
      const data = await resp.json();
      const n = data.numbers;
      for (const key of ["waiting", "active", "seatsLeft", "seatsSold", "bookings", "admittedLastMinute"]) {
        document.getElementById("n-" + key).textContent = fmt(n[key]);
      }
      const lane = document.getElementById("n-waitingPriority");  // an event with a priority lane's
      if (lane) lane.textContent = fmt(n.waitingPriority);
      document.getElementById("n-status").textContent = S.statuses[n.status] || n.status || "–";
      for (const key of ["held", "paid", "refunded"]) {  // a priced event's money, as people read it
        const cell = document.getElementById("n-" + key);
        if (cell) cell.textContent = n.revenue[key];
      }
      const refused = Object.entries(n.joinsRefused).map(
        ([k, v]) => (S.refusals[k] || k.replaceAll("_", " ")) + " " + fmt(v));
      document.getElementById("n-joinsRefused").textContent = refused.join(", ") || "0";
      draw(document.getElementById("chart-waiting"), data.series.waiting, false);
      const step = data.series.step;
      const perSecond = data.series.admitted.map((n) => Math.round((n / step) * 10) / 10);
      draw(document.getElementById("chart-admitted"), perSecond, true);
      draw(document.getElementById("chart-bookings"), data.series.bookings, true);
      document.getElementById("updated").textContent = fill(S.updated, { time: new Date().toLocaleTimeString(lang) });
      root.dataset.ready = "1";
    } catch (e) {
      document.getElementById("updated").textContent = fill(S.failed, { error: e.message });
    }
    setTimeout(refresh, 1000);
  }

  refresh();
})();
