"""Instructions (valgrind Ir) and syscalls (strace -c) per request, for paycred and the
pingora pass-through.

Instructions: each program runs under callgrind with counting off; after a warm-up of W
requests it is switched on, N requests are sent, and the counts are dumped before the
program is stopped. So the window holds the N requests and whatever else ran meanwhile (the
audit writer, timers), and neither start-up nor shutdown. (`--cachegrind` also prints the
difference of two whole cachegrind runs with W and W+N requests, which does not cancel
start-up: start-up under valgrind varies, among it a spin in sled's lazy statics of 7 to 13
million instructions a run, and four runs of one build spread 7.4k a request.)

Syscalls: each program runs twice under strace, with W and W+N requests; the difference
divided by N removes start-up and shutdown."""
import argparse, glob, json, os, re, signal, socket, subprocess, time, urllib.request

a = argparse.ArgumentParser()
for flag in ["work", "paycred", "config", "passthrough", "key", "bodies"]:
    a.add_argument("--" + flag, required=True)
for flag in ["requests", "paycred-port", "passthrough-port", "upstream-port"]:
    a.add_argument("--" + flag, type=int, required=True)
a.add_argument("--body", default="1k", choices=["1k", "64k", "1m"], help="which bench body to send")
a.add_argument("--cachegrind", action="store_true", help="also the difference of two cachegrind runs (W, W+N)")
args = a.parse_args()
WARM = 100


def wait_port(port, seconds=60):
    end = time.time() + seconds
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"port {port} did not open")


def token():
    return subprocess.check_output([args.paycred, "jwt", "--key", args.key, "--kid", "k1", "--project", "bench",
                                    "--sub", "bench", "--role", "private", "--ttl", "30m"], text=True).strip()


def send(port, body, count, tok):
    """`count` POSTs on one keep-alive connection; every answer must be 200."""
    target = f"http://127.0.0.1:{args.upstream_port}/charge"
    head = (f"POST /projects/bench/proxy HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {tok}\r\n"
            f"Svc-Target-URL: {target}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    s = socket.create_connection(("127.0.0.1", port))
    f = s.makefile("rb")
    for _ in range(count):
        s.sendall(head + body)
        status = f.readline()
        if b" 200 " not in status:
            raise SystemExit(f"port {port}: {status!r}")
        length = 0
        while True:
            line = f.readline()
            if line in (b"\r\n", b""):
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        f.read(length)
    s.close()


def control(pid, *command):
    """`callgrind_control` on `pid`; it exits 0 also when it found no such run, so its answer
    is checked."""
    done = subprocess.run(["callgrind_control", *command, str(pid)], capture_output=True, text=True)
    said = done.stdout + done.stderr
    if done.returncode != 0 or "not detected" in said or "No active callgrind" in said:
        raise SystemExit(f"instructions: callgrind_control {' '.join(command)} {pid}: {said.strip()}")


def run(name, port, cmd, wrapper, count, tok):
    data = os.path.join(args.work, "data")
    subprocess.run(["rm", "-rf", data])
    p = subprocess.Popen(wrapper + cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=dict(os.environ, RUST_LOG=os.environ.get("LOG", "error")))
    try:
        wait_port(port)
        body_file = os.path.join(args.work, f"body-{args.body}.json")
        if name == "paycred":
            req = urllib.request.Request(f"http://127.0.0.1:{port}/projects/bench/payment-methods", method="POST",
                data=json.dumps({"entityId": "bench", "card": {"number": "4242424242424242", "expirationMonth": "12",
                                 "expirationYear": "2034", "cvc": "123"}}).encode(),
                headers={"Authorization": "Bearer " + tok, "Content-Type": "application/json"})
            pm = json.load(urllib.request.urlopen(req))["id"]
            subprocess.check_call(["python3", args.bodies, pm, args.work])
        body = open(body_file, "rb").read()
        if "--tool=callgrind" in wrapper:
            # Count the steady state only: warm up with counting off, switch it on, and dump
            # the counts before the shutdown.
            send(port, body, WARM, tok)
            control(p.pid, "-i", "on")
            send(port, body, count, tok)
            control(p.pid, "-d")
        else:
            send(port, body, count, tok)
    finally:
        # strace runs the program as its child: stop the program, not strace.
        victims = [p.pid]
        if wrapper[0] == "strace":
            kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
            victims = [int(k) for k in kids] or victims
        for v in victims:
            os.kill(v, signal.SIGINT)
        p.wait(timeout=120)


def callgrind(key, port, cmd, count, tok):
    """The window's instructions (see the top): all threads', and the request path's (every
    task the runtime ran, inclusive: without the audit writer's thread, so it does not depend
    on how requests share the writer's batches)."""
    out = os.path.join(args.work, f"callgrind.{key}")
    run(key, port, cmd, ["valgrind", "--tool=callgrind", "--fair-sched=yes", "--instr-atstart=no",
                         f"--callgrind-out-file={out}"], count, tok)
    # The dump is the file's first part (X.1); the part written at exit (X, the shutdown) is
    # dropped.
    window = out + ".1"
    if not os.path.exists(window):
        raise SystemExit(f"instructions: callgrind wrote no dump of the window for {key}")
    for part in glob.glob(out + "*"):
        if part != window:
            os.remove(part)
    os.rename(window, out)
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", out], capture_output=True, text=True).stdout
    total = re.search(r"^\s*([\d,]+) .*PROGRAM TOTALS", text, re.M)
    path = re.search(r"^\s*([\d,]+) .*worker::Context::run_task", text, re.M)
    if not (total and path):
        raise SystemExit(f"instructions: no totals or no tokio worker task (Context::run_task) in the {key} profile")
    return int(total.group(1).replace(",", "")), int(path.group(1).replace(",", ""))


def cachegrind(key, port, cmd, count, tok):
    out = os.path.join(args.work, f"cg.{key}.{count}")
    run(key, port, cmd, ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--fair-sched=yes",
                         f"--cachegrind-out-file={out}"], count, tok)
    return int(re.search(r"^summary:\s+(\d+)", open(out).read(), re.M).group(1))


