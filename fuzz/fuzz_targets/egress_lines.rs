//! Fuzzes the lines of the gate's decisions socket: the subscription the gate reads from sited
//! and the decisions sited reads from the gate. Whatever parses must encode and parse back to
//! itself.
#![no_main]

use atelier_proto::egress::{Decision, Subscribe};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(subscribe) = Subscribe::parse_line(data) {
        let line = subscribe.to_line().expect("an accepted subscription encodes");
        assert_eq!(
            Subscribe::parse_line(line.as_bytes()).expect("its encoding parses"),
            subscribe
        );
    }
    if let Ok(decision) = Decision::parse_line(data) {
        let line = decision.to_line().expect("an accepted decision encodes");
        assert_eq!(
            Decision::parse_line(line.as_bytes()).expect("its encoding parses"),
            decision
        );
        let _ = decision.line();
    }
});
