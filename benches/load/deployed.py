"""benches/load/deployed.sh's parsers and table.

  deployed.py h2load NAME TICKS          h2load's output on stdin -> one TSV row
  deployed.py stime NAME TICKS           the outputs of parallel `openssl s_time` and their
                                         wall time ("seconds S") on stdin -> one row
  deployed.py oha NAME TICKS WARMUP      oha's CSV on stdin -> one row
  deployed.py max FILE CASE              paycred's median req/s of CASE in FILE
  deployed.py report FILE                the tables; exits 1 if any request failed

A row is parse_wrk.py's: name ("CASE PROXY"), req/s, p50 ms, p99 ms, requests, errors, CPU
ticks of the measured process, 0.
"""
import os, re, statistics, sys
from collections import defaultdict

PROXIES = ["paycred", "pingora", "nginx"]


def row(name, rps, p50, p99, reqs, errors, ticks):
    print("\t".join(map(str, [name, rps, p50, p99, reqs, errors, ticks, 0])))


def h2load(name, ticks):
    text = sys.stdin.read()
    rps = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", text)
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout", text)
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text)
    if not (rps and m and codes):
        sys.stderr.write(text)
        row(name, 0, "nan", "nan", 0, 1, ticks)
        return
    done, failed, errored, timeout = (int(m.group(i)) for i in (3, 5, 6, 7))
    errors = failed + errored + timeout + sum(int(codes.group(i)) for i in (2, 3, 4))
    # h2load gives no percentiles; the fixed-rate rows (oha) have them.
    row(name, rps.group(1), "nan", "nan", done, errors, ticks)


def stime(name, ticks):
    """Every s_time prints one character per connection ('r' resumed, '*' full handshake)
    and "N connections in ..."; in a `resumed` case, a connection not resumed (but each
    process's first) counts as an error."""
    text = sys.stdin.read()
    seconds = float(re.search(r"^seconds (\S+)", text, re.M).group(1))
    conns = sum(int(n) for n in re.findall(r"^(\d+) connections in [\d.]+s", text, re.M))
    starts = len(re.findall(r"^starting$", text, re.M))
    marks = "".join(re.findall(r"^([r*]+)$", text, re.M))
    errors = len(re.findall(r"error", text, re.I))
    if "resumed" in name:
        errors += max(0, marks.count("*") - starts)
    if conns == 0:
        errors += 1
    row(name, conns / seconds, "nan", "nan", conns, errors, ticks)


def oha(name, ticks, warmup):
    """oha's CSV (one line per completed request: start in seconds from the run's start,
    timed from when it was due; duration; status). The first `warmup` seconds are left out:
    they hold the connections' setup (a TLS handshake each) and the backlog it leaves.
    oha lists completed requests only: a failed connection shows in the throughput cases."""
    lines = sys.stdin.read().splitlines()
    done = []
    errors, last = 0, warmup
    for line in lines[1:] if lines and lines[0].startswith("request-start") else []:
        start, *_, duration, _, status = line.split(",")
        if float(start) < warmup:
            continue
        last = max(last, float(start))
        done.append(float(duration) * 1000)
        errors += not status.startswith("2")
    if not done:
        sys.stderr.write("\n".join(lines[:20]) + "\n")
        row(name, 0, "nan", "nan", 0, 1, ticks)
        return
    rate = len(done) / max(1e-3, last - warmup)
    done.sort()
    at = lambda q: done[min(len(done) - 1, int(q * len(done)))]
    row(name, f"{rate:.1f}", at(0.5), at(0.99), len(done), errors, ticks)


def load(path):
    rows = defaultdict(list)
    for line in open(path):
        name, rps, p50, p99, reqs, errors, ticks, _ = line.rstrip("\n").split("\t")
        rows[name].append((float(rps), float(p50), float(p99), int(reqs), int(errors), int(ticks)))
    return rows


