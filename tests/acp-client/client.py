"""A contract check of paycred's ACP Delegate Payment route (`POST
/agentic_commerce/delegate_payment`) against a running paycred, with the pydantic models of
the `agentic-commerce-protocol` package (PyPI, pinned in scripts/mcp-clients). Those models
are Svix's, generated from the ACP specification: unofficial. The specification's own
OpenAPI file is not vendored in this repository.

The request is built with `DelegatePaymentRequest`; the 201 must validate as
`DelegatePaymentResponse`, and errors (a Luhn failure, a reused Idempotency-Key, a missing
one, no token) as the package's `Error`. No answer may hold the card's number or CVC.

Environment: PAYCRED_URL, PAYCRED_TOKEN (private role, project `dev`), PAYCRED_NUMBER and
PAYCRED_CVC (the card to delegate).
"""

import datetime
import json
import os
import sys
import urllib.error
import urllib.request
import uuid

from agentic_commerce_protocol import (
    Address,
    Allowance,
    DelegatePaymentRequest,
    DelegatePaymentResponse,
    Error,
    PaymentMethodCard,
    RiskSignal,
)

URL = os.environ["PAYCRED_URL"] + "/agentic_commerce/delegate_payment"
TOKEN = os.environ["PAYCRED_TOKEN"]
NUMBER = os.environ["PAYCRED_NUMBER"]
CVC = os.environ["PAYCRED_CVC"]


def request(number=NUMBER, max_amount=2000):
    expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    return DelegatePaymentRequest(
        payment_method=PaymentMethodCard(
            type="card",
            card_number_type="fpan",
            number=number,
            exp_month="11",
            exp_year="2030",
            name="Jane Doe",
            cvc=CVC,
            checks_performed=["avs", "cvv"],
            iin=number[:6],
            display_card_funding_type="credit",
            display_brand="mastercard",
            display_last4=number[-4:],
            metadata={"issuing_bank": "temp"},
        ),
        allowance=Allowance(
            reason="one_time",
            max_amount=max_amount,
            currency="usd",
            checkout_session_id="csn_01HV3P3",
            merchant_id="acme",
            expires_at=expires.isoformat().replace("+00:00", "Z"),
        ),
        billing_address=Address(
            name="Jane Doe", line_one="123 Fake St.", city="San Francisco", state="CA",
            country="US", postal_code="12345",
        ),
        risk_signals=[RiskSignal(type="card_testing", score=10, action="manual_review")],
        metadata={"campaign": "q4"},
    )


def send(body, key, token=TOKEN):
    headers = {"Content-Type": "application/json", "API-Version": "2026-04-17"}
    if key:
        headers["Idempotency-Key"] = key
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = body.model_dump_json(exclude_none=True).encode()
    req = urllib.request.Request(URL, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    if NUMBER in text or f'"{CVC}"' in text:
        sys.exit(f"a card value in the answer: {status}")
    return status, json.loads(text)


def expect_error(answer, status, code):
    got, body = answer
    if got != status:
        sys.exit(f"expected {status} {code}, got {got}: {body}")
    error = Error.model_validate(body)
    if error.code != code:
        sys.exit(f"expected code {code}: {body}")
    print(f"  {status} {error.type} {error.code} {error.param or ''}")


def main():
    key = str(uuid.uuid4())
    first = request()
    status, body = send(first, key)
    if status != 201:
        sys.exit(f"expected 201: {status} {body}")
    token = DelegatePaymentResponse.model_validate(body)
    if not token.id.startswith("vt_") or token.metadata.get("idempotency_key") != key:
        sys.exit(f"unexpected answer: {body}")
    print(f"  201 {token.id}")
    replay = send(first, key)
    if replay[0] != 201 or DelegatePaymentResponse.model_validate(replay[1]).id != token.id:
        sys.exit(f"the replay is not the first answer: {replay}")
    expect_error(send(request(max_amount=9999), key), 422, "idempotency_conflict")
    expect_error(send(request(), None), 400, "idempotency_key_required")
    bad = NUMBER[:-1] + str((int(NUMBER[-1]) + 1) % 10)
    expect_error(send(request(number=bad), str(uuid.uuid4())), 422, "invalid_card")
    expect_error(send(request(), str(uuid.uuid4()), token=None), 401, "unauthorized")
    print("acp-client: ok")


main()
