// The checkout page with Toss Payments: its payment widget (loaded from Toss) shows
// the methods and the agreement; Pay asks Toss to authorise the amount, and Toss
// sends the buyer back to this page with paymentKey, orderId and amount, where the
// server confirms the payment only while it still holds the seats.
(async function () {
  "use strict";
  const cfg = JSON.parse(document.getElementById("toss-widget").textContent);
  const pay = document.getElementById("toss-pay");
  const widgets = window.TossPayments(cfg.clientKey).widgets({ customerKey: window.TossPayments.ANONYMOUS });
  await widgets.setAmount({ currency: "KRW", value: cfg.amount });
  await Promise.all([
    widgets.renderPaymentMethods({ selector: "#payment-method", variantKey: "DEFAULT" }),
    widgets.renderAgreement({ selector: "#agreement", variantKey: "AGREEMENT" }),
  ]);
  pay.disabled = false;
  pay.addEventListener("click", () =>
    widgets.requestPayment({
      orderId: cfg.orderId,
      orderName: cfg.orderName,
      successUrl: cfg.successUrl,
      failUrl: cfg.failUrl,
      customerEmail: cfg.customerEmail || undefined,
      customerName: cfg.customerName || undefined,
    }));
})();
