//! The expectations sited checks PID 1 against agree with what the provisioner renders: every
//! door unit of the committed example (`deploy/examples/rendered/`) meets its door's
//! expectations, every property those files set is one the expectations pin, and a unit that
//! differs in one directive is refused naming that property.
#![expect(
    clippy::expect_used,
    reason = "test helpers outside #[test]: a failure is the test failing"
)]

use std::path::{Path, PathBuf};

use atelier_layout::{Declaration, Door, Layout, SiteOrdinal};
use atelier_systemd::property::check;
use atelier_systemd::{
    door_expectations, unit_file, DoorExpectations, DoorFacts, UnitExpectations, UnitKind,
};

/// The release the committed examples were rendered for (no `PrivatePIDs=`).
const RENDERED_FOR: u32 = 252;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn unit_dir() -> PathBuf {
    repo().join("deploy/examples/rendered/etc/systemd/system")
}

/// Every (ordinal, door) of the example with its expectations.
fn example_doors() -> Vec<(SiteOrdinal, Door, DoorExpectations)> {
    let decl = Declaration::load(&repo().join("deploy/examples/instance.json"))
        .expect("the example declaration loads");
    let layout = Layout::new(&decl);
    let mut doors = Vec::new();
    // The example's ledger gives the sites ordinals in declaration order.
    for (index, site) in decl.sites.iter().enumerate() {
        let k = SiteOrdinal::new(index as u64 + 1).expect("an ordinal");
        for door in Door::ALL {
            let facts = DoorFacts::from_layout(&layout, k, site, door, RENDERED_FOR);
            doors.push((k, door, door_expectations(&facts)));
        }
    }
    doors
}

/// The file a unit's expectations are read from: the template for a service instance.
fn file_of(unit: &UnitExpectations) -> PathBuf {
    let name = match unit.kind {
        UnitKind::Service => {
            let (stem, _) = unit.unit.split_once('@').expect("a template instance");
            format!("{stem}@.service")
        }
        UnitKind::Socket | UnitKind::Target => unit.unit.clone(),
    };
    unit_dir().join(name)
}

