// The operator's message to the crowd (queue_app/crowd_messages.py), in the page's
// live region #crowd-message: in the page's language, or in the other when the
// operator wrote only that one; gone once cleared. The region is always there and
// changes only when the text does, so that a screen reader says it once.
// The waiting room hands it each poll's message (window.crowdMessage). The booking
// page has no poll of its own: given data-poll (the poll's URL for its token), it
// asks at each answer's nextPollMs, so that a message reaches it within one poll too.
(function () {
  "use strict";
  const box = document.getElementById("crowd-message");
  if (!box) return;
  const pageLang = document.documentElement.lang.startsWith("ko") ? "ko" : "en";
  const said = box.querySelector("[lang]");
  let shown = said ? said.lang + ":" + said.textContent : pageLang + ":";

  function show(message) {
    let text = "";
    let lang = pageLang;
    if (message) {
      text = message[pageLang];
      if (!text) {
        lang = pageLang === "ko" ? "en" : "ko";
        text = message[lang];
      }
    }
    if (lang + ":" + (text || "") === shown || (!text && shown.endsWith(":"))) return;
    shown = lang + ":" + (text || "");
    if (!text) { box.replaceChildren(); return; }
    const p = document.createElement("p");
    p.className = "crowd-message";
    const label = document.createElement("strong");
    label.textContent = box.dataset.label;
    const span = document.createElement("span");
    span.lang = lang;
    span.textContent = text;
    p.append(label, span);
    box.replaceChildren(p);
  }
  window.crowdMessage = show;

  const url = box.dataset.poll;
  if (!url) return;
  async function poll() {
    let wait = 5000;
    try {
      const answer = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (answer.ok) {
        const body = await answer.json();
        show(body.data.message);
        if (body.data.nextPollMs) wait = body.data.nextPollMs;
      }
    } catch (e) { /* the network: try again later */ }
    setTimeout(poll, wait);
  }
  setTimeout(poll, 2000);
})();
