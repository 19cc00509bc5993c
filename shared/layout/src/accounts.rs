//! The host's account databases as Atelier reads them, and what a site identity's entries in
//! them must be: held by the provisioner at plan and apply and by sited before every run alike.
//!
//! Both read `/etc/passwd` and `/etc/group` with one parser that takes a line as the C
//! library's `files` source does, so neither sees an account the host does not, nor misses one
//! it does: leading blanks, blank lines and `#` comments are skipped; ids are read as `strtoul`
//! reads them; trailing fields may be missing; the last field runs to the end of the line.

use serde::Serialize;

/// One line of `/etc/passwd`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PasswdEntry {
    /// Login name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Comment field.
    pub gecos: String,
    /// Home directory.
    pub home: String,
    /// Login shell.
    pub shell: String,
}

/// One line of `/etc/group`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupEntry {
    /// Group name.
    pub name: String,
    /// Group id.
    pub gid: u32,
    /// Supplementary members.
    pub members: Vec<String>,
}

/// The entries of an account database split into at most `fields` fields: each line that is
/// neither blank nor a comment (leading blanks removed) as its name and the fields after its
/// password; a line without those two is none.
fn entries(text: &str, fields: usize) -> impl Iterator<Item = (&str, std::str::SplitN<'_, char>)> {
    text.lines()
        .map(|line| line.trim_start_matches([' ', '\t']))
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(move |line| {
            let mut split = line.splitn(fields, ':');
            let name = split.next()?;
            let _password = split.next()?;
            Some((name, split))
        })
}

/// A numeric id as the C library reads it (`strtoul`, then clamped to 32 bits): leading
/// blanks and one sign may precede the digits, a value past 32 bits reads as `u32::MAX` and a
/// negative one wraps; no digit, or anything after them, and the line is not an entry.
fn id(field: &str) -> Option<u32> {
    let field = field.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, digits) = match field.as_bytes().first() {
        Some(b'-') => (true, &field[1..]),
        Some(b'+') => (false, &field[1..]),
        _ => (false, field),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Past 64 bits `strtoul` answers its maximum, whatever the sign; a negative value within
    // them is negated in 64 bits.
    let value = match digits.parse::<u64>() {
        Ok(value) if negative => value.wrapping_neg(),
        Ok(value) => value,
        Err(_) => u64::MAX,
    };
    Some(u32::try_from(value).unwrap_or(u32::MAX))
}

/// Parses `/etc/passwd`; a line without a name, password, uid and gid is skipped, as the C
/// library skips it.
pub fn parse_passwd(text: &str) -> Vec<PasswdEntry> {
    entries(text, 7)
        .filter_map(|(name, mut fields)| {
            let uid = id(fields.next()?)?;
            let gid = id(fields.next()?)?;
            let mut rest = || fields.next().unwrap_or_default().to_owned();
            Some(PasswdEntry {
                name: name.to_owned(),
                uid,
                gid,
                gecos: rest(),
                home: rest(),
                shell: rest(),
            })
        })
        .collect()
}

/// Parses `/etc/group`; a line without a name, password and gid is skipped, as the C library
/// skips it. Empty items of the member list name no one.
pub fn parse_group(text: &str) -> Vec<GroupEntry> {
    entries(text, 4)
        .filter_map(|(name, mut fields)| {
            let gid = id(fields.next()?)?;
            let members = fields
                .next()
                .unwrap_or_default()
                .split(',')
                .filter(|m| !m.is_empty())
                .map(str::to_owned)
                .collect();
            Some(GroupEntry {
                name: name.to_owned(),
                gid,
                members,
            })
        })
        .collect()
}

