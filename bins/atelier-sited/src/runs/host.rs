//! The host checks before a confined run: the site's identity is exactly what the provisioner
//! made, the shim every door runs is root's and writable by no one else, and a turn's HOME has
//! the provisioner's shape.
//!
//! Identities are read from `/etc/passwd` and `/etc/group` (with the parser the provisioner
//! reads them with), where `atelier-provision` creates them (`useradd --system`); an identity
//! that exists only in another NSS source is not one it made, and is refused.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use atelier_layout::accounts::{GroupEntry, PasswdEntry};

/// Checks that `identity` is what the provisioner made: it exists once, is not root and
/// shares its uid with no one; its primary group is `instance_group`; no group but its private
/// one (and the instance group) lists it, since a door's run takes every group `/etc/group`
/// gives its user and no unit property shows them; its private group (of the same name) holds
/// exactly it and `service_user`, and is no other account's primary group.
pub fn check_identity(
    passwd: &[PasswdEntry],
    groups: &[GroupEntry],
    identity: &str,
    instance_group: &str,
    service_user: &str,
) -> Result<(), String> {
    let users: Vec<&PasswdEntry> = passwd.iter().filter(|u| u.name == identity).collect();
    let [user] = users.as_slice() else {
        return Err(format!(
            "the site identity {identity} is {} in /etc/passwd",
            if users.is_empty() {
                "missing"
            } else {
                "listed twice"
            }
        ));
    };
    if user.uid == 0 {
        return Err(format!("the site identity {identity} has uid 0"));
    }
    if passwd.iter().filter(|u| u.uid == user.uid).count() > 1 {
        return Err(format!(
            "the site identity {identity} shares uid {} with another account",
            user.uid
        ));
    }
    let primary = groups
        .iter()
        .find(|g| g.gid == user.gid)
        .map(|g| g.name.as_str());
    if primary != Some(instance_group) {
        return Err(format!(
            "the site identity {identity}'s primary group is {}, not {instance_group}",
            primary.unwrap_or("unknown")
        ));
    }
    let listed = groups
        .iter()
        .map(|g| (g.name.as_str(), g.members.as_slice()));
    if let Some(group) = atelier_layout::accounts::foreign_group(listed, identity, instance_group) {
        return Err(format!(
            "the site identity {identity} is a member of {group}, a group the provisioner never \
             gives it (remove it: gpasswd -d {identity} {group})"
        ));
    }
    let private = groups
        .iter()
        .find(|g| g.name == identity)
        .ok_or_else(|| format!("the site identity's private group {identity} is missing"))?;
    let members: BTreeSet<&str> = private.members.iter().map(String::as_str).collect();
    let wanted: BTreeSet<&str> = [identity, service_user].into_iter().collect();
    if members != wanted {
        return Err(format!(
            "the private group {identity} holds {members:?}, not exactly {wanted:?}"
        ));
    }
    if let Some(other) = passwd
        .iter()
        .find(|u| u.gid == private.gid && u.name != identity)
    {
        return Err(format!(
            "the private group {identity} is {}'s primary group",
            other.name
        ));
    }
    Ok(())
}

/// Checks that `path` and every directory above it are root's and writable by no one else, so
/// no site identity can replace what a door runs.
pub fn check_root_owned(path: &Path) -> Result<(), String> {
    let mut at = Some(path);
    while let Some(p) = at {
        let meta = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        if meta.uid() != 0 {
            return Err(format!("{} is not owned by root", p.display()));
        }
        // A sticky directory (e.g. /tmp) still lets its users plant names in it.
        if meta.mode() & 0o022 != 0 {
            return Err(format!(
                "{} is writable by a group or others (mode {:o})",
                p.display(),
                meta.mode() & 0o7777
            ));
        }
        at = p.parent();
    }
    Ok(())
}

