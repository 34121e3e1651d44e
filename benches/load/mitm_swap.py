"""mitmproxy addon for benches/load/browser.sh: in each form-encoded request body, the stand-in
card number becomes the real one under any field, the stand-in CVC under a CVC field only
(the last bracketed segment of its name), whole values only: paycred's browser swap for forms.

  mitmdump -s benches/load/mitm_swap.py --set swap=STAND_IN_NUMBER:REAL_NUMBER:STAND_IN_CVC:REAL_CVC
"""
from mitmproxy import ctx, http

CVC_NAMES = {"cvc", "cvv", "cvc2", "cvv2", "cvd", "cvn", "csc", "securitycode"}


class Swap:
    def load(self, loader):
        loader.add_option("swap", str, "", "STAND_IN_NUMBER:REAL_NUMBER:STAND_IN_CVC:REAL_CVC")

    def request(self, flow: http.HTTPFlow) -> None:
        number, real_number, cvc, real_cvc = ctx.options.swap.split(":")
        if "application/x-www-form-urlencoded" not in flow.request.headers.get("content-type", ""):
            return
        fields, swapped = [], False
        for name, value in flow.request.urlencoded_form.items(multi=True):
            last = name.rstrip("]").rsplit("[", 1)[-1].lower().replace("_", "").replace("-", "")
            if value == number:
                value, swapped = real_number, True
            elif value == cvc and last in CVC_NAMES:
                value, swapped = real_cvc, True
            fields.append((name, value))
        if swapped:
            flow.request.urlencoded_form = fields


addons = [Swap()]
