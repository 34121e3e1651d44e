"""Writes the bench bodies: JSON with card templates of payment method argv[1] into argv[2];
beside them form-encoded and SOAP (XML) bodies of 1 KiB and 64 KiB with the same 4 templates.

  bodies.py PM DIR
  bodies.py --card PM NUMBER MONTH YEAR CVC DIR
      browser.sh's: DIR/body-card-1k.txt, the 1 KiB form with these card values (a browser
      session's stand-ins), and DIR/body-card-1k-templates.txt, the same form with PM's
      templates in their place (the same bytes once substituted)
"""
import json, sys, urllib.parse

fields = ["number", "expirationMonth", "expirationYear", "cvc"]
pm, out = sys.argv[2 if sys.argv[1] == "--card" else 1], sys.argv[-1]
tpl = lambda f: "{{ paymentMethod: %s | type: 'pan' | json: '$.%s' }}" % (pm, f)


def body(size, templates):
    """A JSON object of about `size` bytes with `templates` templates spread through it."""
    card = {f: tpl(f) for f in fields}
    doc = {"amount": 1000, "currency": "USD", "card": card, "items": []}
    base = len(json.dumps(doc))
    filler = "x" * 100
    n = max(0, (size - base) // (len(json.dumps({"sku": filler})) + 1))
    extra = max(0, templates - 4)
    for i in range(n):
        v = tpl(fields[i % 4]) if extra and i % max(1, n // extra) == 0 and extra > 0 else filler
        if v != filler:
            extra -= 1
        doc["items"].append({"sku": v})
    text = json.dumps(doc, separators=(",", ":"))
    return text


def form(size, card=tpl):
    """A form as a client library writes it (Stripe-style nested keys, urlencode), about `size`
    bytes, the card's 4 fields templated (or `card(field)`); with the filler's pairs."""
    pairs = [(f"card[{f}]", card(f)) for f in fields] + [("amount", "1000"), ("currency", "usd")]
    i = 0
    while len(urllib.parse.urlencode(pairs)) < size - 120:
        pairs.append((f"metadata[order_{i}][note]", "Delivery before noon, ring twice & leave at door %d" % i))
        i += 1
    return urllib.parse.urlencode(pairs)


if sys.argv[1] == "--card":
    text = form(1024, dict(zip(fields, sys.argv[3:7])).get)
    with open(f"{out}/body-card-1k.txt", "w") as f:
        f.write(text)
    with open(f"{out}/body-card-1k-templates.txt", "w") as f:
        card = urllib.parse.urlencode([(f"card[{f}]", tpl(f)) for f in fields])
        f.write(card + "&" + text.split("&", 4)[4])
    sys.exit(0)

for name, size, templates in [("1k", 1024, 4), ("64k", 64 * 1024, 4), ("1m", 1024 * 1024, 4), ("100m", 100 * 1024 * 1024, 100)]:
    text = body(size, templates)
    if name == "64k":
        text = text[: 64 * 1024]  # stay at or under the 64 KiB preflight limit
        text = text[: text.rindex(",")] + "]}"
    with open(f"{out}/body-{name}.json", "w") as f:
        f.write(text)


def soap(size):
    """A SOAP envelope as CyberSource documents it, about `size` bytes, the card's 4 fields
    templated (in element text)."""
    names = {"number": "accountNumber", "expirationMonth": "expirationMonth",
             "expirationYear": "expirationYear", "cvc": "cvNumber"}
    card = "".join(f"<{names[f]}>{tpl(f)}</{names[f]}>" for f in fields)
    head = ('<?xml version="1.0" encoding="UTF-8"?>\n<soapenv:Envelope '
            'xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body>'
            '<requestMessage xmlns="urn:schemas-cybersource-com:transaction-data-1.219">'
            f"<merchantID>bench</merchantID><card>{card}</card>")
    tail = "</requestMessage></soapenv:Body></soapenv:Envelope>"
    items, i = [], 0
    while len(head) + sum(map(len, items)) + len(tail) < size - 130:
        items.append(f'<item id="{i}"><productName>Widget &amp; co. {i}</productName>'
                     f"<unitPrice>19.99</unitPrice><quantity>{i % 7}</quantity></item>")
        i += 1
    return head + "".join(items) + tail


# At most 64 KiB each: substituted whole before the target is contacted, as JSON's 64k.
for name, size in [("1k", 1024), ("64k", 64 * 1024)]:
    for kind, make in [("form", form), ("xml", soap)]:
        text = make(size)
        assert len(text) <= 64 * 1024, (kind, name, len(text))
        with open(f"{out}/body-{kind}-{name}.txt", "w") as f:
            f.write(text)
