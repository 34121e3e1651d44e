"""Writes the bench bodies: JSON with card templates of payment method argv[1] into argv[2]."""
import json, sys

pm, out = sys.argv[1], sys.argv[2]
fields = ["number", "expirationMonth", "expirationYear", "cvc"]
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


for name, size, templates in [("1k", 1024, 4), ("64k", 64 * 1024, 4), ("1m", 1024 * 1024, 4), ("100m", 100 * 1024 * 1024, 100)]:
    text = body(size, templates)
    if name == "64k":
        text = text[: 64 * 1024]  # stay at or under the 64 KiB preflight limit
        text = text[: text.rindex(",")] + "]}"
    with open(f"{out}/body-{name}.json", "w") as f:
        f.write(text)
