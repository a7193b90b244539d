#!/usr/bin/python3
"""An HTTP/1.1 proxy that injects failures chosen by the URL, for ferry's remote-data tests.

Command line:
    fault_proxy.py --upstream http://127.0.0.1:P --state DIR [--log PATH]
prints `ready http://127.0.0.1:PORT` once listening (also written atomically to STATE/endpoint) and
serves until SIGTERM/SIGINT or its parent's death. The log (default STATE/requests.jsonl) gets one
JSON object per request: t, conn (client connection number: same number = keep-alive reuse),
method, path, range, if_range, status (null if none was sent), fault (null if none fired), bytes
(body bytes sent), error.

From Python:
    from fault_proxy import serve
    with serve("http://127.0.0.1:P", state) as p:
        p.url, p.log, p.entries()

URLs: /<rest> is forwarded unchanged; /fault/<SPEC>/<rest> is forwarded as /<rest> unless the fault
fires. SPEC is comma-separated key=value:
    status=N          answer N with an S3-style XML error (503 SlowDown, 500 InternalError,
                      404 NoSuchKey, 403 AccessDenied) and keep the connection
    reset             close the connection with a TCP RST before any response
    cut=B             forward the headers (full Content-Length) and B body bytes, then RST
    stall=S           forward the headers, sleep S seconds, then the body; with stall_at=B the
                      sleep comes after B body bytes instead (a transfer that goes quiet)
    stall_headers=S   sleep S seconds before sending any byte (then answer normally)
    etag=V            pass through with ETag replaced by "V" (an object that changed; a client's
                      If-Range/If-Match still goes upstream unchanged, so nginx decides on it)
    times=K           the fault fires on the first K requests for this exact URL (path and query,
                      SPEC included), then they pass through; default: every request
e.g. /fault/status=503,times=2/shard-000.tar fails twice, then serves the file;
/fault/etag=v2,cut=1000,times=1/x is cut after 1000 bytes with ETag "v2", and its retry gets the
real ETag: If-Range: "v2" then brings a 200 with the whole file, If-Match: "v2" a 412 (a changed object).
Faults combine; stall_headers comes first, then status or reset, then stall/cut/etag on the body.
Request and response headers pass through unchanged (Range, If-*, ETag, 206, Content-Range) except
hop-by-hop ones; request bodies need a Content-Length (no chunked uploads).
"""
import argparse
import contextlib
import ctypes
import fcntl
import http.client
import http.server
import itertools
import json
import os
import signal
import socket
import struct
import sys
import termios
import threading
import time
import urllib.parse

from http_server import exit_on_signal, write_atomically  # tests/servers/, beside this file

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
              "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"}
S3_CODES = {400: "InvalidRequest", 403: "AccessDenied", 404: "NoSuchKey", 416: "InvalidRange",
            500: "InternalError", 503: "SlowDown"}
CHUNK = 64 * 1024


class Faults:
    """The parsed SPEC; only the keys given are set."""
    KEYS = {"status": int, "reset": None, "cut": int, "stall": float, "stall_at": int,
            "stall_headers": float, "etag": str, "times": int}

    def __init__(self, spec):
        self.spec = spec
        for item in filter(None, spec.split(",")):
            key, _, value = item.partition("=")
            if key not in self.KEYS:
                raise ValueError(f"unknown fault {key!r} (known: {', '.join(self.KEYS)})")
            setattr(self, key, True if self.KEYS[key] is None else self.KEYS[key](value))

    def get(self, key):
        return getattr(self, key, None)


class Proxy(http.server.ThreadingHTTPServer):
    daemon_threads = True       # a stalled handler must not hold up exit
    request_queue_size = 128

    def __init__(self, upstream, log_path):
        super().__init__(("127.0.0.1", 0), Handler)
        u = urllib.parse.urlsplit(upstream)
        self.upstream = (u.hostname, u.port or 80)
        self.counts, self.lock = {}, threading.Lock()
        self.conn_ids = itertools.count(1)
        self.log_path = log_path
        self.log_file = open(log_path, "a", buffering=1) if log_path else None
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def fires(self, path, faults):
        with self.lock:
            n = self.counts[path] = self.counts.get(path, 0) + 1
        return faults.get("times") is None or n <= faults.times

    def log(self, entry):
        if self.log_file:
            with self.lock:  # one whole line per request even with many threads
                self.log_file.write(json.dumps(entry) + "\n")


