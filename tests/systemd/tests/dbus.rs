//! atelier-systemd against a real PID 1: the release, what PID 1 loaded for the provisioned
//! example's door units (conformant as rendered; a drop-in, a changed identity and a missing
//! socket each refused naming the property), stop and kill of a live run by the service user
//! under the provisioner's polkit rule while StartUnit is refused, `wait_gone`, and a run that
//! ignores SIGTERM reported still alive at the deadline until a SIGKILL lets it go.
//!
//! The D-Bus calls run inside the box through `atelier-dbus-probe` (this crate's binary), which
//! asks through `atelier-systemd` exactly as sited does.

use atelier_systemd_tests::{built_binaries_dir, repo_root, BoxRun, SystemdBox};

/// Runs inside the box after the example instance is provisioned.
const DOORS: &str = r#"
set -uo pipefail
CREDENTIAL_VALUE=probe-credential bash /root/operator-setup.sh >/dev/null 2>&1
atelier-provision apply --declaration /root/instance.json > /tmp/apply 2>&1; echo "apply=$?"
DECL=/etc/atelier/example/instance.json
probe() { atelier-dbus-probe "$@"; }
as_service_user() { runuser -u atelier-example -- atelier-dbus-probe "$@"; }
conform() { probe conform-door --declaration $DECL --site "$1" --slug "$2" --door "$3"; }
reload() { systemctl daemon-reload; }

echo "version=$(probe version)"
echo "require_248=$(probe require-version 248)"
echo "require_999=$(probe require-version 999)"
echo "bad_bus=$(probe --bus unix:path=/nonexistent/bus version)"

for door in turn build git; do
  echo "conform_1_$door=$(conform 1 collection $door)"
  echo "conform_2_$door=$(conform 2 archive $door)"
done
# What conformance costs per run, against one round trip to PID 1 (reported, not asserted).
echo "bench=$(as_service_user bench-conform --declaration $DECL --site 1 --slug collection --door turn --rounds 200)"
echo "conform_as_service_user=$(as_service_user conform-door --declaration $DECL --site 1 --slug collection --door turn)"

probe properties atelier-example-s1-turn.socket Listen Accept MaxConnections SocketMode SocketUser | sed 's/^/socket| /'
probe properties atelier-example-s1-turn@probe.service User ExecStartEx PrivateNetwork BindReadOnlyPaths IPAddressDeny | sed 's/^/service| /'

# A drop-in that turns the private network off.
mkdir -p /etc/systemd/system/atelier-example-s1-turn@.service.d
printf '[Service]\nPrivateNetwork=no\n' > /etc/systemd/system/atelier-example-s1-turn@.service.d/50-tamper.conf
reload
echo "tampered_network=$(conform 1 collection turn)"
echo "untampered_build=$(conform 1 collection build)"
rm -r /etc/systemd/system/atelier-example-s1-turn@.service.d; reload
echo "restored=$(conform 1 collection turn)"

# A directive this PID 1 does not know is loaded as nothing: expected from 257 on, refused.
mkdir -p /etc/systemd/system/atelier-example-s1-git@.service.d
printf '[Service]\nPrivatePIDs=yes\n' > /etc/systemd/system/atelier-example-s1-git@.service.d/50-newer.conf
reload
echo "unknown_to_pid1=$(probe conform-door --declaration $DECL --site 1 --slug collection --door git --assume-version 257)"
rm -r /etc/systemd/system/atelier-example-s1-git@.service.d; reload

# A changed identity.
mkdir -p /etc/systemd/system/atelier-example-s1-build@.service.d
printf '[Service]\nUser=nobody\n' > /etc/systemd/system/atelier-example-s1-build@.service.d/50-tamper.conf
reload
echo "tampered_user=$(conform 1 collection build)"
rm -r /etc/systemd/system/atelier-example-s1-build@.service.d; reload

# A missing door socket.
systemctl stop atelier-example-s2-git.socket
rm /etc/systemd/system/atelier-example-s2-git.socket; reload
echo "missing_socket=$(conform 2 archive git)"

