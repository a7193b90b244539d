#!/usr/bin/python3
"""A real S3-compatible server for ferry's tests, in one process.

It is OpenStack Swift (Debian's python3-swift) assembled by hand: a proxy
server with the s3api middleware (which checks AWS Signature Version 4) and
tempauth (narrowed to one access key / secret), plus account, container and
object servers.  All four run as eventlet green threads of this one process,
each on its own socket on 127.0.0.1; only the proxy's port is the S3 endpoint.
Objects live in memory (swift.obj.mem_server); the account and container
databases (SQLite), rings and swift.conf live under --dir.  Nothing is
written anywhere else, and nothing is needed in /etc.

Usage:
    /usr/bin/python3 tests/servers/s3_server.py --dir DIR [--port N]
        [--access-key ferry] [--secret-key ferry-secret]
        [--region us-east-1] [--verbose]

Once requests are accepted it writes DIR/endpoint (atomically) containing
e.g. "http://127.0.0.1:PORT" and prints "ready http://127.0.0.1:PORT" on
stdout; DIR/endpoint is removed again on exit.  It exits on SIGTERM/SIGINT
and when its parent dies.

Clients: path-style URLs (http://127.0.0.1:PORT/bucket/key), SigV4 with
service "s3" and exactly the configured region, header auth or presigned
URLs.  Header-signed requests must carry x-amz-content-sha256 (as on AWS);
curl 7.88's --aws-sigv4 does not send it, so add
-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD', and write query strings in
canonical form (sorted, %-encoded, "acl=" not "acl"), which curl 7.88 signs
verbatim.  Bucket names need 3+ characters.  Unsigned requests get 403
AccessDenied, even for public-read buckets (s3api has no anonymous access).

Requires: apt-get install --no-install-recommends python3-swift
(run with Debian's /usr/bin/python3).

Why Swift: Debian 12 packages neither MinIO nor moto, and npm's s3rver
accepts any signature; Swift's s3api is a packaged, maintained S3 front end
that actually checks SigV4, so auth failures can be tested too.
"""

import argparse
import ctypes
import logging
import os
import signal
import sys

# Taken first thing, so that a parent which dies while we import Swift is
# still noticed below.
PARENT_PID = os.getppid()

import eventlet  # noqa: E402
import eventlet.wsgi  # noqa: E402

# As swift.common.utils.eventlet_monkey_patch(), but before importing Swift:
# greening existing locks walks all live objects, so earlier is cheaper.
eventlet.patcher.monkey_patch(all=False, socket=True, select=True,
                              thread=True)
logging.logThreads = 0  # logging threads while monkey-patched can deadlock

from swift.common import constraints, storage_policy, utils  # noqa: E402
from swift.common.ring import RingBuilder  # noqa: E402
from swift.common.wsgi import SwiftHttpProtocol  # noqa: E402
from swift.common.middleware import (  # noqa: E402
    copy, dlo, listing_formats, slo, tempauth)
from swift.common.middleware.s3api import s3api  # noqa: E402
from swift.common.middleware.s3api.s3response import AccessDenied  # noqa
from swift.account.server import AccountController  # noqa: E402
from swift.container.server import ContainerController  # noqa: E402
from swift.obj.mem_server import ObjectController  # noqa: E402
from swift.proxy.server import Application as ProxyApplication  # noqa: E402

SWIFT_CONF = """\
[swift-hash]
swift_hash_path_suffix = ferry-tests

[storage-policy:0]
name = memory
default = yes
"""


ACCOUNT = 'AUTH_ferry'


class S3TempAuth(tempauth.TempAuth):
    """tempauth with exactly one user, known only by S3 credentials.

    Stock tempauth wants access keys shaped "account:user", needs memcache,
    and maps the access key to the account with PATH_INFO.replace(); s3api
    re-authenticates every follow-up subrequest (DELETE, copy, multipart)
    on the already rewritten path, where that replace() then hits the
    account or a bucket/key name containing the access key.  Authorization
    (tempauth.authorize) stays stock.
    """

    def __init__(self, app, conf, access_key, secret_key):
        super().__init__(app, conf)
        self.access_key, self.secret_key = access_key, secret_key

    def get_groups(self, env, token):
        s3 = env.get('s3api.auth_details')
        if not s3 or s3['access_key'] != self.access_key or \
                not s3['check_signature'](self.secret_key):
            return None  # also refuses Swift tokens: there are none here
        path = env['PATH_INFO'].split('/', 3)  # '', 'v1', account[, rest]
        path[2] = ACCOUNT
        env['PATH_INFO'] = '/'.join(path)
        return ','.join([ACCOUNT, self.access_key, ACCOUNT])


def s3_only(app):
    # s3api hands requests without S3 auth to Swift's native API, which
    # answers 400/401 in its own format; S3 says 403 AccessDenied.  (s3api
    # has no anonymous access, so public-read buckets are not readable
    # unsigned either.)
    def middleware(env, start_response):
        query = env.get('QUERY_STRING', '')
        if 'HTTP_AUTHORIZATION' not in env and \
                'X-Amz-Credential=' not in query and \
                'AWSAccessKeyId=' not in query:
            return AccessDenied()(env, start_response)
        return app(env, start_response)
    return middleware


