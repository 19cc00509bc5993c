#!/usr/bin/env python3
"""Writes the committed seed corpus of every fuzz target, and its dictionary.

Each fuzz/seeds/<target>/ holds valid inputs of each shape the target's parser tells apart, and
near misses, each file named for what it is. Where the target reads a control byte before its
input (a chunk or read size, a split point, a status, a tool), every seed starts with that byte,
chosen so the rest reaches the parser as named. fuzz/dict/<target>.dict lists the tokens the
parser looks for.

connect_head: CONNECT heads of every shape the parser tells apart (accepted, each refusal,
incomplete), so a run starts past the method. client_hello: real TLS first flights made by
Python's ssl module (TLS 1.2 and 1.3, with and without ALPN, several names), each also split
over several records, plus a non-TLS flight and a hello with no server name.

frame_decoder: a chunk size byte, then frame streams: each message in its own frame (the hello
and the spec of each door, exit records of a code, a failure and a signal, every build event),
stdout and stderr chunks, empty payloads, a shim's whole run in chunks of 1, 7 and 64; headers
the decoder refuses (unknown type, over the cap) or is cut inside; whole frames whose message is
refused (version, door, array form, wrong frame, fixed or duplicate env key, missing key, unknown
event). messages: the same messages as bare JSON, and a near miss for each validation rule.

build_events: a read size byte, then atelier-build's stream of T, O and E frames: a successful
build in reads of 1, 7, 64 and 255 bytes, each failure it reports (install failed or timed out,
build killed, output missing or a link, a malformed plan, interrupted), and streams sited
refuses (a frame atelier-build never sends, a bad or unknown event, a bad header, a cut frame).

egress_lines: the decisions socket's lines: subscriptions to each door with a way out, and
decisions of every verdict as the gate words them (parsed CONNECT, unparsed head, MCP relay);
then each refusal: the git door, version, unknown door or verdict, extra or missing key, empty,
unprintable or over-long text, a second line, a line over its cap.

model_route: a byte that picks the plan's model routes (bit 0: Anthropic at
https://api.anthropic.com, or with bit 2 at a gateway's base https://gateway.example.com/v1/acct/
gw/anthropic; bit 1: OpenAI at http://127.0.0.1:8080/v1, or with bit 3 at https://llm.example.org,
an origin alone), then a request's method, a space and its target below /model/: requests each
API relays (`ok-…`: every endpoint below each kind of base, queries kept as they are, dots and
other encodings inside a model id), and each refusal in the relay's order: not found (an unknown
API, a route not in the plan, the prefix alone), a bad path (`bad-path-…`: outside the base path,
a prefix of its segment, the base path alone, another account or provider on the gateway;
traversal, plain, percent-encoded in either case or half so, encoded slashes and backslashes, an
empty segment or rest, a space, a tab, a control byte, a fragment, non-ASCII), a method other
than GET and POST (`method-not-allowed-…`), an endpoint that is not the model API's
(`endpoint-not-relayed-…`: batches, files, the legacy completions, a gateway's key minting, the
Responses API, a GET of messages, a model id of two segments).

model_body: POST bodies an agent sends its model (`ok-…`: Claude Code's and an
OpenAI-compatible request with the agent's own tools, provider-defined tools the agent runs,
base64 and data-URL images, a tool call's input, a search result and schema examples naming
URLs, file references by id, an earlier server tool's result in the history), a server tool's
call in the history (`tool-…`), and each finding: a tool the provider runs itself
(`tool-…`: web search, web fetch, code execution, an MCP toolset, a type in another case, a
repeated type or tools member, MCP servers, a container, web search options, plugins, a member
name in capitals, with a long s, escaped or in camel case, extra_body, a one-member tool a
gateway reads as its provider's, a tool with neither type nor name, legacy functions, a version
too short), a URL it would fetch (`fetch-…`: an image or document source by URL, in a tool
result, an OpenAI image URL as object and string, a file URL, a file id that is a URL),
a list of models for a gateway to fall back to (`models-…`: models, fallbacks),
and bodies it cannot vet (`not-json-…`: empty, an array, text, cut, trailing bytes, tools as an
object, a tool's type not a string, invalid UTF-8, nesting past the parser's depth).

agent_stream: a chunk size byte alone on the first line, then a run's stdout for each driver:
Claude Code's stream-json (init, text, thinking, each tool's target key, tool results, results
of success, max turns and API error), opencode's JSON lines (step start and finish with costs,
text, tool use with each target key, errors, done, flat frames, a run without done), pi's JSON
mode (session, message_end of the assistant with tool calls and text, updates it skips, a
provider error, aborted, recovered), atelier-agent's lines (tool, file_change, text, result,
error, warning); and what every parser must survive (prose, truncated JSON, wrong types,
option-shaped session ids, CRLF, invalid UTF-8, a missing last newline, a line over the target's
256-byte bound). Every other line is within that bound.

user_image: JPEGs this script encodes (baseline, the standard tables): greyscale 8x8 and 1x1,
colour 4:4:4 and 4:2:0, an odd size, restart markers, an Exif orientation, a comment with fill
bytes; JPEGs the walk or the decode refuses (cut in the scan or a segment, no EOI, no frame,
scan before frame, zero height, over the edge or pixel limits, a second frame header, a bad
length, a non-marker, a PNG); and base64 text, canonical (of those JPEGs, each padding) and not
(unused bits set, missing or extra padding, the URL alphabet, line wrapping, a data URL).

session_identity: Cookie headers (the session cookie alone, among others, padded, quoted, with
`=` in its value, twice, at and over its length limit, empty, missing, misspelled) and, after a
byte that picks the status (0: 200, 1: 401, 2: 403, 3: 500), the CMS's answers to the session
check: signed-in users, 401 refusals with and without mfa_required, 403 and 500, and 200 bodies
that are no user (wrong shape, unusable id, bad capability).

agent_tool_args: a byte that picks the tool (0 read, 1 write, 2 edit, 3 list, 4 glob, 5 grep,
6 a tool nobody offers), then the raw arguments a model sends: accepted calls of each tool
(relative and absolute paths below /w, windows, replace_all, globs, regexes) and refusals
(escapes, .git and .builder, NUL, empty path, schema errors, bad or oversized patterns,
truncated JSON, not an object, the unknown tool).

sse: a byte that picks where the stream is split in two reads, then event streams: Anthropic's
messages stream (text, tool use, error), OpenAI chat chunks (text, tool calls, usage, [DONE],
keep-alive comments), sited's session stream (ids, pings, replay_failed); each rule of the
format (CRLF, CR, mixed ends, a CRLF split between reads, multi-line data, BOM, retry and
unknown fields, no or two spaces after the colon, a field without colon, an id without data or
with NUL, empty data, invalid UTF-8); and streams that end mid-frame.

Run from the repository root: python3 fuzz/seeds/make.py [target ...] (every target when none is
named). It rewrites fuzz/seeds/<target>/ and fuzz/dict/<target>.dict; the output is
deterministic except for the hellos' random fields, which change on every run of client_hello.
"""

import base64
import json
import math
import os
import shutil
import ssl
import struct
import sys

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
        "accepted-with-flight": head(b"registry.store.example:443") + b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00",
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
        for server in ["api.example.com", "registry.store.example", "a.b"]:
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


def hello(extensions, session_id=b"", suites=b"\x13\x01", compression=b"\x00"):
    """A ClientHello handshake message (type, length, body) with these parts; the random is
    zeros so the seed is the same on every run."""
    body = b"\x03\x03" + b"\x00" * 32 + bytes([len(session_id)]) + session_id
    body += struct.pack(">H", len(suites)) + suites + bytes([len(compression)]) + compression
    block = b"".join(struct.pack(">HH", kind, len(data)) + data for kind, data in extensions)
    body += struct.pack(">H", len(block)) + block
    return b"\x01" + struct.pack(">I", len(body))[1:] + body


def server_name(name):
    """A server_name extension holding one host_name entry."""
    entry = b"\x00" + struct.pack(">H", len(name)) + name
    return (0x0000, struct.pack(">H", len(entry)) + entry)


def hand_made_hellos():
    """Deterministic flights of the shapes the walker tells apart: one accepted (its name
    lowercased) and one of each refusal, named `refused-<reason>[-<variant>]` after the
    refusal's log name, so the gate's unit test can hold each seed to its reason."""
    alpn = (0x0010, b"\x00\x0c\x02h2\x08http/1.1")
    good = hello([server_name(b"Api.Example.COM"), alpn])
    flight = reframe(good, [])
    return {
        "hand-made-api.example.com": flight,
        "hand-made-split-in-header-api.example.com": reframe(good, [2, 3]),
        "refused-not-tls-handshake": b"\x17" + flight[1:],
        "refused-bad-record-version": flight[:1] + b"\x02" + flight[2:],
        "refused-bad-record-length": b"\x16\x03\x01\x00\x00",
        "refused-bad-record-length-over-max": b"\x16\x03\x01\x48\x01" + good,
        "refused-not-client-hello": reframe(b"\x02" + good[1:], []),
        "refused-too-large": b"\x16\x03\x01\x00\x04\x01\xff\xff\xff",
        "refused-malformed-session-id": reframe(hello([server_name(b"a.b")], b"\x00" * 33), []),
        "refused-malformed-odd-suites": reframe(hello([server_name(b"a.b")], suites=b"\x13"), []),
        "refused-malformed-no-compression": reframe(
            hello([server_name(b"a.b")], compression=b""), []
        ),
        "refused-malformed-server-name-list": reframe(
            hello([(0x0000, b"\x00\x09\x00\x00\x03a.b")]), []
        ),
        "refused-encrypted-client-hello": reframe(
            hello([server_name(b"a.b"), (0xFE0D, b"\x00\x00\x01")]), []
        ),
        "refused-encrypted-client-hello-draft": reframe(
            hello([(0xFFCE, b"\x00"), server_name(b"a.b")]), []
        ),
        "refused-duplicate-server-name": reframe(
            hello([server_name(b"a.b"), server_name(b"c.d")]), []
        ),
        "refused-invalid-server-name": reframe(hello([server_name(b"a b")]), []),
        "refused-no-server-name-alpn-only": reframe(hello([alpn]), []),
    }