# A live run of site 1's git door, started the way sited starts one: a connection. sited
# itself is a stand-in here (the run BindsTo it).
mkdir -p /etc/systemd/system/atelier-sited@example.service.d /etc/systemd/system/atelier-example-s1-git@.service.d
printf '[Service]\nType=simple\nExecStart=\nExecStart=/bin/sleep infinity\n' > /etc/systemd/system/atelier-sited@example.service.d/50-stand-in.conf
printf '[Service]\nExecStart=\nExecStart=/bin/sleep infinity\n' > /etc/systemd/system/atelier-example-s1-git@.service.d/50-sleep.conf
reload
systemctl start atelier-sited@example.service
# The site's workspace and its state folder, which sited would have created: the unit binds the
# one writable and the other read-only.
install -d -o atelier-example -g atelier-example -m 2770 /var/lib/atelier/example/sites/collection
install -d -o atelier-example -g atelier-example -m 0710 /var/lib/atelier/example/sites/collection/.builder
live_run() {
  for _ in $(seq 1 100); do
    line=$(probe units 'atelier-example-s1-git@*.service' | grep ' active running' | head -n1)
    if [ -n "$line" ]; then echo "${line%% *}"; return; fi
    sleep 0.05
  done
}
probe hold /run/atelier/example/s1-git.sock & holder=$!
run=$(live_run)
echo "run1=$run"
echo "run1_connections=$(probe connections atelier-example-s1-git.socket)"
echo "stop_by_service_user=$(as_service_user stop "$run")"
echo "gone_after_stop=$(as_service_user wait-gone "$run" 10)"
echo "run1_state=$(probe state "$run")"
kill $holder; wait $holder 2>/dev/null
for _ in $(seq 1 100); do [ "$(probe connections atelier-example-s1-git.socket)" = 0 ] && break; sleep 0.05; done
echo "connections_after=$(probe connections atelier-example-s1-git.socket)"

probe hold /run/atelier/example/s1-git.sock & holder=$!
run=$(live_run)
echo "run2=$run"
echo "kill_by_service_user=$(as_service_user kill "$run" 9)"
echo "gone_after_kill=$(as_service_user wait-gone "$run" 10)"
kill $holder; wait $holder 2>/dev/null

echo "start_by_service_user=$(as_service_user start atelier-example-s1-git@1-2-3.service)"
echo "stop_sited_by_service_user=$(as_service_user stop atelier-sited@example.service)"
echo "kill_sited_by_service_user=$(as_service_user kill atelier-sited@example.service 9)"
echo "sited_still=$(probe state atelier-sited@example.service)"
exit 0
"#;

/// Runs inside the box with the test's own units.
const LIFECYCLE: &str = r#"
set -uo pipefail
probe() { atelier-dbus-probe "$@"; }
systemctl start dbustest-sleeper.service dbustest-stubborn.service
echo "listed=$(probe units 'dbustest-*' | sort | tr '\n' ',')"
echo "sleeper_state=$(probe state dbustest-sleeper.service)"
echo "sleeper_stop=$(probe stop dbustest-sleeper.service)"
echo "sleeper_gone=$(probe wait-gone dbustest-sleeper.service 10)"

echo "stubborn_stop=$(probe stop dbustest-stubborn.service)"
echo "stubborn_wait=$(probe wait-gone dbustest-stubborn.service 1.5)"
echo "stubborn_state=$(probe state dbustest-stubborn.service)"
echo "stubborn_kill=$(probe kill dbustest-stubborn.service 9)"
echo "stubborn_gone=$(probe wait-gone dbustest-stubborn.service 10)"
echo "stubborn_after=$(probe state dbustest-stubborn.service)"

systemctl start dbustest-orphan.service
for _ in $(seq 100); do
  [ "$(systemctl show -P ActiveState dbustest-orphan.service)" = inactive ] && break
  sleep 0.1
