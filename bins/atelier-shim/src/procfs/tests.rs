//! Tables for the cgroup, interface-table and namespace-identity parsers.

use super::*;

#[test]
fn unit_names_come_from_the_last_service_component() {
    let cases: [(&str, &str, Option<&str>); 9] = [
        (
            "a door instance under cgroup v2",
            "0::/system.slice/system-atelier\\x2dexample\\x2ds1\\x2dturn.slice/atelier-example-s1-turn@3-1234-0.service\n",
            Some("atelier-example-s1-turn@3-1234-0.service"),
        ),
        (
            "a service with a delegated subgroup",
            "0::/system.slice/atelier-example-s1-git@1-2-3.service/payload\n",
            Some("atelier-example-s1-git@1-2-3.service"),
        ),
        (
            "the unified line wins over v1 lines",
            "12:pids:/system.slice/wrong.service\n0::/system.slice/right.service\n",
            Some("right.service"),
        ),
        (
            "a v1-only host uses the first line",
            "9:name=systemd:/system.slice/legacy.service\n8:pids:/other.service\n",
            Some("legacy.service"),
        ),
        ("the root cgroup", "0::/\n", None),
        (
            "a login session scope",
            "0::/user.slice/user-0.slice/session-4.scope\n",
            None,
        ),
        ("a component named only .service", "0::/x/.service\n", None),
        ("empty", "", None),
        ("no path field", "0:\n", None),
    ];
    for (name, cgroup, want) in cases {
        assert_eq!(unit_from_cgroup(cgroup).as_deref(), want, "{name}");
    }
}

const HEADER: &str = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n";

/// (name, table text, parse result)
type TableCase = (&'static str, String, Result<Vec<&'static str>, NetDevError>);

#[test]
fn interface_tables_parse_to_names() {
    let row = |name: &str| {
        format!("{name:>6}:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n")
    };
    let cases: Vec<TableCase> = vec![
        (
            "only loopback",
            format!("{HEADER}{}", row("lo")),
            Ok(vec!["lo"]),
        ),
        (
            "loopback and a host interface",
            format!("{HEADER}{}{}", row("lo"), row("eth0")),
            Ok(vec!["lo", "eth0"]),
        ),
        ("no rows at all", HEADER.to_owned(), Ok(vec![])),
        (
            "a name with a dot and a dash",
            format!("{HEADER}{}", row("br-1.5")),
            Ok(vec!["br-1.5"]),
        ),
        ("no header", row("lo"), Err(NetDevError::NoHeader)),
        ("empty text", String::new(), Err(NetDevError::NoHeader)),
        (
            "a row without a name",
            format!("{HEADER}{}   :  0 0\n", row("lo")),
            Err(NetDevError::BadRow { row: 2 }),
        ),
        (
            "a row without a colon",
            format!("{HEADER}garbage\n"),
            Err(NetDevError::BadRow { row: 1 }),
        ),
    ];
    for (name, table, want) in cases {
        let want = want.map(|names| names.into_iter().map(str::to_owned).collect::<Vec<_>>());
        assert_eq!(interfaces_from_net_dev(&table), want, "{name}");
    }
}

#[test]
fn the_real_table_of_this_process_parses_and_lists_loopback() {
    let table = std::fs::read_to_string("/proc/self/net/dev").unwrap();
    let names = interfaces_from_net_dev(&table).unwrap();
    assert!(names.iter().any(|n| n == "lo"), "{names:?}");
}

#[test]
fn namespace_identities_have_the_readlink_form() {
    let cases = [
        ("a network namespace", "net:[4026531840]", true),
        ("a one-digit inode", "net:[1]", true),
        ("no inode", "net:[]", false),
        ("another namespace kind", "mnt:[4026531840]", false),
        ("letters in the inode", "net:[40265x]", false),
        ("no brackets", "net:4026531840", false),
        ("a trailing newline", "net:[4026531840]\n", false),
        ("empty", "", false),
        ("a path", "/proc/self/ns/net", false),
    ];
    for (name, identity, want) in cases {
        assert_eq!(is_netns_identity(identity), want, "{name}");
    }
    let own = std::fs::read_link("/proc/self/ns/net").unwrap();
    assert!(is_netns_identity(own.to_str().unwrap()), "{own:?}");
}
