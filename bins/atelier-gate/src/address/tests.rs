//! Named vectors and properties for the public-address classifier.

use super::*;
use proptest::prelude::*;
use std::collections::HashSet;

use Reason::*;

/// Shorthand for an expected verdict in the table.
const PUBLIC: Option<Reason> = None;

fn refused(reason: Reason) -> Option<Reason> {
    Some(reason)
}

/// (name, address text, expected verdict under the default policy: `None` = public).
fn vectors() -> Vec<(&'static str, &'static str, Option<Reason>)> {
    vec![
        // Public IPv4, including the edges just outside refused blocks.
        ("google dns", "8.8.8.8", PUBLIC),
        ("cloudflare dns", "1.1.1.1", PUBLIC),
        ("cloudflare dns secondary", "1.0.0.1", PUBLIC),
        ("just above 0/8", "1.0.0.0", PUBLIC),
        ("just below 10/8", "9.255.255.255", PUBLIC),
        ("just above 10/8", "11.0.0.0", PUBLIC),
        ("just below cgnat", "100.63.255.254", PUBLIC),
        ("just above cgnat", "100.128.0.1", PUBLIC),
        ("just below loopback", "126.255.255.255", PUBLIC),
        ("just above loopback", "128.0.0.0", PUBLIC),
        ("just below link-local", "169.253.255.255", PUBLIC),
        ("just above link-local", "169.255.0.0", PUBLIC),
        ("just below 172.16/12", "172.15.255.255", PUBLIC),
        ("just above 172.16/12", "172.32.0.0", PUBLIC),
        ("just above 192.0.0/24", "192.0.1.1", PUBLIC),
        ("just above test-net-1", "192.0.3.0", PUBLIC),
        ("just below 192.168/16", "192.167.255.255", PUBLIC),
        ("just above 192.168/16", "192.169.0.0", PUBLIC),
        ("just below benchmarking", "198.17.255.255", PUBLIC),
        ("just above benchmarking", "198.20.0.0", PUBLIC),
        ("just above test-net-2", "198.51.101.0", PUBLIC),
        ("just below test-net-3", "203.0.112.255", PUBLIC),
        ("last public before multicast", "223.255.255.255", PUBLIC),
        ("as112 anycast is global", "192.31.196.1", PUBLIC),
        // This network (0.0.0.0/8), a smokescreen gap.
        ("unspecified ipv4", "0.0.0.0", refused(Unspecified)),
        ("this network low", "0.0.0.1", refused(ThisNetwork)),
        ("this network high", "0.255.255.255", refused(ThisNetwork)),
        // RFC 1918.
        ("rfc1918 10 low", "10.0.0.0", refused(Private)),
        ("rfc1918 10 high", "10.255.255.255", refused(Private)),
        ("rfc1918 172.16 low", "172.16.0.1", refused(Private)),
        ("rfc1918 172.31 high", "172.31.255.255", refused(Private)),
        ("rfc1918 192.168", "192.168.1.1", refused(Private)),
        // CGNAT (RFC 6598).
        ("cgnat low", "100.64.0.0", refused(SharedAddressSpace)),
        ("cgnat high", "100.127.255.255", refused(SharedAddressSpace)),
        // Loopback.
        ("loopback", "127.0.0.1", refused(Loopback)),
        ("loopback high", "127.255.255.254", refused(Loopback)),
        // Link-local, cloud metadata.
        ("cloud metadata", "169.254.169.254", refused(LinkLocal)),
        ("link-local low", "169.254.0.1", refused(LinkLocal)),
        // Special-purpose, documentation, relay.
        (
            "ietf protocol assignments",
            "192.0.0.8",
            refused(IetfProtocolAssignments),
        ),
        ("dslite b4", "192.0.0.2", refused(IetfProtocolAssignments)),
        ("test-net-1", "192.0.2.1", refused(Documentation)),
        ("test-net-2", "198.51.100.7", refused(Documentation)),
        ("test-net-3", "203.0.113.200", refused(Documentation)),
        (
            "6to4 relay anycast",
            "192.88.99.1",
            refused(SixToFourRelayAnycast),
        ),
        // Benchmarking (RFC 2544), a smokescreen gap.
        ("benchmarking low", "198.18.0.0", refused(Benchmarking)),
        ("benchmarking high", "198.19.255.255", refused(Benchmarking)),
        // Multicast, reserved, broadcast.
        ("multicast low", "224.0.0.1", refused(Multicast)),
        ("multicast high", "239.255.255.255", refused(Multicast)),
        ("reserved low", "240.0.0.0", refused(Reserved)),
        ("reserved mid", "250.1.2.3", refused(Reserved)),
        ("reserved high", "255.255.255.254", refused(Reserved)),
        ("broadcast", "255.255.255.255", refused(Broadcast)),
        // Public IPv6.
        ("google dns v6", "2001:4860:4860::8888", PUBLIC),
        ("cloudflare dns v6", "2606:4700:4700::1111", PUBLIC),
        ("first global unicast", "2000::", PUBLIC),
        ("just above ietf /23", "2001:200::1", PUBLIC),
        ("just below 2001:db8", "2001:db7:ffff::1", PUBLIC),
        ("just above 2001:db8", "2001:db9::1", PUBLIC),
        ("just above 6to4", "2003::1", PUBLIC),
        ("just below 3fff::/20", "3ffe:ffff::1", PUBLIC),
        ("just above 3fff::/20", "3fff:1000::1", PUBLIC),
        // IPv6 specials outside 2000::/3.
        ("unspecified ipv6", "::", refused(Unspecified)),
        ("loopback ipv6", "::1", refused(Loopback)),
        ("unique local fd", "fd00::1", refused(UniqueLocal)),
        ("unique local fc", "fc00::1", refused(UniqueLocal)),
        ("link-local ipv6", "fe80::1", refused(LinkLocal)),
        ("link-local ipv6 high", "febf:ffff::1", refused(LinkLocal)),
        ("site-local ipv6", "fec0::1", refused(SiteLocal)),
        ("multicast all routers", "ff02::2", refused(Multicast)),
        ("multicast global", "ff0e::1", refused(Multicast)),
        ("discard only", "100::1", refused(DiscardOnly)),
        (
            "just past discard only",
            "100:0:0:1::1",
            refused(NotGlobalUnicast),
        ),
        (
            "below global unicast",
            "1fff:ffff::1",
            refused(NotGlobalUnicast),
        ),
        ("above global unicast", "4000::1", refused(NotGlobalUnicast)),
        ("srv6 sids", "5f00::1", refused(NotGlobalUnicast)),
        (
            "ipv4-translated",
            "::ffff:0:8.8.8.8",
            refused(Ipv4Translated),
        ),
        // IPv6 specials inside 2000::/3.
        ("teredo", "2001::1", refused(Teredo)),
        (
            "teredo embedding public",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            refused(Teredo),
        ),
        ("ietf /23", "2001:100::1", refused(IetfProtocolAssignments)),
        (
            "ietf /23 high",
            "2001:1ff:ffff::1",
            refused(IetfProtocolAssignments),
        ),
        ("benchmarking v6", "2001:2::1", refused(Benchmarking)),
        ("documentation v6", "2001:db8::1", refused(Documentation)),
        ("documentation v6 3fff", "3fff::1", refused(Documentation)),
        (
            "6to4 embedding public",
            "2002:0808:0808::1",
            refused(SixToFour),
        ),
        (
            "6to4 embedding private",
            "2002:0a00:0001::1",
            refused(SixToFour),
        ),
        // IPv4-mapped: judged by the embedded IPv4.
        ("mapped public", "::ffff:8.8.8.8", PUBLIC),
        ("mapped loopback", "::ffff:127.0.0.1", refused(Loopback)),
        (
            "mapped metadata",
            "::ffff:169.254.169.254",
            refused(LinkLocal),
        ),
        ("mapped private hex", "::ffff:a00:1", refused(Private)),
        (
            "mapped benchmarking",
            "::ffff:198.18.0.1",
            refused(Benchmarking),
        ),
        // NAT64 well-known prefix: judged by the embedded IPv4.
        ("nat64 public", "64:ff9b::8.8.8.8", PUBLIC),
        ("nat64 private", "64:ff9b::10.0.0.1", refused(Private)),
        ("nat64 loopback", "64:ff9b::7f00:1", refused(Loopback)),
        ("nat64 reserved", "64:ff9b::240.0.0.1", refused(Reserved)),
        // NAT64 local-use (RFC 8215), a smokescreen gap: refused whatever it embeds.
        (
            "nat64 local use public",
            "64:ff9b:1::8.8.8.8",
            refused(Nat64LocalUse),
        ),
        (
            "nat64 local use private",
            "64:ff9b:1:ffff::10.0.0.1",
            refused(Nat64LocalUse),
        ),
        (
            "just past nat64 /96",
            "64:ff9b:0:0:0:1::1",
            refused(NotGlobalUnicast),
        ),
        // IPv4-compatible (deprecated), a smokescreen gap: refused whatever it embeds.
        (
            "ipv4-compatible public",
            "::8.8.8.8",
            refused(Ipv4Compatible),
        ),
        (
            "ipv4-compatible loopback",
            "::127.0.0.1",
            refused(Ipv4Compatible),
        ),
        ("ipv4-compatible low", "::2", refused(Ipv4Compatible)),
        // Text that is not a bare address.
        ("zone id link-local", "fe80::1%eth0", refused(ZoneId)),
        (
            "zone id on public",
            "2001:4860:4860::8888%1",
            refused(ZoneId),
        ),
        ("bracketed", "[::1]", refused(Unparseable)),
        ("with port", "8.8.8.8:443", refused(Unparseable)),
        ("inet_aton shorthand", "127.1", refused(Unparseable)),
        ("decimal integer", "2130706433", refused(Unparseable)),
        ("hex integer", "0x7f000001", refused(Unparseable)),
        ("leading zero octal", "010.0.0.1", refused(Unparseable)),
        ("trailing space", "8.8.8.8 ", refused(Unparseable)),
        ("hostname", "example.com", refused(Unparseable)),
        ("empty", "", refused(Unparseable)),
        ("octet overflow", "256.0.0.1", refused(Unparseable)),
    ]
}