/// The first of `groups` (name and listed members) that lists `identity` though it is neither
/// the identity's own private group nor `instance_group` (its primary): a group the provisioner
/// never gives a site identity. A door's run holds every group `/etc/group` lists its user in,
/// and no unit property shows them.
pub fn foreign_group<'g>(
    groups: impl IntoIterator<Item = (&'g str, &'g [String])>,
    identity: &str,
    instance_group: &str,
) -> Option<&'g str> {
    groups
        .into_iter()
        .find(|(name, members)| {
            *name != identity && *name != instance_group && members.iter().any(|m| m == identity)
        })
        .map(|(name, _)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_read_as_the_c_library_reads_them() {
        let user = |line: &str| {
            parse_passwd(line)
                .into_iter()
                .map(|u| (u.name, u.uid, u.gid, u.gecos, u.home, u.shell))
                .next()
        };
        let whole = |name: &str, gecos: &str, home: &str, shell: &str| {
            Some((
                name.into(),
                991,
                990,
                gecos.into(),
                home.into(),
                shell.into(),
            ))
        };
        let passwd_cases = [
            (
                "every field",
                "site:x:991:990:atelier site blog:/nonexistent:/usr/sbin/nologin",
                whole(
                    "site",
                    "atelier site blog",
                    "/nonexistent",
                    "/usr/sbin/nologin",
                ),
            ),
            (
                "trailing fields missing",
                "site:x:991:990",
                whole("site", "", "", ""),
            ),
            (
                "the shell runs to the end",
                "site:x:991:990:g:/h:/bin/sh:extra",
                whole("site", "g", "/h", "/bin/sh:extra"),
            ),
            (
                "leading blanks",
                " \tsite:x:991:990:::",
                whole("site", "", "", ""),
            ),
            ("no gid", "site:x:991", None),
            ("a uid with a letter", "site:x:991a:990:::", None),
            ("an empty uid", "site:x::990:::", None),
            ("a uid of blanks", "site:x: :990:::", None),
            ("a sign alone", "site:x:+:990:::", None),
            (
                "a signed uid",
                "site:x:+991:990:::",
                whole("site", "", "", ""),
            ),
            (
                "blanks before the uid",
                "site:x: \t991:990:::",
                whole("site", "", "", ""),
            ),
            ("a comment", "#site:x:991:990:::", None),
            ("a blank line", "   ", None),
        ];
        for (name, line, expected) in passwd_cases {
            assert_eq!(user(line), expected, "passwd: {name}");
        }
        let uid = |field: &str| {
            parse_passwd(&format!("site:x:{field}:0"))
                .first()
                .map(|u| u.uid)
        };
        let id_cases = [
            ("root", "0", Some(0)),
            ("the largest", "4294967295", Some(u32::MAX)),
            ("past 32 bits", "4294967296", Some(u32::MAX)),
            ("past 64 bits", "99999999999999999999999", Some(u32::MAX)),
            ("minus one", "-1", Some(u32::MAX)),
            ("minus zero", "-0", Some(0)),
            ("wrapped to one", "-18446744073709551615", Some(1)),
            (
                "minus past 64 bits",
                "-99999999999999999999999",
                Some(u32::MAX),
            ),
        ];
        for (name, field, expected) in id_cases {
            assert_eq!(uid(field), expected, "uid: {name}");
        }
        let group = |line: &str| {
            parse_group(line)
                .into_iter()
                .map(|g| (g.name, g.gid, g.members))
                .next()
        };
        let members = |list: &[&str]| list.iter().map(|m| (*m).to_owned()).collect();
        let group_cases = [
            (
                "members",
                "site:x:991:site,atelier",
                Some(("site".into(), 991, members(&["site", "atelier"]))),
            ),
            (
                "empty items name no one",
                "site:x:991:,site,,",
                Some(("site".into(), 991, members(&["site"]))),
            ),
            (
                "no member field",
                "site:x:991",
                Some(("site".into(), 991, members(&[]))),
            ),
            ("no gid", "site:x:", None),
            ("a comment", "# site:x:991:", None),
        ];
        for (name, line, expected) in group_cases {
            assert_eq!(group(line), expected, "group: {name}");
        }
        assert_eq!(
            parse_passwd("root:x:0:0:root:/root:/bin/bash\n\n# note\nbad line\nsite:x:1:2\n").len(),
            2,
            "only the lines that hold an entry"
        );
    }

    #[test]
    fn only_the_own_and_the_instance_group_may_list_an_identity() {
        let group = |name: &'static str, members: &[&str]| {
            (
                name,
                members.iter().map(|m| (*m).to_owned()).collect::<Vec<_>>(),
            )
        };
        let groups = [
            group("atelier-example", &["atelier-a-example_1"]),
            group(
                "atelier-a-example_1",
                &["atelier-a-example_1", "atelier-example"],
            ),
            group("www-data", &["nginx"]),
        ];
        let listed = |extra: &[(&'static str, Vec<String>)]| {
            let all: Vec<(&str, &[String])> = groups
                .iter()
                .chain(extra)
                .map(|(name, members)| (*name, members.as_slice()))
                .collect();
            foreign_group(all, "atelier-a-example_1", "atelier-example").map(str::to_owned)
        };
        assert_eq!(listed(&[]), None, "its own group and the instance's");
        assert_eq!(
            listed(&[group("shadow", &["atelier-a-example_1"])]),
            Some("shadow".to_owned())
        );
        assert_eq!(
            listed(&[group("atelier-a-example_2", &["atelier-a-example_1"])]),
            Some("atelier-a-example_2".to_owned()),
            "another site's private group"
        );
    }
}
