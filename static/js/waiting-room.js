// The waiting room: join on the first visit, keep the token (localStorage and a
// cookie, so F5 keeps the place), poll at the server's nextPollMs, and move to the
// booking page when admitted.
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

  function show(state) {
    room.dataset.state = state;
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

  function keepToken(token) {
    try { localStorage.setItem(storeKey, token); } catch (e) { /* cookie still keeps it */ }
    document.cookie = cfg.cookie + "=" + encodeURIComponent(token) +
      "; path=/; max-age=86400; samesite=lax";
  }

  // A token this service did not issue (made up, or from before a key rotation's
  // grace period ended): forget it and take a new place.
  function forgetToken() {
    try { localStorage.removeItem(storeKey); } catch (e) { /* ignore */ }
    document.cookie = cfg.cookie + "=; path=/; max-age=0; samesite=lax";
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
    showError(error.message);
    return true;
  }

  function booked(reservationId) {
    $("confirmation-link").href = cfg.confirmationUrl.replace("RID", reservationId);
    show("booked");
  }

  async function enter(rejoin) {
    const token = readToken();
    let answer;
    try {
      answer = token
        ? await call("POST", cfg.api.rejoin, { token: token, eventId: cfg.eventId })
        : await call("POST", cfg.api.join, { eventId: cfg.eventId });
    } catch (e) {
      return retry();
    }
    if (answer.status !== 200) {
      if (answer.status >= 500) return retry();
      if (token && isForeign(answer)) { forgetToken(); return enter(rejoin); }
      return refusal(answer);
    }
    const data = answer.payload.data;
    keepToken(data.token);
    if (rejoin || !data.rejoined) {
      try { localStorage.removeItem(firstRankKey); } catch (e) { /* ignore */ }
    }
    poll();
  }

  function render(data) {
    showError("");
    $("paused").hidden = data.eventStatus !== "PAUSED";
    if (data.soldOut) { show("soldout"); return; }
    show("waiting");
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

  async function poll() {
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
    failures = 0;
    const data = answer.payload.data;
    switch (data.status) {
      case "WAITING":
        render(data);
        return later(data.nextPollMs || 1000);
      case "ACTIVE":
        show("active");
        window.location.assign(cfg.bookUrl);
        return;
      case "BOOKED":
        return booked(data.reservationId);
      case "EXPIRED":
        show(data.eventStatus === "CLOSED" ? "closed" : "expired");
        return;
      default: // NOT_FOUND: the line forgot us (left, or a restore); take a new place
        return enter(true);
    }
  }

  $("rejoin").addEventListener("click", () => { show("joining"); enter(true); });
  // A returning browser (F5) asks where it stands first: still waiting keeps its
  // place, an expired window is explained, and only an unknown token rejoins.
  if (readToken()) poll(); else enter(false);
})();