def client_hello():
    seeds = {}
    for name, flight in client_hellos():
        seeds[name] = flight
        handshake = records(flight)
        seeds[name + "-split3"] = reframe(handshake, [4, 40])
        seeds[name + "-truncated"] = flight[: len(flight) // 2]
    seeds["not-tls"] = b"GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n"
    seeds.update(hand_made_hellos())
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


def small(target, seeds, limit=4096):
    """`seeds`, after checking that each name is lowercase words and hyphens, and each seed is
    under `limit` bytes unless its name says it is over."""
    for name, data in seeds.items():
        assert name == name.lower() and " " not in name and "_" not in name, name
        assert len(data) < limit or "over" in name, (target, name, len(data))
    return seeds


def js(value):
    """`value` as compact JSON, keys in the order given, non-ASCII as UTF-8."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


# === Frames and messages (atelier_proto) ===


def frame(kind, payload):
    """A frame: the type byte, the payload's length as a big-endian u32, the payload."""
    if not isinstance(payload, bytes):
        payload = js(payload)
    return kind + struct.pack(">I", len(payload)) + payload


PROXY = "http://127.0.0.1:3128"
HELLO_TURN = {"v": 1, "door": "turn", "unit": "atelier-museo-s1-turn@0.service"}
HELLO_BUILD = {"v": 1, "door": "build", "unit": "atelier-museo-s1-build@0.service"}
HELLO_GIT = {"v": 1, "door": "git", "unit": "atelier-museo-s1-git@0.service"}
SPEC_TURN = {
    "v": 1,
    "door": "turn",
    "argv": [
        "/usr/bin/claude",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--permission-mode",
        "acceptEdits",
        "--setting-sources",
        "",
        "--",
        "Add a collection page",
    ],
    "env": {
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "HTTPS_PROXY": PROXY,
        "NO_PROXY": "127.0.0.1,localhost",
        "PATH": "/usr/bin:/bin",
    },
    "hostNetns": "net:[4026531840]",
}
BUILD_PLAN = (
    '{"install":["bun","install"],"build":["bun","run","build"],"output":"dist",'
    '"install_timeout_ms":300000,"build_timeout_ms":300000,"lifecycle_scripts":false}'
)
SPEC_BUILD = {
    "v": 1,
    "door": "build",
    "argv": ["/usr/lib/atelier/atelier-build", "--plan", BUILD_PLAN],
    "env": {"HTTPS_PROXY": PROXY, "NODE_USE_ENV_PROXY": "1", "PATH": "/usr/bin:/bin"},
    "hostNetns": "net:[4026531840]",
}
SPEC_GIT = {
    "v": 1,
    "door": "git",
    "argv": [
        "/usr/bin/git",
        "-C",
        "/var/lib/atelier/museo/sites/alpha",
        "commit",
        "-q",
        "-m",
        "Turn 3",
    ],
    "env": {"LANG": "C.UTF-8", "PATH": "/usr/bin:/bin", "_private": ""},
    "hostNetns": "net:[4026531840]",
}
EXIT_OK = {"code": 0, "signal": None}
EXIT_FAILED = {"code": 1, "signal": None}
EXIT_KILLED = {"code": None, "signal": "SIGKILL"}
INSTALL_STARTED = {"event": "step_started", "step": "install", "argv": ["bun", "install"]}
INSTALL_OK = {
    "event": "step_finished",
    "step": "install",
    "outcome": "ok",
    "code": 0,
    "duration_ms": 2413,
}
INSTALL_FAILED = {
    "event": "step_finished",
    "step": "install",
    "outcome": "failed",
    "code": 1,
    "duration_ms": 912,
}
INSTALL_TIMED_OUT = {
    "event": "step_finished",
    "step": "install",
    "outcome": "timed_out",
    "code": None,
    "duration_ms": 300000,
}
BUILD_STARTED = {"event": "step_started", "step": "build", "argv": ["bun", "run", "build"]}
BUILD_OK = {
    "event": "step_finished",
    "step": "build",
    "outcome": "ok",
    "code": 0,
    "duration_ms": 3120,
}
BUILD_KILLED = {
    "event": "step_finished",
    "step": "build",
    "outcome": "failed",
    "code": None,
    "duration_ms": 41,
}
VERIFIED = {"event": "output_verified", "output": "dist", "files": 14, "bytes": 482133}


def refused(reason):
    return {"event": "refused", "reason": reason}


def frame_decoder():
    def chunked(size, *frames):
        # The first byte picks the chunk size: (byte % 64) + 1.
        assert 1 <= size <= 64
        return bytes([size - 1]) + b"".join(frames)

    H, S, O, E, X, T = b"H", b"S", b"O", b"E", b"X", b"T"
    shim_run = [
        frame(H, HELLO_TURN),
        frame(O, b'{"type":"system","subtype":"init"}\n'),
        frame(E, b"warning: no stdin data received in 3s\n"),
        frame(O, b'{"type":"result","subtype":"success","duration_ms":48213}\n'),
        frame(X, EXIT_OK),
    ]
    seeds = {
        "hello-turn": chunked(64, frame(H, HELLO_TURN)),
        "hello-build": chunked(5, frame(H, HELLO_BUILD)),
        "hello-git": chunked(13, frame(H, HELLO_GIT)),
        "spec-turn": chunked(64, frame(S, SPEC_TURN)),
        "spec-build": chunked(32, frame(S, SPEC_BUILD)),
        "spec-git": chunked(9, frame(S, SPEC_GIT)),
        "exit-code": chunked(64, frame(X, EXIT_OK)),
        "exit-failed": chunked(3, frame(X, EXIT_FAILED)),
        "exit-signal": chunked(8, frame(X, EXIT_KILLED)),
        "event-step-started": chunked(64, frame(T, INSTALL_STARTED)),
        "event-step-finished": chunked(16, frame(T, INSTALL_OK)),
        "event-step-timed-out": chunked(7, frame(T, INSTALL_TIMED_OUT)),
        "event-output-verified": chunked(64, frame(T, VERIFIED)),
        "event-refused": chunked(11, frame(T, refused("build produced no dist/ directory"))),
        "stdout-stderr": chunked(
            4, frame(O, b"building\n"), frame(E, b"warn: 1 deprecated dependency\n")
        ),
        "empty-payloads": chunked(64, frame(O, b""), frame(E, b""), frame(O, b"\x00\xff")),
        "shim-run-bytewise": chunked(1, *shim_run),
        "shim-run-chunk-7": chunked(7, *shim_run),
        "shim-run-chunk-64": chunked(64, *shim_run),
        "build-stream-in-stdout": chunked(
            64,
            frame(H, HELLO_BUILD),
            frame(O, frame(T, INSTALL_STARTED) + frame(O, b"ok\n")),
            frame(X, EXIT_OK),
        ),
        # Refused headers: the decoder fails for good.
        "unknown-kind": chunked(64, b"Z\x00\x00\x00\x02{}"),
        "unknown-kind-after-frame": chunked(2, frame(O, b"ok\n"), b"h\x00\x00\x00\x00"),
        "too-large-stdout-over-cap": chunked(64, b"O\x00\x01\x00\x01"),
        "too-large-spec-over-cap": chunked(64, b"S\x00\x10\x00\x01"),
        "stdout-at-cap-cut-short": chunked(64, b"O\x00\x01\x00\x00" + b"x" * 16),
        "truncated-header": chunked(64, frame(X, EXIT_OK), b"H\x00\x00"),
        "truncated-payload": chunked(6, frame(H, HELLO_TURN)[:30]),
        # Whole frames whose message is refused.
        "hello-version-2": chunked(64, frame(H, {"v": 2, "door": "turn", "unit": "u"})),
        "hello-unknown-door": chunked(64, frame(H, {"v": 1, "door": "shell", "unit": "u"})),
        "hello-as-array": chunked(64, frame(H, [1, "turn", "atelier-museo-s1-turn@0.service"])),
        "hello-in-event-frame": chunked(64, frame(T, HELLO_TURN)),
        "spec-fixed-env-key": chunked(64, frame(S, dict(SPEC_GIT, env={"HOME": "/root"}))),
        "spec-duplicate-env-key": chunked(
            64,
            frame(
                S,
                b'{"v":1,"door":"git","argv":["git"],"env":{"A":"1","A":"2"},'
                b'"hostNetns":"net:[1]"}',
            ),
        ),
        "exit-missing-signal": chunked(64, frame(X, b'{"code":0}')),
        "event-unknown": chunked(64, frame(T, {"event": "nope"})),
    }
    write_corpus("frame_decoder", small("frame_decoder", seeds))
    write_dict("frame_decoder", FRAME_TAGS + MESSAGE_TOKENS)


FRAME_TAGS = [
    b"H\x00\x00\x00", b"S\x00\x00", b"O\x00\x00\x00", b"E\x00\x00\x00", b"X\x00\x00\x00",
    b"T\x00\x00\x00", b"\x00\x01\x00\x00", b"\x00\x01\x00\x01", b"\x00\x10\x00\x00",
    b"\x00\x10\x00\x01", b"\xff\xff\xff\xff",
]
HELLO_SPEC_TOKENS = [
    b'"v":1', b'"v":', b'"door":', b'"turn"', b'"build"', b'"git"', b'"unit":', b'"argv":',
    b'"env":', b'"hostNetns":', b'"code":', b'"signal":', b'"SIGKILL"', b'"HOME"', b'"ATELIER_',
    b'"DEDALO_', b'"GIT_CONFIG_GLOBAL"', b'"GIT_CONFIG_NOSYSTEM"',
    b'"BUN_RUNTIME_TRANSPILER_CACHE_PATH"',
]
EVENT_TOKENS = [
    b'"event":', b'"step_started"', b'"step_finished"', b'"output_verified"', b'"refused"',
    b'"step":', b'"install"', b'"build"', b'"argv":', b'"outcome":', b'"ok"', b'"failed"',
    b'"timed_out"', b'"code":', b'"duration_ms":', b'"output":', b'"files":', b'"bytes":',
    b'"reason":', b"null", b"\\u0000", b"{}", b"[]", b'""',
]
MESSAGE_TOKENS = HELLO_SPEC_TOKENS + [t for t in EVENT_TOKENS if t not in HELLO_SPEC_TOKENS]


def messages():
    seeds = {
        "hello-turn": js(HELLO_TURN),
        "hello-build": js(HELLO_BUILD),
        "hello-git": js(HELLO_GIT),
        "spec-turn": js(SPEC_TURN),
        "spec-build": js(SPEC_BUILD),
        "spec-git": js(SPEC_GIT),
        "spec-pretty": json.dumps(SPEC_GIT, indent=2).encode() + b"\n",
        "exit-code": js(EXIT_OK),
        "exit-failed": js(EXIT_FAILED),
        "exit-signal": js(EXIT_KILLED),
        "event-install-started": js(INSTALL_STARTED),
        "event-install-finished": js(INSTALL_OK),
        "event-install-timed-out": js(INSTALL_TIMED_OUT),
        "event-build-started": js(BUILD_STARTED),
        "event-build-killed": js(BUILD_KILLED),
        "event-output-verified": js(VERIFIED),
        "event-refused": js(refused("build output 'dist' is a symbolic link")),
        "leading-whitespace": b" \r\n\t" + js(EXIT_OK),
        # Near misses, each refused by the rule its name says.
        "hello-version-2": js(dict(HELLO_TURN, v=2)),
        "hello-unknown-door": js(dict(HELLO_TURN, door="shell")),
        "hello-empty-unit": js(dict(HELLO_TURN, unit="")),
        "hello-extra-key": js(dict(HELLO_TURN, pid=4242)),
        "hello-missing-unit": js({"v": 1, "door": "turn"}),
        "hello-as-array": js([1, "turn", "atelier-museo-s1-turn@0.service"]),
        "spec-fixed-env-key": js(dict(SPEC_GIT, env={"HOME": "/root"})),
        "spec-fixed-env-prefix": js(dict(SPEC_GIT, env={"ATELIER_INSTANCE": "museo"})),
        "spec-invalid-env-key": js(dict(SPEC_GIT, env={"1PATH": "/bin"})),
        "spec-nul-in-env-value": js(dict(SPEC_GIT, env={"PATH": "/bin\x00"})),
        "spec-duplicate-env-key": (
            b'{"v":1,"door":"git","argv":["git","status"],"env":{"PATH":"/bin","PATH":"/tmp"},'
            b'"hostNetns":"net:[4026531840]"}'
        ),
        "spec-empty-argv": js(dict(SPEC_GIT, argv=[])),
        "spec-empty-program": js(dict(SPEC_GIT, argv=["", "status"])),
        "spec-nul-in-argv": js(dict(SPEC_GIT, argv=["git", "sta\x00tus"])),
        "spec-empty-host-netns": js(dict(SPEC_GIT, hostNetns="")),
        "exit-missing-code": js({"signal": "SIGTERM"}),
        "exit-empty-signal": js({"code": None, "signal": ""}),
        "exit-code-out-of-range": js({"code": 2147483648, "signal": None}),
        "event-unknown": js({"event": "step_skipped", "step": "install"}),
        "event-missing-code": js(
            {"event": "step_finished", "step": "build", "outcome": "ok", "duration_ms": 1}
        ),
        "event-unknown-step": js(dict(INSTALL_STARTED, step="deploy")),
        "event-empty-reason": js(refused("")),
        "event-negative-bytes": js(dict(VERIFIED, bytes=-1)),
        "event-tag-as-array": js(["refused", "build failed"]),
        "not-json": b"hello\n",
        "trailing-garbage": js(EXIT_OK) + b"x",
    }
    write_corpus("messages", small("messages", seeds))
    write_dict("messages", MESSAGE_TOKENS)


# === The build door's event stream (atelier_proto::build) ===


def build_events():
    def split(size, *frames):
        # The first byte is the size of each read (0 reads one byte at a time too).
        assert 0 <= size <= 255
        return bytes([size]) + b"".join(frames)

    T, O, E = b"T", b"O", b"E"
    success = [
        frame(T, INSTALL_STARTED),
        frame(O, b"bun install v1.2.19\n\n+ astro@5.13.5\n\n312 packages installed [2.41s]\n"),
        frame(T, INSTALL_OK),
        frame(T, BUILD_STARTED),
        frame(
            O,
            b'$ astro build\n12:00:01 [build] output: "static"\n12:00:03 [build] 4 page(s) built\n',
        ),
        frame(E, b"warn: 1 deprecated dependency\n"),
        frame(T, BUILD_OK),
        frame(T, VERIFIED),
    ]
    seeds = {
        "success": split(255, *success),
        "success-bytewise": split(1, *success),
        "success-reads-of-7": split(7, *success),
        "success-reads-of-64": split(64, *success),
        "no-install-step": split(
            32, frame(T, BUILD_STARTED), frame(O, b"done\n"), frame(T, BUILD_OK), frame(T, VERIFIED)
        ),
        "install-failed": split(
            16,
            frame(T, INSTALL_STARTED),
            frame(E, b"error: GET https://pkgs.registry.test/astro - 403\n"),
            frame(T, INSTALL_FAILED),
            frame(T, refused("install failed")),
        ),
        "install-timed-out": split(
            5,
            frame(T, INSTALL_STARTED),
            frame(T, INSTALL_TIMED_OUT),
            frame(T, refused("install timed out")),
        ),
        "build-killed": split(
            64,
            frame(T, INSTALL_STARTED),
            frame(T, INSTALL_OK),
            frame(T, BUILD_STARTED),
            frame(T, BUILD_KILLED),
            frame(T, refused("build failed")),
        ),
        "output-missing": split(
            48,
            frame(T, BUILD_STARTED),
            frame(T, BUILD_OK),
            frame(T, refused("build produced no dist/ directory")),
        ),
        "output-symlink": split(
            48,
            frame(T, BUILD_STARTED),
            frame(T, BUILD_OK),
            frame(T, refused("build output 'dist' contains a symbolic link")),
        ),
        "plan-refused": split(
            200,
            frame(E, b"atelier-build: the plan is malformed: missing field `output`\n"),
            frame(T, refused("build error")),
        ),
        "interrupted": split(3, frame(T, INSTALL_STARTED), frame(T, refused("build interrupted"))),
        "empty-output-frames": split(2, frame(O, b""), frame(E, b""), frame(T, VERIFIED)),
        "empty-stream": split(1),
        # Streams sited must refuse, each for the reason its name says.
        "exit-frame": split(64, frame(T, INSTALL_STARTED), frame(b"X", EXIT_OK)),
        "hello-frame": split(64, frame(b"H", HELLO_BUILD), frame(T, VERIFIED)),
        "spec-frame": split(64, frame(b"S", SPEC_BUILD)),
        "bad-event": split(64, frame(T, {"event": "nope"})),
        "event-extra-key": split(64, frame(T, dict(VERIFIED, site="alpha"))),
        "event-not-json": split(64, frame(T, b"step_started install\n")),
        "unknown-kind": split(64, frame(T, INSTALL_STARTED), b"Z\x00\x00\x00\x00"),
        "too-large-over-cap": split(64, frame(O, b"ok\n"), b"T\x00\x01\x00\x01"),
        "cut-inside-payload": split(9, *success[:3], frame(T, BUILD_STARTED)[:20]),
        "cut-inside-header": split(9, frame(T, INSTALL_STARTED), b"O\x00\x00"),
    }
    write_corpus("build_events", small("build_events", seeds))
    write_dict(
        "build_events",
        [
            b"T\x00\x00\x00", b"O\x00\x00\x00", b"E\x00\x00\x00", b"X\x00\x00\x00",
            b"H\x00\x00\x00", b"S\x00\x00\x00", b"\x00\x01\x00\x00", b"atelier-build: ",
        ]
        + EVENT_TOKENS,
    )


# === The gate's decisions socket (atelier_proto::egress) ===


def decision(door, host, port, verdict, reason):
    return (
        js({"door": door, "host": host, "port": port, "verdict": verdict, "reason": reason}) + b"\n"
    )


def egress_lines():
    allowed = decision("turn", "api.anthropic.com", 443, "allowed", "via 160.79.104.10:443")
    seeds = {
        "subscribe-turn": b'{"v":1,"door":"turn"}\n',
        "subscribe-build": b'{"v":1,"door":"build"}\n',
        "subscribe-no-newline": b'{"v":1,"door":"turn"}',
        "subscribe-crlf": b'{"v":1,"door":"build"}\r\n',
        "subscribe-spaced": b' { "door" : "turn", "v" : 1 }\n',
        "decision-allowed": allowed,
        "decision-allowed-build": decision(
            "build", "pkgs.registry.test", 443, "allowed", "via 104.16.1.34:443"
        ),
        "decision-refused-not-in-plan": decision(
            "turn", "evil.example.com", 443, "refused", "not_in_plan"
        ),
        "decision-refused-not-public": decision(
            "build",
            "intranet.example.com",
            443,
            "refused",
            "not_public: 10.1.2.3 private, fd00::1 unique_local",
        ),
        "decision-refused-no-address": decision(
            "turn", "gone.example.com", 443, "refused", "no_address"
        ),
        "decision-closed-first-flight": decision(
            "turn",
            "api.anthropic.com",
            443,
            "closed",
            "server_name_mismatch; nothing was sent upstream",
        ),
        "decision-closed-by-client": decision(
            "build", "pkgs.registry.test", 443, "closed", "client_closed; nothing was sent upstream"
        ),
        "decision-refused-unparsed-head": decision(
            "turn", "api.example.com:80", None, "refused", "port_not_allowed"
        ),
        "decision-refused-no-target": decision("build", "-", None, "refused", "head_timeout"),
        "decision-failed-lookup": decision(
            "turn", "unresolvable.example.com", 443, "failed", "lookup_failed: no such host"
        ),
        "decision-failed-dial": decision(
            "build",
            "pkgs.registry.test",
            443,
            "failed",
            "dial_failed: 104.16.1.34:443 connection refused",
        ),
        "decision-relayed-mcp": decision("turn", "mcp", None, "relayed", "POST /mcp 200"),
        "decision-refused-mcp": decision(
            "turn", "mcp", None, "refused", "GET /mcp method_not_allowed"
        ),
        "decision-escaped-quote": decision(
            "turn", '"quoted\\', None, "refused", "malformed_request_line"
        ),
        "decision-no-newline": allowed[:-1],
        # Lines each side refuses, named by the rule.
        "subscribe-git-door": b'{"v":1,"door":"git"}\n',
        "subscribe-version-2": b'{"v":2,"door":"turn"}\n',
        "subscribe-unknown-door": b'{"v":1,"door":"shell"}\n',
        "subscribe-extra-key": b'{"v":1,"door":"turn","since":0}\n',
        "subscribe-as-array": b'[1,"turn"]\n',
        "subscribe-over-cap": b'{"v":1,' + b" " * 1003 + b'"door":"turn"}\n',
        "two-lines": b'{"v":1,"door":"turn"}\n{"v":1,"door":"build"}\n',
        "decision-git-door": decision("git", "github.com", 443, "refused", "not_in_plan"),
        "decision-empty-host": decision("turn", "", 443, "refused", "invalid_host"),
        "decision-empty-reason": decision("turn", "api.example.com", 443, "refused", ""),
        "decision-not-printable": decision(
            "turn", "api.example.com", 443, "refused", "not_public: caf\u00e9"
        ),
        "decision-control-char": decision(
            "turn", "api.example.com\t", 443, "refused", "invalid_host"
        ),
        "decision-text-too-long": decision("turn", "a" * 201, None, "refused", "invalid_host"),
        "decision-port-out-of-range": decision(
            "turn", "api.example.com", 65536, "allowed", "via 1.2.3.4:443"
        ),
        "decision-missing-port": (
            b'{"door":"turn","host":"api.example.com","verdict":"allowed",'
            b'"reason":"via 1.2.3.4:443"}\n'
        ),
        "decision-unknown-verdict": decision(
            "turn", "api.example.com", 443, "blocked", "not_in_plan"
        ),
        "decision-extra-key": allowed[:-2] + b',"at":"2026-01-01T00:00:00Z"}\n',
        "decision-over-cap": allowed[:1] + b" " * (2049 - len(allowed)) + allowed[1:],
    }
    write_corpus("egress_lines", small("egress_lines", seeds))
    write_dict(
        "egress_lines",
        [
            b'{"v":1,"door":', b'"v":', b'"door":', b'"turn"', b'"build"', b'"git"', b'"host":',
            b'"port":', b"443", b"null", b'"verdict":', b'"allowed"', b'"refused"', b'"failed"',
            b'"relayed"', b'"closed"', b'"reason":', b'"mcp"', b"via ", b"not_in_plan", b"not_public: ",
            b"no_address", b"lookup_failed: ", b"dial_failed: ", b"port_not_allowed",
            b"POST /mcp 200", b"; nothing was sent upstream", b"\\u0000", b"\\\"", b"\n",
        ],
    )


# === The gate's model relay requests (atelier_gate::model::route_target) ===

MODEL_ANTHROPIC = 1  # the routes byte: bit 0, the Anthropic route at https://api.anthropic.com
MODEL_OPENAI = 2  # bit 1, the OpenAI route at http://127.0.0.1:8080/v1
MODEL_GATEWAY = 4  # bit 2: the Anthropic route at a gateway's base with a path instead
MODEL_OPENAI_ORIGIN = 8  # bit 3: the OpenAI route at an origin alone instead
MODEL_BOTH = MODEL_ANTHROPIC | MODEL_OPENAI
MODEL_AT_GATEWAY = MODEL_BOTH | MODEL_GATEWAY | MODEL_OPENAI_ORIGIN
MODEL_GATEWAY_PATH = b"/v1/acct/gw/anthropic"


def model_request(routes, method, target):
    """The routes byte, then the request's method, a space and its target."""
    return bytes([routes]) + method + b" " + target


def model_route():
    def both(method, target):
        return model_request(MODEL_BOTH, method, target)

    def at_gateway(method, target):
        return model_request(MODEL_AT_GATEWAY, method, target)

    gw = b"/model/anthropic" + MODEL_GATEWAY_PATH
    seeds = {
        # Each endpoint relayed, below each kind of base.
        "ok-anthropic-messages": both(b"POST", b"/model/anthropic/v1/messages"),
        "ok-anthropic-messages-beta-query": both(
            b"POST", b"/model/anthropic/v1/messages?beta=true"
        ),
        "ok-anthropic-count-tokens": both(b"POST", b"/model/anthropic/v1/messages/count_tokens"),
        "ok-anthropic-models-query": both(b"GET", b"/model/anthropic/v1/models?limit=1000"),
        "ok-anthropic-one-model": both(b"GET", b"/model/anthropic/v1/models/claude-sonnet-4-5"),
        "ok-gateway-messages": at_gateway(b"POST", gw + b"/v1/messages?beta=true"),
        "ok-gateway-one-model": at_gateway(b"GET", gw + b"/v1/models/claude-opus-4"),
        "ok-openai-chat-completions-below-v1": both(b"POST", b"/model/openai/v1/chat/completions"),
        "ok-openai-v1-chat-completions-below-v1": both(
            b"POST", b"/model/openai/v1/v1/chat/completions"
        ),
        "ok-openai-origin-chat-completions": at_gateway(b"POST", b"/model/openai/chat/completions"),
        "ok-openai-origin-v1-chat-completions": at_gateway(
            b"POST", b"/model/openai/v1/chat/completions"
        ),
        "ok-openai-models-below-v1": both(b"GET", b"/model/openai/v1/models"),
        "ok-openai-origin-v1-models": at_gateway(b"GET", b"/model/openai/v1/models"),
        "ok-openai-origin-one-model": at_gateway(b"GET", b"/model/openai/models/gpt-4.1"),
        "ok-query-with-traversal-and-encodings": both(
            b"GET", b"/model/openai/v1/models?next=../../admin&after=a%2Fb%2e"
        ),
        "ok-empty-query": both(b"GET", b"/model/anthropic/v1/models?"),
        "ok-dots-inside-model-id": both(b"GET", b"/model/openai/v1/models/gpt-4.1-mini..."),
        "ok-other-encoding-in-model-id": both(b"GET", b"/model/anthropic/v1/models/a%20b%252e"),
        # The base path: the path must be the base's, then `/` and an endpoint.
        "bad-path-outside-base-path": both(b"POST", b"/model/openai/chat/completions"),
        "bad-path-base-path-prefix-not-a-segment": both(b"GET", b"/model/openai/v1x/models"),
        "bad-path-base-path-alone": both(b"GET", b"/model/openai/v1"),
        "bad-path-base-path-and-slash": both(b"GET", b"/model/openai/v1/"),
        "bad-path-base-path-upper-case": both(b"GET", b"/model/openai/V1/models"),
        "bad-path-base-path-encoded": both(b"GET", b"/model/openai/%761/models"),
        "bad-path-key-generate-outside-base-path": both(b"POST", b"/model/openai/key/generate"),
        "bad-path-gateway-other-account": at_gateway(
            b"POST", b"/model/anthropic/v1/other/gw/anthropic/v1/messages"
        ),
        "bad-path-gateway-other-provider": at_gateway(
            b"POST", b"/model/anthropic/v1/acct/gw/openai/chat/completions"
        ),
        "bad-path-gateway-origin": at_gateway(b"POST", b"/model/anthropic/v1/messages"),
        # Endpoints the relay does not serve, each with a method it serves.
        "endpoint-not-relayed-message-batches": both(
            b"POST", b"/model/anthropic/v1/messages/batches"
        ),
        "endpoint-not-relayed-batch-results": both(
            b"GET", b"/model/anthropic/v1/messages/batches/msgbatch_01/results"
        ),
        "endpoint-not-relayed-files": both(b"POST", b"/model/anthropic/v1/files"),
        "endpoint-not-relayed-legacy-complete": both(b"POST", b"/model/anthropic/v1/complete"),
        "endpoint-not-relayed-get-of-messages": both(b"GET", b"/model/anthropic/v1/messages"),
        "endpoint-not-relayed-post-of-models": both(b"POST", b"/model/anthropic/v1/models"),
        "endpoint-not-relayed-key-generate": at_gateway(b"POST", b"/model/openai/key/generate"),
        "endpoint-not-relayed-key-generate-below-v1": both(
            b"POST", b"/model/openai/v1/key/generate"
        ),
        "endpoint-not-relayed-openai-responses": both(b"POST", b"/model/openai/v1/responses"),
        "endpoint-not-relayed-openai-batches": both(b"POST", b"/model/openai/v1/batches"),
        "endpoint-not-relayed-model-id-of-two-segments": both(
            b"GET", b"/model/openai/v1/models/org/model"
        ),
        "endpoint-not-relayed-models-trailing-slash": both(b"GET", b"/model/openai/v1/models/"),
        "endpoint-not-relayed-chat-completions-on-anthropic": both(
            b"POST", b"/model/anthropic/v1/chat/completions"
        ),
        # Methods other than GET and POST, once the path is below the base path.
        "method-not-allowed-put": both(b"PUT", b"/model/anthropic/v1/messages"),
        "method-not-allowed-delete-model": both(b"DELETE", b"/model/openai/v1/models/ft-1"),
        "method-not-allowed-lower-case-post": both(b"post", b"/model/anthropic/v1/messages"),
        "method-not-allowed-extension-method": both(b"BREW", b"/model/anthropic/v1/files"),
        # Paths that could leave the base path.
        "bad-path-traversal": both(b"POST", b"/model/anthropic/v1/../../admin"),
        "bad-path-traversal-out-and-back": both(
            b"POST", b"/model/openai/v1/../v1/chat/completions"
        ),
        "bad-path-dot-segment": both(b"POST", b"/model/anthropic/./v1/messages"),
        "bad-path-traversal-at-end": both(b"GET", b"/model/openai/.."),
        "bad-path-encoded-traversal": both(b"GET", b"/model/openai/v1/%2e%2e/admin"),
        "bad-path-encoded-traversal-upper-case": both(b"GET", b"/model/openai/v1/%2E%2E/admin"),
        "bad-path-half-encoded-traversal": both(b"GET", b"/model/openai/v1/.%2e/admin"),
        "bad-path-encoded-slash": both(b"GET", b"/model/openai/v1/models/a%2F..%2Fadmin"),
        "bad-path-encoded-backslash": both(b"GET", b"/model/openai/v1/..%5cadmin"),
        "bad-path-backslash": both(b"GET", b"/model/openai/v1/..\\admin"),
        "bad-path-empty-segment": both(b"GET", b"/model/openai/v1//models"),
        "bad-path-empty-rest": both(b"POST", b"/model/anthropic/"),
        "bad-path-no-rest-query": both(b"POST", b"/model/anthropic?beta=true"),
        "bad-path-space": both(b"GET", b"/model/anthropic/v1/models/a b"),
        "bad-path-tab-between-dots": both(b"GET", b"/model/anthropic/.\t./admin"),
        "bad-path-control-byte-in-query": both(b"GET", b"/model/anthropic/v1/models?\x1b[2J"),
        "bad-path-fragment": both(b"POST", b"/model/anthropic/v1/messages#top"),
        "bad-path-non-ascii": both(b"GET", "/model/openai/v1/models/caf\u00e9".encode()),
        "bad-path-put-outside-base-path": both(b"PUT", b"/model/openai/models"),
        # No route.
        "not-found-unknown-api": both(b"GET", b"/model/gemini/v1beta/models"),
        "not-found-api-upper-case": both(b"POST", b"/model/Anthropic/v1/messages"),
        "not-found-route-not-in-plan": model_request(
            MODEL_ANTHROPIC, b"GET", b"/model/openai/v1/models"
        ),
        "not-found-no-routes": model_request(0, b"POST", b"/model/anthropic/v1/messages"),
        "not-found-prefix-alone": both(b"GET", b"/model"),
        "not-found-no-api": both(b"GET", b"/model/"),
        "not-found-encoded-traversal-as-api": both(b"GET", b"/model/%2e%2e/anthropic/v1"),
        "not-found-mcp-path": both(b"POST", b"/mcp"),
        "not-found-put-of-unknown-api": both(b"PUT", b"/model/gemini/v1/models"),
    }
    write_corpus("model_route", small("model_route", seeds))
    write_dict(
        "model_route",
        [
            b"GET ", b"POST ", b"PUT ", b"/model/", b"anthropic", b"openai", b"/v1",
            b"/v1/messages", b"/count_tokens", b"/v1/models", b"/models/", b"/chat/completions",
            MODEL_GATEWAY_PATH, b"?beta=true", b"?", b"#", b"/", b".", b"..", b"%2e", b"%2E",
            b"%2f", b"%2F", b"%5c", b"%5C", b"\\", b"\t", b"%25",
        ],
    )


def model_body():
    def request(content, **extra):
        body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": content}]}
        body.update(extra)
        return js(body)

    def tools(*tools):
        return request("hi", tools=list(tools))

    custom = {
        "name": "Read",
        "description": "reads a file",
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": {"type": "string"},
                "source": {"type": ["string", "null"]},
                "image_url": {"type": "string", "format": "uri"},
            },
        },
    }
    function = {
        "type": "function",
        "function": {"name": "read", "parameters": {"type": "object", "properties": {}}},
    }

    def image(source):
        return [{"type": "image", "source": source}]

    seeds = {
        "ok-claude-code-request": request(
            [{"type": "text", "text": "see https://example.com", "cache_control": {"type": "ephemeral"}}],
            tools=[custom],
            system=[{"type": "text", "text": "You are a coding agent."}],
            stream=True,
            metadata={"user_id": "u"},
        ),
        "ok-openai-request": js(
            {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [function], "stream": True}
        ),
        "ok-provider-defined-tools-the-agent-runs": tools(
            {"type": "bash_20250124", "name": "bash"},
            {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
            {"type": "memory_20250818", "name": "memory"},
            {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
        ),
        "ok-base64-image": request(
            image({"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="})
        ),
        "ok-data-url-image": request(
            [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]
        ),
        "ok-tool-input-names-a-url": request(
            [{"type": "tool_use", "id": "t1", "name": "fetch", "input": {"source": {"type": "url", "url": "https://example.com"}}}]
        ),
        "ok-search-result-citation": request(
            [{"type": "search_result", "source": "https://example.com/a", "title": "t", "content": []}]
        ),
        "ok-server-tool-result-in-history": request(
            [{"type": "web_search_tool_result", "tool_use_id": "s1", "content": []}]
        ),
        "tool-server-tool-use-in-history": request(
            [{"type": "server_tool_use", "id": "s1", "name": "web_fetch", "input": {"url": "https://x"}}]
        ),
        "ok-null-members": request("hi", tools=None, mcp_servers=None, container=None),
        "tool-web-search": tools({"type": "web_search_20250305", "name": "web_search", "max_uses": 5}),
        "tool-web-fetch": tools({"type": "web_fetch_20250910", "name": "web_fetch"}),
        "tool-code-execution": tools({"type": "code_execution_20250825", "name": "code_execution"}),
        "tool-mcp-toolset": tools({"type": "mcp_toolset", "mcp_server_name": "x"}),
        "tool-type-in-another-case": tools({"type": "Custom", "name": "a"}),
        "tool-repeated-type": request("hi")[:-1]
        + b',"tools":[{"type":"custom","name":"a","type":"web_fetch_20250910"}]}',
        "tool-repeated-tools": request("hi")[:-1]
        + b',"tools":[],"tools":[{"type":"web_search_20250305"}]}',
        "tool-type-member-in-capitals": request("hi")[:-1] + b',"tools":[{"TYPE":"web_search_20250305"}]}',
        "tool-mcp-servers": request(
            "hi", mcp_servers=[{"type": "url", "url": "https://mcp.example.com", "name": "x"}]
        ),
        "tool-mcp-servers-in-capitals": request("hi")[:-1] + b',"MCP_SERVERS":[]}',
        "tool-mcp-servers-long-s": request("hi")[:-1] + ',"mcp_\u017fervers":[]}'.encode(),
        "tool-mcp-servers-escaped": request("hi")[:-1] + b',"mcp\\u005fservers":{}}',
        "tool-container": request("hi", container={"id": "c"}),
        "tool-web-search-options": request("hi", web_search_options={}),
        "tool-plugins": request("hi", plugins=[{"id": "web"}]),
        "tool-mcp-servers-camel-case": request("hi", mcpServers=[{"url": "https://mcp.example.com"}]),
        "tool-extra-body": request("hi", extra_body={"tools": [{"type": "web_search_20250305"}]}),
        "tool-one-member-gateway-tool": tools({"urlContext": {}}),
        "tool-neither-type-nor-name": tools({"description": "d", "input_schema": {}}),
        "tool-legacy-functions": request("hi", functions=[{"google_search": {}}]),
        "tool-version-too-short": tools({"type": "bash_2025012", "name": "bash"}),
        "fetch-file-id-url": request([{"type": "file", "file": {"file_id": "https://example.com/a.pdf"}}]),
        "ok-file-references": request(
            [
                {"type": "file", "file": {"file_id": "file-abc123"}},
                {"type": "document", "source": {"type": "file", "file_id": "file_011"}},
            ]
        ),
        "ok-urls-in-schema-examples": request(
            "hi",
            tools=[{"name": "pic", "input_schema": {"examples": [{"image_url": "https://x/cat.png"}]}}],
            response_format={"type": "json_schema", "json_schema": {"schema": {"examples": [{"file_url": "https://x"}]}}},
        ),
        "fetch-image-source-url": request(image({"type": "url", "url": "https://example.com/a.png"})),
        "fetch-document-source-type-url": request([{"type": "document", "source": {"type": "url"}}]),
        "fetch-image-in-tool-result": request(
            [{"type": "tool_result", "tool_use_id": "t", "content": image({"type": "url", "url": "x"})}]
        ),
        "fetch-openai-image-url": request(
            [{"type": "image_url", "image_url": {"url": "https://example.com/?leak=1", "detail": "low"}}]
        ),
        "fetch-image-url-string": request([{"type": "image_url", "image_url": "http://x"}]),
        "fetch-file-url": request([{"type": "file", "file": {"file_url": "https://x"}}]),
        "models-fallback-list": request("hi", models=["openai/gpt-4o:online"]),
        "models-fallbacks": request("hi", fallbacks=[{"model": "perplexity/sonar"}]),
        "not-json-empty": b"",
        "not-json-array": b"[]",
        "not-json-text": b"model=m",
        "not-json-cut": request("hi")[:20],
        "not-json-trailing-bytes": b"{} {}",
        "not-json-tools-object": request("hi", tools={}),
        "not-json-tool-type-not-a-string": tools({"type": ["custom"]}),
        "not-json-invalid-utf-8": b'{"model":"\xff\xfe"}',
        "not-json-nesting-too-deep": b'{"a":' + b"[" * 200 + b"]" * 200 + b"}",
    }
    write_corpus("model_body", small("model_body", seeds))
    write_dict(
        "model_body",
        [
            b'"tools"', b'"type"', b'"source"', b'"url"', b'"image_url"', b'"file_url"', b'"input"',
            b'"mcp_servers"', b'"container"', b'"web_search_options"', b'"plugins"', b'"custom"',
            b'"function"', b'"bash_20250124"', b'"web_search_20250305"', b'"data:', b'"https://',
            b'"functions"', b'"name"', b'"input_schema"', b'"parameters"', b'"file_id"',
            b'"extra_body"', b'"urlContext"', b'"googleSearch"', b'"mcpServers"', b'"models"',
            b'"fallbacks"',
            b"\\u017f", b"\\u212a", b"null", b"{", b"}", b"[", b"]", b":", b",",
        ],
    )


# === Agent run stdout (atelier_agents::parse) ===

AGENT_MAX_LINE = 256  # the fuzz target's LineSplitter bound


def agent_run(step, lines, end=b"\n"):
    """One run's stdout: a first line holding only the byte that picks the chunk size (a
    line no parser reads), then `lines`, each ended by `end`."""
    assert 1 <= step <= 255
    body = [line if isinstance(line, bytes) else js(line) for line in lines]
    return bytes([step]) + b"\n" + b"".join(line + end for line in body)


CLAUDE_SESSION = "9f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f"


def claude_message(*blocks, session=False):
    line = {"type": "assistant", "message": {"role": "assistant", "content": list(blocks)}}
    if session:
        line["session_id"] = CLAUDE_SESSION
    return line


def claude_tool(name, tool_input, tool_id="toolu_01A"):
    return claude_message({"type": "tool_use", "id": tool_id, "name": name, "input": tool_input})


CLAUDE_INIT = {
    "type": "system",
    "subtype": "init",
    "cwd": "/var/lib/atelier/museo/sites/alpha",
    "session_id": CLAUDE_SESSION,
    "tools": ["Glob", "Grep", "Read", "Edit", "Write"],
    "model": "claude-sonnet-4-5-20250929",
    "permissionMode": "acceptEdits",
}
CLAUDE_RESULT = {
    "type": "result",
    "subtype": "success",
    "is_error": False,
    "duration_ms": 48213,
    "duration_api_ms": 45102,
    "num_turns": 9,
    "result": "Added the page.",
    "session_id": CLAUDE_SESSION,
    "total_cost_usd": 0.1423785,
}
SITE = "/var/lib/atelier/museo/sites/alpha"

OPENCODE_SESSION = "ses_494719016ffe85dkDMj0FPRbHK"


def opencode(kind, at, **rest):
    return dict(
        {"type": kind, "timestamp": 1767036059338 + at, "sessionID": OPENCODE_SESSION}, **rest
    )


def opencode_tool(at, tool, tool_input, status="completed"):
    return opencode(
        "tool_use",
        at,
        part={
            "type": "tool",
            "callID": "call_%d" % at,
            "tool": tool,
            "state": {"status": status, "input": tool_input},
        },
    )


def opencode_text(at, text):
    return opencode("text", at, part={"type": "text", "text": text})


def opencode_step_finish(at, cost, reason="tool-calls"):
    return opencode(
        "step_finish",
        at,
        part={
            "type": "step-finish",
            "reason": reason,
            "cost": cost,
            "tokens": {"input": 12011, "output": 188, "reasoning": 0},
        },
    )


OPENCODE_STEP_START = opencode(
    "step_start",
    0,
    part={"type": "step-start", "snapshot": "4b825dc642cb6eb9a060e54bf8d69288fbee4904"},
)
OPENCODE_DONE = opencode("done", 9150, reason="idle", rejected=[])

PI_SESSION = {
    "type": "session",
    "version": 3,
    "id": "01a23c28-4509-718b-a52a-005e5c4b4409",
    "timestamp": "2026-12-03T13:46:41.807Z",
    "cwd": "/tmp/pilab/ws",
}


def pi_end(content, at, stop="stop", cost=None, **rest):
    message = {"role": "assistant", "content": content}
    if cost is not None:
        message.update(model="lab-model", usage={"cost": {"total": cost}})
    message.update(stopReason=stop, timestamp=1796305602039 + at, **rest)
    return {"type": "message_end", "message": message}


PI_USER = {
    "type": "message_end",
    "message": {
        "role": "user",
        "content": [{"type": "text", "text": "Write the page"}],
        "timestamp": 1796305601870,
    },
}
PI_WRITE = {
    "type": "toolCall",
    "id": "call_lab_3",
    "name": "write",
    "arguments": {"content": "<h1>pi</h1>", "path": "/tmp/pilab/ws/src/index.html"},
}


def agent_stream():
    seeds = {
        # Claude Code, --output-format stream-json.
        "claude-text-and-result": agent_run(
            10,
            [
                CLAUDE_INIT,
                claude_message(
                    {
                        "type": "text",
                        "text": "I'll start by looking at the current structure of the site.",
                    },
                    session=True,
                ),
                CLAUDE_RESULT,
            ],
        ),
        "claude-tools": agent_run(
            64,
            [
                claude_tool("Glob", {"pattern": "**/*"}),
                claude_tool("Read", {"file_path": SITE + "/src/index.html"}),
                claude_tool(
                    "Edit",
                    {
                        "file_path": SITE + "/src/index.html",
                        "old_string": "<h1>Museo</h1>",
                        "new_string": "<h1>Colecci\u00f3n</h1>",
                    },
                ),
                claude_tool("Grep", {"pattern": "collection\\.html", "path": SITE + "/src"}),
                claude_tool("Bash", {"command": "npm run build", "description": "Build the site"}),
                claude_tool(
                    "mcp__dedalo_publication__search_records",
                    {"query": "cer\u00e1mica", "limit": 10},
                ),
                claude_tool("TodoWrite", {"todos": []}),
            ],
        ),
        "claude-thinking-then-text": agent_run(
            32,
            [
                claude_message(
                    {
                        "type": "thinking",
                        "thinking": "First find what the API has.",
                        "signature": "EqQBCkYIBxgCKkB",
                    },
                    {"type": "text", "text": "Let me see what the publication API holds."},
                ),
            ],
        ),
        "claude-text-and-tool-in-one": agent_run(
            7,
            [
                claude_message(
                    {"type": "text", "text": "Writing it."},
                    {
                        "type": "tool_use",
                        "id": "toolu_01W",
                        "name": "Write",
                        "input": {"file_path": "src/a.html", "content": "<p>a</p>"},
                    },
                ),
            ],
        ),
        "claude-tool-results": agent_run(
            16,
            [
                {
                    "type": "user",
                    "message": {
                        "role": "user",
                        "content": [
                            {
                                "tool_use_id": "toolu_01A",
                                "type": "tool_result",
                                "content": "File created successfully",
                            }
                        ],
                    },
                    "session_id": CLAUDE_SESSION,
                },
                {
                    "type": "user",
                    "message": {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "content": "No such tool available: WebFetch",
                                "is_error": True,
                                "tool_use_id": "toolu_02",
                            }
                        ],
                    },
                },
            ],
        ),
        "claude-max-turns": agent_run(
            128,
            [
                claude_tool("WebFetch", {"url": "https://example.org/", "prompt": "Summarize"}),
                {
                    "type": "result",
                    "subtype": "error_max_turns",
                    "is_error": True,
                    "duration_ms": 201877,
                    "num_turns": 51,
                    "session_id": CLAUDE_SESSION,
                    "total_cost_usd": 1.25,
                },
            ],
        ),
        "claude-api-error": agent_run(
            10,
            [
                claude_message(
                    {"type": "text", "text": "Invalid API key \u00b7 Please run /login"}
                ),
                {
                    "type": "result",
                    "subtype": "success",
                    "is_error": True,
                    "duration_ms": 512,
                    "num_turns": 1,
                    "result": "Invalid API key",
                    "session_id": CLAUDE_SESSION,
                },
            ],
        ),
        "claude-partial-messages": agent_run(
            10,
            [
                {
                    "type": "stream_event",
                    "event": {
                        "type": "content_block_delta",
                        "delta": {"type": "text_delta", "text": "par"},
                    },
                },
                {
                    "type": "system",
                    "subtype": "compact_boundary",
                    "compact_metadata": {"trigger": "auto", "pre_tokens": 155000},
                },
            ],
        ),
        "claude-wrong-types": agent_run(
            10,
            [
                {"type": "assistant", "message": {"content": "a string, not blocks"}},
                {
                    "type": "assistant",
                    "message": {
                        "content": [
                            {"type": "tool_use", "name": 42},
                            {"type": "text", "text": 7},
                            {"type": "text", "text": "still here"},
                        ]
                    },
                },
                {
                    "type": "assistant",
                    "message": {
                        "content": [
                            {
                                "type": "tool_use",
                                "name": "Read",
                                "input": {"file_path": 7, "path": "/fallback"},
                            }
                        ]
                    },
                },
                {
                    "type": "assistant",
                    "message": {
                        "content": [{"type": "tool_use", "name": "LS", "input": "not an object"}]
                    },
                },
            ],
        ),
        "claude-option-shaped-session": agent_run(
            10,
            [
                {
                    "type": "result",
                    "subtype": "success",
                    "is_error": False,
                    "duration_ms": "12",
                    "session_id": "--dangerously-skip-permissions",
                    "total_cost_usd": "0.5",
                },
            ],
        ),
        "claude-crlf": agent_run(
            10,
            [CLAUDE_INIT, claude_message({"type": "text", "text": "Done."}), CLAUDE_RESULT],
            end=b"\r\n",
        ),
        # opencode, run --format json.
        "opencode-turn-with-done": agent_run(
            10,
            [
                OPENCODE_STEP_START,
                opencode_text(700, "I'll look at the site's pages first."),
                opencode_tool(1400, "glob", {"pattern": "src/**/*.html"}),
                opencode_tool(2100, "read", {"filePath": SITE + "/src/index.html"}),
                opencode_step_finish(2800, 0.015625),
                opencode_tool(
                    3500, "write", {"filePath": "src/list.html", "content": "<h1>Lista</h1>\n"}
                ),
                opencode_text(4200, "Added a Colecci\u00f3n page."),
                opencode_step_finish(4900, 0.00390625, reason="stop"),
                OPENCODE_DONE,
            ],
        ),
        "opencode-tool-targets": agent_run(
            48,
            [
                opencode_tool(
                    100, "bash", {"command": "ls -la", "description": "List files"}, status="error"
                ),
                opencode_tool(200, "webfetch", {"url": "https://example.org/", "format": "text"}),
                opencode_tool(300, "list", {"path": SITE + "/src"}),
                opencode_tool(
                    400,
                    "dedalo_publication_search_records",
                    {"database": "museo", "query": "cer\u00e1mica"},
                ),
                opencode_tool(500, "todowrite", {"todos": []}),
            ],
        ),
        "opencode-no-done-line": agent_run(
            10,
            [
                OPENCODE_STEP_START,
                opencode_text(700, "Reading the brief."),
                opencode_step_finish(1400, 0),
                opencode_text(2100, "   "),
            ],
        ),
        "opencode-errors": agent_run(
            10,
            [
                opencode(
                    "error",
                    300,
                    error={
                        "name": "APIError",
                        "data": {
                            "message": "Rate limit exceeded, retry in 20s",
                            "statusCode": 429,
                            "isRetryable": True,
                        },
                    },
                ),
                opencode("error", 400, error={"name": "UnknownError"}),
                opencode("error", 500, error={"message": "socket hang up"}),
            ],
        ),
        "opencode-flat-frames": agent_run(
            10,
            [
                {"text": "Hello from a flat frame"},
                {"tool": "edit"},
                {"type": "session"},
                {"type": "session", "id": "-x"},
                {"type": "session", "id": "ses_flat01"},
                {"type": "session", "id": "ses_flat02"},
            ],
        ),
        "opencode-two-done-lines": agent_run(
            10, [opencode_step_finish(100, 0.5), OPENCODE_DONE, OPENCODE_DONE]
        ),
        # pi, --mode json --print.
        "pi-turn": agent_run(
            10,
            [
                PI_SESSION,
                {"type": "agent_start"},
                {"type": "turn_start"},
                PI_USER,
                pi_end([PI_WRITE], 0, stop="toolUse"),
                {
                    "type": "tool_execution_start",
                    "toolCallId": "call_lab_3",
                    "toolName": "write",
                    "args": {"path": "/tmp/pilab/ws/src/index.html"},
                },
                {
                    "type": "tool_execution_end",
                    "toolCallId": "call_lab_3",
                    "toolName": "write",
                    "result": {
                        "content": [{"type": "text", "text": "Successfully wrote 11 bytes"}]
                    },
                    "isError": False,
                },
                {
                    "type": "message_end",
                    "message": {
                        "role": "toolResult",
                        "toolCallId": "call_lab_3",
                        "toolName": "write",
                        "content": [],
                        "isError": False,
                        "timestamp": 1796305602190,
                    },
                },
                pi_end(
                    [{"type": "text", "text": "Done: the home page is written."}], 151, cost=0.0002
                ),
                {
                    "type": "turn_end",
                    "message": {"role": "assistant", "content": [], "stopReason": "stop"},
                    "toolResults": [],
                },
                {"type": "agent_end", "messages": []},
            ],
        ),
        "pi-message-updates": agent_run(
            24,
            [
                PI_SESSION,
                {
                    "type": "message_update",
                    "assistantMessageEvent": {
                        "type": "text_delta",
                        "contentIndex": 0,
                        "delta": "Done: the home ",
                    },
                    "message": {
                        "role": "assistant",
                        "content": [{"type": "text", "text": "Done: the home "}],
                    },
                },
                {
                    "type": "message_start",
                    "message": {
                        "role": "assistant",
                        "content": [],
                        "stopReason": "stop",
                        "timestamp": 1796305602190,
                    },
                },
                pi_end(
                    [
                        {"type": "text", "text": "   "},
                        {
                            "type": "toolCall",
                            "id": "c2",
                            "name": "grep",
                            "arguments": {"pattern": "<h1>"},
                        },
                    ],
                    10,
                ),
                {"type": "agent_end", "messages": []},
            ],
        ),
        "pi-provider-error": agent_run(
            10,
            [
                PI_SESSION,
                PI_USER,
                pi_end([], 0, stop="error", errorMessage="Connection error."),
                {"type": "agent_end", "messages": []},
            ],
        ),
        "pi-aborted": agent_run(10, [PI_SESSION, pi_end([], 0, stop="aborted")]),
        "pi-error-then-recovered": agent_run(
            10,
            [
                PI_SESSION,
                pi_end([], 0, stop="error", errorMessage="429 Too Many Requests"),
                pi_end([{"type": "text", "text": "Retried and done."}], 900, cost=0.001),
                {"type": "agent_end", "messages": []},
            ],
        ),
        "pi-no-agent-end": agent_run(
            10, [PI_SESSION, pi_end([{"type": "text", "text": "Cut short."}], 5)]
        ),
        # atelier-agent's own lines.
        "atelier-turn": agent_run(
            10,
            [
                {
                    "type": "warning",
                    "message": "the MCP server dedalo_publication did not answer, "
                    "so its tools are not offered this turn",
                },
                {"type": "tool", "id": "call_1", "name": "read", "input": {"path": "index.html"}},
                {"type": "tool_result", "id": "call_1", "name": "read", "ok": True},
                {"type": "text", "text": "I'll add the about page and retitle the home page."},
                {
                    "type": "tool",
                    "id": "call_2",
                    "name": "write",
                    "input": {"path": "about.html", "content": "<p>About</p>\n"},
                },
                {"type": "file_change", "path": "about.html", "kind": "created"},
                {"type": "tool_result", "id": "call_2", "name": "write", "ok": True},
                {
                    "type": "tool",
                    "id": "call_3",
                    "name": "edit",
                    "input": {
                        "path": "index.html",
                        "old_string": "<h1>Old title</h1>",
                        "new_string": "<h1>New title</h1>",
                    },
                },
                {"type": "file_change", "path": "index.html", "kind": "modified"},
                {"type": "tool", "id": "call_5", "name": "glob", "input": {"pattern": "**/*.html"}},
                {
                    "type": "tool",
                    "id": "call_6",
                    "name": "mcp__dedalo_publication__search_records",
                    "input": {"query": "portrait", "limit": 3},
                },
                {"type": "text", "text": "Done: about page added, title changed."},
                {
                    "type": "result",
                    "stop": "end_turn",
                    "rounds": 4,
                    "usage": {
                        "input_tokens": 4210,
                        "output_tokens": 312,
                        "cache_read_tokens": 3900,
                    },
                    "cost_usd": 0.0123,
                    "duration_ms": 2841,
                    "resume": "5d1f0c2b7e440b6c5a382f8e4d6a9a51",
                },
            ],
        ),
        "atelier-refused-tool": agent_run(
            10,
            [
                {
                    "type": "tool",
                    "id": "call_4",
                    "name": "write",
                    "input": {"path": "evil/pwned.html", "content": "x"},
                },
                {
                    "type": "tool_result",
                    "id": "call_4",
                    "name": "write",
                    "ok": False,
                    "error": "refused: symlink (evil is a symbolic link; links are never followed)",
                },
                {"type": "tool", "id": "c5", "name": "edit", "input": '{"path": "a'},
                {"type": "tool", "id": "c6", "input": {}},
                {"type": "file_change", "path": "", "kind": "created"},
            ],
        ),
        "atelier-max-turns": agent_run(
            10,
            [
                {"type": "text", "text": "   "},
                {
                    "type": "tool",
                    "id": "call_2",
                    "name": "read",
                    "input": {"path": "src/../../etc/passwd"},
                },
                {
                    "type": "result",
                    "stop": "max_turns",
                    "rounds": 50,
                    "usage": {"input_tokens": 800, "output_tokens": 40},
                    "duration_ms": 911,
                    "resume": "9a513d1f0c2b7e440b6c5a382f8e4d6a",
                },
            ],
        ),
        "atelier-provider-error": agent_run(
            10,
            [
                {
                    "type": "error",
                    "reason": "provider",
                    "message": "Custom Provider request failed: error sending request",
                    "resume": "67849ef3df0a7a8217ff79d83bca2561",
                },
            ],
        ),
        "atelier-bad-result-fields": agent_run(
            10,
            [
                {"type": "result", "duration_ms": -5, "resume": "--settings", "cost_usd": "1"},
                {"type": "result", "duration_ms": 1e308, "resume": "a" * 129, "cost_usd": 1e308},
                {"type": "error"},
            ],
        ),
        # What every parser must survive.
        "noise": agent_run(
            10,
            [
                b"", b"Warning: no stdin data received in 3s, proceeding without it.", b"   ",
                b'["an","array"]', b"null",
                b'{"type":"assistant","message":{"content":[{"type":"text","text":"cut off',
            ],
        ),
        "bytewise-utf8": agent_run(
            1, [claude_message({"type": "text", "text": "Colecci\u00f3n \U0001f980 lista"})]
        ),
        "invalid-utf8": agent_run(
            10, [b'{"type":"text","text":"caf\xc3"}', b'{"type":"text","text":"\xff\xfe ok"}']
        ),
        "no-final-newline": agent_run(10, [{"type": "text", "text": "first"}])
        + js({"type": "text", "text": "last, unterminated"}),
        "lone-cr-inside-line": agent_run(10, [b'{"type":"text",\r"text":"a\\rb"}']),
        "over-long-line": agent_run(
            10,
            [
                {"type": "text", "text": "kept before"},
                claude_message({"type": "text", "text": "x" * 300}),
                {"type": "text", "text": "kept after"},
            ],
        ),
    }
    for name, data in seeds.items():
        if name != "over-long-line":
            for line in data.split(b"\n"):
                assert len(line) <= AGENT_MAX_LINE, (name, len(line), line[:80])
    write_corpus("agent_stream", small("agent_stream", seeds))
    write_dict(
        "agent_stream",
        [
            b'"type":', b'"system"', b'"init"', b'"assistant"', b'"user"', b'"result"',
            b'"message":', b'"content":', b'"text"', b'"text":', b'"thinking"', b'"tool_use"',
            b'"tool_result"', b'"name":', b'"input":', b'"file_path":', b'"path":', b'"command":',
            b'"query":', b'"pattern":', b'"url":', b'"filePath":', b'"session_id":',
            b'"total_cost_usd":', b'"duration_ms":', b'"is_error":', b'"subtype":',
            b'"error_max_turns"', b'"sessionID":', b'"timestamp":', b'"part":', b'"tool":',
            b'"state":', b'"step_start"', b'"step_finish"', b'"cost":', b'"error"', b'"error":',
            b'"data":', b'"done"', b'"session"', b'"id":', b'"message_end"', b'"message_update"',
            b'"agent_end"', b'"role":', b'"toolCall"', b'"arguments":', b'"usage":', b'"total":',
            b'"stopReason":', b'"errorMessage":', b'"aborted"', b'"file_change"', b'"resume":',
            b'"cost_usd":', b'"reason":', b'"warning"', b"\r\n", b"1e308", b"-1", b"null", b"[]",
            b"{}",
        ],
    )