/// Checks the turn HOME as a closed world: root's `0755` directory holding exactly `state/`
/// (the identity's, `0700`), `stated/` (sited's, `daemon_uid`, `0750`: what sited writes there
/// before each turn is the CLI's configuration), `.config/` (root's, `0755`, holding only
/// `opencode/`, root's, `0755`, empty) and `.gitconfig` (root's `0644` file); nothing is
/// followed. What a turn writes at HOME level
/// would otherwise be configuration the next turn reads.
pub fn check_turn_home(home: &Path, identity_uid: u32, daemon_uid: u32) -> Result<(), String> {
    use atelier_layout::paths::{
        TURN_HOME_CONFIG_DIR, TURN_HOME_GITCONFIG, TURN_HOME_OPENCODE_DIR, TURN_HOME_STATED_DIR,
        TURN_HOME_STATE_DIR,
    };
    let shape = |path: &Path, dir: bool, uid: u32, mode: u32| -> Result<(), String> {
        let meta =
            std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let kind_ok = if dir { meta.is_dir() } else { meta.is_file() };
        if !kind_ok {
            let want = if dir { "a directory" } else { "a regular file" };
            return Err(format!("{} is not {want}", path.display()));
        }
        if meta.uid() != uid || meta.mode() & 0o7777 != mode {
            return Err(format!(
                "{} is uid {} mode {:o}, not uid {uid} mode {mode:o}",
                path.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ));
        }
        Ok(())
    };
    shape(home, true, 0, 0o755)?;
    let expected = [
        TURN_HOME_CONFIG_DIR,
        TURN_HOME_GITCONFIG,
        TURN_HOME_STATE_DIR,
        TURN_HOME_STATED_DIR,
    ];
    let exactly = |dir: &Path, expected: &[&str]| -> Result<(), String> {
        let mut found: Vec<String> = std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .map(|entry| entry.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        found.sort();
        if found != expected {
            return Err(format!(
                "{} holds {found:?}, not exactly {expected:?}",
                dir.display()
            ));
        }
        Ok(())
    };
    exactly(home, &expected)?;
    shape(&home.join(TURN_HOME_STATE_DIR), true, identity_uid, 0o700)?;
    shape(&home.join(TURN_HOME_STATED_DIR), true, daemon_uid, 0o750)?;
    let config = home.join(TURN_HOME_CONFIG_DIR);
    shape(&config, true, 0, 0o755)?;
    exactly(&config, &[TURN_HOME_OPENCODE_DIR])?;
    let opencode = config.join(TURN_HOME_OPENCODE_DIR);
    shape(&opencode, true, 0, 0o755)?;
    exactly(&opencode, &[])?;
    shape(&home.join(TURN_HOME_GITCONFIG), false, 0, 0o644)
}

#[cfg(test)]
mod tests {
    use super::*;
    use atelier_layout::accounts::{parse_group, parse_passwd};

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash
atelier-example:x:990:990::/nonexistent:/usr/sbin/nologin
atelier-a-example_1:x:991:990::/nonexistent:/usr/sbin/nologin
atelier-a-example_2:x:992:990::/nonexistent:/usr/sbin/nologin
";
    const GROUP: &str = "root:x:0:
atelier-example:x:990:
atelier-a-example_1:x:991:atelier-a-example_1,atelier-example
atelier-a-example_2:x:992:atelier-a-example_2,atelier-example
";

    fn check(passwd: &str, group: &str) -> Result<(), String> {
        check_identity(
            &parse_passwd(passwd),
            &parse_group(group),
            "atelier-a-example_1",
            "atelier-example",
            "atelier-example",
        )
    }

    #[test]
    fn identities_as_the_provisioner_makes_them_pass_and_every_drift_is_named() {
        assert_eq!(check(PASSWD, GROUP), Ok(()));
        // Listed in the instance group as well as having it as primary changes nothing.
        let listed = GROUP.replace(
            "atelier-example:x:990:\n",
            "atelier-example:x:990:atelier-a-example_1\n",
        );
        assert_eq!(check(PASSWD, &listed), Ok(()));
        let cases: [(&str, String, String, &str); 9] = [
            (
                "missing",
                PASSWD.replace("atelier-a-example_1:", "someone-else:"),
                GROUP.into(),
                "missing",
            ),
            (
                "uid 0",
                PASSWD.replace(":991:990:", ":0:990:"),
                GROUP.into(),
                "uid 0",
            ),
            (
                "shared uid",
                PASSWD.replace(":992:990:", ":991:990:"),
                GROUP.into(),
                "shares uid",
            ),
            (
                "wrong primary group",
                PASSWD.replace(":991:990:", ":991:0:"),
                GROUP.into(),
                "primary group is root",
            ),
            (
                "stranger in the private group",
                PASSWD.into(),
                GROUP.replace(
                    "atelier-a-example_1,atelier-example",
                    "atelier-a-example_1,atelier-example,mallory",
                ),
                "holds",
            ),
            (
                "service user missing from it",
                PASSWD.into(),
                GROUP.replace("atelier-a-example_1,atelier-example", "atelier-a-example_1"),
                "holds",
            ),
            (
                "another account's primary group",
                format!("{PASSWD}mallory:x:1500:991::/:/bin/sh\n"),
                GROUP.into(),
                "mallory's primary group",
            ),
            (
                "a member of a host group",
                PASSWD.into(),
                format!("{GROUP}shadow:x:42:atelier-a-example_1\n"),
                "member of shadow, a group the provisioner never gives it (remove it: \
                 gpasswd -d atelier-a-example_1 shadow)",
            ),
            (
                "a member of another site's private group",
                PASSWD.into(),
                GROUP.replace(
                    "atelier-a-example_2,atelier-example",
                    "atelier-a-example_2,atelier-example,atelier-a-example_1",
                ),
                "member of atelier-a-example_2",
            ),
        ];
        for (name, passwd, group, words) in cases {
            let got = check(&passwd, &group).unwrap_err();
            assert!(got.contains(words), "{name}: {got}");
        }
    }

    #[test]
    fn the_shim_must_be_roots_all_the_way_up() {
        assert_eq!(check_root_owned(Path::new("/usr/bin/env")), Ok(()));
        let dir = tempfile::tempdir().unwrap();
        let shim = dir.path().join("atelier-shim");
        std::fs::write(&shim, "").unwrap();
        // tempdir() lives under /tmp, which others may write (sticky or not).
        assert!(check_root_owned(&shim).is_err());
        assert!(check_root_owned(Path::new("/nonexistent/shim")).is_err());
    }

    /// The site identity's and sited's uids in the turn HOME cases.
    const ID: u32 = 991;
    const DAEMON: u32 = 990;

    /// A turn HOME as the provisioner makes it, in a fresh folder; the tests run as root.
    fn good_home(identity: u32) -> tempfile::TempDir {
        use std::os::unix::fs::{chown, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        std::fs::set_permissions(home, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir(home.join("state")).unwrap();
        std::fs::set_permissions(home.join("state"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        chown(home.join("state"), Some(identity), None).unwrap();
        std::fs::create_dir(home.join("stated")).unwrap();
        std::fs::set_permissions(home.join("stated"), std::fs::Permissions::from_mode(0o750))
            .unwrap();
        chown(home.join("stated"), Some(DAEMON), None).unwrap();
        std::fs::create_dir(home.join(".config")).unwrap();
        std::fs::set_permissions(home.join(".config"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::fs::create_dir(home.join(".config/opencode")).unwrap();
        std::fs::set_permissions(
            home.join(".config/opencode"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::fs::write(home.join(".gitconfig"), "[safe]\n").unwrap();
        std::fs::set_permissions(
            home.join(".gitconfig"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        dir
    }

    #[test]
    fn the_turn_home_is_checked_as_a_closed_world() {
        use std::os::unix::fs::{chown, symlink, PermissionsExt};
        assert_eq!(
            rustix::process::geteuid().as_raw(),
            0,
            "these cases need root"
        );
        fn mode(p: &Path, m: u32) {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        }
        type Case = (&'static str, fn(&Path), Option<&'static str>);
        let cases: [Case; 14] = [
            ("as provisioned", |_| {}, None),
            (
                "a HOME the identity may write",
                |h| mode(h, 0o775),
                Some("mode 775"),
            ),
            (
                "a HOME not root's",
                |h| chown(h, Some(ID), None).unwrap(),
                Some("uid 991"),
            ),
            (
                "a planted entry",
                |h| std::fs::write(h.join(".bashrc"), "x").unwrap(),
                Some(".bashrc"),
            ),
            (
                "state/ root's",
                |h| chown(h.join("state"), Some(0), None).unwrap(),
                Some("state is uid 0"),
            ),
            (
                "more than opencode/ in .config/",
                |h| std::fs::create_dir(h.join(".config/git")).unwrap(),
                Some("not exactly"),
            ),
            (
                "a non-empty .config/opencode/",
                |h| std::fs::write(h.join(".config/opencode/opencode.json"), "{}").unwrap(),
                Some("not exactly"),
            ),
            (
                ".config/opencode/ the identity's",
                |h| chown(h.join(".config/opencode"), Some(ID), None).unwrap(),
                Some("opencode is uid 991"),
            ),
            (
                ".config/ writable",
                |h| mode(&h.join(".config"), 0o777),
                Some("mode 777"),
            ),
            (
                ".gitconfig a link",
                |h| {
                    std::fs::remove_file(h.join(".gitconfig")).unwrap();
                    symlink("/etc/passwd", h.join(".gitconfig")).unwrap();
                },
                Some("not a regular file"),
            ),
            (
                "stated/ the identity's",
                |h| chown(h.join("stated"), Some(ID), None).unwrap(),
                Some("stated is uid 991"),
            ),
            (
                "stated/ missing (a host provisioned before it existed)",
                |h| std::fs::remove_dir(h.join("stated")).unwrap(),
                Some("not exactly"),
            ),
            (
                "stated/ open to others",
                |h| mode(&h.join("stated"), 0o755),
                Some("mode 755"),
            ),
            (
                "state/ a link",
                |h| {
                    std::fs::remove_dir(h.join("state")).unwrap();
                    symlink("/tmp", h.join("state")).unwrap();
                },
                Some("not a directory"),
            ),
        ];
        for (name, spoil, refused) in cases {
            let dir = good_home(ID);
            spoil(dir.path());
            match (check_turn_home(dir.path(), ID, DAEMON), refused) {
                (Ok(()), None) => {}
                (Err(why), Some(needle)) => assert!(why.contains(needle), "{name}: {why}"),
                (got, want) => panic!("{name}: got {got:?}, wanted a refusal naming {want:?}"),
            }
        }
    }
}