def paired(rows, case, base):
    """Median of the per-repetition ratios paycred / base: of req/s, or for a handshake case
    (whose client, not the proxy, sets the pace) of requests per CPU second of the proxy."""
    a, b = rows.get(f"{case} paycred"), rows.get(f"{case} {base}")
    if not a or not b or len(a) != len(b):
        return "-"
    if case.startswith("handshake"):
        pairs = [(x[3] / x[5], y[3] / y[5]) for x, y in zip(a, b) if x[5] and y[5]]
    else:
        pairs = [(x[0], y[0]) for x, y in zip(a, b)]
    ratios = [x / y for x, y in pairs if y]
    return f"{statistics.median(ratios):.2f}x" if ratios else "-"


def report(path):
    rows = load(path)
    tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
    cases = list(dict.fromkeys(n.rpartition(" ")[0] for n in rows))
    # A repetition that completed no request failed too.
    failed = sum(r[4] + (r[3] == 0) for rs in rows.values() for r in rs)
    fmt = lambda v, spec: "-" if v != v else format(v, spec)
    print()
    print("| case | paycred req/s | pingora req/s | nginx req/s | paycred / pingora | paycred / nginx"
          " | CPU us/req paycred, pingora, nginx | p50 / p99 ms paycred (wrk) | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in (c for c in cases if "@" not in c):
        med, cpu = [], []
        for p in PROXIES:
            rs = rows.get(f"{case} {p}", [])
            med.append(f"{statistics.median(r[0] for r in rs):.0f}" if rs else "-")
            reqs, ticks = sum(r[3] for r in rs), sum(r[5] for r in rs)
            cpu.append(f"{ticks * tick_us / reqs:.0f}" if reqs and ticks else "-")
        pc = rows.get(f"{case} paycred", [])
        lat = (f"{fmt(statistics.median(r[1] for r in pc), '.2f')} / {fmt(statistics.median(r[2] for r in pc), '.2f')}"
               if pc else "-")
        errors = sum(r[4] for p in PROXIES for r in rows.get(f"{case} {p}", []))
        print(f"| {case} | {' | '.join(med)} | {paired(rows, case, 'pingora')} | {paired(rows, case, 'nginx')}"
              f" | {', '.join(cpu)} | {lat} | {errors} |")
    fixed = [c for c in cases if "@" in c]
    if fixed:
        print()
        print("| case @ share of paycred's maximum = req/s (oha, latency corrected) | p50 / p99 ms paycred"
              " | p50 / p99 ms pingora | p50 / p99 ms nginx | errors |")
        print("|---|---|---|---|---|")
        for case in fixed:
            asked, cells = float(case.rpartition("= ")[2]), []
            for p in PROXIES:
                rs = rows.get(f"{case} {p}", [])
                cell = (f"{fmt(statistics.median(r[1] for r in rs), '.2f')} / {fmt(statistics.median(r[2] for r in rs), '.2f')}"
                        if rs else "-")
                got = statistics.median(r[0] for r in rs) if rs else 0
                # A proxy slower than the rate asked falls behind: its latencies grow with the run.
                cells.append(cell + (f" (behind: {got:.0f}/s)" if got < 0.95 * asked else ""))
            errors = sum(r[4] for p in PROXIES for r in rows.get(f"{case} {p}", []))
            print(f"| {case} | {' | '.join(cells)} | {errors} |")
    if failed:
        bad = sorted({n for n, rs in rows.items() for r in rs if r[4] or not r[3]})
        print(f"FAILED: {failed} requests failed (or repetitions completed none): {', '.join(bad)}")
        sys.exit(1)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "h2load":
        h2load(args[0], int(args[1]))
    elif cmd == "stime":
        stime(args[0], int(args[1]))
    elif cmd == "oha":
        oha(args[0], int(args[1]), float(args[2]))
    elif cmd == "max":
        rs = load(args[0]).get(f"{args[1]} paycred")
        print(f"{statistics.median(r[0] for r in rs):.0f}" if rs else 0)
    elif cmd == "report":
        report(args[0])
    else:
        sys.exit(f"unknown command {cmd}")
