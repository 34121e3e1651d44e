"""A target for the proxy tests that parses what it receives with a real parser.

Listens on 127.0.0.1 on a free port (printed on the first line of stdout) and answers every
POST with JSON: the body as received (`raw`), and its parse: `form` (urllib.parse.parse_qs,
strict) for a form, `xml` (xml.etree, every element's path and text, every attribute) for
XML, or `error` when the parser refused it. Chunked bodies are read too. Stops when stdin
closes, so that it never outlives the test that started it.
"""

import json
import sys
import threading
import urllib.parse
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def read_chunked(rfile):
    body = b""
    while True:
        size = int(rfile.readline().split(b";")[0].strip(), 16)
        if size == 0:
            while rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return body
        body += rfile.read(size)
        rfile.readline()


def xml_items(root):
    items = []

    def walk(el, path):
        tag = el.tag.split("}")[-1]
        here = path + "/" + tag
        for name, value in el.attrib.items():
            items.append([here + "/@" + name.split("}")[-1], value])
        if el.text and el.text.strip():
            items.append([here, el.text])
        for child in el:
            walk(child, here)

    walk(root, "")
    return items


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = read_chunked(self.rfile)
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        answer = {"raw": body.decode("utf-8", "replace")}
        try:
            if "xml" in self.headers.get("Content-Type", ""):
                answer["xml"] = xml_items(ET.fromstring(body))
            else:
                answer["form"] = urllib.parse.parse_qs(
                    body.decode("utf-8"), keep_blank_values=True, strict_parsing=True
                )
        except Exception as e:  # the test reads the refusal
            answer["error"] = str(e)
        out = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
threading.Thread(target=server.serve_forever, daemon=True).start()
sys.stdin.read()
