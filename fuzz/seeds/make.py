#!/usr/bin/env python3
"""Writes the committed seed corpora and dictionaries of the gate's two hand-written parsers.

connect_head: CONNECT heads of every shape the parser tells apart (accepted, each refusal,
incomplete), so a run starts past the method. client_hello: real TLS first flights made by
Python's ssl module (TLS 1.2 and 1.3, with and without ALPN, several names), each also split
over several records, plus a non-TLS flight and a hello with no server name. Run from the
repository root: python3 fuzz/seeds/make.py. It rewrites fuzz/seeds/<target>/ and
fuzz/dict/<target>.dict; the output is deterministic except for the hellos' random fields.
"""

import os
import shutil
import ssl
import struct

ROOT = os.path.dirname(os.path.abspath(__file__))
DICT_DIR = os.path.join(os.path.dirname(ROOT), "dict")


def write_corpus(target, seeds):
    out = os.path.join(ROOT, target)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


def write_dict(target, tokens):
    os.makedirs(DICT_DIR, exist_ok=True)
    with open(os.path.join(DICT_DIR, target + ".dict"), "w") as f:
        f.write("# libFuzzer dictionary for the %s target (fuzz/seeds/make.py)\n" % target)
        for token in tokens:
            escaped = "".join(
                c if 0x20 <= ord(c) < 0x7F and c not in '"\\' else "\\x%02x" % ord(c)
                for c in token.decode("latin-1")
            )
            f.write('"%s"\n' % escaped)


def head(target, version=b"HTTP/1.1", headers=(), method=b"CONNECT"):
    lines = [method + b" " + target + b" " + version]
    lines += list(headers)
    return b"\r\n".join(lines) + b"\r\n\r\n"


def connect_head():
    host = b"api.example.com:443"
    seeds = {
        "accepted": head(host, headers=[b"Host: " + host]),
        "accepted-http10": head(host, version=b"HTTP/1.0"),
        "accepted-headers": head(
            host,
            headers=[
                b"Host: " + host,
                b"User-Agent: curl/8.5.0",
                b"Proxy-Connection: Keep-Alive",
                b"Proxy-Authorization: Basic dXNlcjpwYXNz",
            ],
        ),
        "accepted-with-flight": head(b"registry.npmjs.example:443") + b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00",
        "accepted-uppercase": head(b"API.Example.COM:443"),
        "accepted-digits-hyphens": head(b"a-1.b2-c.example-site.org:443"),
        "incomplete": b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n",
        "method-get": head(b"http://api.example.com/", method=b"GET"),
        "method-lowercase": head(host, method=b"connect"),
        "port-80": head(b"api.example.com:80"),
        "no-port": head(b"api.example.com"),
        "ipv4": head(b"127.0.0.1:443"),
        "ipv6": head(b"[::1]:443"),
        "bad-host": head(b"api_example.com:443"),
        "single-label": head(b"intranet:443"),
        "trailing-dot": head(b"api.example.com.:443"),
        "special-localhost": head(b"db.localhost:443"),
        "special-internal": head(b"metadata.google.internal:443"),
        "special-home-arpa": head(b"router.home.arpa:443"),
        "bad-version": head(host, version=b"HTTP/2"),
        "extra-space": b"CONNECT  api.example.com:443 HTTP/1.1\r\n\r\n",
        "control-byte": b"CONNECT api.example.com:443\tHTTP/1.1\r\n\r\n",
        "bare-lf": b"CONNECT api.example.com:443 HTTP/1.1\n\n",
        "long-label": head(b"a" * 64 + b".example.com:443"),
        "too-large": b"CONNECT api.example.com:443 HTTP/1.1\r\nX-Pad: " + b"a" * 8200,
    }
    write_corpus("connect_head", seeds)
    write_dict(
        "connect_head",
        [
            b"CONNECT ", b"GET ", b" HTTP/1.1", b" HTTP/1.0", b"\r\n", b"\r\n\r\n", b":443",
            b":80", b"Host: ", b"Proxy-Authorization: ", b".com", b".example.com", b".localhost",
            b".local", b".internal", b".home.arpa", b".localdomain", b".invalid", b"[::1]",
            b"127.0.0.1", b"0x7f.1", b"-", b".", b"xn--",
        ],
    )


def client_hellos():
    """(name, first flight) pairs from Python's TLS client."""
    out = []
    for name, minimum, maximum, alpn in [
        ("tls13", ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3, None),
        ("tls12", ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2, None),
        ("tls12-13-alpn", ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3, ["h2", "http/1.1"]),
    ]:
        for server in ["api.example.com", "registry.npmjs.example", "a.b"]:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.minimum_version = minimum
            ctx.maximum_version = maximum
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            if alpn:
                ctx.set_alpn_protocols(alpn)
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            tls = ctx.wrap_bio(incoming, outgoing, server_hostname=server)
            try:
                tls.do_handshake()
            except ssl.SSLWantReadError:
                pass
            out.append(("%s-%s" % (name, server), outgoing.read()))
    return out


def records(flight):
    """The handshake bytes of a first flight made of TLS records."""
    body = b""
    at = 0
    while at + 5 <= len(flight):
        length = struct.unpack(">H", flight[at + 3 : at + 5])[0]
        body += flight[at + 5 : at + 5 + length]
        at += 5 + length
    return body


def reframe(handshake, sizes):
    """The handshake split into records of `sizes` bytes (the rest in a last record)."""
    out = b""
    at = 0
    for size in list(sizes) + [len(handshake)]:
        piece = handshake[at : at + size]
        if not piece:
            break
        out += b"\x16\x03\x01" + struct.pack(">H", len(piece)) + piece
        at += len(piece)
    return out


def client_hello():
    seeds = {}
    for name, flight in client_hellos():
        seeds[name] = flight
        handshake = records(flight)
        seeds[name + "-split3"] = reframe(handshake, [4, 40])
        seeds[name + "-truncated"] = flight[: len(flight) // 2]
    seeds["not-tls"] = b"GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n"
    # A hello whose extensions block is empty: no server name at all.
    no_ext = b"\x01\x00\x00\x2a\x03\x03" + b"\x00" * 32 + b"\x00\x00\x02\x13\x01\x01\x00\x00\x00"
    seeds["no-server-name"] = reframe(no_ext, [])
    write_corpus("client_hello", seeds)
    write_dict(
        "client_hello",
        [
            b"\x16\x03\x01", b"\x16\x03\x03", b"\x01\x00", b"\x03\x03", b"\x00\x00",
            b"\x00\x10", b"\x00\x2b", b"\x00\x0a", b"\x00\x0d", b"\x00\x33", b"\x13\x01",
            b"\x15\x03\x03", b"\x17\x03\x03",
        ],
    )


if __name__ == "__main__":
    connect_head()
    client_hello()
