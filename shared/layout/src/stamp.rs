//! The stamp on the first line of every file the provisioner renders: the instance, the kind
//! and the sha256 of the body. The provisioner writes it; sited verifies it before trusting a
//! file such as `sites.json`. One format, read and written here only.

use sha2::{Digest, Sha256};

/// The word that marks a stamp line as Atelier's.
pub const STAMP_MARK: &str = "atelier-provision:";

/// How a file format writes a comment line, which is what the stamp is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommentStyle {
    /// `#`: units, env files, tmpfiles.d, vhosts, gitconfig.
    Hash,
    /// `//`: the polkit rule (JavaScript) and JSON files whose readers strip the first line.
    Slashes,
}

impl CommentStyle {
    fn prefix(self) -> &'static str {
        match self {
            CommentStyle::Hash => "#",
            CommentStyle::Slashes => "//",
        }
    }
}

/// A parsed stamp line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    /// The instance it names.
    pub instance: String,
    /// The kind it names (`^[a-z][a-z0-9_]*$`).
    pub kind: String,
    /// The sha256 of the body it records, lowercase hex.
    pub sha256: String,
}

/// Why a stamped file cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StampError {
    /// The first line is not a stamp of ours.
    #[error("has no stamp line")]
    Missing,
    /// The stamp names another instance.
    #[error("belongs to instance {0}")]
    Foreign(String),
    /// The stamp names another kind of file.
    #[error("is stamped as {found}, not {expected}")]
    WrongKind {
        /// The kind the reader expects.
        expected: String,
        /// The kind the stamp names.
        found: String,
    },
    /// The body no longer hashes to the stamp: edited after it was rendered.
    #[error("was edited after it was rendered (hash drift)")]
    Drift,
}

/// `body` under a stamp line for `instance` and `kind`.
pub fn stamped(instance: &str, kind: &str, style: CommentStyle, body: &[u8]) -> Vec<u8> {
    let line = format!(
        "{} {STAMP_MARK} {instance} {kind} {}\n",
        style.prefix(),
        sha256_hex(body)
    );
    let mut bytes = Vec::with_capacity(line.len() + body.len());
    bytes.extend_from_slice(line.as_bytes());
    bytes.extend_from_slice(body);
    bytes
}

/// The first line (without its newline) and the body after it.
pub fn split_stamp(file: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = file.iter().position(|&b| b == b'\n')?;
    Some((&file[..end], &file[end + 1..]))
}

/// Parses the stamp on the first line of `file`, if it carries one of ours.
pub fn parse_stamp(file: &[u8]) -> Option<Stamp> {
    let (line, _) = split_stamp(file)?;
    let line = std::str::from_utf8(line).ok()?;
    let line = line.strip_suffix('\r').unwrap_or(line);
    let mut words = line.split([' ', '\t']).filter(|w| !w.is_empty());
    let prefix = words.next()?;
    if prefix.len() > 4 || words.next()? != STAMP_MARK {
        return None;
    }
    let instance = words.next()?.to_owned();
    let kind = words.next()?.to_owned();
    let sha256 = words.next()?.to_owned();
    let kind_ok = kind.starts_with(|c: char| c.is_ascii_lowercase())
        && kind
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    let hash_ok = sha256.len() == 64
        && sha256
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    (kind_ok && hash_ok && words.next().is_none()).then_some(Stamp {
        instance,
        kind,
        sha256,
    })
}

/// Returns true if and only if the body of `file` hashes to what its stamp records.
pub fn body_matches(file: &[u8], stamp: &Stamp) -> bool {
    split_stamp(file).is_some_and(|(_, body)| sha256_hex(body) == stamp.sha256)
}

/// Checks that `file` is a `kind` file rendered for `instance` and unedited since; returns the
/// body after the stamp line.
pub fn verify<'a>(file: &'a [u8], instance: &str, kind: &str) -> Result<&'a [u8], StampError> {
    let stamp = parse_stamp(file).ok_or(StampError::Missing)?;
    if stamp.kind != kind {
        return Err(StampError::WrongKind {
            expected: kind.to_owned(),
            found: stamp.kind,
        });
    }
    if stamp.instance != instance {
        return Err(StampError::Foreign(stamp.instance));
    }
    if !body_matches(file, &stamp) {
        return Err(StampError::Drift);
    }
    Ok(split_stamp(file).map_or(&[][..], |(_, body)| body))
}

/// The lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_round_trips_and_names_the_body_hash() {
        let file = stamped("museum", "unit", CommentStyle::Hash, b"[Unit]\n");
        let text = String::from_utf8(file.clone()).unwrap();
        assert_eq!(
            text.lines().next().unwrap(),
            format!(
                "# atelier-provision: museum unit {}",
                sha256_hex(b"[Unit]\n")
            )
        );
        let stamp = parse_stamp(&file).unwrap();
        assert_eq!(
            (stamp.instance.as_str(), stamp.kind.as_str()),
            ("museum", "unit")
        );
        let json = stamped("museum", "sites", CommentStyle::Slashes, b"{}\n");
        assert!(json.starts_with(b"// atelier-provision: museum sites "));
        assert_eq!(verify(&json, "museum", "sites"), Ok(&b"{}\n"[..]));
    }

    #[test]
    fn verification_refusals() {
        let ours = stamped("museum", "sites", CommentStyle::Slashes, b"{}\n");
        let mut edited = ours.clone();
        edited.extend_from_slice(b" ");
        let cases: [(&str, &[u8], StampError); 4] = [
            ("no stamp", b"{}\n", StampError::Missing),
            (
                "another instance",
                &stamped("other", "sites", CommentStyle::Slashes, b"{}\n"),
                StampError::Foreign("other".into()),
            ),
            (
                "another kind",
                &stamped("museum", "env", CommentStyle::Hash, b"{}\n"),
                StampError::WrongKind {
                    expected: "sites".into(),
                    found: "env".into(),
                },
            ),
            ("edited", &edited, StampError::Drift),
        ];
        for (name, file, expected) in cases {
            assert_eq!(
                verify(file, "museum", "sites"),
                Err(expected),
                "case {name}"
            );
        }
    }

    #[test]
    fn malformed_stamps_are_not_stamps() {
        let hash = "0".repeat(64);
        let cases = [
            format!("# atelier-provision: museum unit {}\n", &hash[..63]),
            format!("# atelier-provision: museum Unit {hash}\n"),
            format!("##### atelier-provision: museum unit {hash}\n"),
            format!("# dedalo-provision: museum unit {hash}\n"),
            format!("# atelier-provision: museum unit {hash} extra\n"),
            format!("# atelier-provision: museum unit {}\n", "A".repeat(64)),
        ];
        for case in cases {
            assert!(parse_stamp(case.as_bytes()).is_none(), "{case}");
        }
        let crlf = format!("# atelier-provision: museum unit {hash}\r\n");
        assert!(parse_stamp(crlf.as_bytes()).is_some());
    }
}
