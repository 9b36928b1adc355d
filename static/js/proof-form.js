// A form that must carry a solved proof of work (sign-up, while an event asks for
// one: accounts_app/proof.py). The page's challenge is solved in the background by
// the vendored ALTCHA widget, out of sight, as the waiting room does
// (static/js/waiting-room.js); the payload goes into the form's `altcha` field and
// the submit button, disabled until then, is enabled.
(function () {
  "use strict";
  const form = document.querySelector("form[data-proof]");
  if (!form) return;
  const challenge = JSON.parse(document.getElementById("proof-challenge").textContent);
  const field = form.querySelector('input[name="altcha"]');
  const button = form.querySelector('button[type="submit"]');
  const status = document.getElementById("proof-status");
  const failed = () => { status.textContent = status.dataset.failed; };
  // The widget's script did not load, or the solve never ended: say so.
  const stuck = setTimeout(failed, 30000);

  customElements.whenDefined("altcha-widget").then(() => {
    const widget = document.createElement("altcha-widget");
    widget.setAttribute("display", "invisible");
    widget.setAttribute("auto", "onload");
    widget.setAttribute("challenge", JSON.stringify(challenge));
    widget.setAttribute("configuration", JSON.stringify({
      minDuration: 0,
      humanInteractionSignature: false,
      hideFooter: true,
      hideLogo: true,
    }));
    widget.addEventListener("verified", (e) => {
      clearTimeout(stuck);
      field.value = e.detail.payload;
      widget.remove();
      status.hidden = true;
      button.disabled = false;
    });
    widget.addEventListener("statechange", (e) => {
      if (e.detail.state !== "error" && e.detail.state !== "expired") return;
      clearTimeout(stuck);
      widget.remove();
      failed();
    });
    document.getElementById("proof-widget").replaceChildren(widget);
  });
})();
