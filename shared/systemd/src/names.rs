//! What may be sent to PID 1: unit names, unit name patterns and signals, each checked before
//! any call; the object path a unit's name gives; and PID 1's release number read off its
//! `Version` string.

use std::fmt;

/// The longest unit name systemd accepts.
pub const MAX_UNIT_NAME_LEN: usize = 255;

/// The unit types systemd knows; a name must end in one.
const UNIT_SUFFIXES: [&str; 11] = [
    "service",
    "socket",
    "target",
    "device",
    "mount",
    "automount",
    "swap",
    "timer",
    "path",
    "slice",
    "scope",
];

/// Why a unit name, a pattern or a signal is not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Empty, too long, a character systemd does not allow, more than one `@`, or no unit
    /// type suffix.
    #[error("{name:?} is not a unit name: {why}")]
    BadUnitName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A pattern for `ListUnitsByPatterns` with a character outside unit names and globs.
    #[error("{pattern:?} is not a unit name pattern: {why}")]
    BadPattern {
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A signal number outside 1..=64.
    #[error("{0} is not a signal number (1..=64)")]
    BadSignal(i32),
}

fn is_unit_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, ':' | '-' | '_' | '.' | '\\' | '@')
}

/// Checks `name` against systemd's unit name grammar: 1–255 characters of `A-Za-z0-9:-_.\@`,
/// at most one `@`, a non-empty stem and a unit type suffix.
pub fn check_unit_name(name: &str) -> Result<(), NameError> {
    let bad = |why| NameError::BadUnitName {
        name: name.to_owned(),
        why,
    };
    if name.is_empty() {
        return Err(bad("it is empty"));
    }
    if name.len() > MAX_UNIT_NAME_LEN {
        return Err(bad("it is longer than 255 characters"));
    }
    if !name.chars().all(is_unit_char) {
        return Err(bad("it holds a character systemd does not allow"));
    }
    if name.matches('@').count() > 1 {
        return Err(bad("it holds more than one '@'"));
    }
    let Some((stem, suffix)) = name.rsplit_once('.') else {
        return Err(bad("it has no unit type suffix"));
    };
    if !UNIT_SUFFIXES.contains(&suffix) {
        return Err(bad("its suffix is not a unit type"));
    }
    let prefix = stem.split('@').next().unwrap_or_default();
    if prefix.is_empty() {
        return Err(bad("its name before the suffix is empty"));
    }
    Ok(())
}

/// Checks a `ListUnitsByPatterns` pattern: unit name characters and the globs `*?[]`, 1–255
/// characters.
pub fn check_pattern(pattern: &str) -> Result<(), NameError> {
    let bad = |why| NameError::BadPattern {
        pattern: pattern.to_owned(),
        why,
    };
    if pattern.is_empty() {
        return Err(bad("it is empty"));
    }
    if pattern.len() > MAX_UNIT_NAME_LEN {
        return Err(bad("it is longer than 255 characters"));
    }
    if !pattern
        .chars()
        .all(|c| is_unit_char(c) || matches!(c, '*' | '?' | '[' | ']'))
    {
        return Err(bad(
            "it holds a character that is neither a unit name's nor a glob's",
        ));
    }
    Ok(())
}

/// PID 1's release from its `Version` property: the leading number of `252.39-1~deb12u2`.
pub fn parse_version(version: &str) -> Option<u32> {
    let digits: &str = version
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap_or_default();
    digits.parse().ok()
}

/// A signal for `KillUnit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal(i32);

// === impl Signal ===

impl Signal {
    /// `SIGTERM`: asks a run to end.
    pub const TERM: Signal = Signal(15);
    /// `SIGKILL`: ends it.
    pub const KILL: Signal = Signal(9);

    /// Checks that `number` is a signal (1..=64).
    pub fn new(number: i32) -> Result<Self, NameError> {
        if (1..=64).contains(&number) {
            Ok(Self(number))
        } else {
            Err(NameError::BadSignal(number))
        }
    }

    /// The signal's number.
    pub fn number(self) -> i32 {
        self.0
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            9 => f.write_str("SIGKILL"),
            15 => f.write_str("SIGTERM"),
            n => write!(f, "signal {n}"),
        }
    }
}

