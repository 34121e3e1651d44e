"""Reads wrk --latency output on stdin; prints one TSV row: name, req/s, p50 ms, p99 ms,
requests, errors, cpu ticks of the measured process (argv[2]) and of its background threads
(argv[3], 0 when not measured)."""
import re, sys

name, ticks = sys.argv[1], int(sys.argv[2])
background = int(sys.argv[3]) if len(sys.argv) > 3 else 0
text = sys.stdin.read()


def ms(label):
    m = re.search(r"^\s*%s%%\s+([\d.]+)(us|ms|s)" % label, text, re.M)
    if not m:
        return float("nan")
    v, unit = float(m.group(1)), m.group(2)
    return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v


rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
reqs = re.search(r"(\d+) requests in", text)
errors = sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", text))
non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
errors += int(non2xx.group(1)) if non2xx else 0
print("\t".join(map(str, [name, rps.group(1) if rps else 0, ms("50"), ms("99"), reqs.group(1) if reqs else 0, errors, ticks, background])))
