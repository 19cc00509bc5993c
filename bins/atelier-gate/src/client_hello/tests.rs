//! Real ClientHello bytes, built here, fed whole, split and lied about.

use super::*;
use proptest::prelude::*;
use std::collections::HashSet;

use HelloRefusal::*;

/// Bytes under construction, remembering where each length field sits.
#[derive(Default)]
struct Out {
    bytes: Vec<u8>,
    /// (name, offset, width) of every length field written.
    fields: Vec<(String, usize, usize)>,
}

impl Out {
    fn put(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    /// Writes a `width`-byte big-endian length covering what `body` writes.
    fn prefixed(&mut self, name: &str, width: usize, body: impl FnOnce(&mut Out)) {
        let at = self.bytes.len();
        self.bytes.resize(at + width, 0);
        self.fields.push((name.to_owned(), at, width));
        body(self);
        let len = self.bytes.len() - at - width;
        let be = (len as u64).to_be_bytes();
        self.bytes[at..at + width].copy_from_slice(&be[8 - width..]);
    }
}

/// A ClientHello description; `build` gives real bytes.
#[derive(Clone)]
pub(crate) struct Hello {
    extensions: Vec<(u16, Vec<u8>)>,
}

pub(crate) fn sni(name: &str) -> (u16, Vec<u8>) {
    let mut out = Out::default();
    out.prefixed("list", 2, |o| {
        o.put(&[0]);
        o.prefixed("name", 2, |o| o.put(name.as_bytes()));
    });
    (0, out.bytes)
}

/// A post-quantum key share: X25519MLKEM768 (1216 bytes), as Chrome sends.
fn pq_key_share() -> (u16, Vec<u8>) {
    let mut out = Out::default();
    out.prefixed("shares", 2, |o| {
        o.put(&[0x11, 0xec]);
        o.prefixed("share", 2, |o| o.put(&[0xab; 1216]));
        o.put(&[0x00, 0x1d]);
        o.prefixed("x25519 share", 2, |o| o.put(&[0xcd; 32]));
    });
    (0x0033, out.bytes)
}

/// Whether server_name data is one well-formed entry, whose fields the builder can re-derive.
fn is_canonical_sni(data: &[u8]) -> bool {
    data.len() >= 5
        && usize::from(u16::from_be_bytes([data[0], data[1]])) + 2 == data.len()
        && data[2] == 0
        && usize::from(u16::from_be_bytes([data[3], data[4]])) + 5 == data.len()
}

impl Hello {
    /// A Chrome-like hello naming `name`, about 1.5 KB.
    pub(crate) fn named(name: &str) -> Self {
        Hello {
            extensions: vec![
                (0x000a, vec![0, 4, 0x11, 0xec, 0, 0x1d]), // supported_groups
                sni(name),
                (0x002b, vec![4, 3, 4, 3, 3]), // supported_versions
                pq_key_share(),
                (0x0010, b"\x00\x03\x02h2".to_vec()), // ALPN
                (0x0015, vec![0; 200]),               // padding
            ],
        }
    }

    pub(crate) fn without(mut self, ext_type: u16) -> Self {
        self.extensions.retain(|(t, _)| *t != ext_type);
        self
    }

    pub(crate) fn with(mut self, ext: (u16, Vec<u8>)) -> Self {
        self.extensions.push(ext);
        self
    }

    /// Writes the handshake message (header and body) with named length fields.
    fn write_handshake(&self, out: &mut Out) {
        out.put(&[1]);
        out.prefixed("handshake length", 3, |o| {
            o.put(&[3, 3]);
            o.put(&[0x5a; 32]);
            o.prefixed("session_id", 1, |o| o.put(&[0x77; 32]));
            o.prefixed("cipher_suites", 2, |o| o.put(&[0x13, 1, 0x13, 2, 0x13, 3]));
            o.prefixed("compression_methods", 1, |o| o.put(&[0]));
            o.prefixed("extensions", 2, |o| {
                for (ext_type, data) in &self.extensions {
                    o.put(&ext_type.to_be_bytes());
                    let name = format!("extension {ext_type:#06x}");
                    o.prefixed(&name, 2, |o| {
                        if *ext_type == 0 && is_canonical_sni(data) {
                            // Re-derive the server_name fields so lies can target them.
                            let name_len = usize::from(u16::from_be_bytes([data[3], data[4]]));
                            o.prefixed("server_name list", 2, |o| {
                                o.put(&[data[2]]);
                                o.prefixed("host_name", 2, |o| o.put(&data[5..5 + name_len]));
                            });
                        } else {
                            o.put(data);
                        }
                    });
                }
            });
        });
    }

