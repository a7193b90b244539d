#!/usr/bin/python3
"""Serve a folder over HTTP and HTTPS on 127.0.0.1 with Debian's nginx, for ferry's remote-data tests.

Command line:
    http_server.py --root DIR --state DIR
prints one line, once both ports accept connections,
    ready http://127.0.0.1:P https://127.0.0.1:Q CAFILE
(the same line is written atomically to STATE/endpoint), then waits. It stops nginx and exits on
SIGTERM/SIGINT, when its parent dies, and (status 1) if nginx dies. CAFILE is the CA certificate that
signed the server certificate (SAN IP:127.0.0.1, DNS:localhost): pass it to curl --cacert or to
libcurl CURLOPT_CAINFO.

From Python:
    from http_server import serve
    with serve(root, state) as s:
        s.http, s.https, s.cert      # base URLs and the CA file

Everything nginx writes (config, pid, lock, logs, temp folders, keys) lies under STATE; ROOT is only
read. STATE/access.log has one line per request with its Range header and status. Static files get
byte ranges (206, multipart for several), ETag, Last-Modified, If-Range/If-Match/If-None-Match and
keep-alive from nginx itself. HTTP/1.1 only (no http2 on the TLS port).
"""
import argparse
import contextlib
import ctypes
import os
import pwd
import grp
import signal
import socket
import subprocess
import sys
import time

NGINX = os.environ.get("FERRY_NGINX", "/usr/sbin/nginx")  # another nginx binary, where set
OPENSSL = "openssl"
PR_SET_PDEATHSIG = 1


def set_pdeathsig(sig):
    """Ask the kernel to send `sig` to this process when its parent (thread) exits."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


def make_certificates(state):
    """A throwaway CA and a server certificate it signs; kept between runs of the same STATE.

    A separate CA (rather than one self-signed leaf) because some TLS stacks refuse a CA:TRUE
    certificate as the server's own, and others refuse a CA:FALSE one as a trust anchor.
    """
    ca, crt, key = (os.path.join(state, n) for n in ("ca.pem", "server.pem", "server.key"))
    if all(os.path.exists(p) for p in (ca, crt, key)):
        return ca, crt, key
    ext = os.path.join(state, "server.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]  # fast to make
    run = lambda *a: subprocess.run([OPENSSL, *a], check=True, capture_output=True)
    run("req", "-x509", *ec, "-keyout", os.path.join(state, "ca.key"), "-out", ca, "-days", "3650",
        "-subj", "/CN=ferry test CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    csr = os.path.join(state, "server.csr")
    run("req", "-new", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=localhost")
    run("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", os.path.join(state, "ca.key"),
        "-set_serial", str(int.from_bytes(os.urandom(8), "big")), "-days", "3650",
        "-extfile", ext, "-out", crt)
    return ca, crt, key


def free_ports(n):
    """n distinct ports the kernel considers free now (another process may still take one)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def q(path):
    """Quote a path for nginx.conf (spaces, semicolons)."""
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_config(state, root, http_port, https_port, crt, key, listen="127.0.0.1"):
    s = lambda name: q(os.path.join(state, name))
    # As root, nginx would otherwise switch to 'nobody'/'www-data' and may not read ROOT or STATE.
    user = ""
    if os.geteuid() == 0:
        user = f"user {pwd.getpwuid(0).pw_name} {grp.getgrgid(os.getegid()).gr_name};"
    conf = f"""
# Written by http_server.py. One process (master_process off): nothing outlives it, and its
# PDEATHSIG (set before exec) takes it down with the script even after kill -9.
daemon off;
master_process off;
{user}
pid {s("nginx.pid")};
lock_file {s("nginx.lock")};
error_log {s("error.log")} notice;
events {{ worker_connections 1024; }}
http {{
    default_type application/octet-stream;
    log_format ranges '$remote_addr:$remote_port "$request" range="$http_range" '
                      'if_range="$http_if_range" $status $body_bytes_sent';
    access_log {s("access.log")} ranges;
    client_body_temp_path {s("tmp/body")};
    proxy_temp_path {s("tmp/proxy")};
    fastcgi_temp_path {s("tmp/fastcgi")};
    uwsgi_temp_path {s("tmp/uwsgi")};
    scgi_temp_path {s("tmp/scgi")};
    sendfile on;
    etag on;
    keepalive_timeout 75s;
    keepalive_requests 100000;   # long test runs reuse one connection
    server {{
        listen {listen}:{http_port};
        listen {listen}:{https_port} ssl;
        ssl_certificate {q(crt)};
        ssl_certificate_key {q(key)};
        root {q(root)};
    }}
}}
"""
    path = os.path.join(state, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf)
    return path