done
echo "orphan_units=$(probe units 'dbustest-orphan*')"
echo "orphan_live=$(probe live 'dbustest-orphan*')"
echo "orphan_wait=$(probe wait-gone dbustest-orphan.service 0.5)"
echo "orphan_kill=$(probe kill dbustest-orphan.service 9)"
echo "orphan_gone=$(probe wait-gone dbustest-orphan.service 10)"
echo "orphan_live_after=$(probe live 'dbustest-orphan*')"

echo "never_state=$(probe state dbustest-never.service)"
echo "never_stop=$(probe stop dbustest-never.service)"
echo "never_kill=$(probe kill dbustest-never.service 15)"
echo "never_gone=$(probe wait-gone dbustest-never.service 1)"
echo "bad_name=$(probe stop '../../etc/passwd.service')"
echo "bad_pattern=$(probe units 'dbustest-* ; reboot')"
echo "no_pattern=$(probe units)"
probe kill dbustest-sleeper.service 0 >/dev/null 2>&1; echo "bad_signal_status=$?"
echo "socket_kind=$(probe connections dbustest-sleeper.service)"
exit 0
"#;

const SLEEPER: &str = "[Service]\nExecStart=/bin/sleep infinity\n";
/// Its main process leaves a child behind and exits; `KillMode=process` leaves the child in the
/// stopped unit's cgroup.
const ORPHAN: &str =
    "[Service]\nExecStart=/bin/sh -c 'sleep infinity & exit 0'\nKillMode=process\n";
/// Ignores SIGTERM and never escalates: a stop stays pending until someone sends SIGKILL.
const STUBBORN: &str = "[Service]\nExecStart=/bin/bash -c 'trap \"\" TERM; while :; do sleep 0.2; done'\nTimeoutStopSec=infinity\n";

fn probe_box() -> SystemdBox {
    SystemdBox::new().copy(
        env!("CARGO_BIN_EXE_atelier-dbus-probe"),
        "/usr/local/bin/atelier-dbus-probe",
    )
}

fn fact<'r>(run: &'r BoxRun, key: &str) -> &'r str {
    run.fact(key).unwrap_or("<missing>")
}

