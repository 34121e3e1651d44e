// The cross-origin test page: the reference client (@basis-theory-ai/react) with a public-role
// token, `environment: "local"` (it calls http://localhost:3000). The token, project and intent
// come from the query string; the outcome of verifyPurchaseIntent is written to #result.
import React, { useState } from "react";
import { createRoot } from "react-dom/client";
import { BtAiProvider, useBtAi } from "@basis-theory-ai/react";

const q = new URLSearchParams(location.search);

function Checkout() {
  const { verifyPurchaseIntent } = useBtAi();
  const [result, setResult] = useState("");
  const verify = async () => {
    try {
      const r = await verifyPurchaseIntent(q.get("project"), q.get("intent"));
      setResult(`resolved ${JSON.stringify(r)}`);
    } catch (e) {
      setResult(`rejected ${e && e.message}`);
    }
  };
  return (
    <main>
      <h1>Shop checkout</h1>
      <button id="verify" onClick={verify}>
        Verify purchase
      </button>
      <pre id="result">{result}</pre>
    </main>
  );
}

createRoot(document.getElementById("root")).render(
  <BtAiProvider jwt={q.get("jwt")} environment="local">
    <Checkout />
  </BtAiProvider>,
);
