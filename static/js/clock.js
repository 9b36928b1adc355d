// Times shown to a person, all on one clock: the browser's zone, named, written the
// way the page's language writes a date and time ("Dec 5, 2026, 2:41 PM EST";
// "2026년 12월 5일 오전 2:41 GMT+9"). Server-rendered times are <time data-local>
// elements (queue_app/templatetags/clock.py), rewritten here; scripts that show
// a time of their own use window.clock.format. Loaded by base.html before any
// page's script.
(function () {
  "use strict";
  const formatter = new Intl.DateTimeFormat(document.documentElement.lang || undefined, {
    year: "numeric",
    month: "short",
    day: "numeric",
    hour: "numeric",
    minute: "2-digit",
    timeZoneName: "short",
  });

  // `moment`: milliseconds since the epoch, or a Date.
  function format(moment) {
    return formatter.format(new Date(moment));
  }

  function rewrite(root) {
    (root || document).querySelectorAll("time[data-local]").forEach((el) => {
      const ms = Date.parse(el.dateTime);
      if (Number.isNaN(ms)) return;
      el.textContent = format(ms);
      el.dataset.shown = "local"; // (the browser tests wait for it)
    });
  }

  window.clock = { format: format, rewrite: rewrite };
  rewrite();
})();