def syscalls(name, port, cmd, count, tok):
    out = os.path.join(args.work, f"st.{name}.{count}")
    run(name, port, cmd, ["strace", "-f", "-c", "-o", out], count, tok)
    m = re.search(r"^\S*\s*100\.00\s+\S+\s+\S+\s+(\d+)", open(out).read(), re.M)
    return int(m.group(1)) if m else 0


tok = token()
targets = {
    "paycred": (args.paycred_port, [args.paycred, "serve", "-c", args.config]),
    "pingora pass-through": (args.passthrough_port, [args.passthrough, f"127.0.0.1:{args.passthrough_port}",
                                                     f"127.0.0.1:{args.upstream_port}", "1"]),
}
n = args.requests
rows = []
for name, (port, cmd) in targets.items():
    key = "paycred" if name == "paycred" else "pt"
    total, path = callgrind(key, port, cmd, n, tok)
    sc = (syscalls(key, port, cmd, WARM + n, tok) - syscalls(key, port, cmd, WARM, tok)) / n
    cg = (cachegrind(key, port, cmd, WARM + n, tok) - cachegrind(key, port, cmd, WARM, tok)) / n if args.cachegrind else None
    rows.append((name, total / n, path / n, sc, cg))
base = rows[-1]
extra = ("", "")
if args.cachegrind:
    extra = (" cachegrind difference (start-up noise, see the top) |", "---|")
print("| program | instructions / request | of which the request path | syscalls / request | instructions vs pass-through | request path vs pass-through |" + extra[0])
print("|---|---|---|---|---|---|" + extra[1])
for name, ir, path, sc, cg in rows:
    col = f" {cg:,.0f} ({cg / base[4]:.2f}x) |" if cg is not None else ""
    print(f"| {name} | {ir:,.0f} | {path:,.0f} | {sc:.1f} | {ir / base[1]:.2f}x | {path / base[2]:.2f}x |{col}")
