//! Named cases for the CONNECT head parser and the plan check.

use super::*;
use std::collections::HashSet;

use ConnectRefusal::*;

/// (name, head, expected host or refusal).
fn cases() -> Vec<(&'static str, Vec<u8>, Result<&'static str, ConnectRefusal>)> {
    let h = |s: &str| s.as_bytes().to_vec();
    vec![
        ("plain", h("CONNECT api.anthropic.com:443 HTTP/1.1\r\n\r\n"), Ok("api.anthropic.com")),
        (
            "with headers",
            h("CONNECT packages.example.org:443 HTTP/1.1\r\nHost: packages.example.org:443\r\nUser-Agent: builder\r\n\r\n"),
            Ok("packages.example.org"),
        ),
        ("http/1.0", h("CONNECT example.com:443 HTTP/1.0\r\n\r\n"), Ok("example.com")),
        ("host lowercased", h("CONNECT API.Anthropic.COM:443 HTTP/1.1\r\n\r\n"), Ok("api.anthropic.com")),
        ("punycode", h("CONNECT xn--bcher-kva.example:443 HTTP/1.1\r\n\r\n"), Ok("xn--bcher-kva.example")),
        ("digits and hyphens", h("CONNECT a-1.b2.example:443 HTTP/1.1\r\n\r\n"), Ok("a-1.b2.example")),
        ("get", h("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"), Err(MethodNotAllowed)),
        ("absolute-form get", h("GET http://example.com/ HTTP/1.1\r\n\r\n"), Err(MethodNotAllowed)),
        ("lowercase connect", h("connect example.com:443 HTTP/1.1\r\n\r\n"), Err(MethodNotAllowed)),
        ("post", h("POST example.com:443 HTTP/1.1\r\n\r\n"), Err(MethodNotAllowed)),
        ("garbage", h("\x16\x03\x01\x00\x05hello\r\n\r\n"), Err(MethodNotAllowed)),
        ("empty line first", h("\r\nCONNECT example.com:443 HTTP/1.1\r\n\r\n"), Err(MethodNotAllowed)),
        ("missing version", h("CONNECT example.com:443\r\n\r\n"), Err(MalformedRequestLine)),
        ("http/2 version", h("CONNECT example.com:443 HTTP/2\r\n\r\n"), Err(MalformedRequestLine)),
        ("double space", h("CONNECT  example.com:443 HTTP/1.1\r\n\r\n"), Err(MalformedRequestLine)),
        ("extra token", h("CONNECT example.com:443 HTTP/1.1 x\r\n\r\n"), Err(MalformedRequestLine)),
        ("tab separator", h("CONNECT\texample.com:443 HTTP/1.1\r\n\r\n"), Err(MethodNotAllowed)),
        ("tab in target", h("CONNECT example.com:443\tHTTP/1.1\r\n\r\n"), Err(MalformedRequestLine)),
        ("non-ascii host", h("CONNECT bücher.example:443 HTTP/1.1\r\n\r\n"), Err(MalformedRequestLine)),
        ("nul in line", h("CONNECT example.com:443\0 HTTP/1.1\r\n\r\n"), Err(MalformedRequestLine)),
        ("port 80", h("CONNECT example.com:80 HTTP/1.1\r\n\r\n"), Err(PortNotAllowed)),
        ("no port", h("CONNECT example.com HTTP/1.1\r\n\r\n"), Err(PortNotAllowed)),
        ("empty port", h("CONNECT example.com: HTTP/1.1\r\n\r\n"), Err(PortNotAllowed)),
        ("port 0443", h("CONNECT example.com:0443 HTTP/1.1\r\n\r\n"), Err(PortNotAllowed)),
        ("port +443", h("CONNECT example.com:+443 HTTP/1.1\r\n\r\n"), Err(PortNotAllowed)),
        ("port 4430", h("CONNECT example.com:4430 HTTP/1.1\r\n\r\n"), Err(PortNotAllowed)),
        ("last colon wins", h("CONNECT example.com:443:22 HTTP/1.1\r\n\r\n"), Err(PortNotAllowed)),
        ("ipv4 literal", h("CONNECT 1.1.1.1:443 HTTP/1.1\r\n\r\n"), Err(IpLiteral)),
        ("loopback literal", h("CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n"), Err(IpLiteral)),
        ("bracketed ipv6", h("CONNECT [::1]:443 HTTP/1.1\r\n\r\n"), Err(IpLiteral)),
        ("bracketed public ipv6", h("CONNECT [2001:4860:4860::8888]:443 HTTP/1.1\r\n\r\n"), Err(IpLiteral)),
        ("bare ipv6", h("CONNECT ::1:443 HTTP/1.1\r\n\r\n"), Err(IpLiteral)),
        ("bracket garbage", h("CONNECT [example.com]:443 HTTP/1.1\r\n\r\n"), Err(IpLiteral)),
        ("inet_aton shorthand", h("CONNECT 127.1:443 HTTP/1.1\r\n\r\n"), Err(InvalidHost)),
        ("decimal address", h("CONNECT 2130706433:443 HTTP/1.1\r\n\r\n"), Err(InvalidHost)),
        ("hex address", h("CONNECT 0x7f.0x1:443 HTTP/1.1\r\n\r\n"), Err(InvalidHost)),
        ("trailing dot", h("CONNECT api.anthropic.com.:443 HTTP/1.1\r\n\r\n"), Err(InvalidHost)),
        ("single label", h("CONNECT intranet:443 HTTP/1.1\r\n\r\n"), Err(InvalidHost)),
        ("localhost", h("CONNECT localhost:443 HTTP/1.1\r\n\r\n"), Err(InvalidHost)),
        ("empty host", h("CONNECT :443 HTTP/1.1\r\n\r\n"), Err(InvalidHost)),
        ("leading dot", h("CONNECT .example.com:443 HTTP/1.1\r\n\r\n"), Err(InvalidHost)),
        ("empty label", h("CONNECT a..example:443 HTTP/1.1\r\n\r\n"), Err(InvalidHost)),
        ("label leading hyphen", h("CONNECT -a.example:443 HTTP/1.1\r\n\r\n"), Err(InvalidHost)),
        ("label trailing hyphen", h("CONNECT a-.example:443 HTTP/1.1\r\n\r\n"), Err(InvalidHost)),
        ("underscore", h("CONNECT a_b.example:443 HTTP/1.1\r\n\r\n"), Err(InvalidHost)),
        ("wildcard", h("CONNECT *.example.com:443 HTTP/1.1\r\n\r\n"), Err(InvalidHost)),
        ("userinfo", h("CONNECT user@example.com:443 HTTP/1.1\r\n\r\n"), Err(InvalidHost)),
        ("numeric tld", h("CONNECT example.123:443 HTTP/1.1\r\n\r\n"), Err(InvalidHost)),
        ("one-letter tld", h("CONNECT example.c:443 HTTP/1.1\r\n\r\n"), Err(InvalidHost)),
        ("percent-encoded", h("CONNECT example%2ecom:443 HTTP/1.1\r\n\r\n"), Err(InvalidHost)),
        ("64-byte label", format!("CONNECT {}.example:443 HTTP/1.1\r\n\r\n", "a".repeat(64)).into_bytes(), Err(InvalidHost)),
        ("name over 253 bytes", format!("CONNECT {}.com:443 HTTP/1.1\r\n\r\n", vec!["a".repeat(62); 4].join(".")).into_bytes(), Err(InvalidHost)),
        ("sub.localhost", h("CONNECT evil.localhost:443 HTTP/1.1\r\n\r\n"), Err(SpecialUseHost)),
        ("mdns local", h("CONNECT printer.local:443 HTTP/1.1\r\n\r\n"), Err(SpecialUseHost)),
        ("internal", h("CONNECT metadata.google.internal:443 HTTP/1.1\r\n\r\n"), Err(SpecialUseHost)),
        ("home.arpa", h("CONNECT router.home.arpa:443 HTTP/1.1\r\n\r\n"), Err(SpecialUseHost)),
        ("bare home.arpa", h("CONNECT home.arpa:443 HTTP/1.1\r\n\r\n"), Err(SpecialUseHost)),
        ("localdomain", h("CONNECT box.localdomain:443 HTTP/1.1\r\n\r\n"), Err(SpecialUseHost)),
        ("invalid", h("CONNECT x.invalid:443 HTTP/1.1\r\n\r\n"), Err(SpecialUseHost)),
        ("suffix lookalike is fine", h("CONNECT notlocalhost.com:443 HTTP/1.1\r\n\r\n"), Ok("notlocalhost.com")),
        ("local as a middle label", h("CONNECT local.example.com:443 HTTP/1.1\r\n\r\n"), Ok("local.example.com")),
    ]
}