    pub(crate) fn handshake(&self) -> Vec<u8> {
        let mut out = Out::default();
        self.write_handshake(&mut out);
        out.bytes
    }

    /// One record holding the whole hello, with every length field named.
    fn single_record(&self) -> Out {
        let mut out = Out::default();
        out.put(&[0x16, 3, 1]);
        out.prefixed("record length", 2, |o| self.write_handshake(o));
        out
    }

    pub(crate) fn flight(&self) -> Vec<u8> {
        self.single_record().bytes
    }
}

/// Splits a handshake message into records whose fragments have these sizes (the last takes
/// the rest).
pub(crate) fn records(handshake: &[u8], sizes: &[usize]) -> Vec<u8> {
    let mut flight = Vec::new();
    let mut rest = handshake;
    for (i, size) in sizes.iter().enumerate() {
        if rest.is_empty() {
            break;
        }
        let take = if i + 1 == sizes.len() {
            rest.len()
        } else {
            (*size).min(rest.len())
        };
        let (fragment, tail) = rest.split_at(take);
        flight.extend_from_slice(&[0x16, 3, 1]);
        flight.extend_from_slice(&(fragment.len() as u16).to_be_bytes());
        flight.extend_from_slice(fragment);
        rest = tail;
    }
    flight
}

fn accepts(name: &str) -> FirstFlight {
    FirstFlight::Accept {
        sni: name.to_owned(),
    }
}

#[test]
fn a_whole_hello_is_accepted() {
    let flight = Hello::named("api.anthropic.com").flight();
    assert!(
        flight.len() > 1500,
        "a post-quantum hello is {} bytes",
        flight.len()
    );
    assert_eq!(inspect_first_flight(&flight), accepts("api.anthropic.com"));
}

#[test]
fn the_server_name_is_lowercased() {
    let flight = Hello::named("API.Anthropic.COM").flight();
    assert_eq!(inspect_first_flight(&flight), accepts("api.anthropic.com"));
}

#[test]
fn split_over_three_records_and_fed_in_five_segments() {
    let handshake = Hello::named("packages.example.org").handshake();
    let flight = records(&handshake, &[300, 900, 0]);
    assert_eq!(flight.len(), handshake.len() + 3 * 5);
    // Five segments cut at arbitrary points, one inside a record header.
    let cuts = [1, 303, 310, 1211, flight.len()];
    let mut buffered = Vec::new();
    let mut start = 0;
    for (i, cut) in cuts.iter().enumerate() {
        buffered.extend_from_slice(&flight[start..*cut]);
        start = *cut;
        let expected = if i + 1 == cuts.len() {
            accepts("packages.example.org")
        } else {
            FirstFlight::NeedMore
        };
        assert_eq!(inspect_first_flight(&buffered), expected, "segment {i}");
    }
}

/// A reader kept between reads answers at every read as a walk of the whole buffer does, for
/// flights accepted and refused, fed a byte at a time.
#[test]
fn a_reader_fed_a_byte_at_a_time_answers_as_the_whole_walk() {
    let handshake = Hello::named("packages.example.org").handshake();
    let mut not_hello = records(&handshake, &[3, 700, 0]);
    not_hello[RECORD_HEADER_LEN] = 2;
    let mut bad_second_record = records(&handshake, &[300, 0]);
    bad_second_record[RECORD_HEADER_LEN + 300 + 1] = 2;
    let flights = [
        ("three records", records(&handshake, &[3, 700, 0])),
        ("one record", records(&handshake, &[0])),
        ("not a client hello", not_hello),
        ("a bad second record", bad_second_record),
    ];
    for (name, flight) in flights {
        let mut reader = FirstFlightReader::default();
        let mut decided = None;
        for cut in 1..=flight.len() {
            let answer = reader.inspect(&flight[..cut]);
            assert_eq!(
                answer,
                inspect_first_flight(&flight[..cut]),
                "{name}: {cut}"
            );
            if answer != FirstFlight::NeedMore {
                decided = Some(answer);
                break;
            }
        }
        assert!(decided.is_some(), "{name}: decided");
    }
}

#[test]
fn every_strict_prefix_needs_more() {
    let handshake = Hello::named("example.com").handshake();
    let flight = records(&handshake, &[2, 500, 0]);
    for cut in 0..flight.len() {
        assert_eq!(
            inspect_first_flight(&flight[..cut]),
            FirstFlight::NeedMore,
            "cut at {cut}"
        );
    }
    assert_eq!(inspect_first_flight(&flight), accepts("example.com"));
}

#[test]
fn bytes_after_the_hello_do_not_matter() {
    let mut flight = Hello::named("example.com").flight();
    flight.extend_from_slice(b"\x14\x03\x03\x00\x01\x01GET / HTTP/1.1\r\n");
    assert_eq!(inspect_first_flight(&flight), accepts("example.com"));
}

#[test]
fn no_server_name_is_refused() {
    let flight = Hello::named("x.example").without(0).flight();
    assert_eq!(
        inspect_first_flight(&flight),
        FirstFlight::Refuse(NoServerName)
    );
    let no_extensions = Hello { extensions: vec![] };
    let mut out = Out::default();
    out.put(&[0x16, 3, 1]);
    out.prefixed("record", 2, |o| {
        o.put(&[1]);
        o.prefixed("handshake", 3, |o| {
            o.put(&[3, 3]);
            o.put(&[0; 32]);
            o.put(&[0, 0, 2, 0x13, 1, 1, 0]);
        });
    });
    assert_eq!(
        inspect_first_flight(&out.bytes),
        FirstFlight::Refuse(NoServerName)
    );
    // An empty extensions block says the same.
    assert_eq!(
        inspect_first_flight(&no_extensions.flight()),
        FirstFlight::Refuse(NoServerName)
    );
}

#[test]
fn two_server_names_are_refused() {
    let flight = Hello::named("a.example").with(sni("b.example")).flight();
    assert_eq!(
        inspect_first_flight(&flight),
        FirstFlight::Refuse(DuplicateServerName)
    );
    let same = Hello::named("a.example").with(sni("a.example")).flight();
    assert_eq!(
        inspect_first_flight(&same),
        FirstFlight::Refuse(DuplicateServerName)
    );
}

#[test]
fn two_entries_in_one_server_name_are_malformed() {
    let (_, mut data) = sni("a.example");
    data.extend_from_slice(&[0, 0, 9]);
    data.extend_from_slice(b"b.example");
    let list_len = (data.len() - 2) as u16;
    data[..2].copy_from_slice(&list_len.to_be_bytes());
    let flight = Hello::named("x.example")
        .without(0)
        .with((0, data))
        .flight();
    assert_eq!(
        inspect_first_flight(&flight),
        FirstFlight::Refuse(Malformed)
    );
}

#[test]
fn server_name_entry_rules() {
    let with_sni_data = |data: Vec<u8>| {
        Hello::named("x.example")
            .without(0)
            .with((0, data))
            .flight()
    };
    // Entry type other than host_name.
    let (_, mut other_type) = sni("a.example");
    other_type[2] = 1;
    assert_eq!(
        inspect_first_flight(&with_sni_data(other_type)),
        FirstFlight::Refuse(Malformed)
    );
    // Empty name.
    assert_eq!(
        inspect_first_flight(&with_sni_data(vec![0, 3, 0, 0, 0])),
        FirstFlight::Refuse(Malformed)
    );
    // Empty extension (a server's form, never a client's).
    assert_eq!(
        inspect_first_flight(&with_sni_data(vec![])),
        FirstFlight::Refuse(Malformed)
    );
    // Bytes outside visible ASCII.
    for name in [
        "bücher.example",
        "a b.example",
        "a\0.example",
        "a\x7f.example",
    ] {
        assert_eq!(
            inspect_first_flight(&with_sni_data(sni(name).1)),
            FirstFlight::Refuse(InvalidServerName),
            "{name:?}"
        );
    }
}

#[test]
fn encrypted_client_hello_is_refused() {
    let ech = Hello::named("public.example")
        .with((0xfe0d, vec![0; 200]))
        .flight();
    assert_eq!(
        inspect_first_flight(&ech),
        FirstFlight::Refuse(EncryptedClientHello)
    );
    let esni = Hello::named("public.example")
        .with((0xffce, vec![0; 50]))
        .flight();
    assert_eq!(
        inspect_first_flight(&esni),
        FirstFlight::Refuse(EncryptedClientHello)
    );
    // ECH wins over a duplicate or missing server name.
    let ech_no_sni = Hello::named("x.example")
        .without(0)
        .with((0xfe0d, vec![1]))
        .flight();
    assert_eq!(
        inspect_first_flight(&ech_no_sni),
        FirstFlight::Refuse(EncryptedClientHello)
    );
}

#[test]
fn non_tls_first_flights_are_refused_at_the_first_byte() {
    for (name, flight, refusal) in [
        (
            "http request",
            &b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"[..],
            NotTlsHandshake,
        ),
        ("first byte of http", &b"G"[..], NotTlsHandshake),
        (
            "ssh banner",
            &b"SSH-2.0-OpenSSH_9.2\r\n"[..],
            NotTlsHandshake,
        ),
        ("sslv2 hello", &b"\x80\x2e\x01\x00\x02"[..], NotTlsHandshake),
        (
            "application data",
            &b"\x17\x03\x03\x00\x10"[..],
            NotTlsHandshake,
        ),
        (
            "alert",
            &b"\x15\x03\x03\x00\x02\x02\x28"[..],
            NotTlsHandshake,
        ),
        ("major version 2", &b"\x16\x02"[..], BadRecordVersion),
        (
            "major version 4",
            &b"\x16\x04\x01\x00\x05"[..],
            BadRecordVersion,
        ),
        (
            "empty record",
            &b"\x16\x03\x01\x00\x00"[..],
            BadRecordLength,
        ),
        (
            "record too long",
            &b"\x16\x03\x01\x48\x01"[..],
            BadRecordLength,
        ),
        (
            "server hello",
            &b"\x16\x03\x03\x00\x40\x02"[..],
            NotClientHello,
        ),
        (
            "finished",
            &b"\x16\x03\x03\x00\x40\x14\x00\x00\x0c"[..],
            NotClientHello,
        ),
    ] {
        assert_eq!(
            inspect_first_flight(flight),
            FirstFlight::Refuse(refusal),
            "{name}"
        );
    }
    assert_eq!(inspect_first_flight(b""), FirstFlight::NeedMore);
    assert_eq!(inspect_first_flight(b"\x16"), FirstFlight::NeedMore);
    assert_eq!(
        inspect_first_flight(b"\x16\x03\x01\x48\x00"),
        FirstFlight::NeedMore
    );
}

#[test]
fn a_non_handshake_record_mid_hello_is_refused() {
    let handshake = Hello::named("example.com").handshake();
    let mut flight = records(&handshake[..100], &[100]);
    flight.extend_from_slice(b"\x17\x03\x03\x00\x05hello");
    assert_eq!(
        inspect_first_flight(&flight),
        FirstFlight::Refuse(NotTlsHandshake)
    );
}

#[test]
fn a_length_lie_at_every_field_is_never_accepted() {
    let good = Hello::named("api.anthropic.com").single_record();
    assert_eq!(
        inspect_first_flight(&good.bytes),
        accepts("api.anthropic.com")
    );
    assert!(good.fields.len() >= 12, "{:?}", good.fields);
    let mut failures = Vec::new();
    for (name, at, width) in &good.fields {
        let value = good.bytes[*at..at + width]
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        let max = (1u64 << (8 * width)) - 1;
        for lie in [value.wrapping_add(1), value.wrapping_sub(1), 0, max] {
            if lie == value || lie > max {
                continue;
            }
            let mut bytes = good.bytes.clone();
            bytes[*at..at + width].copy_from_slice(&lie.to_be_bytes()[8 - width..]);
            let got = inspect_first_flight(&bytes);
            // Framing lies may leave the walker waiting (the deadline then ends it); a lie
            // inside the hello is malformed, whatever it is.
            let framing = name == "record length" || name == "handshake length";
            let ok = match &got {
                FirstFlight::Accept { .. } => false,
                FirstFlight::NeedMore | FirstFlight::Refuse(_) if framing => true,
                FirstFlight::Refuse(Malformed) => true,
                _ => false,
            };
            if !ok {
                failures.push(format!("{name} {value} -> {lie}: {got:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn framing_lies_have_definite_outcomes() {
    let good = Hello::named("example.com").single_record();
    let field = |name: &str| {
        let (_, at, _) = good.fields.iter().find(|f| f.0 == name).unwrap();
        *at
    };
    let lie = |at: usize, delta: i32| {
        let mut bytes = good.bytes.clone();
        let value = u16::from_be_bytes([bytes[at], bytes[at + 1]]) as i32 + delta;
        bytes[at..at + 2].copy_from_slice(&(value as u16).to_be_bytes());
        inspect_first_flight(&bytes)
    };
    // A record claiming one more byte waits for it.
    assert_eq!(lie(field("record length"), 1), FirstFlight::NeedMore);
    // A record claiming one less leaves a stray byte that is no record header.
    assert!(matches!(
        lie(field("record length"), -1),
        FirstFlight::Refuse(_)
    ));
    // A hello claiming one more byte waits for another record; one less is malformed.
    let hs = field("handshake length") + 1; // the low two of its three bytes
    assert_eq!(lie(hs, 1), FirstFlight::NeedMore);
    assert_eq!(lie(hs, -1), FirstFlight::Refuse(Malformed));
}

#[test]
fn session_id_over_32_bytes_is_malformed() {
    let good = Hello::named("example.com").single_record();
    let (_, at, _) = good.fields.iter().find(|f| f.0 == "session_id").unwrap();
    let mut bytes = good.bytes.clone();
    bytes[*at] = 33;
    assert_eq!(inspect_first_flight(&bytes), FirstFlight::Refuse(Malformed));
}

#[test]
fn size_bounds() {
    // A large hello (padding extension) that still fits the flight is accepted.
    let big = Hello::named("example.com")
        .with((0x0015, vec![0; 60_000]))
        .handshake();
    let flight = records(&big, &[16_384, 16_384, 16_384, 0]);
    assert!(flight.len() < MAX_FIRST_FLIGHT);
    assert_eq!(inspect_first_flight(&flight), accepts("example.com"));
    // A record of the largest length is fine.
    let largest = records(&big, &[MAX_RECORD_LEN, MAX_RECORD_LEN, MAX_RECORD_LEN, 0]);
    assert_eq!(inspect_first_flight(&largest), accepts("example.com"));
    // The same hello in 50-byte records outgrows the flight bound before it completes.
    let small_records = records(&big, &vec![50; big.len() / 50 + 1]);
    assert!(small_records.len() > MAX_FIRST_FLIGHT);
    assert_eq!(
        inspect_first_flight(&small_records[..MAX_FIRST_FLIGHT - 1]),
        FirstFlight::NeedMore
    );
    assert_eq!(
        inspect_first_flight(&small_records),
        FirstFlight::Refuse(TooLarge)
    );
    // A hello that could never fit is refused as soon as its length is seen.
    let huge = Hello::named("example.com")
        .with((0x0015, vec![0; 65_500]))
        .handshake();
    let huge_flight = records(&huge, &[16_384, 0]);
    assert_eq!(
        inspect_first_flight(&huge_flight[..9]),
        FirstFlight::Refuse(TooLarge)
    );
    assert_eq!(
        inspect_first_flight(b"\x16\x03\x01\x00\x04\x01\x01\x00\x01"),
        FirstFlight::Refuse(TooLarge)
    );
    // A hello that fits, fed one byte per record, never completes within the bound.
    let mut endless = b"\x16\x03\x01\x00\x04\x01\x00\xf0\x00".to_vec();
    while endless.len() < MAX_FIRST_FLIGHT + 100 {
        endless.extend_from_slice(b"\x16\x03\x01\x00\x01\x00");
    }
    assert_eq!(
        inspect_first_flight(&endless[..MAX_FIRST_FLIGHT - 1]),
        FirstFlight::NeedMore
    );
    assert_eq!(
        inspect_first_flight(&endless),
        FirstFlight::Refuse(TooLarge)
    );
}

#[test]
fn server_name_check() {
    assert_eq!(
        check_server_name("api.anthropic.com", "api.anthropic.com"),
        Ok(())
    );
    for sni in ["evil.example", "api.anthropic.com.", "anthropic.com", ""] {
        assert_eq!(
            check_server_name("api.anthropic.com", sni),
            Err(ServerNameMismatch),
            "{sni:?}"
        );
    }
}

#[test]
fn refusal_names_are_unique_snake_case() {
    let mut names = HashSet::new();
    for refusal in HelloRefusal::ALL {
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

fn hostname() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9]{1,20}(\\.[a-z0-9-]{1,20}){0,3}\\.[a-z]{2,6}"
}

proptest! {
    #[test]
    fn any_record_split_of_a_valid_hello_is_accepted(
        name in hostname(),
        sizes in prop::collection::vec(1usize..700, 1..8),
    ) {
        let handshake = Hello::named(&name).handshake();
        let flight = records(&handshake, &sizes);
        prop_assert_eq!(inspect_first_flight(&flight), accepts(&name.to_ascii_lowercase()));
    }

    #[test]
    fn a_prefix_never_decides_differently_from_the_whole(
        bytes in prop::collection::vec(any::<u8>(), 0..600),
        cut in any::<prop::sample::Index>(),
    ) {
        let whole = inspect_first_flight(&bytes);
        let prefix = inspect_first_flight(&bytes[..cut.index(bytes.len() + 1)]);
        prop_assert!(prefix == FirstFlight::NeedMore || prefix == whole, "{:?} vs {:?}", prefix, whole);
    }
}

/// The fuzz target's committed seeds (`fuzz/seeds/make.py`), each deciding as its name says:
/// so a seed corpus that no longer reaches past the walker's first checks is caught here.
#[test]
fn the_fuzz_seeds_decide_as_their_names_say() {
    for (name, flight) in crate::fuzz_seeds("client_hello") {
        let decided = inspect_first_flight(&flight);
        match name.as_str() {
            "not-tls" | "no-server-name" => {
                assert!(
                    matches!(decided, FirstFlight::Refuse(_)),
                    "{name}: {decided:?}"
                )
            }
            truncated if truncated.ends_with("-truncated") => {
                assert_eq!(decided, FirstFlight::NeedMore, "{name}")
            }
            refused if refused.starts_with("refused-") => {
                // `refused-<reason>[-<variant>]`, the reason's log name with hyphens.
                let named: Vec<HelloRefusal> = HelloRefusal::ALL
                    .into_iter()
                    .filter(|r| {
                        let prefix = format!("refused-{}", r.as_str().replace('_', "-"));
                        refused == prefix || refused.starts_with(&format!("{prefix}-"))
                    })
                    .collect();
                assert_eq!(named.len(), 1, "{name} names one refusal");
                assert_eq!(decided, FirstFlight::Refuse(named[0]), "{name}");
            }
            accepted => match decided {
                FirstFlight::Accept { sni } => assert!(
                    accepted.contains(&format!("-{sni}")) && !sni.is_empty(),
                    "{name}: {sni}"
                ),
                other => panic!("{name}: {other:?}"),
            },
        }
    }
}
