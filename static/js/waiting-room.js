// The waiting room: join on the first visit, keep the token (localStorage and a
// cookie, so F5 keeps the place), poll at the server's nextPollMs, and move to the
// booking page when admitted. Before a scheduled start, a countdown, the place's
// receipt in the draw and the draw's commitment to keep; after it, the drawn
// position. When the event asks for proof of work, the join carries a solved
// challenge (ALTCHA, static/vendor/altcha), solved in the background while the
// page says so. The operator's message to the crowd comes with each poll.
(function () {
  "use strict";
  const cfg = JSON.parse(document.getElementById("room-config").textContent);
  const room = document.getElementById("room");
  const S = cfg.strings;
  const storeKey = "queueToken:" + cfg.eventId;
  const firstRankKey = "queueFirstRank:" + cfg.eventId;
  const $ = (id) => document.getElementById(id);
  const fmt = (template, values) =>
    template.replace(/%\((\w+)\)s/g, (_, k) => (k in values ? values[k] : ""));
  const num = (n) => Number(n).toLocaleString(document.documentElement.lang);
  let timer = null;
  let failures = 0;
  let gone = false; // the line was left on this page: nothing more to ask
  // Solutions refused in a row (expired, or used before): a few new challenges at
  // once, then only at the pace of the retries' back-off, so that a phone's CPU is
  // not kept busy for nothing.
  const MAX_CHECKS = 3;
  let checks = 0;

  // The step that asks "leave the line?" stays up while the place still waits.
  function show(state) {
    if (room.dataset.state === "leaving" && (state === "waiting" || state === "prequeue")) return;
    room.dataset.state = state;
  }

  // No seat free: sold out, unless some are held by buyers paying now, which may
  // come back (the page keeps asking, and says so).
  function soldOut(data) {
    const held = data.seatsOnHold || 0;
    $("on-hold").hidden = held <= 0;
    $("soldout-heading").textContent = held > 0 ? S.noSeatFree : S.soldOut;
    $("on-hold").textContent = held > 0 ? fmt(S.onHold, { n: num(held) }) : "";
    show("soldout");
  }

  function csrf() {
    const m = document.cookie.match(/(?:^|; )csrftoken=([^;]*)/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  function readToken() {
    let token = null;
    try { token = localStorage.getItem(storeKey); } catch (e) { /* private mode */ }
    if (!token) {
      const m = document.cookie.match(new RegExp("(?:^|; )" + cfg.cookie + "=([^;]*)"));
      token = m ? decodeURIComponent(m[1]) : null;
    }
    return token;
  }

  // Over https the token cookie is Secure: never sent on a plain-http request.
  const secureCookie = location.protocol === "https:" ? "; secure" : "";

  function keepToken(token) {
    try { localStorage.setItem(storeKey, token); } catch (e) { /* cookie still keeps it */ }
    document.cookie = cfg.cookie + "=" + encodeURIComponent(token) +
      "; path=/; max-age=86400; samesite=lax" + secureCookie;
  }

  // A token this service did not issue (made up, or from before a key rotation's
  // grace period ended): forget it and take a new place.
  function forgetToken() {
    try { localStorage.removeItem(storeKey); } catch (e) { /* ignore */ }
    document.cookie = cfg.cookie + "=; path=/; max-age=0; samesite=lax" + secureCookie;
  }

  function isForeign(answer) {
    const error = answer.payload && answer.payload.error;
    return Boolean(error) && error.code === "INVALID_TOKEN";
  }

  async function call(method, url, body) {
    const options = { method: method, headers: { "Accept": "application/json" } };
    if (body) {
      options.headers["Content-Type"] = "application/json";
      options.headers["X-CSRFToken"] = csrf();
      options.body = JSON.stringify(body);
    }
    const resp = await fetch(url, options);
    const date = Date.parse(resp.headers.get("Date") || "");
    if (!Number.isNaN(date)) serverTime(date + 500, false);
    let payload = null;
    try { payload = await resp.json(); } catch (e) { /* not JSON: a proxy error page */ }
    return { status: resp.status, payload: payload };
  }

  function showError(text) {
    const el = $("error");
    el.textContent = text;
    el.hidden = !text;
  }

  function later(ms) {
    clearTimeout(timer);
    timer = setTimeout(poll, ms);
  }

  // Network trouble or 5xx: keep the place, back off, try again.
  function retry(reason) {
    failures += 1;
    showError(reason || S.networkError);
    later(Math.min(30000, 1000 * 2 ** Math.min(failures, 5)));
  }

  function refusal(answer) {
    const error = answer.payload && answer.payload.error;
    if (!error) return false;
    if (error.code === "EVENT_CLOSED") { show("closed"); return true; }
    if (error.code === "ALREADY_BOOKED" && error.reservationId) {
      booked(error.reservationId);
      return true;
    }
    if (error.code === "RATE_LIMIT") { retry(S.rateLimited); return true; }
    if (error.code === "ACCOUNT_REQUIRED") { signIn(); return true; }
    if (error.code === "EMAIL_UNCONFIRMED") { signIn(S.confirmEmail, S.confirmEmailLink, cfg.confirmUrl); return true; }
    if (error.code === "TOO_MANY_PLACES") { refused(); return true; }
    // The operator has stopped new places for now: say why, and try again later.
    if (error.code === "EVENT_REJECTING") {
      if (error.crowdMessage) { crowdMessage(error.crowdMessage); retry(S.rejecting); } else retry(error.message);
      return true;
    }
    showError(error.message);
    return true;
  }

  // What the account event needs first: a signed-in account, or (with `text`,
  // `label` and `url`) the account's email address confirmed.
  function signIn(text, label, url) {
    showError("");
    $("signin-message").textContent = text || S.signIn;
    const link = $("signin-link");
    link.textContent = label || S.signInLink;
    link.href = url || cfg.loginUrl;
    show("signin");
  }

  // This connection is at the event's cap of places (people sharing it took them):
  // the panel says what to do; "Try again" asks again (a place may have been freed).
  function refused() {
    showError("");
    show("refused");
  }

  function status(text) {
    $("joining").textContent = text;
    show("joining");
  }

  // The widget's script: the template loads it when the event asks for proof of
  // work; an event that starts asking while this page is open gets it loaded here.
  function widgetReady() {
    if (!customElements.get("altcha-widget") &&
        !document.querySelector('script[src="' + cfg.widget + '"]')) {
      const script = document.createElement("script");
      script.type = "module";
      script.src = cfg.widget;
      document.head.appendChild(script);
    }
    return Promise.race([
      customElements.whenDefined("altcha-widget"),
      new Promise((_, reject) => setTimeout(() => reject(new Error("widget not loaded")), 30000)),
    ]);
  }

  // One challenge solved by an invisible <altcha-widget>, in its Web Workers: the
  // payload of its "verified" event, or an error. The time it took is kept on
  // <html data-pow-ms> (the browser tests read it).
  function solve(challenge) {
    return new Promise((resolve, reject) => {
      const widget = document.createElement("altcha-widget");
      widget.setAttribute("display", "invisible");
      widget.setAttribute("auto", "onload");
      widget.setAttribute("challenge", JSON.stringify(challenge));
      widget.setAttribute("configuration", JSON.stringify({
        minDuration: 0, // no pause added after a quick solve
        humanInteractionSignature: false, // no pointer and scroll tracking
        hideFooter: true,
        hideLogo: true,
      }));
      const started = performance.now();
      widget.addEventListener("verified", (e) => {
        document.documentElement.dataset.powMs = String(Math.round(performance.now() - started));
        widget.remove();
        resolve(e.detail.payload);
      });
      widget.addEventListener("statechange", (e) => {
        if (e.detail.state !== "error" && e.detail.state !== "expired") return;
        widget.remove();
        reject(new Error("the proof of work failed: " + e.detail.state));
      });
      $("pow").replaceChildren(widget);
    });
  }

  // Fetch a challenge, solve it, then enter with the solution. Network trouble
  // backs off as a poll does (and comes back here).
  async function prove(rejoin, text) {
    showError("");
    status(text || S.checking);
    let answer;
    try {
      answer = await call("GET", cfg.api.challenge + "?eventId=" + encodeURIComponent(cfg.eventId));
    } catch (e) {
      return retry();
    }
    if (answer.status !== 200 || !answer.payload) {
      if (answer.status >= 500 || !answer.payload) return retry();
      return refusal(answer);
    }
    const data = answer.payload.data;
    if (!data.required) return enter(rejoin, null); // the event stopped asking
    let payload;
    try {
      await widgetReady();
      payload = await solve(data.challenge);
    } catch (e) {
      return checkFailed(rejoin);
    }
    status(S.joining);
    return enter(rejoin, payload);
  }

  // A solution refused (expired, used before) or a solve that failed: a new
  // challenge, a few times; then again after a pause, as for network trouble.
  function checkFailed(rejoin) {
    checks += 1;
    if (checks >= MAX_CHECKS) {
      checks = 0;
      return retry(S.checkFailed);
    }
    return prove(rejoin, S.checkFailed);
  }

  function booked(reservationId) {
    $("confirmation-link").href = cfg.confirmationUrl.replace("RID", reservationId);
    show("booked");
  }

  // Join, or rejoin with the token kept. `proof` is a solved challenge's payload:
  // undefined when none was asked for yet, null when the event asks for none.
  async function enter(rejoin, proof) {
    if (cfg.requireAccount && !cfg.signedIn) return signIn();
    if (cfg.requireAccount && cfg.mustConfirm) {
      return signIn(S.confirmEmail, S.confirmEmailLink, cfg.confirmUrl);
    }
    const token = readToken();
    // A new place needs a solution; a rejoin tries without one first (keeping a
    // place needs none) and solves only when the answer asks for it.
    if (cfg.proofOfWork && !token && proof === undefined) return prove(rejoin);
    const body = { eventId: cfg.eventId };
    if (token) body.token = token;
    if (proof) body.altcha = proof;
    if (presaleCode) body.presaleCode = presaleCode;
    let answer;
    try {
      answer = await call("POST", token ? cfg.api.rejoin : cfg.api.join, body);
    } catch (e) {
      return retry();
    }
    if (answer.status !== 200) {
      if (answer.status >= 500) return retry();
      if (token && isForeign(answer)) { forgetToken(); return enter(rejoin, proof); }
      const error = answer.payload && answer.payload.error;
      if (error && error.code === "PROOF_OF_WORK") {
        return proof ? checkFailed(rejoin) : prove(rejoin);
      }
      if (error && presaleRefused(error.code, () => enter(rejoin, proof))) return;
      return refusal(answer);
    }
    checks = 0;
    failures = 0;
    presaleCode = ""; // spent (or not needed): another new place asks for a code again
    const data = answer.payload.data;
    if (data.joinedAt) serverTime(data.joinedAt, true);
    keepToken(data.token);
    if (rejoin || !data.rejoined) {
      try { localStorage.removeItem(firstRankKey); } catch (e) { /* ignore */ }
    }
    // The answer carries the place's first poll: shown now, the next one at its nextPollMs.
    if (data.position) shown(data.position); else poll();
  }

  // --- Presale codes (docs/presale.md) -----------------------------------------
  // While the sale is in its presale, a new place needs a code (or a signed-in
  // account on the event's list): a join refused for it shows the code's form, and
  // the code entered goes with this page's joins from then on. A refused join
  // spent nothing, its solved proof of work included: it is sent again as it was.
  const PRESALE_REFUSALS = {
    PRESALE_CODE_REQUIRED: "presaleRequired",
    PRESALE_CODE_INVALID: "presaleInvalid",
    PRESALE_CODE_USED_UP: "presaleUsedUp",
  };
  // As queue_app/presale.py reads it: 10 of its 32 letters and digits (no I, O, 0, 1).
  const PRESALE_CODE = /^[A-HJ-NP-Z2-9]{10}$/;
  // A holder's link may carry the code (?code=ABCDE-FGH23): the first join sends it,
  // as the code's form would, in the presale and, on an event with a priority lane,
  // after it (docs/presale.md).
  const linked = (new URLSearchParams(location.search).get("code") || "").replace(/[\s-]/g, "").toUpperCase();
  let presaleCode = PRESALE_CODE.test(linked) ? linked : "";
  let presaleAgain = null; // the join to send again once a code is entered

  function presaleRefused(code, again) {
    if (!(code in PRESALE_REFUSALS)) return false;
    showError("");
    presaleAgain = again;
    $("presale-message").textContent = S[PRESALE_REFUSALS[code]];
    $("presale-opens").textContent = cfg.presaleUntil
      ? fmt(S.presaleOpens, { time: window.clock.format(cfg.presaleUntil) }) : "";
    show("presale");
    $("presale-code").focus();
    return true;
  }

  $("presale-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const typed = $("presale-code").value.replace(/[\s-]/g, "").toUpperCase();
    if (!PRESALE_CODE.test(typed)) {
      $("presale-message").textContent = S.presaleMalformed;
      $("presale-code").focus();
      return;
    }
    presaleCode = typed;
    status(S.joining);
    if (presaleAgain) presaleAgain();
  });

  // The server's clock, for the countdown to a scheduled start (the browser's may
  // differ): a new place's joinedAt (ms, on the line's clock), else the Date of the
  // API's answers (whole seconds: the middle of the second is taken). The page itself
  // is the same for everyone, and may be cached: it carries no clock of its own.
  let skew = 0;
  let skewExact = false;
  function serverTime(ms, exact) {
    if (skewExact && !exact) return;
    skew = Date.now() - ms;
    skewExact = exact;
  }
  let countdown = null;

  function clock(ms) {
    const s = Math.max(0, Math.ceil(ms / 1000));
    const h = Math.floor(s / 3600);
    const mm = String(Math.floor((s % 3600) / 60));
    const ss = String(s % 60).padStart(2, "0");
    return h > 0 ? h + ":" + mm.padStart(2, "0") + ":" + ss : mm + ":" + ss;
  }

  function drawLink(receipt) {
    const href = cfg.drawUrl + (receipt ? "?receipt=" + encodeURIComponent(receipt) : "");
    room.querySelectorAll(".draw-link").forEach((a) => { a.href = href; });
  }

  // The place's receipt signed by the service (docs/draw.md), saved as a file for its
  // holder to keep: before the draw it proves the draw must include this place, after
  // it also where. Asked for when wanted, not with every poll: a signature is work.
  async function saveReceipt(event) {
    event.preventDefault();
    const token = readToken();
    if (!token) return;
    const query = "?token=" + encodeURIComponent(token) + "&eventId=" + encodeURIComponent(cfg.eventId);
    let body;
    try {
      const response = await fetch(cfg.api.signedReceipt + query, { headers: { Accept: "application/json" } });
      body = await response.json();
    } catch (e) {
      showError(S.networkError);
      return;
    }
    if (!body.success) { showError(body.error.message); return; }
    const file = new Blob([JSON.stringify(body.data, null, 1) + "\n"], { type: "application/json" });
    const link = document.createElement("a");
    link.href = URL.createObjectURL(file);
    link.download = "receipt-" + cfg.eventId + "-" + body.data.receipt + ".json";
    document.body.appendChild(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 60000);
  }
  room.querySelectorAll(".save-receipt").forEach((a) => a.addEventListener("click", saveReceipt));

  // Copy the draw's commitment (the page comes with it), for the person to keep
  // before the start (docs/draw.md). Where the clipboard is out of reach (a page
  // over plain http, a refused permission) select it, to be copied by hand.
  $("copy-commitment").addEventListener("click", async () => {
    const code = $("prequeue-commitment");
    try {
      await navigator.clipboard.writeText(code.textContent);
      $("copied").textContent = S.copied;
    } catch (e) {
      const range = document.createRange();
      range.selectNodeContents(code);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      $("copied").textContent = S.copyFailed;
    }
  });

  // Before a scheduled start: the countdown, the receipt that names this place in
  // the draw, and the draw's commitment.
  function preQueue(data) {
    showError("");
    // The start as every page shows a time (static/js/clock.js): the draw page's reads the same.
    $("prequeue-message").textContent = fmt(S.preQueue, { time: window.clock.format(data.opensAt) });
    $("receipt").textContent = data.receipt || "";
    drawLink(data.receipt);
    show("prequeue");
    clearTimeout(countdown);
    (function tick() {
      const left = data.opensAt - (Date.now() - skew);
      $("starts-in").textContent = fmt(S.countdown, { time: clock(left) });
      if (left > 0 && room.dataset.state === "prequeue") countdown = setTimeout(tick, 250);
    })();
  }

  function render(data) {
    showError("");
    clearTimeout(countdown);
    $("drawn").hidden = !data.drawPosition;
    if (data.drawPosition) {
      $("drawn-position").textContent = fmt(S.drawnPosition, { n: num(data.drawPosition) });
      drawLink(data.receipt);
    }
    $("paused").hidden = data.eventStatus !== "PAUSED";
    if (data.soldOut) { soldOut(data); return; }
    show("waiting");
    $("priority").hidden = !data.priorityLane;
    $("position").textContent = fmt(S.position, { rank: num(data.rank) });
    $("ahead").textContent = num(data.ahead);
    $("behind").textContent = num(data.behind);
    $("seats").textContent = num(data.remainingSeats);
    if (data.etaSeconds === null || data.etaSeconds === undefined) {
      $("eta").textContent = "–";
    } else if (data.etaSeconds >= 60) {
      $("eta").textContent = fmt(S.minutes, { n: num(Math.ceil(data.etaSeconds / 60)) });
    } else {
      $("eta").textContent = fmt(S.seconds, { n: num(data.etaSeconds) });
    }
    let first = null;
    try { first = Number(localStorage.getItem(firstRankKey)) || null; } catch (e) { /* ignore */ }
    if (!first || data.rank > first) {
      first = data.rank;
      try { localStorage.setItem(firstRankKey, String(first)); } catch (e) { /* ignore */ }
    }
    const percent = first > 1 ? Math.round(100 * (first - data.rank) / (first - 1)) : 100;
    const bar = room.querySelector(".progress");
    bar.setAttribute("aria-valuenow", String(percent));
    bar.querySelector(".fill").style.width = percent + "%";
  }

  // The operator's message to the crowd, which every poll carries (static/js/crowd-message.js).
  const crowdMessage = window.crowdMessage;

  // A window that ended (or a booking not saved once it had): joining again is
  // offered only while there are seats to join for; a sold-out sale is said so,
  // and watched until it closes or seats come back.
  function ended(data) {
    if (!data.soldOut) { show("expired"); return; }
    soldOut(data);
    later(data.nextPollMs || 5000);
  }

  // Give the place up (after the page asked to be sure): the people behind move
  // up at once, and this page stops asking about a place it no longer holds.
  async function leave() {
    const token = readToken();
    if (!token) return;
    clearTimeout(timer);
    clearTimeout(countdown);
    const query = "?token=" + encodeURIComponent(token) + "&eventId=" + encodeURIComponent(cfg.eventId);
    let answer;
    try {
      answer = await call("DELETE", cfg.api.leave + query);
    } catch (e) {
      room.dataset.state = asked;
      return retry();
    }
    room.dataset.state = asked; // out of the question; poll() shows where it stands now
    if (answer.status !== 200) {
      if (answer.status >= 500 || !answer.payload) return retry();
      return refusal(answer);
    }
    if (!answer.payload.data.removed) return poll(); // not waiting any more (admitted meanwhile)
    gone = true;
    forgetToken();
    try { localStorage.removeItem(firstRankKey); } catch (e) { /* ignore */ }
    showError("");
    show("left");
  }

  let asked = "waiting"; // the state the question was asked from
  room.querySelectorAll(".leave").forEach((b) => b.addEventListener("click", () => {
    asked = room.dataset.state;
    room.dataset.state = "leaving";
    $("leave-yes").focus();
  }));
  $("leave-yes").addEventListener("click", leave);
  $("leave-no").addEventListener("click", () => { room.dataset.state = asked; poll(); });

  async function poll() {
    if (gone) return;
    const token = readToken();
    if (!token) return enter(false);
    let answer;
    try {
      const query = "?token=" + encodeURIComponent(token) + "&eventId=" + encodeURIComponent(cfg.eventId);
      answer = await call("GET", cfg.api.poll + query);
    } catch (e) {
      return retry();
    }
    if (answer.status !== 200) {
      if (answer.status >= 500 || !answer.payload) return retry();
      if (isForeign(answer)) { forgetToken(); return enter(false); }
      return refusal(answer);
    }
    if (gone) return; // an answer that crossed the leave
    failures = 0;
    shown(answer.payload.data);
  }

  // A poll's answer (or the join's first one) on the page, and what follows it.
  function shown(data) {
    crowdMessage(data.message);
    // A closed sale books nobody: said so, whatever the place was.
    if (data.eventStatus === "CLOSED" && data.status !== "BOOKED") { show("closed"); return; }
    switch (data.status) {
      case "PRE_QUEUE":
        preQueue(data);
        return later(data.nextPollMs || 1000);
      case "DRAWING":
        clearTimeout(countdown);
        $("drawing-message").textContent = S.drawing;
        show("drawing");
        return later(data.nextPollMs || 1000);
      case "WAITING":
        render(data);
        return later(data.nextPollMs || 1000);
      case "ACTIVE":
        // Admitted to a sale sold out meanwhile: the booking page has nothing to
        // sell, so stay here and keep asking (a cancellation brings seats back).
        if (data.soldOut) { soldOut(data); return later(data.nextPollMs || 2000); }
        show("active");
        announceTurn(() => window.location.assign(cfg.bookUrl));
        return;
      case "BOOKED":
        return booked(data.reservationId);
      case "NOT_SAVED": // a pending booking was not saved: book again while the window lasts
        if (data.activeExpiresAt && !data.soldOut) { show("active"); window.location.assign(cfg.bookUrl); return; }
        return ended(data);
      case "EXPIRED":
        return ended(data);
      case "UNCLAIMED": // admitted while away, and the claim time ran out
        if (!data.soldOut) { show("unclaimed"); return; }
        return ended(data);
      default: // NOT_FOUND: the line forgot us (left, or a restore); take a new place
        return enter(true);
    }
  }

  // --- Notify me (queue_app/notify.py) ----------------------------------------------
  // An email when the turn is near, asked for with the form; and, once the person
  // presses "Alert me", a notification and a short sound when the turn comes. The
  // browser is asked nothing before the person asks for it.
  const N = cfg.notify;
  let alerts = false; // "Alert me" was pressed on this page
  let audio = null; // made on that press: a page may only sound after a gesture

  // A mail's signed link (?place=): the server checked it and handed its token over,
  // kept here as the page keeps its own. The link is the place: it is taken off the
  // address bar, out of the history and of addresses copied from there.
  function restorePlace() {
    if (N.place) {
      keepToken(N.place);
      try { localStorage.removeItem(firstRankKey); } catch (e) { /* ignore */ }
    }
    if (N.badLink) {
      $("place-link").textContent = N.strings.badLink;
      $("place-link").hidden = false;
    }
    if (N.place || N.badLink) {
      const url = new URL(window.location.href);
      url.searchParams.delete(N.parameter);
      history.replaceState(history.state, "", url.pathname + url.search + url.hash);
    }
  }

  function notifyRefused(answer) {
    const error = answer.payload && answer.payload.error;
    const code = error ? error.code : "";
    if (code === "VALIDATION_ERROR") return N.strings.badEmail;
    if (code === "NOT_WAITING") return N.strings.notWaiting;
    if (code === "RATE_LIMIT") return N.strings.tooFast;
    return N.strings.notSaved;
  }

  $("notify-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = readToken();
    const email = $("notify-email").value.trim();
    if (!token || !email) return;
    const button = event.target.querySelector("button");
    button.disabled = true;
    let answer = null;
    try {
      answer = await call("POST", N.api, { eventId: cfg.eventId, token: token, email: email });
    } catch (e) {
      answer = null;
    } finally {
      button.disabled = false;
    }
    const ok = answer && answer.payload && answer.payload.success;
    const status = $("notify-status");
    status.classList.toggle("error", !ok);
    if (!ok) { status.textContent = answer ? notifyRefused(answer) : N.strings.notSaved; return; }
    const data = answer.payload.data;
    status.textContent = fmt(data.status === "PENDING" ? N.strings.asked : N.strings.sent, { email: data.email });
  });

  // The permission is asked for in the press itself (browsers want a gesture), and
  // the sound made ready there too; without a notification the sound still plays.
  $("alert-me").addEventListener("click", async () => {
    alerts = true;
    const Context = window.AudioContext || window.webkitAudioContext;
    if (Context && !audio) {
      try { audio = new Context(); } catch (e) { audio = null; }
    }
    if (audio && audio.state === "suspended") audio.resume().catch(() => {});
    let permission = "Notification" in window ? Notification.permission : "denied";
    if (permission === "default") {
      try { await Notification.requestPermission(); } catch (e) { /* the answer is read below */ }
      permission = Notification.permission;
    }
    $("alert-status").textContent = permission === "granted" ? N.strings.alertsOn : N.strings.soundOnly;
  });

  // Two short beeps (an oscillator: no sound file to load).
  function beep() {
    if (!audio) return;
    const start = audio.currentTime + 0.05;
    [0, 0.3].forEach((offset) => {
      const tone = audio.createOscillator();
      const gain = audio.createGain();
      tone.frequency.value = 880;
      gain.gain.setValueAtTime(0.0001, start + offset);
      gain.gain.exponentialRampToValueAtTime(0.3, start + offset + 0.02);
      gain.gain.exponentialRampToValueAtTime(0.0001, start + offset + 0.2);
      tone.connect(gain).connect(audio.destination);
      tone.start(start + offset);
      tone.stop(start + offset + 0.22);
    });
  }

  // The turn came: the alerts asked for, then `then` (to the booking page), a moment
  // later so that the sound plays out first.
  function announceTurn(then) {
    if (!alerts) return then();
    if ("Notification" in window && Notification.permission === "granted") {
      try {
        const shown = new Notification(N.strings.alertTitle, { body: N.strings.alertBody, tag: "turn-" + cfg.eventId });
        shown.addEventListener("click", () => window.focus());
      } catch (e) { /* Chrome on Android shows them from a service worker only: the sound says it */ }
    }
    beep();
    setTimeout(then, 700);
  }

  restorePlace();

  $("rejoin").addEventListener("click", () => { show("joining"); enter(true); });
  $("rejoin-unclaimed").addEventListener("click", () => { show("joining"); enter(true); });
  $("try-again").addEventListener("click", () => { status(S.joining); enter(false); });
  // A returning browser (F5) asks where it stands first: still waiting keeps its
  // place, an expired window is explained, and only an unknown token rejoins.
  if (readToken()) poll(); else enter(false);
})();
