// The active window's countdown on the booking page; when it ends, back to the
// waiting room, which explains and offers to rejoin.
(function () {
  "use strict";
  const el = document.getElementById("countdown");
  if (!el) return;
  const expires = Number(el.dataset.expires);
  // The window's end is on the server's clock; the browser's may differ.
  const skew = Date.now() - Number(el.dataset.now || Date.now());
  function tick() {
    const left = Math.max(0, Math.round((expires + skew - Date.now()) / 1000));
    el.textContent = Math.floor(left / 60) + ":" + String(left % 60).padStart(2, "0");
    if (left <= 0) {
      window.location.assign(el.dataset.expiredUrl);
      return;
    }
    setTimeout(tick, 250);
  }
  tick();
})();
