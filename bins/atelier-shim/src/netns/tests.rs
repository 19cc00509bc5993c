//! The proof's decision table.

use super::*;

const HOST: &str = "net:[4026531840]";
const PRIVATE: &str = "net:[4026532178]";

/// (name, daemon identity, own identity as read, interfaces as read, decision)
type Case = (
    &'static str,
    &'static str,
    Result<String, String>,
    Result<Vec<Interface>, String>,
    Result<(), NotInEffect>,
);

/// The interfaces as read: a name alone is down, `+name` is up (`lo`'s state is not read).
fn names(list: &[&str]) -> Result<Vec<Interface>, String> {
    Ok(list
        .iter()
        .map(|s| match s.strip_prefix('+') {
            Some(name) => Interface {
                name: name.to_owned(),
                up: true,
            },
            None => Interface {
                name: (*s).to_owned(),
                up: false,
            },
        })
        .collect())
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
            "private namespace with only lo, up",
            HOST,
            Ok(PRIVATE.into()),
            names(&["+lo"]),
            Ok(()),
        ),
        (
            "sees a host interface",
            HOST,
            Ok(PRIVATE.into()),
            names(&["lo", "+eth0"]),
            Err(NotInEffect::HostInterface(vec!["eth0".into()])),
        ),
        (
            "sees several",
            HOST,
            Ok(PRIVATE.into()),
            names(&["+eth0", "lo", "+wlan0"]),
            Err(NotInEffect::HostInterface(vec![
                "eth0".into(),
                "wlan0".into(),
            ])),
        ),
        (
            "sees only a non-loopback interface",
            HOST,
            Ok(PRIVATE.into()),
            names(&["+eth0"]),
            Err(NotInEffect::HostInterface(vec!["eth0".into()])),
        ),
        (
            "a down fallback tunnel beside lo",
            HOST,
            Ok(PRIVATE.into()),
            names(&["+lo", "tunl0"]),
            Ok(()),
        ),
        (
            "several down fallback devices",
            HOST,
            Ok(PRIVATE.into()),
            names(&[
                "+lo", "tunl0", "gre0", "gretap0", "erspan0", "sit0", "ip6tnl0", "ip6gre0",
                "ip_vti0", "ip6_vti0",
            ]),
            Ok(()),
        ),
        (
            "an up interface beside a down one",
            HOST,
            Ok(PRIVATE.into()),
            names(&["+lo", "tunl0", "+eth0"]),
            Err(NotInEffect::HostInterface(vec!["eth0".into()])),
        ),
        // No lo: judged by the others like any table (the rule is what is up, and the kernel
        // gives every namespace a loopback anyway; without one, a door's forwards on
        // 127.0.0.1 could not listen and its run would stop there).
        (
            "only a down non-loopback interface, no lo",
            HOST,
            Ok(PRIVATE.into()),
            names(&["tunl0"]),
            Ok(()),
        ),
        (
            "the daemon's namespace is refused even when everything else is down",
            HOST,
            Ok(HOST.into()),
            names(&["+lo", "tunl0"]),
            Err(NotInEffect::SharesDaemonNamespace(HOST.into())),
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
        "this unit can see a host interface that is up (eth0, d0)"
    );
    assert_eq!(
        NotInEffect::InterfacesUnreadable("/proc/self/net/dev: gone".into()).to_string(),
        "this unit cannot read its interfaces: /proc/self/net/dev: gone"
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

#[test]
fn an_interface_name_that_does_not_fit_ifreq_is_unreadable() {
    let longest = "a".repeat(libc::IFNAMSIZ - 1);
    let name = ifreq_name(&longest).unwrap();
    assert_eq!(name[libc::IFNAMSIZ - 1], 0);
    assert_eq!(name[0], b'a' as libc::c_char);
    let too_long = "a".repeat(libc::IFNAMSIZ);
    assert_eq!(ifreq_name(&too_long), None);
    assert_eq!(ifreq_name("a\0b"), None);
    let socket = flags_socket().unwrap();
    assert_eq!(
        is_up(&socket, &too_long),
        Err(format!(
            "the interface name {too_long:?} does not fit in IFNAMSIZ (16 bytes)"
        ))
    );
}

#[test]
fn the_flags_come_from_the_socket_s_namespace_and_a_missing_interface_is_an_error() {
    let socket = flags_socket().unwrap();
    // Every namespace has a loopback; whether it is up here does not matter.
    assert!(is_up(&socket, "lo").is_ok());
    let missing = is_up(&socket, "atelier-none0").unwrap_err();
    assert!(
        missing.starts_with("the flags of atelier-none0 (SIOCGIFFLAGS): "),
        "{missing}"
    );
}
