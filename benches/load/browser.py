"""benches/load/browser.sh's parser and table.

  browser.py oha NAME TICKS      oha's JSON on stdin -> one row (deployed.py's format)
  browser.py report FILE         the table and the ratios; exits 1 if any request failed

A request answered other than 2xx is an error (the target answers 422 to a body without the
real card values); the requests oha cuts off at the end of its run are not.
"""
import os, statistics, sys

from deployed import load, row

CASES = [
    ("browser-1k", "paycred browser proxy: CONNECT + intercepted TLS, stand-ins swapped"),
    ("reverse-1k", "paycred TLS listener: /proxy, `pan` templates substituted"),
    ("reverse-use-1k", "the same, `virtual-card` templates: an intent's use counted"),
    ("mitmproxy-1k", "mitmproxy + benches/load/mitm_swap.py, stand-ins swapped"),
    ("browser-newconn-1k", "browser proxy, a new connection (CONNECT + handshake) a request, no stand-ins"),
    ("reverse-newconn-1k", "TLS listener, a new connection (handshake) a request"),
]
RATIOS = [
    ("browser / reverse proxy, keep-alive", "browser-1k", "reverse-1k", 0.8),
    ("browser / reverse proxy counting a use", "browser-1k", "reverse-use-1k", None),
    ("browser / mitmproxy, keep-alive", "browser-1k", "mitmproxy-1k", 5.0),
    ("browser / TLS listener, new connections", "browser-newconn-1k", "reverse-newconn-1k", 0.9),
]


def oha(name, ticks):
    import json
    doc = json.load(sys.stdin)
    codes = {int(k): v for k, v in doc.get("statusCodeDistribution", {}).items()}
    ok = sum(v for k, v in codes.items() if 200 <= k < 300)
    errors = sum(v for k, v in codes.items() if not 200 <= k < 300)
    for what, n in doc.get("errorDistribution", {}).items():
        if "deadline" in what:
            continue
        sys.stderr.write(f"{name}: {n} x {what}\n")
        errors += n
    secs = doc["summary"]["total"] or 1
    pct = doc.get("latencyPercentiles", {})
    ms = lambda q: (pct.get(q) or float("nan")) * 1000
    row(name, f"{ok / secs:.1f}", f"{ms('p50'):.2f}", f"{ms('p99'):.2f}", ok + errors, errors, ticks)


def report(path):
    rows = load(path)
    tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
    print()
    print("| case | req/s | p50 / p99 ms | CPU us/req of the proxy | errors |")
    print("|---|---|---|---|---|")
    failed = 0
    for case, what in CASES:
        rs = rows.get(case)
        if not rs:
            continue
        reqs, ticks = sum(r[3] for r in rs), sum(r[5] for r in rs)
        errors = sum(r[4] + (r[3] == 0) for r in rs)
        failed += errors
        med = lambda i: statistics.median(r[i] for r in rs)
        cpu = f"{ticks * tick_us / reqs:.0f}" if reqs and ticks else "-"
        print(f"| {case} ({what}) | {med(0):.0f} | {med(1):.2f} / {med(2):.2f} | {cpu} | {errors} |")
    print()
    print("| ratio (median of per-repetition ratios of req/s) | measured | target |")
    print("|---|---|---|")
    for what, a, b, target in RATIOS:
        xs, ys = rows.get(a, []), rows.get(b, [])
        ratios = [x[0] / y[0] for x, y in zip(xs, ys) if y[0]]
        got = f"{statistics.median(ratios):.2f}x" if ratios else "-"
        print(f"| {what} | {got} | {f'>= {target}x' if target else '-'} |")
    if failed:
        print(f"FAILED: {failed} requests failed (or repetitions completed none)")
        sys.exit(1)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(__file__))
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "oha":
        oha(args[0], int(args[1]))
    elif cmd == "report":
        report(args[0])
    else:
        sys.exit(f"unknown command {cmd}")
