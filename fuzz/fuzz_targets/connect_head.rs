//! Fuzzes the CONNECT head parser: no panic, every accepted head obeys the gate's rules, and a
//! prefix never decides differently from the whole.
#![no_main]

use atelier_gate::{parse_and_classify, parse_head, ConnectRefusal, Reason, Verdict, MAX_HEAD};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let whole = parse_head(data);
    match &whole {
        Ok(Some((target, head_len))) => {
            let head_len = *head_len;
            assert!(head_len <= data.len() && head_len <= MAX_HEAD);
            assert!(data[..head_len].ends_with(b"\r\n\r\n"));
            assert_eq!(target.port(), 443);
            let host = target.host();
            assert!(atelier_gate::is_plan_hostname(host), "{host:?}");
            assert_eq!(host, host.to_ascii_lowercase());
            assert!(!host.ends_with('.'));
            assert_eq!(
                parse_and_classify(host),
                Verdict::Refused(Reason::Unparseable),
                "an accepted host is never an IP literal: {host:?}"
            );
            // The head alone parses the same; one byte less needs more.
            assert_eq!(parse_head(&data[..head_len]), whole);
            assert_eq!(parse_head(&data[..head_len - 1]), Ok(None));
        }
        Ok(None) => assert!(data.len() < MAX_HEAD),
        Err(refusal) => {
            assert_ne!(*refusal, ConnectRefusal::NotInPlan);
            assert_ne!(*refusal, ConnectRefusal::HeadTimeout);
            let reply = refusal.reply();
            assert!(reply.starts_with(format!("HTTP/1.1 {} ", refusal.status()).as_bytes()));
            assert!(reply.ends_with(b"\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"));
        }
    }
    // Any prefix (chosen by the first byte) either needs more or decides the same.
    if let Some(&seed) = data.first() {
        let cut = data.len() * usize::from(seed) / 255;
        let prefix = parse_head(&data[..cut]);
        assert!(
            prefix == Ok(None) || prefix == whole,
            "{prefix:?} vs {whole:?}"
        );
    }
});