#[test]
fn named_vectors() {
    let table = vectors();
    assert!(table.len() >= 80, "only {} vectors", table.len());
    let mut names = HashSet::new();
    let mut failures = Vec::new();
    for (name, text, expected) in &table {
        assert!(names.insert(*name), "duplicate vector name {name:?}");
        let expected = match expected {
            None => Verdict::Public,
            Some(reason) => Verdict::Refused(*reason),
        };
        let got = parse_and_classify(text);
        if got != expected {
            failures.push(format!(
                "{name} ({text}): expected {expected:?}, got {got:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_reason_appears_in_the_table() {
    let seen: HashSet<Reason> = vectors().iter().filter_map(|v| v.2).collect();
    for reason in Reason::ALL {
        assert!(seen.contains(&reason), "no vector for {reason}");
    }
}

#[test]
fn reason_names_are_unique_snake_case() {
    let mut names = HashSet::new();
    for reason in Reason::ALL {
        let name = reason.as_str();
        assert!(names.insert(name), "{name} named twice");
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "{name} is not snake_case"
        );
        assert_eq!(reason.to_string(), name);
    }
}

#[test]
fn benchmark_range_is_widened_only_by_the_explicit_option() {
    let lab = Policy {
        allow_benchmark_range: true,
    };
    assert_eq!(
        Policy::default(),
        Policy {
            allow_benchmark_range: false
        }
    );
    for text in [
        "198.18.0.1",
        "198.19.255.254",
        "::ffff:198.18.7.7",
        "64:ff9b::198.19.0.1",
    ] {
        assert_eq!(lab.parse_and_classify(text), Verdict::Public, "{text}");
        assert_eq!(
            parse_and_classify(text),
            Verdict::Refused(Benchmarking),
            "{text}"
        );
    }
    // The option widens that one IPv4 block, nothing else.
    for (text, reason) in [
        ("2001:2::1", Benchmarking),
        ("198.51.100.1", Documentation),
        ("10.0.0.1", Private),
        ("::198.18.0.1", Ipv4Compatible),
    ] {
        assert_eq!(
            lab.parse_and_classify(text),
            Verdict::Refused(reason),
            "{text}"
        );
    }
}

#[test]
fn verdict_is_public_matches_the_variant() {
    assert!(classify("8.8.8.8".parse().unwrap()).is_public());
    assert!(!classify("10.0.0.1".parse().unwrap()).is_public());
}

fn any_v4_block() -> impl Strategy<Value = (usize, u32)> {
    (0..REFUSED_V4.len(), any::<u32>())
}

fn any_v6_block() -> impl Strategy<Value = (usize, u128)> {
    (0..REFUSED_V6.len(), any::<u128>())
}

fn v4_inside(index: usize, noise: u32) -> Ipv4Addr {
    let block = &REFUSED_V4[index];
    Ipv4Addr::from(block.net | (noise & !mask32(block.len)))
}

fn v6_inside(index: usize, noise: u128) -> Ipv6Addr {
    let block = &REFUSED_V6[index];
    Ipv6Addr::from(block.net | (noise & !mask128(block.len)))
}

proptest! {
    #[test]
    fn no_address_in_a_refused_v4_block_is_public((index, noise) in any_v4_block()) {
        let ip = v4_inside(index, noise);
        prop_assert!(!classify(IpAddr::V4(ip)).is_public(), "{ip} is public");
        // Nor is it public when carried in IPv4-mapped or NAT64 form, or as text.
        let mapped = ip.to_ipv6_mapped();
        prop_assert!(!classify(IpAddr::V6(mapped)).is_public(), "{mapped} is public");
        let nat64 = Ipv6Addr::from(NAT64_WELL_KNOWN.net | u128::from(u32::from(ip)));
        prop_assert!(!classify(IpAddr::V6(nat64)).is_public(), "{nat64} is public");
        prop_assert!(!parse_and_classify(&ip.to_string()).is_public());
        prop_assert!(!parse_and_classify(&mapped.to_string()).is_public());
    }

    #[test]
    fn no_address_in_a_refused_v6_block_is_public((index, noise) in any_v6_block()) {
        let ip = v6_inside(index, noise);
        prop_assert!(!classify(IpAddr::V6(ip)).is_public(), "{ip} is public");
        prop_assert!(!parse_and_classify(&ip.to_string()).is_public());
    }

    #[test]
    fn outside_global_unicast_only_carriers_of_public_ipv4_are_public(raw in any::<u128>()) {
        let ip = Ipv6Addr::from(raw);
        if !GLOBAL_UNICAST.contains(raw) && classify(IpAddr::V6(ip)).is_public() {
            prop_assert!(MAPPED.contains(raw) || NAT64_WELL_KNOWN.contains(raw), "{ip} is public");
            let embedded = Ipv4Addr::from(raw as u32);
            prop_assert!(classify(IpAddr::V4(embedded)).is_public());
        }
    }

    #[test]
    fn carriers_agree_with_the_embedded_ipv4(raw in any::<u32>()) {
        let ip = Ipv4Addr::from(raw);
        let direct = classify(IpAddr::V4(ip));
        prop_assert_eq!(classify(IpAddr::V6(ip.to_ipv6_mapped())), direct);
        let nat64 = Ipv6Addr::from(NAT64_WELL_KNOWN.net | u128::from(raw));
        prop_assert_eq!(classify(IpAddr::V6(nat64)), direct);
        // The IPv4-compatible form is refused whatever it embeds.
        prop_assert!(!classify(IpAddr::V6(Ipv6Addr::from(u128::from(raw)))).is_public());
    }
}

#[test]
fn table_rows_are_aligned_networks() {
    for block in REFUSED_V4 {
        assert_eq!(
            block.net & !mask32(block.len),
            0,
            "{}",
            Ipv4Addr::from(block.net)
        );
    }
    for block in REFUSED_V6 {
        assert_eq!(
            block.net & !mask128(block.len),
            0,
            "{}",
            Ipv6Addr::from(block.net)
        );
    }
}

/// Each case: its name, the policy widens the benchmark range, the answers, and the refusal
/// (`None` when they pass).
type VetCase = (
    &'static str,
    bool,
    &'static [&'static str],
    Option<AnswersRefused>,
);

#[test]
fn a_host_passes_only_when_every_answer_is_public() {
    let ip = |text: &str| -> IpAddr { text.parse().unwrap() };
    let not_public = |pairs: &[(&str, Reason)]| {
        Some(AnswersRefused::NotPublic(
            pairs
                .iter()
                .map(|&(text, reason)| (ip(text), reason))
                .collect(),
        ))
    };
    let cases: Vec<VetCase> = vec![
        ("one public v4", false, &["93.184.216.34"], None),
        (
            "public v4 and v6",
            false,
            &["93.184.216.34", "2606:4700::1111"],
            None,
        ),
        (
            "no answer at all",
            false,
            &[],
            Some(AnswersRefused::NoAddress),
        ),
        (
            "loopback alone",
            false,
            &["127.0.0.1"],
            not_public(&[("127.0.0.1", Loopback)]),
        ),
        (
            "one private answer among public ones refuses the host",
            false,
            &["93.184.216.34", "10.0.0.7", "1.1.1.1"],
            not_public(&[("10.0.0.7", Private)]),
        ),
        (
            "every refused answer named, in the resolver's order",
            false,
            &["::1", "93.184.216.34", "10.0.0.7", "::ffff:127.0.0.1"],
            not_public(&[
                ("::1", Loopback),
                ("10.0.0.7", Private),
                ("::ffff:127.0.0.1", Loopback),
            ]),
        ),
        (
            "the benchmark range under the default policy",
            false,
            &["198.18.0.10"],
            not_public(&[("198.18.0.10", Benchmarking)]),
        ),
        (
            "the benchmark range widened",
            true,
            &["198.18.0.10", "198.19.255.1"],
            None,
        ),
        (
            "the benchmark range widened, loopback beside it still refuses",
            true,
            &["198.18.0.10", "127.0.0.1"],
            not_public(&[("127.0.0.1", Loopback)]),
        ),
    ];
    for (what, widened, answers, want) in cases {
        let policy = Policy {
            allow_benchmark_range: widened,
        };
        let got = policy.vet(answers.iter().map(|text| ip(text)));
        assert_eq!(got.err(), want, "{what}");
    }
}

#[test]
fn a_refusal_lists_each_address_with_its_reason() {
    let refused = AnswersRefused::NotPublic(vec![
        ("10.0.0.7".parse().unwrap(), Private),
        ("::1".parse().unwrap(), Loopback),
    ]);
    assert_eq!(
        refused.to_string(),
        "it resolves to an address that is not public: 10.0.0.7 private, ::1 loopback"
    );
    assert_eq!(
        AnswersRefused::NoAddress.to_string(),
        "it resolves to no address"
    );
}
