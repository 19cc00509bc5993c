//! The site domain grammar: a lowercase hostname of at least two DNS labels, at most 253 chars.

/// A domain that breaks the grammar; the detail names the domain as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("domain '{0}' must be a lowercase hostname of at least two labels (a-z, 0-9, '-'; no leading or trailing '-'; at most 253 chars)")]
pub struct BadDomain(pub String);

/// Trims and lower-cases `input`, then checks it: labels of 1–63 chars of `[a-z0-9-]` not
/// starting or ending with `-`, at least two of them, 253 chars at most in all.
pub fn normalize_domain(input: &str) -> Result<String, BadDomain> {
    let domain = input.trim().to_lowercase();
    if atelier_layout::names::is_domain(&domain) {
        Ok(domain)
    } else {
        Err(BadDomain(input.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar_table() {
        let long_label = "a".repeat(63);
        let too_long_label = "a".repeat(64);
        let max_total = format!("{0}.{0}.{0}.{1}", "a".repeat(63), "a".repeat(61));
        let over_total = format!("{max_total}a");
        let cases: Vec<(&str, String, Option<&str>)> = vec![
            ("two labels", "example.org".into(), Some("example.org")),
            (
                "many labels",
                "www.pre.example.org".into(),
                Some("www.pre.example.org"),
            ),
            (
                "trimmed and lowered",
                "  WWW.Example.ORG ".into(),
                Some("www.example.org"),
            ),
            ("digits and hyphens", "a-1.b2".into(), Some("a-1.b2")),
            ("63-char label", format!("{long_label}.org"), None),
            ("64-char label", format!("{too_long_label}.org"), None),
            ("253 chars", max_total.clone(), None),
            ("254 chars", over_total, None),
            ("one label", "localhost".into(), None),
            ("empty", "".into(), None),
            ("empty label", "a..org".into(), None),
            ("trailing dot", "example.org.".into(), None),
            ("leading hyphen", "-a.org".into(), None),
            ("trailing hyphen", "a-.org".into(), None),
            ("underscore", "a_b.org".into(), None),
            ("url", "https://example.org".into(), None),
            ("port", "example.org:80".into(), None),
            ("path", "example.org/x".into(), None),
            ("non-ascii", "exámple.org".into(), None),
        ];
        for (name, input, want) in cases {
            let got = normalize_domain(&input);
            match name {
                "63-char label" | "253 chars" => {
                    assert_eq!(got.as_deref(), Ok(input.as_str()), "case {name}")
                }
                _ => match want {
                    Some(w) => assert_eq!(got.as_deref(), Ok(w), "case {name}"),
                    None => assert_eq!(got, Err(BadDomain(input.clone())), "case {name}"),
                },
            }
        }
        assert!(normalize_domain("x")
            .unwrap_err()
            .to_string()
            .contains("domain 'x'"));
    }
}
