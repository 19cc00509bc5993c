//! The proof's decision table.

use super::*;

const HOST: &str = "net:[4026531840]";
const PRIVATE: &str = "net:[4026532178]";

/// (name, daemon identity, own identity as read, interfaces as read, decision)
type Case = (
    &'static str,
    &'static str,
    Result<String, String>,
    Result<Vec<String>, String>,
    Result<(), NotInEffect>,
);

fn names(list: &[&str]) -> Result<Vec<String>, String> {
    Ok(list.iter().map(|s| (*s).to_owned()).collect())
}

#[test]
fn both_conditions_must_hold_and_an_unreadable_fact_is_a_refusal() {
    let cases: Vec<Case> = vec![
        (
            "private namespace with only lo",
            HOST,
            Ok(PRIVATE.into()),
            names(&["lo"]),
            Ok(()),
        ),
        (
            "shares the daemon's namespace",
            HOST,
            Ok(HOST.into()),
            names(&["lo"]),
            Err(NotInEffect::SharesDaemonNamespace(HOST.into())),
        ),
        (
            "shares it even when only lo shows",
            PRIVATE,
            Ok(PRIVATE.into()),
            names(&["lo"]),
            Err(NotInEffect::SharesDaemonNamespace(PRIVATE.into())),
        ),
        (
            "sees a host interface",
            HOST,
            Ok(PRIVATE.into()),
            names(&["lo", "eth0"]),
            Err(NotInEffect::HostInterface(vec!["eth0".into()])),
        ),
        (
            "sees several",
            HOST,
            Ok(PRIVATE.into()),
            names(&["eth0", "lo", "wlan0"]),
            Err(NotInEffect::HostInterface(vec![
                "eth0".into(),
                "wlan0".into(),
            ])),
        ),
        (
            "sees only a non-loopback interface",
            HOST,
            Ok(PRIVATE.into()),
            names(&["eth0"]),
            Err(NotInEffect::HostInterface(vec!["eth0".into()])),
        ),
        (
            "sees nothing",
            HOST,
            Ok(PRIVATE.into()),
            names(&[]),
            Err(NotInEffect::NoInterface),
        ),
        (
            "the daemon's identity is empty",
            "",
            Ok(PRIVATE.into()),
            names(&["lo"]),
            Err(NotInEffect::BadHostIdentity(String::new())),
        ),
        (
            "the daemon's identity is malformed",
            "4026531840",
            Ok(PRIVATE.into()),
            names(&["lo"]),
            Err(NotInEffect::BadHostIdentity("4026531840".into())),
        ),
        (
            "own identity unreadable",
            HOST,
            Err("Permission denied".into()),
            names(&["lo"]),
            Err(NotInEffect::OwnIdentityUnreadable(
                "Permission denied".into(),
            )),
        ),
        (
            "own identity malformed",
            HOST,
            Ok("garbage".into()),
            names(&["lo"]),
            Err(NotInEffect::OwnIdentityUnreadable(
                "\"garbage\" is not of the form net:[<inode>]".into(),
            )),
        ),
        (
            "interfaces unreadable",
            HOST,
            Ok(PRIVATE.into()),
            Err("No such file or directory".into()),
            Err(NotInEffect::InterfacesUnreadable(
                "No such file or directory".into(),
            )),
        ),
    ];
    for (name, host, own, interfaces, want) in cases {
        assert_eq!(check(host, own, interfaces), want, "{name}");
    }
}

#[test]
fn refusal_texts_name_what_was_seen() {
    assert_eq!(
        NotInEffect::HostInterface(vec!["eth0".into(), "d0".into()]).to_string(),
        "this unit can see a host interface (eth0, d0)"
    );
    assert_eq!(
        NotInEffect::SharesDaemonNamespace(HOST.into()).to_string(),
        "this unit shares the daemon's network namespace (net:[4026531840])"
    );
}

#[test]
fn the_test_process_is_in_the_host_namespace_so_the_real_proof_refuses() {
    let own = std::fs::read_link("/proc/self/ns/net").unwrap();
    let own = own.to_str().unwrap();
    assert_eq!(
        prove(own),
        Err(NotInEffect::SharesDaemonNamespace(own.to_owned()))
    );
}