# === Chat images (atelier_chatd::images) ===

JPEG_ZIGZAG = [
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27,
    20, 13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58,
    59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
]
# The quantization and Huffman tables most JPEG encoders write.
LUMA_QUANT = [
    16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55, 14, 13, 16, 24, 40, 57, 69, 56,
    14, 17, 22, 29, 51, 87, 80, 62, 18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113,
    92, 49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99,
]
CHROMA_QUANT = [
    17, 18, 24, 47, 99, 99, 99, 99, 18, 21, 26, 66, 99, 99, 99, 99, 24, 26, 56, 99, 99, 99, 99, 99,
    47, 66, 99, 99, 99, 99, 99, 99,
] + [99] * 32
DC_LUMA = ([0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0], bytes(range(12)))
DC_CHROMA = ([0, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0], bytes(range(12)))
AC_LUMA = (
    [0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 0x7D],
    bytes.fromhex(
        "01020300041105122131410613516107227114328191a1082342b1c11552d1f02433627282090a161718191a"
        "25262728292a3435363738393a434445464748494a535455565758595a636465666768696a73747576777879"
        "7a838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9"
        "cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9fa"
    ),
)
AC_CHROMA = (
    [0, 2, 1, 2, 4, 4, 3, 4, 7, 5, 4, 4, 0, 1, 2, 0x77],
    bytes.fromhex(
        "000102031104052131061241510761711322328108144291a1b1c109233352f0156272d10a162434e125f1"
        "1718191a262728292a35363738393a434445464748494a535455565758595a636465666768696a7374757677"
        "78797a82838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6"
        "c7c8c9cad2d3d4d5d6d7d8d9dae2e3e4e5e6e7e8e9eaf2f3f4f5f6f7f8f9fa"
    ),
)
# The DCT's cosines in fixed point (2^13): the coefficients are then exact integers, the same on
# every machine.
DCT_COS = [
    [round((math.sqrt(0.5) if u == 0 else 1.0) * math.cos((2 * x + 1) * u * math.pi / 16) * 8192)
     for x in range(8)]
    for u in range(8)
]


