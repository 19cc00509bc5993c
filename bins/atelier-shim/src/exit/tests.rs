//! The exit-code contract and the child-status mapping.

use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;

use super::*;

#[test]
fn the_contract_codes_are_distinct_and_not_success() {
    let codes = [
        NO_DOOR,
        BAD_SPEC,
        INTERNAL,
        CANNOT_LISTEN,
        DAEMON_GONE,
        NAMESPACE_NOT_IN_EFFECT,
        SPAWN_FAILED,
    ];
    assert_eq!(codes, [64, 65, 70, 71, 74, 78, 127]);
}

#[test]
fn child_ends_map_to_records_and_exit_codes() {
    let cases = [
        ("exit 0", ChildEnd::Exited(0), ExitRecord::exited(0), 0),
        ("exit 1", ChildEnd::Exited(1), ExitRecord::exited(1), 1),
        (
            "exit 255",
            ChildEnd::Exited(255),
            ExitRecord::exited(255),
            255,
        ),
        (
            "SIGKILL",
            ChildEnd::Signaled(9),
            ExitRecord::signaled("SIGKILL"),
            137,
        ),
        (
            "SIGTERM",
            ChildEnd::Signaled(15),
            ExitRecord::signaled("SIGTERM"),
            143,
        ),
        (
            "SIGINT",
            ChildEnd::Signaled(2),
            ExitRecord::signaled("SIGINT"),
            130,
        ),
        (
            "SIGSEGV",
            ChildEnd::Signaled(11),
            ExitRecord::signaled("SIGSEGV"),
            139,
        ),
        (
            "a real-time signal",
            ChildEnd::Signaled(40),
            ExitRecord::signaled("SIG40"),
            168,
        ),
        (
            "a code no process has",
            ChildEnd::Exited(300),
            ExitRecord::exited(300),
            INTERNAL,
        ),
        (
            "a negative code",
            ChildEnd::Exited(-1),
            ExitRecord::exited(-1),
            INTERNAL,
        ),
    ];
    for (name, end, record, code) in cases {
        assert_eq!(end.record(), record, "{name}");
        assert_eq!(end.exit_code(), code, "{name}");
    }
}

#[test]
fn wait_statuses_become_ends() {
    // Raw wait statuses: exit code in bits 8..16, terminating signal in the low 7 bits.
    let cases = [
        ("exited 0", 0, Some(ChildEnd::Exited(0))),
        ("exited 3", 3 << 8, Some(ChildEnd::Exited(3))),
        ("killed", 9, Some(ChildEnd::Signaled(9))),
        (
            "terminated with a core dump",
            11 | 0x80,
            Some(ChildEnd::Signaled(11)),
        ),
        ("stopped", (19 << 8) | 0x7f, None),
    ];
    for (name, raw, want) in cases {
        assert_eq!(
            ChildEnd::from_status(ExitStatus::from_raw(raw)),
            want,
            "{name}"
        );
    }
}

#[test]
fn every_standard_signal_has_its_name() {
    let names: Vec<String> = (1..=31).map(signal_name).collect();
    assert!(
        names.iter().all(|n| n.starts_with("SIG") && n.len() > 4),
        "{names:?}"
    );
    let unique: std::collections::BTreeSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), 31);
    assert_eq!(signal_name(libc::SIGPIPE), "SIGPIPE");
    assert_eq!(signal_name(0), "SIG0");
}