def write_rings(swift_dir, ports):
    for name, port in ports.items():
        builder = RingBuilder(part_power=2, replicas=1, min_part_hours=0)
        builder.add_dev({'id': 0, 'region': 1, 'zone': 1, 'weight': 1,
                         'ip': '127.0.0.1', 'port': port, 'device': 'd0'})
        builder.rebalance()
        builder.get_ring().save(os.path.join(swift_dir, name + '.ring.gz'))


def quiet_swift_loggers(level):
    # Swift's get_logger() sends everything to syslog; tests want stderr.
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(logging.Formatter('s3_server %(name)s: %(message)s'))
    for logger, handler in getattr(utils.get_logger, 'handler4logger',
                                   {}).items():
        logger.removeHandler(handler)
        if stderr not in logger.handlers:
            logger.addHandler(stderr)
        logger.setLevel(level)


def build_apps(args, swift_dir, ports):
    level = 'INFO' if args.verbose else 'ERROR'
    conf = {'swift_dir': swift_dir, 'devices': os.path.join(swift_dir, 'dev'),
            'mount_check': 'false', 'log_level': level}
    os.makedirs(os.path.join(conf['devices'], 'd0'), exist_ok=True)

    proxy = ProxyApplication(dict(conf, account_autocreate='true'))
    # Outermost last; this is the usual s3api + tempauth proxy pipeline
    # minus what tests don't need (memcache, ratelimit, logging, ...).
    filters = [
        slo.filter_factory(conf),   # s3api multipart uploads need SLO
        dlo.filter_factory(conf),
        copy.filter_factory(conf),
        lambda app: S3TempAuth(app, dict(conf, reseller_prefix='AUTH'),
                               args.access_key, args.secret_key),
        s3api.filter_factory(conf, location=args.region),
        listing_formats.filter_factory(conf),
    ]
    app = proxy
    for make in filters:
        app = make(app)
    apps = {'proxy': s3_only(app),
            'account': AccountController(conf),
            'container': ContainerController(conf),
            'object': ObjectController(conf)}
    quiet_swift_loggers(level)
    return apps


def on_signal(signum, frame):
    # Raised in whichever green thread runs; eventlet's hub passes
    # SystemExit on to the main green thread, which then unwinds.
    raise SystemExit(0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--dir', required=True)
    parser.add_argument('--port', type=int, default=0)
    parser.add_argument('--access-key', default='ferry')
    parser.add_argument('--secret-key', default='ferry-secret')
    parser.add_argument('--region', default='us-east-1')
    parser.add_argument('--verbose', action='store_true')
    args = parser.parse_args()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != PARENT_PID:
        return 0  # parent already gone before prctl took effect

    swift_dir = os.path.abspath(args.dir)
    os.makedirs(swift_dir, exist_ok=True)
    endpoint_file = os.path.join(swift_dir, 'endpoint')
    if os.path.exists(endpoint_file):
        os.unlink(endpoint_file)

    socks = {'proxy': eventlet.listen(('127.0.0.1', args.port))}
    for name in ('account', 'container', 'object'):
        socks[name] = eventlet.listen(('127.0.0.1', 0))
    ports = {name: s.getsockname()[1] for name, s in socks.items()}

    with open(os.path.join(swift_dir, 'swift.conf'), 'w') as f:
        f.write(SWIFT_CONF)
    write_rings(swift_dir, {n: ports[n] for n in socks if n != 'proxy'})
    # Swift reads swift.conf from a module global that defaults to /etc.
    utils.set_swift_dir(swift_dir)
    constraints.reload_constraints()
    storage_policy.reload_storage_policies()

    apps = build_apps(args, swift_dir, ports)
    servers = []
    for name, app in apps.items():
        log_requests = args.verbose and name == 'proxy'
        servers.append(eventlet.spawn(
            eventlet.wsgi.server, socks[name], app,
            log=sys.stderr if log_requests else None, log_output=log_requests,
            protocol=SwiftHttpProtocol, socket_timeout=60,
            # s3api clients need "ETag", not eventlet's "Etag".
            capitalize_response_headers=False))
    eventlet.sleep(0)  # let the servers reach accept()

    endpoint = 'http://127.0.0.1:%d' % ports['proxy']
    with open(endpoint_file + '.tmp', 'w') as f:
        f.write(endpoint + '\n')
    os.replace(endpoint_file + '.tmp', endpoint_file)
    print('ready ' + endpoint, flush=True)
    try:
        servers[0].wait()
    finally:
        for s in socks.values():
            s.close()
        if os.path.exists(endpoint_file):
            os.unlink(endpoint_file)
    return 0


if __name__ == '__main__':
    sys.exit(main())