class Dropped(Exception):
    """The connection cannot go on (client gone, upstream short); the message goes to the log."""


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive, as long as every answer has a Content-Length
    upstream_conn = None

    def setup(self):
        super().setup()
        self.conn_id = next(self.server.conn_ids)

    def log_message(self, *args):   # the JSON log replaces the stderr chatter
        pass

    def do_GET(self):
        self.entry = {"t": round(time.time(), 6), "conn": self.conn_id, "method": self.command,
                      "path": self.path, "range": self.headers.get("Range"),
                      "if_range": self.headers.get("If-Range"), "status": None, "fault": None,
                      "bytes": 0, "error": None}
        try:
            self.proxy()
        except Dropped as e:
            self.entry["error"] = str(e)
            self.close_connection = True
        finally:
            self.server.log(self.entry)

    do_HEAD = do_POST = do_PUT = do_DELETE = do_OPTIONS = do_GET

    def proxy(self):
        # Read any request body first: an injected answer must not leave it in the keep-alive stream.
        length = int(self.headers.get("Content-Length") or 0)
        self.body = self.rfile.read(length) if length else None
        target = self.path
        if target.startswith("http://"):   # absolute form, when used as CURLOPT_PROXY
            u = urllib.parse.urlsplit(target)
            target = urllib.parse.urlunsplit(("", "", u.path or "/", u.query, ""))
        faults = None
        if target.startswith("/fault/"):
            spec, _, rest = target[len("/fault/"):].partition("/")
            target = "/" + rest
            try:
                faults = Faults(spec)
            except ValueError as e:
                return self.answer(400, "text/plain", f"fault_proxy: {e}\n".encode())
            if not self.server.fires(self.path, faults):
                faults = None
        self.entry["fault"] = faults.spec if faults else None
        f = faults.get if faults else (lambda key: None)

        if f("stall_headers"):
            time.sleep(f("stall_headers"))
        if f("reset"):
            return self.reset()
        if f("status"):
            code = f("status")
            xml = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>'
                   f'{S3_CODES.get(code, "InjectedFault")}</Code><Message>injected by fault_proxy'
                   f'</Message><Resource>{target}</Resource>'
                   f'<RequestId>{self.conn_id}</RequestId></Error>\n')
            return self.answer(code, "application/xml", xml.encode())

        resp = self.forward(target)
        if resp is None:
            return self.answer(502, "text/plain", b"fault_proxy: upstream unreachable\n")
        headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP]
        if f("etag") is not None:
            headers = [(k, v) for k, v in headers if k.lower() != "etag"]
            headers.append(("ETag", f'"{f("etag")}"'))
        length = resp.getheader("Content-Length")
        has_body = self.command != "HEAD" and resp.status not in (204, 304)
        if has_body and length is None:   # chunked upstream: buffer so we can send a length
            resp = Buffered(resp)
            headers.append(("Content-Length", str(resp.length)))
            length = resp.length
        self.send_response_only(resp.status, resp.reason)
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.entry["status"] = resp.status
        if not has_body:
            return self.flush()
        self.copy_body(resp.read, int(length), f)

    def copy_body(self, read, remaining, f):
        cut, stall, stall_at = f("cut"), f("stall"), f("stall_at") or 0
        if stall and stall_at == 0:
            self.flush()
            time.sleep(stall)
            stall = None
        while remaining > 0:
            n = min(CHUNK, remaining)
            for limit in (cut, stall_at if stall else None):
                if limit is not None and self.entry["bytes"] < limit:
                    n = min(n, limit - self.entry["bytes"])
            if cut is not None and self.entry["bytes"] >= cut:
                self.drop_upstream()   # the rest of its body is unread
                return self.reset(drain=True)
            data = read(n)
            if not data:
                raise Dropped("upstream body ended early")
            self.write(data)
            self.entry["bytes"] += len(data)
            remaining -= len(data)
            if stall and self.entry["bytes"] >= stall_at:
                self.flush()
                time.sleep(stall)
                stall = None
        self.flush()   # a body no longer than cut goes out whole

    def forward(self, target):
        """Send the request upstream on this connection's keep-alive socket; one retry on a
        fresh socket covers nginx closing an idle one."""
        drop = HOP_BY_HOP | {"host"} | {h.strip().lower() for h in
                                       self.headers.get("Connection", "").split(",")}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in drop}
        headers["Host"] = "%s:%d" % self.server.upstream
        for attempt in range(2):
            if self.upstream_conn is None:
                self.upstream_conn = http.client.HTTPConnection(*self.server.upstream, timeout=60)
            try:
                self.upstream_conn.request(self.command, target, self.body, headers)
                return self.upstream_conn.getresponse()
            except (OSError, http.client.HTTPException):
                self.drop_upstream()
        return None

    def drop_upstream(self):
        if self.upstream_conn is not None:
            self.upstream_conn.close()
            self.upstream_conn = None

    def answer(self, code, ctype, body):
        self.send_response_only(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Date", self.date_time_string())
        self.end_headers()
        if self.command != "HEAD":
            self.write(body)
            self.entry["bytes"] = len(body)
        self.entry["status"] = code
        self.flush()

    def reset(self, drain=False):
        """Abort with RST: SO_LINGER 0, then close the descriptor itself (rfile/wfile hold
        references, so socket.close() alone would not close it)."""
        self.close_connection = True
        sock = self.connection
        # An RST discards whatever the client has not yet acknowledged; wait (up to 5 s) until
        # it has, so that a cut delivers exactly the bytes promised even to a slow reader.
        deadline = time.monotonic() + 5
        while drain and time.monotonic() < deadline:
            unsent = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
            if struct.unpack("i", unsent)[0] == 0:
                break
            time.sleep(0.005)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        os.close(sock.detach())

    def write(self, data):
        try:
            self.wfile.write(data)
        except OSError as e:
            raise Dropped(f"client gone: {e}") from None

    def flush(self):
        try:
            self.wfile.flush()
        except OSError as e:
            raise Dropped(f"client gone: {e}") from None

    def end_headers(self):
        try:
            super().end_headers()
        except OSError as e:
            raise Dropped(f"client gone: {e}") from None

    def finish(self):
        self.drop_upstream()
        with contextlib.suppress(OSError, ValueError):
            super().finish()


class Buffered:
    """A whole upstream response read into memory, read()able like the original."""
    def __init__(self, resp):
        self.status, self.reason = resp.status, resp.reason
        self.body = resp.read()
        self.length, self.pos = len(self.body), 0

    def read(self, n):
        self.pos += n
        return self.body[self.pos - n:self.pos]


class Running:
    def __init__(self, server):
        self.url, self.log = server.url, server.log_path

    def entries(self):
        """The log so far, as a list of dicts."""
        with open(self.log) as f:
            return [json.loads(line) for line in f]


@contextlib.contextmanager
def serve(upstream, state=None, log=None):
    """Run the proxy in a background thread of this process."""
    if state:
        os.makedirs(state, exist_ok=True)
        log = log or os.path.join(state, "requests.jsonl")
    server = Proxy(upstream, log)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        if state:
            write_atomically(os.path.join(state, "endpoint"), f"ready {server.url}\n")
        yield Running(server)
    finally:
        server.shutdown()
        server.server_close()
        if server.log_file:
            server.log_file.close()




def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--state", required=True, help="folder for the endpoint file and the log")
    ap.add_argument("--log", help="request log, one JSON object a line "
                                  "(default STATE/requests.jsonl)")
    args = ap.parse_args()
    parent = os.getppid()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, exit_on_signal)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)   # PR_SET_PDEATHSIG: go when the parent goes
    if os.getppid() != parent:
        return 1
    with serve(args.upstream, args.state, args.log) as p:
        print(f"ready {p.url}", flush=True)
        while True:
            signal.pause()


if __name__ == "__main__":
    sys.exit(main())
