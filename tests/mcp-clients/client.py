"""The official MCP Python SDK (`mcp`, pinned in scripts/mcp-clients) against a running
paycred: over Streamable HTTP with the bearer token, in both eras (the 2026-07-28 probe of
`server/discover`, and the 2025-11-25 `initialize` handshake), it lists the tools and calls
each one; no answer may hold the card's number or CVC. A client without a token is refused.

Environment: PAYCRED_URL (e.g. http://127.0.0.1:8080), PAYCRED_TOKEN (private role, project
`dev`), PAYCRED_PM (the payment method of card PAYCRED_NUMBER, cvc PAYCRED_CVC).
"""

import asyncio
import json
import os
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL = os.environ["PAYCRED_URL"]
TOKEN = os.environ["PAYCRED_TOKEN"]
PM = os.environ["PAYCRED_PM"]
SECRETS = [os.environ["PAYCRED_NUMBER"], f'"{os.environ["PAYCRED_CVC"]}"']
TOOLS = ("list_payment_methods create_purchase_intent get_purchase_intent cancel_purchase_intent "
         "pay create_browser_session").split()


def client(mode, token=TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=30)
    return Client(streamable_http_client(f"{URL}/mcp", http_client=http), mode=mode)


async def call(c, name, arguments):
    result = await c.call_tool(name, arguments)
    text = result.content[0].text
    for secret in SECRETS:
        assert secret not in text, f"{name}: a card value in {text}"
        assert secret not in json.dumps(result.structured_content or {}), name
    assert not result.is_error, f"{name}: {text}"
    print(f"  {name}: {text[:160]}")
    return result.structured_content


def template(kind, field):
    return f"{{{{ paymentMethod: {PM} | type: '{kind}' | json: '$.{field}' }}}}"


async def run(mode):
    async with client(mode) as c:
        print(f"python mcp, mode={mode}: protocol {c.protocol_version}")
        tools = (await c.list_tools()).tools
        assert [t.name for t in tools] == TOOLS, [t.name for t in tools]
        assert all(t.output_schema for t in tools)
        methods = await call(c, "list_payment_methods", {})
        assert any(m["id"] == PM for m in methods["paymentMethods"]), methods
        mandates = [{"type": "maxAmount", "value": "50.00", "details": {"currency": "USD"}}]
        vc = await call(c, "create_purchase_intent",
                        {"paymentMethodId": PM, "credentialType": "virtual-card", "mandates": mandates})
        assert vc["status"] == "active" and vc["nextAction"]["type"] == "pay", vc
        pan = await call(c, "create_purchase_intent",
                         {"paymentMethodId": PM, "credentialType": "pan", "mandates": mandates})
        assert pan["last4"] == os.environ["PAYCRED_NUMBER"][-4:], pan
        got = await call(c, "get_purchase_intent", {"id": pan["id"]})
        assert got["status"] == "active", got
        body = {f: template("virtual-card", f) for f in ("number", "cvc", "expirationMonth", "expirationYear")}
        body.update(amount="12.50", currency="USD")
        paid = await call(c, "pay", {
            "method": "POST", "url": f"{URL}/projects/dev/sandbox/authorizations",
            "headers": {"Authorization": f"Bearer {TOKEN}"}, "body": body})
        assert paid["status"] == 200 and paid["body"]["approved"] is True, paid
        session = await call(c, "create_browser_session",
                             {"purchaseIntentId": pan["id"], "allowedHosts": ["localhost"], "ttl": 600})
        assert session["proxy"]["password"], session
        canceled = await call(c, "cancel_purchase_intent", {"id": vc["id"]})
        assert canceled["status"] == "canceled", canceled
        missing = await c.call_tool("get_purchase_intent", {"id": "pi_nope"})
        assert missing.is_error and json.loads(missing.content[0].text)["error"]["type"] == "notFound"
        return c.protocol_version


async def refused():
    try:
        async with client("legacy", token=None) as c:
            await c.list_tools()
    except BaseException as e:  # the SDK raises its own error (or a group) on the 401
        print(f"python mcp, no token: refused ({type(e).__name__})")
        return
    raise AssertionError("a client without a token listed the tools")


async def main():
    versions = [await asyncio.wait_for(run(mode), 60) for mode in ("auto", "legacy")]
    assert versions == ["2026-07-28", "2025-11-25"], versions
    await asyncio.wait_for(refused(), 30)
    print("python mcp: ok")


asyncio.run(main())