def rounded_div(n, d):
    return (2 * n + d) // (2 * d) if n >= 0 else -((-2 * n + d) // (2 * d))


def huffman_codes(spec):
    bits, values = spec
    assert sum(bits) == len(values)
    codes, code, at = {}, 0, 0
    for length, count in enumerate(bits, 1):
        for _ in range(count):
            codes[values[at]] = (code, length)
            code += 1
            at += 1
        code <<= 1
    return codes


class BitWriter:
    """Entropy-coded bits, most significant first, a 0x00 stuffed after every 0xFF."""

    def __init__(self):
        self.out = bytearray()
        self.acc = 0
        self.n = 0

    def write(self, value, length):
        for i in range(length - 1, -1, -1):
            self.acc = (self.acc << 1) | ((value >> i) & 1)
            self.n += 1
            if self.n == 8:
                self.out.append(self.acc)
                if self.acc == 0xFF:
                    self.out.append(0)
                self.acc = self.n = 0

    def flush(self):
        while self.n:
            self.write(1, 1)


def jpeg_segment(marker, body):
    return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body


def jpeg_block(bits, block, quant, prev_dc, dc_codes, ac_codes):
    """Transforms, quantizes and codes one 8x8 block (level-shifted samples); returns its DC."""
    coeffs = [0] * 64
    for v in range(8):
        for u in range(8):
            s = sum(
                DCT_COS[v][y] * sum(block[y * 8 + x] * DCT_COS[u][x] for x in range(8))
                for y in range(8)
            )
            coeffs[v * 8 + u] = rounded_div(s, 4 * 8192 * 8192 * quant[v * 8 + u])
    zz = [coeffs[JPEG_ZIGZAG[k]] for k in range(64)]

    def magnitude(value):
        size = abs(value).bit_length()
        return size, (value if value >= 0 else value + (1 << size) - 1)

    size, extra = magnitude(zz[0] - prev_dc)
    bits.write(*dc_codes[size])
    bits.write(extra, size)
    run = 0
    for c in zz[1:]:
        if c == 0:
            run += 1
            continue
        while run > 15:
            bits.write(*ac_codes[0xF0])
            run -= 16
        size, extra = magnitude(c)
        bits.write(*ac_codes[(run << 4) | size])
        bits.write(extra, size)
        run = 0
    if run:
        bits.write(*ac_codes[0x00])
    return zz[0]


