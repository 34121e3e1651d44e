"""Prints the bench table from the TSV rows of run.sh; exits 1 if any request failed."""
import os, statistics, sys
from collections import defaultdict

path, flushes, rss0, rss1, rss2, smoke = sys.argv[1:7]
tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
rows = defaultdict(list)
for line in open(path):
    name, rps, p50, p99, reqs, errors, ticks, background = line.rstrip("\n").split("\t")
    rows[name].append((float(rps), float(p50), float(p99), int(reqs), int(errors), int(ticks), int(background)))

print()
print("| case | req/s median | spread (min-max) | p50 ms | p99 ms | CPU us/req (of it background) | errors | ratio to pingora, to sled for a backend row, to pan for a counted row (paired median) |")
print("|---|---|---|---|---|---|---|---|")
failed = 0
for name, rs in rows.items():
    rps = [r[0] for r in rs]
    p50 = statistics.median(r[1] for r in rs)
    p99 = statistics.median(r[2] for r in rs)
    reqs = sum(r[3] for r in rs)
    errors = sum(r[4] for r in rs)
    ticks = sum(r[5] for r in rs)
    failed += errors
    # Per-thread ticks round separately from the process's: in a short run the difference
    # can come out a tick below zero.
    background = max(0, sum(r[6] for r in rs))
    cpu = f"{ticks * tick_us / reqs:.0f}" if ticks and reqs else "-"
    if background and reqs:
        cpu += f" ({background * tick_us / reqs:.0f})"
    ratio = "-"
    case, _, who = name.rpartition(" ")
    base = rows.get(f"{case} pingora") or rows.get(f"{case} sled") or rows.get(f"{case} pan")
    if base and who not in ("pingora", "sled", "pan") and len(base) == len(rs):
        ratio = f"{statistics.median(a[0] / b[0] for a, b in zip(rs, base) if b[0]):.2f}x"
    spread = f"{min(rps):.0f}-{max(rps):.0f}"
    print(f"| {name} | {statistics.median(rps):.0f} | {spread} | {p50:.2f} | {p99:.2f} | {cpu} | {errors} | {ratio} |")
for name, rs in rows.items():
    case, _, who = name.rpartition(" ")
    on = rows.get(f"{case} paycred")
    if who == "paycred-guard-off" and on and len(on) == len(rs):
        ratios = sorted(a[0] / b[0] for a, b in zip(on, rs) if b[0])
        print(f"\n{case}: response guard on (mask) / off, paired: median {statistics.median(ratios):.2f}x"
              f" (min {ratios[0]:.2f}, max {ratios[-1]:.2f})")
print()
print(f"store: {flushes}")
print(f"paycred peak RSS: {int(rss0)//1024} MiB at start; {int(rss1)//1024} MiB after a 100 MiB body with 100 templates"
      f"{' (skipped in --smoke)' if smoke == '1' else ''}; {int(rss2)//1024} MiB after 200 concurrent 64 KiB requests")
if failed:
    print(f"FAILED: {failed} requests failed")
    sys.exit(1)