#[test]
fn door_units_as_pid_1_loaded_them_and_the_service_user_stops_and_kills_runs() {
    let bins = built_binaries_dir().expect("locating the built binaries");
    let run = probe_box()
        .install_binaries(&bins, &["atelier-provision"])
        .copy(
            repo_root().join("deploy/examples/instance.json"),
            "/root/instance.json",
        )
        .copy(
            repo_root().join("deploy/examples/operator-setup.sh"),
            "/root/operator-setup.sh",
        )
        .run(DOORS)
        .expect("booting systemd in a container");
    run.assert_success();
    assert_eq!(fact(&run, "apply"), "0", "{run:?}");

    let version: u32 = fact(&run, "version")
        .parse()
        .unwrap_or_else(|_| panic!("a release number: {run:?}"));
    assert!(version >= 248, "{run:?}");
    assert_eq!(fact(&run, "require_248"), format!("ok {version}"));
    assert!(
        fact(&run, "require_999").starts_with("refused confinement_unavailable too-old"),
        "{run:?}"
    );
    assert!(
        fact(&run, "bad_bus").starts_with("refused confinement_unavailable bus-unavailable"),
        "{run:?}"
    );

    for k in 1..=2 {
        for door in ["turn", "build", "git"] {
            assert_eq!(
                fact(&run, &format!("conform_{k}_{door}")),
                "conformant",
                "site {k} door {door}\n{run:?}"
            );
        }
    }
    assert_eq!(
        fact(&run, "conform_as_service_user"),
        "conformant",
        "{run:?}"
    );
    let bench = fact(&run, "bench");
    assert!(
        bench.starts_with("version_p50_us=") && bench.contains(" ratio="),
        "{run:?}"
    );
    eprintln!("conformance cost on PID 1: {bench}");

    // What PID 1 loaded reads back as the rendered units say.
    for line in [
        "socket| Listen=[Stream /run/atelier/example/s1-turn.sock]",
        "socket| Accept=yes",
        "socket| MaxConnections=1",
        "socket| SocketMode=384",
        "socket| SocketUser=\"atelier-example\"",
        "service| User=\"atelier-a-example_1\"",
        "service| ExecStartEx=[/usr/bin/atelier-shim]",
        "service| PrivateNetwork=yes",
        "service| BindReadOnlyPaths=[/usr:/usr, /etc:/etc, -/opt:/opt, \
         /run/atelier/example/egress/s1/turn.sock:/run/atelier-egress/turn.sock, \
         /run/atelier/example/egress/s1/mcp.sock:/run/atelier-egress/mcp.sock, \
         /var/lib/atelier/example/agents/turn.gitconfig:/etc/gitconfig]",
    ] {
        assert!(run.output.lines().any(|l| l == line), "{line}\n{run:?}");
    }
    // PID 1 keeps address prefixes as a set; either order is the same list.
    assert!(
        run.output.lines().any(|l| {
            l == "service| IPAddressDeny=[0.0.0.0/0, ::/0]"
                || l == "service| IPAddressDeny=[::/0, 0.0.0.0/0]"
        }),
        "{run:?}"
    );

    let nonconformant = |key: &str, unit: &str, property: &str| {
        let line = fact(&run, key);
        assert!(
            line.starts_with(&format!(
                "refused confinement.unit_nonconformant nonconformant unit={unit} property={property}:"
            )),
            "{key}: {line}\n{run:?}"
        );
    };
    nonconformant(
        "tampered_network",
        "atelier-example-s1-turn@probe.service",
        "PrivateNetwork",
    );
    assert_eq!(fact(&run, "untampered_build"), "conformant", "{run:?}");
    assert_eq!(fact(&run, "restored"), "conformant", "{run:?}");
    if version < 257 {
        nonconformant(
            "unknown_to_pid1",
            "atelier-example-s1-git@probe.service",
            "PrivatePIDs",
        );
        assert!(
            fact(&run, "unknown_to_pid1")
                .ends_with("PrivatePIDs is not known to this PID 1, expected yes"),
            "{run:?}"
        );
    }
    nonconformant(
        "tampered_user",
        "atelier-example-s1-build@probe.service",
        "User",
    );
    assert!(
        fact(&run, "tampered_user").contains("\"nobody\""),
        "{run:?}"
    );
    nonconformant(
        "missing_socket",
        "atelier-example-s2-git.socket",
        "LoadState",
    );
    assert!(
        fact(&run, "missing_socket").contains("\"not-found\""),
        "{run:?}"
    );

    // The provisioner's polkit rule: stop and kill of a run of a declared site, by the service
    // user, allowed; StartUnit and sited's own unit refused.
    let run1 = fact(&run, "run1");
    assert!(
        run1.starts_with("atelier-example-s1-git@") && run1.ends_with(".service"),
        "{run:?}"
    );
    assert_eq!(fact(&run, "run1_connections"), "1", "{run:?}");
    assert_eq!(fact(&run, "stop_by_service_user"), "queued", "{run:?}");
    assert!(
        fact(&run, "gone_after_stop").starts_with("gone after"),
        "{run:?}"
    );
    assert!(
        fact(&run, "run1_state").ends_with("inactive dead"),
        "{run:?}"
    );
    assert_eq!(fact(&run, "connections_after"), "0", "{run:?}");
    assert_ne!(fact(&run, "run2"), run1, "a new run: {run:?}");
    assert!(
        fact(&run, "run2").starts_with("atelier-example-s1-git@"),
        "{run:?}"
    );
    assert_eq!(fact(&run, "kill_by_service_user"), "signalled", "{run:?}");
    assert!(
        fact(&run, "gone_after_kill").starts_with("gone after"),
        "{run:?}"
    );
    assert_eq!(
        fact(&run, "start_by_service_user"),
        "error org.freedesktop.DBus.Error.InteractiveAuthorizationRequired",
        "{run:?}"
    );
    for key in ["stop_sited_by_service_user", "kill_sited_by_service_user"] {
        assert!(
            fact(&run, key).starts_with("refused confinement_unavailable denied"),
            "{key}\n{run:?}"
        );
    }
    assert_eq!(
        fact(&run, "sited_still"),
        "loaded active running",
        "{run:?}"
    );
}