def accepts(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


class Server:
    def __init__(self, proc, http_port, https_port, cert, state):
        self.proc, self.state, self.cert = proc, state, cert
        self.http = f"http://127.0.0.1:{http_port}"
        self.https = f"https://127.0.0.1:{https_port}"
        self.line = f"ready {self.http} {self.https} {cert}"


def start(root, state, attempts=8, timeout=10.0, listen="127.0.0.1"):
    root, state = os.path.abspath(root), os.path.abspath(state)
    if not os.path.isdir(root):
        raise FileNotFoundError(root)
    os.makedirs(os.path.join(state, "tmp"), exist_ok=True)
    ca, crt, key = make_certificates(state)
    pidfile = os.path.join(state, "nginx.pid")
    for _ in range(attempts):
        http_port, https_port = free_ports(2)
        conf = write_config(state, root, http_port, https_port, crt, key, listen)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(pidfile)  # a stale one would look like readiness
        err_start = os.path.getsize(os.path.join(state, "error.log")) if os.path.exists(
            os.path.join(state, "error.log")) else 0
        with open(os.path.join(state, "nginx.stderr"), "ab") as stderr:
            proc = subprocess.Popen(
                [NGINX, "-p", state + "/", "-e", os.path.join(state, "error.log"), "-c", conf],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                # SIGKILL: nginx must go even if the script is killed -9 (no cleanup runs then).
                # PDEATHSIG follows the *thread* that forks: call start()/serve() from a thread
                # that lives as long as the server should.
                preexec_fn=lambda: set_pdeathsig(signal.SIGKILL))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            # nginx writes its pid file only after binding every listen socket.
            try:
                with open(pidfile) as f:
                    ours = f.read().strip() == str(proc.pid)
            except FileNotFoundError:
                ours = False
            if ours and accepts(http_port) and accepts(https_port):
                return Server(proc, http_port, https_port, ca, state)
            time.sleep(0.01)
        stop(proc)
        with open(os.path.join(state, "error.log"), errors="replace") as f:
            f.seek(err_start)
            log = f.read()
        if "Address already in use" not in log:  # only a lost port race is worth retrying
            raise RuntimeError(f"nginx did not start (exit {proc.returncode}):\n{log[-2000:]}")
    raise RuntimeError(f"nginx could not bind free ports in {attempts} attempts")


def stop(proc):
    if proc.poll() is None:
        proc.terminate()  # SIGTERM: nginx's fast shutdown
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def serve(root, state, listen="127.0.0.1"):
    server = start(root, state, listen=listen)
    try:
        yield server
    finally:
        stop(server.proc)


def write_atomically(path, text):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def exit_on_signal(signum, frame):
    raise SystemExit(0)  # unwinds through serve(), which stops nginx


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, help="folder to serve (only read)")
    ap.add_argument("--state", required=True, help="folder for config, logs, pid, certificates")
    ap.add_argument("--listen", default="127.0.0.1",
                    help="address to listen on (0.0.0.0 inside a network namespace of its own)")
    args = ap.parse_args()
    parent = os.getppid()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, exit_on_signal)
    set_pdeathsig(signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before prctl took effect
        return 1
    with serve(args.root, args.state, args.listen) as s:
        write_atomically(os.path.join(s.state, "endpoint"), s.line + "\n")
        print(s.line, flush=True)
        code = s.proc.wait()
        print(f"nginx exited with status {code}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