def jpeg(width, height, pixel, color=True, subsample=False, restart=0, extra=b"", quality=75):
    """A baseline JPEG of `pixel(x, y) -> (r, g, b)`: SOI, JFIF, the `extra` segments, the
    standard tables scaled to `quality`, YCbCr (4:2:0 when `subsample`) or greyscale, a restart
    marker every `restart` MCUs when not 0, EOI."""

    def ycc(x, y):
        r, g, b = pixel(min(x, width - 1), min(y, height - 1))
        luma = (77 * r + 150 * g + 29 * b + 128) >> 8
        cb = ((-43 * r - 85 * g + 128 * b + 128) >> 8) + 128
        cr = ((128 * r - 107 * g - 21 * b + 128) >> 8) + 128
        return [min(255, max(0, c)) for c in (luma, cb, cr)]

    scale = 5000 // quality if quality < 50 else 200 - 2 * quality
    quants = [
        [min(255, max(1, (q * scale + 50) // 100)) for q in t] for t in (LUMA_QUANT, CHROMA_QUANT)
    ]
    # (component id, sampling factor, table index)
    comps = [(1, 2 if color and subsample else 1, 0)] + ([(2, 1, 1), (3, 1, 1)] if color else [])
    mcu = 16 if color and subsample else 8
    out = b"\xff\xd8" + jpeg_segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00") + extra
    out += jpeg_segment(
        0xDB,
        b"".join(
            bytes([i]) + bytes(q[JPEG_ZIGZAG[k]] for k in range(64))
            for i, q in enumerate(quants[: 2 if color else 1])
        ),
    )
    out += jpeg_segment(
        0xC0,
        struct.pack(">BHHB", 8, height, width, len(comps))
        + b"".join(bytes([cid, (s << 4) | s, tq]) for cid, s, tq in comps),
    )
    tables = [(0x00, DC_LUMA), (0x10, AC_LUMA)] + (
        [(0x01, DC_CHROMA), (0x11, AC_CHROMA)] if color else []
    )
    out += jpeg_segment(
        0xC4, b"".join(bytes([tc]) + bytes(bits) + values for tc, (bits, values) in tables)
    )
    if restart:
        out += jpeg_segment(0xDD, struct.pack(">H", restart))
    out += jpeg_segment(
        0xDA,
        bytes([len(comps)])
        + b"".join(bytes([cid, tq * 0x11]) for cid, _, tq in comps)
        + b"\x00\x3f\x00",
    )
    dc_codes = [huffman_codes(DC_LUMA), huffman_codes(DC_CHROMA)]
    ac_codes = [huffman_codes(AC_LUMA), huffman_codes(AC_CHROMA)]
    bits = BitWriter()
    prev = [0, 0, 0]
    count = 0
    for my in range(-(-height // mcu)):
        for mx in range(-(-width // mcu)):
            if restart and count and count % restart == 0:
                bits.flush()
                bits.out += bytes([0xFF, 0xD0 + (count // restart - 1) % 8])
                prev = [0, 0, 0]
            count += 1
            for ci, (_, s, tq) in enumerate(comps):
                f = mcu // 8 if ci else 1  # chroma pixels averaged per sample
                for by in range(s):
                    for bx in range(s):
                        block = []
                        for y in range(8):
                            for x in range(8):
                                x0, y0 = mx * mcu + (bx * 8 + x) * f, my * mcu + (by * 8 + y) * f
                                total = sum(
                                    ycc(x0 + i, y0 + j)[ci] for i in range(f) for j in range(f)
                                )
                                block.append(rounded_div(total, f * f) - 128)
                        prev[ci] = jpeg_block(
                            bits, block, quants[tq], prev[ci], dc_codes[tq], ac_codes[tq]
                        )
    bits.flush()
    return out + bytes(bits.out) + b"\xff\xd9"


def picture(x, y):
    """A colour gradient crossed by a dark diagonal: smooth areas and an edge."""
    if x == y:
        return (30, 30, 60)
    return tuple(min(255, max(0, c)) for c in (40 + 12 * x, 90 + 8 * y, 200 - 6 * (x + y)))


def greys(x, y):
    v = 30 + 25 * x + 3 * y
    return (v, v, v)


def exif_orientation(value):
    """An APP1 Exif segment (big-endian TIFF) whose one tag is the orientation."""
    ifd = (
        struct.pack(">H", 1) + struct.pack(">HHIHH", 0x0112, 3, 1, value, 0) + struct.pack(">I", 0)
    )
    return jpeg_segment(0xE1, b"Exif\x00\x00" + b"MM\x00\x2a" + struct.pack(">I", 8) + ifd)


def with_frame(data, width, height):
    """`data` with its first frame header's dimensions replaced."""
    at = data.index(b"\xff\xc0") + 5
    return data[:at] + struct.pack(">HH", height, width) + data[at + 4 :]


def user_image():
    gray = jpeg(8, 8, greys, color=False)
    color = jpeg(16, 16, picture, subsample=True)
    tiny = jpeg(1, 1, lambda x, y: (128, 128, 128), color=False)
    sos = color.index(b"\xff\xda")
    dqt = color.index(b"\xff\xdb")
    b64 = lambda data: base64.b64encode(data)
    seeds = {
        "jpeg-gray-8x8": gray,
        "jpeg-gray-1x1": tiny,
        "jpeg-color-420-16x16": color,
        "jpeg-color-444-16x16": jpeg(16, 16, picture),
        "jpeg-color-420-13x9": jpeg(13, 9, picture, subsample=True),
        "jpeg-restart-interval": jpeg(32, 16, picture, restart=2),
        "jpeg-exif-orientation-6": jpeg(16, 8, picture, extra=exif_orientation(6)),
        "jpeg-comment-and-fill-bytes": (
            color[:2] + jpeg_segment(0xFE, b"Created with a phone") + b"\xff\xff" + color[2:]
        ),
        # Refused by the walk or the decode, each as its name says.
        "jpeg-truncated-scan": color[: sos + 40],
        "jpeg-truncated-segment": color[: dqt + 30],
        "jpeg-no-eoi": color[:-2],
        "jpeg-no-frame": b"\xff\xd8\xff\xd9",
        "jpeg-scan-before-frame": color[:2] + color[sos:],
        "jpeg-zero-height": with_frame(color, 16, 0),
        "jpeg-too-wide": with_frame(color, 1600, 16),
        "jpeg-too-many-pixels": with_frame(color, 1500, 1100),
        "jpeg-frame-larger-than-scan": with_frame(color, 64, 64),
        "jpeg-second-frame-header": (
            color[:sos]
            + jpeg_segment(0xC0, struct.pack(">BHHB", 8, 32, 32, 1) + b"\x01\x11\x00")
            + color[sos:]
        ),
        "jpeg-bad-length": b"\xff\xd8\xff\xe0\x00\x01",
        "jpeg-not-a-marker": b"\xff\xd8\x00" + color[2:],
        "png-signature": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
        # The base64 text a browser sends.
        "base64-jpeg-gray-8x8": b64(gray),
        "base64-jpeg-color-420": b64(color),
        "base64-jpeg-gray-1x1": b64(tiny),
        "base64-one-padding": b"TWE=",
        "base64-two-padding": b"TQ==",
        "base64-jpeg-magic": b"/9j/",
        # Base64 that is not canonical.
        "base64-unused-bits-set": b"TR==",
        "base64-missing-padding": b64(gray).rstrip(b"="),
        "base64-extra-padding": b"/9j/4A===",
        "base64-url-alphabet": b64(gray).replace(b"+", b"-").replace(b"/", b"_"),
        "base64-line-wrapped": base64.encodebytes(gray),
        "base64-data-url": b"data:image/jpeg;base64," + b64(tiny),
        "base64-padding-inside": b"TQ==TWFu",
    }
    write_corpus("user_image", small("user_image", seeds))
    write_dict(
        "user_image",
        [
            b"\xff\xd8", b"\xff\xd9", b"\xff\xc0", b"\xff\xc1", b"\xff\xc2", b"\xff\xc4",
            b"\xff\xcc", b"\xff\xdb", b"\xff\xda", b"\xff\xdd", b"\xff\xd0", b"\xff\xd7",
            b"\xff\xe0", b"\xff\xe1", b"\xff\xee", b"\xff\xfe", b"\xff\x00", b"\xff\xff",
            b"\xff\x01", b"JFIF\x00", b"Exif\x00\x00", b"MM\x00*", b"II*\x00", b"\x01\x12\x00\x03",
            b"Adobe", b"/9j/", b"/9j/4AAQSkZJRg", b"=", b"==",
        ],
    )


# === Who is asking (atelier_chatd::auth, atelier_chatd::cms) ===

SESSION_VALUE = b"Jx3vS0eQmV7hT1bK9pLw2ZcY8rNf4GdA6uIo5EsHkXq"  # 43 characters, as the CMS's are


def session_identity():
    def cms(status, body):
        # The first byte picks the status: 200, 401, 403, 500 for 0..3.
        return bytes([[200, 401, 403, 500].index(status)]) + (
            body if isinstance(body, bytes) else js(body)
        )

    cookie = b"instatic_admin_session="
    admin = {
        "user": {"id": "V1StGXR8_Z5jdHi6B-myT", "email": "ana@museo.example", "name": "Ana"},
        "role": {"slug": "admin"},
        "capabilities": [
            "ai.chat",
            "ai.tools.write",
            "ai.providers.manage",
            "ai.audit.read",
            "site.read",
        ],
    }
    seeds = {
        "cookie-alone": cookie + SESSION_VALUE,
        "cookie-among-others": b"theme=dark; " + cookie + SESSION_VALUE + b"; lang=sk",
        "cookie-no-spaces": b"a=1;" + cookie + SESSION_VALUE + b";b=2",
        "cookie-padded": b"a=1;   " + cookie + SESSION_VALUE + b"  ; b=2",
        "cookie-quoted": cookie + b'"' + SESSION_VALUE + b'"',
        "cookie-value-with-equals": cookie + b"ab=c=",
        "cookie-duplicate-first-wins": cookie + b"one; " + cookie + b"two",
        "cookie-at-limit": cookie + b"a" * 512,
        # Cookie headers with no usable session.
        "cookie-empty-value": cookie,
        "cookie-empty-first-decides": cookie + b"; " + cookie + SESSION_VALUE,
        "cookie-no-equals": b"instatic_admin_session",
        "cookie-missing": b"theme=dark; lang=sk",
        "cookie-name-suffix": b"instatic_admin_session2=abc",
        "cookie-name-prefix": b"xinstatic_admin_session=abc",
        "cookie-space-before-equals": b"instatic_admin_session =abc",
        "cookie-other-case": b"Instatic_Admin_Session=abc",
        "cookie-over-limit": cookie + b"a" * 513,
        # The CMS's answers to GET /admin/api/cms/me, by status.
        "cms-200-admin": cms(200, admin),
        "cms-200-editor": cms(
            200,
            {
                "user": {"id": "u_7f3a9c"},
                "role": {"slug": "editor"},
                "capabilities": ["ai.chat", "site.read", "site.content.edit", "site.style.edit"],
            },
        ),
        "cms-200-no-capabilities": cms(200, {"user": {"id": "u"}, "capabilities": []}),
        "cms-200-id-at-limit": cms(200, {"user": {"id": "a" * 128}, "capabilities": ["ai.chat"]}),
        "cms-401-unauthorized": cms(401, {"error": "Unauthorized"}),
        "cms-401-mfa-required": cms(401, {"error": "mfa_required"}),
        "cms-401-html": cms(401, b"<html><body>Sign in</body></html>"),
        "cms-401-empty": cms(401, b""),
        "cms-403-forbidden": cms(403, {"error": "Forbidden"}),
        "cms-500-empty": cms(500, b""),
        "cms-500-error": cms(500, {"error": "Internal Server Error"}),
        # 200 answers that are not a signed-in user.
        "cms-200-html": cms(200, b"<html>"),
        "cms-200-missing-capabilities": cms(200, {"user": {"id": "u"}}),
        "cms-200-numeric-id": cms(200, {"user": {"id": 7}, "capabilities": []}),
        "cms-200-empty-id": cms(200, {"user": {"id": ""}, "capabilities": []}),
        "cms-200-spaced-id": cms(200, {"user": {"id": "a b"}, "capabilities": []}),
        "cms-200-non-ascii-id": cms(200, {"user": {"id": "us\u00e9r"}, "capabilities": []}),
        "cms-200-long-id-over-limit": cms(200, {"user": {"id": "a" * 129}, "capabilities": []}),
        "cms-200-empty-capability": cms(200, {"user": {"id": "u"}, "capabilities": [""]}),
        "cms-200-long-capability-over-limit": cms(
            200, {"user": {"id": "u"}, "capabilities": ["c" * 129]}
        ),
        "cms-200-null-user": cms(200, {"user": None, "capabilities": []}),
    }
    write_corpus("session_identity", small("session_identity", seeds))
    write_dict(
        "session_identity",
        [
            b"instatic_admin_session", b"instatic_admin_session=", b"; ", b";", b"=", b'"',
            b'"user":', b'"id":', b'"capabilities":', b'"role":', b'"slug":', b'"error":',
            b'"mfa_required"', b'"Unauthorized"', b'"ai.chat"', b'"ai.tools.write"',
            b'"ai.providers.manage"', b'"ai.audit.read"', b'"site.read"', b"null", b"[]",
        ],
    )


# === atelier-agent's tool arguments (atelier_agent::tools::args) ===

TOOLS = ["read", "write", "edit", "list", "glob", "grep", "shell"]  # the target's order


def agent_tool_args():
    def call(tool, args):
        # The first byte picks the tool (its index, modulo 7); "shell" is offered by nobody.
        return bytes([TOOLS.index(tool)]) + (args if isinstance(args, bytes) else js(args))

    seeds = {
        "read-path": call("read", {"path": "src/index.html"}),
        "read-window": call("read", {"path": "./src/styles/site.css", "offset": 10, "limit": 5}),
        "read-absolute-below-workspace": call("read", {"path": "/w/src/index.html"}),
        "read-null-optionals": call("read", {"path": "AGENTS.md", "offset": None, "limit": None}),
        "read-offset-zero-huge-limit": call(
            "read", {"path": "a", "offset": 0, "limit": 18446744073709551615}
        ),
        "read-gitignore": call("read", {"path": ".gitignore"}),
        "write-page": call(
            "write", {"path": "src/about.html", "content": "<!doctype html>\n<h1>About</h1>\n"}
        ),
        "write-absolute-below-workspace": call(
            "write", {"path": "/w/src/collection.html", "content": "<h1>Colecci\u00f3n</h1>\n"}
        ),
        "write-empty-content": call("write", {"path": "public/.nojekyll", "content": ""}),
        "edit-once": call(
            "edit",
            {
                "path": "src/index.html",
                "old_string": "<h1>Old title</h1>",
                "new_string": "<h1>New title</h1>",
            },
        ),
        "edit-replace-all": call(
            "edit",
            {
                "path": "src/index.html",
                "old_string": "Museo",
                "new_string": "Museum",
                "replace_all": True,
            },
        ),
        "list-workspace": call("list", {}),
        "list-blank-arguments": call("list", b""),
        "list-dot": call("list", {"path": "."}),
        "list-directory": call("list", {"path": "src/"}),
        "list-workspace-by-absolute-path": call("list", {"path": "/w/"}),
        "glob-html": call("glob", {"pattern": "**/*.html"}),
        "glob-below-directory": call("glob", {"pattern": "*.{css,js}", "path": "src"}),
        "grep-regex-with-glob": call("grep", {"pattern": "h[1-6]", "glob": "*.html"}),
        "grep-ignore-case-in-path": call(
            "grep", {"pattern": "colecci\u00f3n", "path": "src", "ignore_case": True}
        ),
        "pretty-printed-arguments": call(
            "read", json.dumps({"path": "src/index.html", "limit": 40}, indent=2).encode()
        ),
        # Calls refused, each for the reason its name says.
        "read-parent-escape": call("read", {"path": "src/../../etc/passwd"}),
        "read-absolute-outside": call("read", {"path": "/etc/passwd"}),
        "read-sibling-with-prefix": call("read", {"path": "/wx/a.css"}),
        "read-absolute-then-parent": call("read", {"path": "/w/../etc/passwd"}),
        "read-git-config": call("read", {"path": ".git/config"}),
        "read-git-other-case": call("read", {"path": "x/.GIT/config"}),
        "read-builder-dir": call("read", {"path": ".builder/mcp.json"}),
        "read-negative-offset": call("read", {"path": "a", "offset": -1}),
        "read-unknown-field": call("read", {"path": "a", "file_path": "b"}),
        "read-missing-path": call("read", {}),
        "read-truncated-json": call("read", b'{"path": "src/ind'),
        "read-not-an-object": call("read", b'"src/index.html"'),
        "write-empty-path": call("write", {"path": "", "content": "x"}),
        "write-nul-in-path": call("write", {"path": "a\x00b", "content": "x"}),
        "write-workspace-itself": call("write", {"path": "/w", "content": "x"}),
        "write-content-not-a-string": call("write", {"path": "a", "content": 3}),
        "edit-empty-old-string": call("edit", {"path": "a", "old_string": "", "new_string": "y"}),
        "edit-same-strings": call("edit", {"path": "a", "old_string": "x", "new_string": "x"}),
        "list-parent": call("list", {"path": ".."}),
        "list-root": call("list", {"path": "/"}),
        "list-builder": call("list", {"path": ".builder"}),
        "glob-unclosed-class": call("glob", {"pattern": "a[b"}),
        "grep-bad-regex": call("grep", {"pattern": "("}),
        "grep-regex-compiles-too-large": call("grep", {"pattern": "\\w{1000}\\w{1000}\\w{1000}"}),
        "grep-in-git": call("grep", {"pattern": "x", "path": ".git"}),
        "grep-pattern-over-limit": call("grep", {"pattern": "a" * 1025}),
        "unknown-tool": call("shell", {"command": "ls -la"}),
    }
    write_corpus("agent_tool_args", small("agent_tool_args", seeds))
    write_dict(
        "agent_tool_args",
        [
            b'"path":', b'"offset":', b'"limit":', b'"content":', b'"old_string":',
            b'"new_string":', b'"replace_all":', b'"pattern":', b'"glob":', b'"ignore_case":',
            b"true", b"false", b"null", b'"/w/', b'"/w"', b"..", b"./", b".git", b".GIT",
            b".builder", b"**", b"*.html", b"\\u0000", b"{1000}", b"[", b"(?i)", b"\\\\", b"//",
        ],
    )


# === Server-sent events (atelier_sse) ===


def sse_event(event=None, data=None, id=None, end=b"\n"):
    lines = []
    if id is not None:
        lines.append(b"id: " + id.encode())
    if event is not None:
        lines.append(b"event: " + event.encode())
    if data is not None:
        for line in (data if isinstance(data, list) else [data]):
            lines.append(b"data: " + (line if isinstance(line, bytes) else js(line)))
    return b"".join(line + end for line in lines) + end


def sse_cut(body, places):
    """`body` after the byte that makes the target split it at the first of `places` that one
    byte can name (the split lands on multiples of len(body) / 256)."""
    for at in places:
        for cut in range(256):
            if cut * len(body) // 256 == at:
                return bytes([cut]) + body
    raise ValueError("no byte splits the body at %s" % places)


def sse():
    def stream(*events, cut=0x80):
        return bytes([cut]) + b"".join(events)

    anthropic_text = [
        sse_event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "claude-sonnet-4-5",
                    "stop_reason": None,
                    "usage": {"input_tokens": 25, "output_tokens": 1},
                },
            },
        ),
        sse_event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        sse_event("ping", {"type": "ping"}),
        sse_event(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hello"},
            },
        ),
        sse_event(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "! Colecci\u00f3n lista."},
            },
        ),
        sse_event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse_event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 15},
            },
        ),
        sse_event("message_stop", {"type": "message_stop"}),
    ]
    anthropic_tool = [
        sse_event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {
                    "type": "tool_use",
                    "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                    "name": "write",
                    "input": {},
                },
            },
        ),
        sse_event(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": ""},
            },
        ),
        sse_event(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": '{"path": "src/a'},
            },
        ),
        sse_event(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {
                    "type": "input_json_delta",
                    "partial_json": 'bout.html", "content": "<p>About</p>"}',
                },
            },
        ),
        sse_event("content_block_stop", {"type": "content_block_stop", "index": 1}),
        sse_event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 89},
            },
        ),
        sse_event("message_stop", {"type": "message_stop"}),
    ]

    def chunk(delta, finish=None):
        return {
            "id": "chatcmpl-9xTq",
            "object": "chat.completion.chunk",
            "created": 1767036059,
            "model": "gpt-4o-mini",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    openai_text = [
        sse_event(data=chunk({"role": "assistant", "content": ""})),
        sse_event(data=chunk({"content": "Hello"})),
        sse_event(data=chunk({"content": " there."})),
        sse_event(data=chunk({}, "stop")),
        sse_event(data=b"[DONE]"),
    ]
    openai_tool = [
        sse_event(
            data=chunk(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_abc123",
                            "type": "function",
                            "function": {"name": "read", "arguments": ""},
                        }
                    ],
                }
            )
        ),
        sse_event(
            data=chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path":'}}]})
        ),
        sse_event(
            data=chunk(
                {"tool_calls": [{"index": 0, "function": {"arguments": '"src/index.html"}'}}]}
            )
        ),
        sse_event(data=chunk({}, "tool_calls")),
        sse_event(
            data={
                "id": "chatcmpl-9xTq",
                "object": "chat.completion.chunk",
                "choices": [],
                "usage": {"prompt_tokens": 412, "completion_tokens": 21, "total_tokens": 433},
            }
        ),
        sse_event(data=b"[DONE]"),
    ]

    def stored(seq, body):
        return sse_event(
            id=str(seq), data={"seq": seq, "ts": "2026-01-01T10:00:%02d.000Z" % seq, "body": body}
        )

    session = [
        stored(0, {"type": "turn_start", "turn": 1, "prompt": "Add a collection page"}),
        stored(1, {"type": "text", "text": "I'll look at the site's pages first."}),
        b": ping\n\n",
        stored(2, {"type": "tool", "name": "write", "summary": "write: src/collection.html"}),
        stored(3, {"type": "file_change", "files": ["src/collection.html"]}),
        stored(
            4,
            {
                "type": "result",
                "ok": True,
                "resumeToken": "ses_494719016ffe85dkDMj0FPRbHK",
                "costUsd": 0.0195,
                "durationMs": 9150,
            },
        ),
        stored(
            5,
            {"type": "turn_end", "state": "idle", "resumeToken": "ses_494719016ffe85dkDMj0FPRbHK"},
        ),
    ]
    crlf_text = b"".join(e.replace(b"\n", b"\r\n") for e in openai_text)
    crlf_ends = [at + 1 for at in range(len(crlf_text)) if crlf_text[at : at + 2] == b"\r\n"]
    seeds = {
        "anthropic-text": stream(*anthropic_text),
        "anthropic-tool-use": stream(*anthropic_tool, cut=0x40),
        "anthropic-error": stream(
            sse_event(
                "error",
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            )
        ),
        "openai-text-done": stream(*openai_text, cut=0xC0),
        "openai-tool-call": stream(*openai_tool),
        "openai-processing-comments": stream(
            b": OPENROUTER PROCESSING\n\n", b": OPENROUTER PROCESSING\n\n", *openai_text[1:]
        ),
        "sited-session-turn": stream(*session, cut=0x20),
        "sited-follow-from-seq-3": stream(*session[4:], cut=0xFF),
        "sited-keepalive-only": stream(b": ping\n\n", b": ping\n\n", b":\n\n"),
        "sited-replay-failed": stream(sse_event("error", {"reason": "replay_failed"})),
        "crlf-line-ends": stream(crlf_text),
        "crlf-split-between-reads": sse_cut(crlf_text, crlf_ends),
        "cr-line-ends": stream(b"id: 1\rdata: x\r\rid: 2\revent: message\rdata: y\r\r"),
        "mixed-line-ends": stream(b"data: a\r\ndata: b\rdata: c\n\r\n"),
        "multi-line-data": stream(
            b'event: message\ndata: {\ndata:   "text": "two lines"\ndata: }\n\n'
        ),
        "bom-first": stream(b'\xef\xbb\xbfdata: {"type":"ping"}\n\n'),
        "bom-split-between-reads": sse_cut(b"\xef\xbb\xbfid: 0\ndata: x\n\n", [2]),
        "retry-and-unknown-fields": stream(b"retry: 3000\nfoo: bar\ndata: x\n\n"),
        "no-space-after-colon": stream(b'event:message_stop\ndata:{"type":"message_stop"}\n\n'),
        "two-spaces-after-colon": stream(b"data:  indented\n\n"),
        "field-without-colon": stream(b"data\n\nevent\ndata\n\n"),
        "colon-in-value": stream(b"data: a: b\n\n"),
        "id-without-data": stream(b"id: 7\nevent: x\n\n", b"data: after\n\n"),
        "id-with-nul": stream(b"id: 1\x00\ndata: x\n\n"),
        "empty-data-lines": stream(b"data:\n\ndata:\ndata:\n\n"),
        "invalid-utf8": stream(b"data: caf\xc3\n\nid: \xff\xfe\ndata: x\n\n"),
        "blank-lines-between": stream(b"\n\n\ndata: x\n\n\n"),
        # Ends a strict reader refuses and a lenient one hands out.
        "unterminated-frame": stream(*openai_text[:2], b'data: {"choices":[]}\n'),
        "unterminated-line": stream(b"data: [DONE]\n\n", b'data: {"type":"content_'),
        "unterminated-id-only": stream(b"id: 42\n"),
        "unterminated-comment": stream(b": ping"),
        "empty-stream": b"\x80",
    }
    write_corpus("sse", small("sse", seeds))
    write_dict(
        "sse",
        [
            b"data:", b"data: ", b"event:", b"event: ", b"id:", b"id: ", b"retry:", b": ping", b":",
            b"\r\n", b"\r", b"\n\n", b"\r\n\r\n", b"\xef\xbb\xbf", b"[DONE]", b"message_start",
            b"content_block_delta", b"message_stop", b"error", b"\x00",
        ],
    )


TARGETS = {
    "connect_head": connect_head,
    "client_hello": client_hello,
    "frame_decoder": frame_decoder,
    "messages": messages,
    "build_events": build_events,
    "egress_lines": egress_lines,
    "model_route": model_route,
    "model_body": model_body,
    "agent_stream": agent_stream,
    "user_image": user_image,
    "session_identity": session_identity,
    "agent_tool_args": agent_tool_args,
    "sse": sse,
}


if __name__ == "__main__":
    names = sys.argv[1:] or list(TARGETS)
    unknown = [name for name in names if name not in TARGETS]
    if unknown:
        sys.exit(
            "make.py: unknown target %s (targets: %s)" % (", ".join(unknown), ", ".join(TARGETS))
        )
    for name in names:
        TARGETS[name]()
