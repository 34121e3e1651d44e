// The demo's page script. `session` stands in for the merchant's backend: the private token is
// used only for the two backend calls (create the purchase intent, read the credential).
import { Paycred } from "/demo/paycred.js";

const $ = (id) => document.getElementById(id);
const step = (text) => {
  const li = document.createElement("li");
  li.textContent = text;
  $("steps").append(li);
  return { done: (extra = "") => { li.classList.add("done"); li.textContent = text + extra; } };
};

async function backend(session, method, path, body) {
  const resp = await fetch(path, {
    method,
    headers: { Authorization: `Bearer ${session.privateToken}`, "Content-Type": "application/json" },
    body: body ? JSON.stringify(body) : undefined,
  });
  const json = await resp.json();
  if (!resp.ok) throw Object.assign(new Error(json.error?.message || resp.status), { type: json.error?.type });
  return json;
}

const session = await (await fetch("/demo/session")).json();
const paycred = new Paycred({ baseUrl: location.origin, jwt: session.publicToken });
window.paycred = paycred; // for the browser tests
window.demoSession = { projectId: session.projectId, entityId: session.entityId };
$("pay").disabled = false;
$("passkey").disabled = false;

$("passkey").addEventListener("click", async () => {
  $("passkey").disabled = true;
  $("error").textContent = "";
  try {
    const key = await paycred.registerPasskey(session.projectId, { name: "Demo device" });
    $("passkey-status").textContent = `Verification: passkey (${key.id} registered)`;
    $("passkey-status").dataset.passkey = key.id;
  } catch (e) {
    $("error").textContent = `Passkey: ${e.type || "error"}: ${e.message}`;
    $("passkey").disabled = false;
  }
});

$("card-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  $("pay").disabled = true;
  $("error").textContent = "";
  const card = {
    number: $("number").value.replace(/[\s-]/g, ""),
    expirationMonth: $("month").value.trim(),
    expirationYear: $("year").value.trim(),
    cvc: $("cvc").value.trim(),
  };
  try {
    let s = step("Encrypting the card and saving the payment method");
    const pm = await paycred.createPaymentMethod(card);
    s.done(`: ${pm.id} (${pm.card.brand} •••• ${pm.card.details.last4})`);

    s = step("Backend: creating a network-token purchase intent");
    const project = encodeURIComponent(session.projectId);
    const pi = await backend(session, "POST", `/projects/${project}/purchase-intents`, {
      entityId: session.entityId,
      credentialType: "network-token",
      paymentMethodId: pm.id,
      mandates: [{ type: "maxAmount", value: "50.00", details: { currency: "USD" } }],
    });
    s.done(`: ${pi.id}, status ${pi.status}`);

    if (pi.status === "verify") {
      const way = $("passkey-status").dataset.passkey ? "a passkey" : "a one-time code";
      s = step(`Verifying in the browser with ${way} (verifyPurchaseIntent)`);
      const verified = await paycred.verifyPurchaseIntent(session.projectId, pi.id);
      s.done(`: ${verified.status}`);
    }

    s = step("Backend: reading the credential");
    const active = await backend(session, "GET", `/projects/${project}/purchase-intents/${pi.id}`);
    s.done(`: ${active.status}`);
    const last4 = active.token.number.slice(-4);
    $("result").style.display = "block";
    $("result").textContent = `Active network token •••• ${last4}`;
    $("result").dataset.last4 = last4;
  } catch (e) {
    $("error").textContent = `Failed: ${e.type || "error"}: ${e.message}`;
    $("error").dataset.type = e.type || "error";
  } finally {
    $("pay").disabled = false;
  }
});
