//! What a host on a gate plan may be: one rule, checked by the provisioner when it reads a
//! declaration's plan hosts and by the gate on every CONNECT, so that a plan can only hold
//! hosts the gate can reach and the gate reaches nothing a plan could not have held.
//!
//! A plan host is a public DNS name, never an address:
//! - not an IP address, bracketed or not: egress is by hostname only;
//! - lowercase, 1 to 253 bytes, at least two labels, each label 1 to 63 of `[a-z0-9-]` not
//!   starting or ending with `-`, the last label 2 to 63 letters. The alphabetic last label
//!   also rules out every numeric shorthand a system resolver would read as an address
//!   (`127.1`, `2130706433`, `0x7f.1`); internationalised names arrive as punycode (`xn--…`);
//!   a trailing dot is refused, so each host has one spelling;
//! - not under a special-use local suffix ([`SPECIAL_USE_SUFFIXES`]).

use std::net::IpAddr;

use crate::names::is_domain;

/// Suffixes that never name a public host (RFC 6761, RFC 6762, RFC 8375, ICANN `internal`).
pub const SPECIAL_USE_SUFFIXES: [&str; 6] = [
    "localhost",
    "local",
    "internal",
    "home.arpa",
    "localdomain",
    "invalid",
];

/// Why a text is not a plan host, in the order the checks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotPlanHost {
    /// An IP address (or bracketed like one).
    Address,
    /// Not a lowercase DNS name of the plan grammar.
    NotHostname,
    /// A name under a special-use local suffix.
    SpecialUse,
}

/// Checks that `host` is a plan host; see the module documentation. Callers that take a host
/// from a client lowercase it first; an uppercase letter is [`NotPlanHost::NotHostname`].
pub fn check_plan_host(host: &str) -> Result<(), NotPlanHost> {
    let unbracketed = host.trim_start_matches('[').trim_end_matches(']');
    if host.starts_with('[') || unbracketed.parse::<IpAddr>().is_ok() {
        return Err(NotPlanHost::Address);
    }
    if !is_plan_hostname(host) {
        return Err(NotPlanHost::NotHostname);
    }
    if is_special_use(host) {
        return Err(NotPlanHost::SpecialUse);
    }
    Ok(())
}

/// Returns true if and only if `host` is a DNS name in the plan grammar (lowercase labels, an
/// alphabetic last label, at most 253 bytes); addresses and special-use names are
/// [`check_plan_host`]'s to refuse.
pub fn is_plan_hostname(host: &str) -> bool {
    // A site domain whose last label is letters only.
    is_domain(host)
        && host.rsplit('.').next().is_some_and(|last| {
            (2..=63).contains(&last.len()) && last.bytes().all(|b| b.is_ascii_lowercase())
        })
}

/// Whether `host` is a special-use suffix or a name below one.
fn is_special_use(host: &str) -> bool {
    SPECIAL_USE_SUFFIXES.iter().any(|suffix| {
        host == *suffix
            || host
                .strip_suffix(suffix)
                .is_some_and(|head| head.ends_with('.'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_hosts() {
        let label63 = "a".repeat(63);
        // Three labels of 63, one of 57 and `com`, with their dots: 253 bytes.
        let longest = format!("{label63}.{label63}.{label63}.{}.com", "b".repeat(57));
        assert_eq!(longest.len(), 253);
        let too_long = format!("c{longest}");
        let cases: &[(&str, &str, Result<(), NotPlanHost>)] = &[
            ("a public name", "api.anthropic.com", Ok(())),
            ("two labels", "a.bc", Ok(())),
            ("digits and hyphens inside", "x-1.a2.example.org", Ok(())),
            ("punycode", "xn--bcher-kva.example", Ok(())),
            ("a 63-byte label", &format!("{label63}.com"), Ok(())),
            ("253 bytes", &longest, Ok(())),
            ("254 bytes", &too_long, Err(NotPlanHost::NotHostname)),
            (
                "a 64-byte label",
                &format!("a.{}.com", "b".repeat(64)),
                Err(NotPlanHost::NotHostname),
            ),
            (
                "a 64-letter last label",
                &format!("a.{}", "b".repeat(64)),
                Err(NotPlanHost::NotHostname),
            ),
            ("empty", "", Err(NotPlanHost::NotHostname)),
            ("one label", "com", Err(NotPlanHost::NotHostname)),
            ("uppercase", "Example.com", Err(NotPlanHost::NotHostname)),
            (
                "a trailing dot",
                "example.com.",
                Err(NotPlanHost::NotHostname),
            ),
            ("an empty label", "a..com", Err(NotPlanHost::NotHostname)),
            ("a leading hyphen", "-a.com", Err(NotPlanHost::NotHostname)),
            ("a trailing hyphen", "a-.com", Err(NotPlanHost::NotHostname)),
            ("an underscore", "a_b.com", Err(NotPlanHost::NotHostname)),
            ("a wildcard", "*.example.org", Err(NotPlanHost::NotHostname)),
            ("a word", "any", Err(NotPlanHost::NotHostname)),
            (
                "a numeric last label",
                "example.123",
                Err(NotPlanHost::NotHostname),
            ),
            (
                "a numeric shorthand",
                "127.1",
                Err(NotPlanHost::NotHostname),
            ),
            (
                "a decimal address",
                "2130706433",
                Err(NotPlanHost::NotHostname),
            ),
            ("a hex shorthand", "0x7f.1", Err(NotPlanHost::NotHostname)),
            ("IPv4", "10.0.0.1", Err(NotPlanHost::Address)),
            ("IPv6", "::1", Err(NotPlanHost::Address)),
            ("bracketed IPv6", "[::1]", Err(NotPlanHost::Address)),
            ("a bracket", "[example.com", Err(NotPlanHost::Address)),
            ("localhost", "localhost", Err(NotPlanHost::NotHostname)),
            (
                "under localhost",
                "evil.localhost",
                Err(NotPlanHost::SpecialUse),
            ),
            ("mDNS", "printer.local", Err(NotPlanHost::SpecialUse)),
            (
                "internal",
                "metadata.google.internal",
                Err(NotPlanHost::SpecialUse),
            ),
            ("home.arpa", "home.arpa", Err(NotPlanHost::SpecialUse)),
            (
                "under home.arpa",
                "router.home.arpa",
                Err(NotPlanHost::SpecialUse),
            ),
            (
                "localdomain",
                "box.localdomain",
                Err(NotPlanHost::SpecialUse),
            ),
            ("invalid", "x.invalid", Err(NotPlanHost::SpecialUse)),
            ("a lookalike suffix", "notlocalhost.com", Ok(())),
        ];
        for (name, host, want) in cases {
            assert_eq!(check_plan_host(host), *want, "{name}: {host:?}");
            assert_eq!(
                is_plan_hostname(host),
                matches!(want, Ok(()) | Err(NotPlanHost::SpecialUse)),
                "{name}: {host:?}"
            );
        }
    }
}