#[test]
fn stop_wait_gone_and_a_run_that_will_not_die() {
    let run = probe_box()
        .write(
            "/etc/systemd/system/dbustest-sleeper.service",
            SLEEPER,
            0o644,
        )
        .write(
            "/etc/systemd/system/dbustest-stubborn.service",
            STUBBORN,
            0o644,
        )
        .write("/etc/systemd/system/dbustest-orphan.service", ORPHAN, 0o644)
        .run(LIFECYCLE)
        .expect("booting systemd in a container");
    run.assert_success();

    assert_eq!(
        fact(&run, "listed"),
        "dbustest-sleeper.service loaded active running,\
         dbustest-stubborn.service loaded active running,",
        "{run:?}"
    );
    assert_eq!(fact(&run, "sleeper_state"), "loaded active running");
    assert_eq!(fact(&run, "sleeper_stop"), "queued", "{run:?}");
    assert!(
        fact(&run, "sleeper_gone").starts_with("gone after"),
        "{run:?}"
    );

    // SIGTERM is ignored and the stop never escalates: still alive at the deadline, the
    // refusal sited quarantines the site with.
    assert_eq!(fact(&run, "stubborn_stop"), "queued", "{run:?}");
    let waited = fact(&run, "stubborn_wait");
    assert!(
        waited.starts_with(
            "refused confinement.identity_quarantined still-alive: \
             dbustest-stubborn.service is still alive (deactivating/stop-sigterm"
        ),
        "{run:?}"
    );
    assert_eq!(
        fact(&run, "stubborn_state"),
        "loaded deactivating stop-sigterm",
        "{run:?}"
    );
    assert_eq!(fact(&run, "stubborn_kill"), "signalled", "{run:?}");
    assert!(
        fact(&run, "stubborn_gone").starts_with("gone after"),
        "{run:?}"
    );
    let after = fact(&run, "stubborn_after");
    assert!(
        after.ends_with("failed failed") || after.ends_with("inactive dead"),
        "{run:?}"
    );

    // A unit whose main process left a child behind is stopped but not gone: still a live
    // run, which sited stops and waits for before it opens another door of the site.
    let orphan = "dbustest-orphan.service loaded inactive dead";
    assert_eq!(fact(&run, "orphan_units"), orphan, "{run:?}");
    assert_eq!(fact(&run, "orphan_live"), orphan, "{run:?}");
    assert!(
        fact(&run, "orphan_wait").starts_with("refused confinement.identity_quarantined"),
        "{run:?}"
    );
    assert_eq!(fact(&run, "orphan_kill"), "signalled", "{run:?}");
    assert!(
        fact(&run, "orphan_gone").starts_with("gone after"),
        "{run:?}"
    );
    assert_eq!(fact(&run, "orphan_live_after"), "", "{run:?}");

    // A unit PID 1 never had: nothing to stop or kill, and gone at once.
    assert_eq!(
        fact(&run, "never_state"),
        "not-found inactive dead",
        "{run:?}"
    );
    assert_eq!(fact(&run, "never_stop"), "not-loaded", "{run:?}");
    assert_eq!(fact(&run, "never_kill"), "not-loaded", "{run:?}");
    assert!(
        fact(&run, "never_gone").starts_with("gone after"),
        "{run:?}"
    );

    // Bad input is refused before anything is sent.
    assert!(
        fact(&run, "bad_name").starts_with("refused confinement.unit_refused bad-name"),
        "{run:?}"
    );
    assert!(
        fact(&run, "bad_pattern").starts_with("refused confinement.unit_refused bad-name"),
        "{run:?}"
    );
    assert!(
        fact(&run, "no_pattern").starts_with("refused confinement.unit_refused bad-name"),
        "{run:?}"
    );
    assert_eq!(fact(&run, "bad_signal_status"), "2", "{run:?}");
    assert!(
        fact(&run, "socket_kind").starts_with("refused confinement.unit_refused bad-name"),
        "{run:?}"
    );
}