fn read(unit: &UnitExpectations) -> String {
    let path = file_of(unit);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_rendered_door_unit_meets_its_expectations() {
    let doors = example_doors();
    assert_eq!(doors.len(), 6, "two sites, three doors each");
    for (k, door, expectations) in &doors {
        for unit in expectations.units() {
            let loaded = unit_file::loaded(&unit.unit, unit.kind, &read(unit));
            if let Err(refusal) = check(&loaded, &unit.expected) {
                panic!("site {k} door {door}: the rendered unit is refused: {refusal}");
            }
        }
    }
}

#[test]
fn every_property_a_rendered_door_unit_sets_is_pinned() {
    for (k, door, expectations) in example_doors() {
        for unit in expectations.units() {
            let loaded = unit_file::loaded(&unit.unit, unit.kind, &read(unit));
            let pinned: Vec<(atelier_systemd::Interface, &str)> = unit
                .expected
                .iter()
                .map(|(p, _)| (p.interface, p.name))
                .collect();
            let unpinned: Vec<&String> = loaded
                .properties
                .keys()
                .filter(|(interface, name)| !pinned.contains(&(*interface, name.as_str())))
                // ExecStart is pinned through ExecStartEx, which also carries its flags.
                .filter(|(_, name)| name != "ExecStart")
                .map(|(_, name)| name)
                .collect();
            assert!(
                unpinned.is_empty(),
                "site {k} door {door}: {} sets {unpinned:?}, which no expectation pins",
                unit.unit
            );
        }
    }
}

/// Each case changes one line of the turn door's rendered service (as a drop-in would) and
/// names the property the check must refuse.
#[test]
fn a_unit_that_differs_in_one_directive_is_refused_naming_it() {
    let doors = example_doors();
    let (_, _, turn) = doors
        .iter()
        .find(|(k, door, _)| k.get() == 1 && *door == Door::Turn)
        .expect("site 1's turn door");
    let rendered = read(&turn.service);
    let cases = [
        (
            "a private network turned off",
            "PrivateNetwork=no",
            "PrivateNetwork",
        ),
        ("another identity", "User=root", "User"),
        ("a dynamic identity", "DynamicUser=yes", "DynamicUser"),
        ("a second command", "ExecStartPre=/bin/true", "ExecStartPre"),
        (
            "a privileged start",
            "ExecStart=\nExecStart=+/usr/local/bin/atelier-shim",
            "ExecStartEx",
        ),
        (
            "another shim",
            "ExecStart=\nExecStart=/tmp/shim",
            "ExecStartEx",
        ),
        (
            "a wider workspace",
            "ReadWritePaths=/var/lib/atelier",
            "ReadWritePaths",
        ),
        (
            "an extra variable",
            "Environment=LD_PRELOAD=/tmp/x.so",
            "Environment",
        ),
        (
            "a way out to anywhere",
            "IPAddressAllow=any",
            "IPAddressAllow",
        ),
        (
            "another address family",
            "RestrictAddressFamilies=AF_PACKET",
            "RestrictAddressFamilies",
        ),
        (
            "a capability",
            "AmbientCapabilities=CAP_NET_RAW",
            "AmbientCapabilities",
        ),
        ("no memory cap", "MemoryMax=infinity", "MemoryMax"),
        ("a longer life", "RuntimeMaxSec=infinity", "RuntimeMaxUSec"),
        ("a visible /proc", "ProtectProc=default", "ProtectProc"),
        (
            "a credential",
            "LoadCredential=X:/etc/shadow",
            "LoadCredential",
        ),
        (
            "a bound host socket",
            "BindReadOnlyPaths=/run/dbus:/run/dbus",
            "BindReadOnlyPaths",
        ),
        ("no BindsTo", "[Unit]\nBindsTo=", "BindsTo"),
        (
            "another namespace",
            "NetworkNamespacePath=/proc/1/ns/net",
            "NetworkNamespacePath",
        ),
        ("no syscall filter", "SystemCallFilter=", "SystemCallFilter"),
        (
            "mounting allowed",
            "SystemCallFilter=@mount",
            "SystemCallFilter",
        ),
        (
            "tracing allowed",
            "SystemCallFilter=ptrace",
            "SystemCallFilter",
        ),
        (
            "a deny list in the allow list's place",
            "SystemCallFilter=\nSystemCallFilter=~@mount",
            "SystemCallFilter",
        ),
        (
            "a file opened by PID 1",
            "OpenFile=/etc/atelier/example/credentials/ANTHROPIC_API_KEY",
            "OpenFile",
        ),
    ];
    for (case, line, property) in cases {
        let changed = format!("{rendered}{line}\n");
        let loaded = unit_file::loaded(&turn.service.unit, UnitKind::Service, &changed);
        let refusal = check(&loaded, &turn.service.expected)
            .expect_err(&format!("{case}: {line:?} must be refused"));
        assert_eq!(refusal.property.name, property, "{case}: {refusal}");
        assert_eq!(
            refusal.unit, "atelier-example-s1-turn@probe.service",
            "{case}"
        );
    }
    // A syscall filter's refusal names what breaks it, not the hundreds of names it holds.
    for (line, says) in [
        (
            "SystemCallFilter=ptrace @mount",
            "is an allow list with [ptrace, @mount], expected",
        ),
        (
            "SystemCallFilter=",
            "SystemCallFilter is empty, expected an allow list without",
        ),
        (
            "SystemCallFilter=\nSystemCallFilter=~@mount",
            "SystemCallFilter is a deny list",
        ),
    ] {
        let changed = format!("{rendered}{line}\n");
        let loaded = unit_file::loaded(&turn.service.unit, UnitKind::Service, &changed);
        let refusal = check(&loaded, &turn.service.expected).expect_err(line);
        assert!(refusal.to_string().contains(says), "{line}: {refusal}");
    }

    let socket = read(&turn.socket);
    for (case, line, property) in [
        ("two connections", "MaxConnections=2", "MaxConnections"),
        ("one process for all", "Accept=no", "Accept"),
        ("a world-writable socket", "SocketMode=0666", "SocketMode"),
        ("another path", "ListenStream=/tmp/x.sock", "Listen"),
    ] {
        // The rendered socket ends in [Install]: a drop-in states its section.
        let changed = format!("{socket}[Socket]\n{line}\n");
        let loaded = unit_file::loaded(&turn.socket.unit, UnitKind::Socket, &changed);
        let refusal = check(&loaded, &turn.socket.expected)
            .expect_err(&format!("{case}: {line:?} must be refused"));
        assert_eq!(refusal.property.name, property, "{case}: {refusal}");
    }
    let target = read(&turn.target);
    let without_conflicts = target.replace("Conflicts=", "#Conflicts=");
    let loaded = unit_file::loaded(&turn.target.unit, UnitKind::Target, &without_conflicts);
    let refusal = check(&loaded, &turn.target.expected).expect_err("no Conflicts= is refused");
    assert_eq!(refusal.property.name, "Conflicts");
}

#[test]
fn doors_differ_where_the_layout_says() {
    let doors = example_doors();
    let service = |k: u16, door: Door| {
        doors
            .iter()
            .find(|(ordinal, d, _)| ordinal.get() == k && *d == door)
            .map(|(_, _, e)| e.service.clone())
            .expect("a door")
    };
    // Site 2's turn unit, checked against site 1's turn expectations, is refused on the
    // identity before anything else that differs.
    let site2 = service(2, Door::Turn);
    let loaded = unit_file::loaded(&site2.unit, UnitKind::Service, &read(&site2));
    let refusal = check(&loaded, &service(1, Door::Turn).expected).expect_err("another site");
    assert_eq!(refusal.property.name, "BindsTo");
    // The git door's rendered unit does not meet the build door's expectations: no gate.
    let git = service(1, Door::Git);
    let loaded = unit_file::loaded(&git.unit, UnitKind::Service, &read(&git));
    let refusal = check(&loaded, &service(1, Door::Build).expected).expect_err("another door");
    assert_eq!(refusal.property.name, "BindsTo");
}

#[test]
fn private_pids_is_required_from_257() {
    let decl = Declaration::load(&repo().join("deploy/examples/instance.json")).expect("loads");
    let layout = Layout::new(&decl);
    let k = SiteOrdinal::new(1).expect("an ordinal");
    let has = |version| {
        door_expectations(&DoorFacts::from_layout(
            &layout,
            k,
            &decl.sites[0],
            Door::Git,
            version,
        ))
        .service
        .expected
        .iter()
        .any(|(p, _)| p.name == "PrivatePIDs")
    };
    assert!(!has(256));
    assert!(has(257));
}

/// An instance's configuration declared outside the folders every door masks is masked by its
/// own path: the example's turn unit, which has no such mask, is refused for a door whose
/// configuration is there, and accepted with the one mask added.
#[test]
fn a_configuration_declared_elsewhere_is_expected_masked_by_its_own_path() {
    let decl = Declaration::load(&repo().join("deploy/examples/instance.json"))
        .expect("the example declaration loads");
    let layout = Layout::new(&decl);
    let k = SiteOrdinal::new(1).expect("an ordinal");
    let mut facts = DoorFacts::from_layout(&layout, k, &decl.sites[0], Door::Turn, RENDERED_FOR);
    let example = door_expectations(&facts);
    let rendered = read(&example.service);
    facts.config_dir = PathBuf::from("/etc/atelier-prod/example");
    let elsewhere = door_expectations(&facts);

    let loaded = unit_file::loaded(&elsewhere.service.unit, UnitKind::Service, &rendered);
    let refusal = check(&loaded, &elsewhere.service.expected)
        .expect_err("the unit lacks the configuration's mask");
    assert_eq!(refusal.property.name, "InaccessiblePaths", "{refusal}");

    let masked = format!(
        "{rendered}InaccessiblePaths=-/var/lib/atelier/example/door-root/etc/atelier-prod/example\n"
    );
    let loaded = unit_file::loaded(&elsewhere.service.unit, UnitKind::Service, &masked);
    if let Err(refusal) = check(&loaded, &elsewhere.service.expected) {
        panic!("the unit with the mask is refused: {refusal}");
    }
}
