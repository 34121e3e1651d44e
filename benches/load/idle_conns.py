"""The memory bench's client (benches/load/memory.sh): opens COUNT HTTP/1.1 keep-alive
connections to 127.0.0.1:PORT, sends one proxied request on each (the body in $BODY_FILE,
$TOKEN, $TARGET_URL; see post.lua), reads its answer whole, and keeps every socket open and
idle. When all are idle it writes `ok N errors E` to READY_FILE, then holds them until it is
killed (or for HOLD seconds at most).

    python3 idle_conns.py PORT COUNT READY_FILE [--tls] [--hold SECONDS] [--close]

--tls speaks TLS (the certificate is not checked: the bench's own, self-signed); --close
closes each connection after its answer (the warm-up). At most 100 connections are being
opened at once."""
import asyncio, os, ssl, sys

args = sys.argv[1:]
port, count, ready = int(args[0]), int(args[1]), args[2]
tls = "--tls" in args
close = "--close" in args
hold = float(args[args.index("--hold") + 1]) if "--hold" in args else 300.0

body = open(os.environ["BODY_FILE"], "rb").read()
request = (
    b"POST /projects/bench/proxy HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\n"
    + b"Authorization: Bearer " + os.environ["TOKEN"].encode() + b"\r\n"
    + b"Svc-Target-URL: " + os.environ["TARGET_URL"].encode() + b"\r\n"
    + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
)
context = None
if tls:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["http/1.1"])


async def read_answer(reader):
    """Reads one answer whole (Content-Length or chunked); returns its status."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    fields = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:] if l)}
    if "content-length" in fields:
        await reader.readexactly(int(fields["content-length"]))
    elif fields.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return status


async def one(gate, held, errors):
    async with gate:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, ssl=context, limit=1 << 20), 30)
            writer.write(request)
            await writer.drain()
            status = await asyncio.wait_for(read_answer(reader), 30)
            if status != 200:
                raise RuntimeError(f"status {status}")
        except Exception as e:  # one line per failure, then counted
            if errors[0] < 5:
                print(f"idle_conns: {type(e).__name__}: {e}", file=sys.stderr)
            errors[0] += 1
            return
        if close:
            writer.close()
        else:
            held.append(writer)


async def main():
    gate = asyncio.Semaphore(100)
    held, errors = [], [0]
    await asyncio.gather(*(one(gate, held, errors) for _ in range(count)))
    with open(ready + ".tmp", "w") as f:
        f.write(f"ok {len(held)} errors {errors[0]}\n")
    os.rename(ready + ".tmp", ready)
    if not close:
        await asyncio.sleep(hold)


asyncio.run(main())