/// The object path PID 1 serves `unit` at: its name with every byte but an ASCII letter (or a
/// digit after the first byte) written as `_` and two lowercase hex digits. Asking a property
/// there loads the unit as `LoadUnit` would, without a round trip of its own.
pub fn unit_object_path(unit: &str) -> String {
    let mut path = String::from("/org/freedesktop/systemd1/unit/");
    for (i, byte) in unit.bytes().enumerate() {
        if byte.is_ascii_alphabetic() || (i > 0 && byte.is_ascii_digit()) {
            path.push(char::from(byte));
        } else {
            path.push_str(&format!("_{byte:02x}"));
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each case as systemd escapes a unit name (the probe's is the path `busctl` shows in the
    /// box).
    #[test]
    fn unit_object_paths_escape_as_pid_1_does() {
        let cases = [
            (
                "a door's probe",
                "atelier-example-s1-turn@probe.service",
                "atelier_2dexample_2ds1_2dturn_40probe_2eservice",
            ),
            ("a socket", "dbus.socket", "dbus_2esocket"),
            ("digits after the first byte", "a10.target", "a10_2etarget"),
            ("a leading digit", "1x.service", "_31x_2eservice"),
            ("an underscore", "a_b.service", "a_5fb_2eservice"),
            (
                "an instance with a colon",
                "x@a:b.service",
                "x_40a_3ab_2eservice",
            ),
        ];
        for (name, unit, escaped) in cases {
            assert_eq!(
                unit_object_path(unit),
                format!("/org/freedesktop/systemd1/unit/{escaped}"),
                "{name}"
            );
        }
    }

    #[test]
    fn unit_names() {
        let good = [
            ("a service", "atelier-sited@example.service"),
            ("a template", "atelier-example-s1-turn@.service"),
            (
                "an accepted instance",
                "atelier-example-s1-turn@3-1234-0.service",
            ),
            ("a socket", "atelier-example-s1-turn.socket"),
            ("a target", "atelier-example-s1-turn.target"),
            ("escaped", "system-atelier\\x2dexample.slice"),
        ];
        for (case, name) in good {
            assert_eq!(check_unit_name(name), Ok(()), "{case}");
        }
        let bad = [
            ("empty", "", "it is empty"),
            (
                "too long",
                &*format!("{}.service", "a".repeat(250)),
                "it is longer than 255 characters",
            ),
            (
                "a slash",
                "../etc/passwd.service",
                "it holds a character systemd does not allow",
            ),
            (
                "a space",
                "a b.service",
                "it holds a character systemd does not allow",
            ),
            (
                "a glob",
                "a*.service",
                "it holds a character systemd does not allow",
            ),
            (
                "a newline",
                "a\n.service",
                "it holds a character systemd does not allow",
            ),
            (
                "non-ascii",
                "é.service",
                "it holds a character systemd does not allow",
            ),
            ("two ats", "a@b@c.service", "it holds more than one '@'"),
            ("no suffix", "atelier-sited", "it has no unit type suffix"),
            ("unknown suffix", "a.conf", "its suffix is not a unit type"),
            (
                "only a suffix",
                ".service",
                "its name before the suffix is empty",
            ),
            (
                "only an instance",
                "@x.service",
                "its name before the suffix is empty",
            ),
        ];
        for (case, name, why) in bad {
            assert_eq!(
                check_unit_name(name),
                Err(NameError::BadUnitName {
                    name: name.to_owned(),
                    why
                }),
                "{case}"
            );
        }
    }

    #[test]
    fn patterns() {
        assert_eq!(check_pattern("atelier-example-s1-*@*.service"), Ok(()));
        assert_eq!(
            check_pattern("atelier-example-s[12]-turn@?.service"),
            Ok(())
        );
        for (case, pattern) in [
            ("empty", ""),
            ("a space", "a *"),
            ("a slash", "*/x"),
            ("a quote", "a'*"),
        ] {
            assert!(
                matches!(check_pattern(pattern), Err(NameError::BadPattern { .. })),
                "{case}"
            );
        }
    }

    #[test]
    fn versions() {
        for (case, text, release) in [
            ("debian", "252.39-1~deb12u2", Some(252)),
            ("plain", "256", Some(256)),
            ("upstream point", "256.1", Some(256)),
            ("release candidate", "257~rc2", Some(257)),
            ("arch", "255.4-1-arch", Some(255)),
            ("spaces", " 248 \n", Some(248)),
            ("empty", "", None),
            ("a prefix", "v252", None),
            ("words", "systemd", None),
            ("too big", "99999999999", None),
        ] {
            assert_eq!(parse_version(text), release, "{case}");
        }
    }

    #[test]
    fn signals() {
        assert_eq!(Signal::new(9), Ok(Signal::KILL));
        assert_eq!(Signal::new(15), Ok(Signal::TERM));
        for bad in [0, -9, 65, i32::MAX] {
            assert_eq!(Signal::new(bad), Err(NameError::BadSignal(bad)));
        }
        assert_eq!(Signal::KILL.to_string(), "SIGKILL");
    }
}