#[test]
fn named_cases() {
    let mut names = HashSet::new();
    let mut failures = Vec::new();
    for (name, head, expected) in cases() {
        assert!(names.insert(name), "duplicate case name {name:?}");
        let got = parse_head(&head);
        let ok = match (&got, expected) {
            (Ok(Some((target, len))), Ok(host)) => {
                target.host() == host && *len == head.len() && target.port() == 443
            }
            (Err(refusal), Err(expected)) => *refusal == expected,
            _ => false,
        };
        if !ok {
            failures.push(format!("{name}: expected {expected:?}, got {got:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn bytes_after_the_head_are_left_for_the_first_flight() {
    let head = b"CONNECT example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut buf = head.to_vec();
    buf.extend_from_slice(b"\x16\x03\x01\x02\x00rest\r\n\r\nmore");
    let (target, len) = parse_head(&buf).unwrap().unwrap();
    assert_eq!(target.to_string(), "example.com:443");
    assert_eq!(len, head.len());
    assert_eq!(&buf[len..], b"\x16\x03\x01\x02\x00rest\r\n\r\nmore");
}

#[test]
fn every_strict_prefix_of_a_head_needs_more() {
    let head = b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n";
    for cut in 0..head.len() {
        assert_eq!(parse_head(&head[..cut]), Ok(None), "cut at {cut}");
    }
    assert!(parse_head(head).unwrap().is_some());
}

/// Whatever was seen before, [`head_may_end`] is false only where [`parse_head`] needs more:
/// every prefix of a head after every earlier look, and around the size bound of one that
/// never ends.
#[test]
fn a_head_may_end_only_in_the_bytes_not_yet_seen() {
    let check = |what: &str, bytes: &[u8], len: usize, seen: usize| {
        let buf = &bytes[..len];
        // Only earlier looks that found nothing: `seen` never holds a terminator.
        if parse_head(&bytes[..seen]) == Ok(None) {
            assert_eq!(
                head_may_end(buf, seen),
                parse_head(buf) != Ok(None),
                "{what}: {len} bytes, {seen} seen"
            );
        }
    };
    let head = b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\nflight";
    for len in 0..=head.len() {
        for seen in 0..=len {
            check("a head", head, len, seen);
        }
    }
    let mut open = b"CONNECT example.com:443 HTTP/1.1\r\nX-Pad: ".to_vec();
    open.resize(MAX_HEAD + 2, b'a');
    for len in MAX_HEAD - 4..=open.len() {
        for seen in [0, 1, len / 2, len - 4, len - 3, len - 2, len - 1, len] {
            check("an unterminated head", &open, len, seen);
        }
    }
}

#[test]
fn bare_newlines_do_not_end_a_head() {
    assert_eq!(
        parse_head(b"CONNECT example.com:443 HTTP/1.1\n\n"),
        Ok(None)
    );
}

/// A head padded with one header so that it is exactly `total` bytes long.
fn head_of_len(total: usize) -> Vec<u8> {
    let start = b"CONNECT example.com:443 HTTP/1.1\r\nX-Pad: ";
    let end = b"\r\n\r\n";
    let mut head = start.to_vec();
    head.resize(total - end.len(), b'a');
    head.extend_from_slice(end);
    assert_eq!(head.len(), total);
    head
}

#[test]
fn head_size_bound() {
    let largest = head_of_len(MAX_HEAD);
    let (_, len) = parse_head(&largest).unwrap().unwrap();
    assert_eq!(len, MAX_HEAD);
    // One byte more: the terminator ends past the bound, so it is never seen.
    let too_large = head_of_len(MAX_HEAD + 1);
    assert_eq!(parse_head(&too_large), Err(HeadTooLarge));
    // Unterminated: waits below the bound, refuses at it.
    let mut open = b"CONNECT example.com:443 HTTP/1.1\r\nX-Pad: ".to_vec();
    open.resize(MAX_HEAD - 1, b'a');
    assert_eq!(parse_head(&open), Ok(None));
    open.push(b'a');
    assert_eq!(parse_head(&open), Err(HeadTooLarge));
    assert_eq!(HeadTooLarge.status(), 431);
}

#[test]
fn only_the_request_line_is_interpreted() {
    let head = b"CONNECT example.com:443 HTTP/1.1\r\nHost: 127.0.0.1:22\r\nX: \x00\xff\r\n\r\n";
    let (target, _) = parse_head(head).unwrap().unwrap();
    assert_eq!(target.host(), "example.com");
}

#[test]
fn plan_check() {
    let plan = [
        "api.anthropic.com".to_owned(),
        "packages.example.org".to_owned(),
    ];
    let target = |host: &str| {
        parse_head(format!("CONNECT {host}:443 HTTP/1.1\r\n\r\n").as_bytes())
            .unwrap()
            .unwrap()
            .0
    };
    assert_eq!(check_plan(&target("api.anthropic.com"), &plan), Ok(()));
    assert_eq!(check_plan(&target("API.ANTHROPIC.COM"), &plan), Ok(()));
    assert_eq!(
        check_plan(&target("packages.example.org"), &plan[..]),
        Ok(())
    );
    for host in [
        "anthropic.com",
        "evil.api.anthropic.com",
        "api.anthropic.co",
        "example.com",
    ] {
        assert_eq!(check_plan(&target(host), &plan), Err(NotInPlan), "{host}");
    }
    let empty: [&str; 0] = [];
    assert_eq!(
        check_plan(&target("api.anthropic.com"), &empty),
        Err(NotInPlan)
    );
}

#[test]
fn replies_are_exact() {
    let expected = [
        (HeadTooLarge, "431 Request Header Fields Too Large"),
        (HeadTimeout, "408 Request Timeout"),
        (MalformedRequestLine, "400 Bad Request"),
        (MethodNotAllowed, "405 Method Not Allowed"),
        (PortNotAllowed, "403 Forbidden"),
        (IpLiteral, "403 Forbidden"),
        (InvalidHost, "403 Forbidden"),
        (SpecialUseHost, "403 Forbidden"),
        (NotInPlan, "403 Forbidden"),
    ];
    assert_eq!(expected.len(), ConnectRefusal::ALL.len());
    for (refusal, status_line) in expected {
        assert_eq!(
            String::from_utf8(refusal.reply()).unwrap(),
            format!("HTTP/1.1 {status_line}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"),
            "{refusal:?}"
        );
    }
}

#[test]
fn refusal_names_are_unique_snake_case() {
    let mut names = HashSet::new();
    for refusal in ConnectRefusal::ALL {
        let name = refusal.as_str();
        assert!(names.insert(name), "{name} named twice");
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "{name}"
        );
        assert!(!refusal.to_string().is_empty());
    }
}

/// The fuzz target's committed seeds (`fuzz/seeds/make.py`), each deciding as its name says:
/// accepted, incomplete, or refused for the named reason.
#[test]
fn the_fuzz_seeds_decide_as_their_names_say() {
    for (name, seed) in crate::fuzz_seeds("connect_head") {
        let decided = parse_head(&seed);
        let expected = match name.as_str() {
            accepted if accepted.starts_with("accepted") => {
                assert!(matches!(decided, Ok(Some(_))), "{name}: {decided:?}");
                continue;
            }
            "incomplete" => Ok(None),
            "method-get" | "method-lowercase" => Err(ConnectRefusal::MethodNotAllowed),
            "port-80" | "no-port" => Err(ConnectRefusal::PortNotAllowed),
            "ipv4" | "ipv6" => Err(ConnectRefusal::IpLiteral),
            "bad-host" | "single-label" | "trailing-dot" | "long-label" => {
                Err(ConnectRefusal::InvalidHost)
            }
            special if special.starts_with("special-") => Err(ConnectRefusal::SpecialUseHost),
            "bad-version" | "extra-space" | "control-byte" => {
                Err(ConnectRefusal::MalformedRequestLine)
            }
            "bare-lf" => Ok(None),
            "too-large" => Err(ConnectRefusal::HeadTooLarge),
            other => panic!("a seed with no expectation: {other}"),
        };
        assert_eq!(
            decided.map(|head| head.map(|(target, _)| target)),
            expected,
            "{name}"
        );
    }
}
