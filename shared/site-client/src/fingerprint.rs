//! The engine's pairing fingerprint: what `/health` must carry for the client to believe
//! it reached the instance its token belongs to.

use subtle::ConstantTimeEq;

pub use atelier_layout::pairing::instance_fingerprint;

/// Returns true if and only if `received` is exactly `expected`, compared in constant time
/// (the length is not secret: every fingerprint is 64 characters).
pub fn fingerprint_matches(received: &str, expected: &str) -> bool {
    received.as_bytes().ct_eq(expected.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_fingerprint_matches() {
        let good = instance_fingerprint("example", &"x".repeat(32));
        let cases: &[(&str, String, bool)] = &[
            ("same", good.clone(), true),
            ("uppercase", good.to_uppercase(), false),
            (
                "other token",
                instance_fingerprint("example", &"y".repeat(32)),
                false,
            ),
            (
                "other instance",
                instance_fingerprint("example2", &"x".repeat(32)),
                false,
            ),
            ("prefix", good[..63].to_owned(), false),
            ("longer", format!("{good}0"), false),
            ("empty", String::new(), false),
        ];
        for (name, received, want) in cases {
            assert_eq!(fingerprint_matches(received, &good), *want, "{name}");
        }
    }
}
