//! atelier-sited under a real PID 1, provisioned the way an operator does it: `atelier-provision
//! apply` of the example declaration, then the rendered socket starts the daemon on the first
//! connection; it reaches READY under `Type=notify`, pairs through `/health`, creates a site
//! (site table, webspace proof, git) as the service user, and on `systemctl stop` sends
//! STOPPING and exits 0. A setting it cannot run with leaves it failed with 78, named at error
//! priority, never restarted.

#![expect(
    clippy::expect_used,
    reason = "test code: a box that cannot be put together must fail the test"
)]

use atelier_systemd_tests::{built_binaries_dir, repo_root, SystemdBox};

/// A box holding the provisioner, sited, the shim, the site templates, the example
/// declaration and the operator's part, as a host is before `apply`.
fn provisioning_box() -> SystemdBox {
    let bins = built_binaries_dir().expect("locating the built binaries");
    SystemdBox::new()
        .install_binaries(
            &bins,
            &["atelier-provision", "atelier-sited", "atelier-shim"],
        )
        .install_templates()
        .copy(
            repo_root().join("deploy/examples/instance.json"),
            "/root/instance.json",
        )
        .copy(
            repo_root().join("deploy/examples/operator-setup.sh"),
            "/root/operator-setup.sh",
        )
}

/// Runs inside the box. Prints `KEY=value` facts for the test to check.
const SCRIPT: &str = r#"
set -uo pipefail
bash /root/operator-setup.sh
atelier-provision apply --declaration /root/instance.json > /tmp/apply 2>&1
echo "apply=$?"
systemd-analyze log-level debug

sock=/run/atelier/example/sited.sock
base=http://sited/publication/site_builder
token=$(cat /etc/atelier/example/credentials/SERVICE_TOKEN)
echo "before_connect=$(systemctl is-active atelier-sited@example.service)"
health=$(curl -sS --unix-socket $sock $base/health)
echo "health=$health"
expected=$(printf 'dedalo-site-instance:example\n%s' "$token" | sha256sum | cut -d' ' -f1)
echo "fingerprint_match=$(echo "$health" | grep -c "\"instance_fingerprint\":\"$expected\"")"
echo "after_connect=$(systemctl is-active atelier-sited@example.service)"
echo "main_user=$(ps -o user= -p "$(systemctl show -P MainPID atelier-sited@example.service)")"
echo "unauthenticated=$(curl -sS -o /dev/null -w '%{http_code}' --unix-socket $sock $base/v1/sites)"

curl -sS -o /tmp/create -w 'create=%{http_code}\n' --unix-socket $sock \
  -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d '{"slug":"collection","name":"The collection","domain":"www.example.org","actor":{"user_id":1,"username":"admin"}}' \
  $base/v1/sites
sed 's/^/create| /' /tmp/create; echo
journalctl -b -u atelier-sited@example.service -o cat --no-pager | grep -v '^GET ' | tail -n 20 | sed 's/^/sited| /'
journalctl -b -u 'atelier-example-s1-git@*' -o cat --no-pager | grep -v mount_setattr | tail -n 40 | sed 's/^/git-door| /' 
ws=/var/lib/atelier/example/sites/collection
echo "workspace_owner=$(stat -c '%U' $ws/site.json)"
echo "first_commit=$(git -c safe.directory='*' -C $ws log --format=%s 2>/dev/null | tail -n1)"
echo "listed=$(curl -sS --unix-socket $sock -H "Authorization: Bearer $token" $base/v1/sites | grep -o '"slug":"[a-z]*"' | tr '\n' ',')"

systemctl stop atelier-sited@example.service
echo "after_stop=$(systemctl is-active atelier-sited@example.service)"
echo "exit_status=$(systemctl show -P ExecMainStatus atelier-sited@example.service)"
echo "result=$(systemctl show -P Result atelier-sited@example.service)"
echo "socket_after_stop=$(systemctl is-active atelier-sited@example.socket)"
exit 0
"#;

#[test]
fn provisioned_sited_is_socket_activated_ready_creates_a_site_and_stops_cleanly() {
    let run = provisioning_box()
        .run(SCRIPT)
        .expect("booting systemd in a container");
    run.assert_success();
    let fact = |key: &str| run.fact(key).unwrap_or("<missing>");

    assert_eq!(fact("apply"), "0", "{run:?}");
    assert_eq!(fact("before_connect"), "inactive", "{run:?}");
    let health: serde_json::Value =
        serde_json::from_str(fact("health")).unwrap_or_else(|e| panic!("{e}: {run:?}"));
    assert_eq!(health["status"], "ok");
    assert_eq!(health["service"], "dedalo-site-builder");
    assert_eq!(fact("fingerprint_match"), "1", "{run:?}");
    assert_eq!(fact("after_connect"), "active", "{run:?}");
    assert_eq!(fact("main_user"), "atelier-example", "{run:?}");
    assert_eq!(fact("unauthenticated"), "401", "{run:?}");

    assert_eq!(fact("create"), "201", "{run:?}");
    assert_eq!(fact("workspace_owner"), "atelier-example", "{run:?}");
    assert_eq!(
        fact("first_commit"),
        "scaffold: initial template",
        "{run:?}"
    );
    assert_eq!(fact("listed"), "\"slug\":\"collection\",", "{run:?}");

    // PID 1's own debug log proves which notifications arrived, from which unit.
    let notifications: Vec<&str> = run
        .journal_lines("atelier-sited@example.service")
        .into_iter()
        .filter(|l| l.contains("Got notification message"))
        .collect();
    assert!(
        notifications.iter().any(|l| l.contains("READY=1")),
        "no READY=1 from sited: {notifications:#?}\n{run:?}"
    );
    assert!(
        notifications.iter().any(|l| l.contains("STOPPING=1")),
        "no STOPPING=1 from sited: {notifications:#?}\n{run:?}"
    );
    assert_eq!(fact("after_stop"), "inactive", "{run:?}");
    assert_eq!(fact("exit_status"), "0", "{run:?}");
    assert_eq!(fact("result"), "success", "{run:?}");
    assert_eq!(fact("socket_after_stop"), "active", "{run:?}");
}

/// A setting sited cannot run with: a drop-in adds a key no sited knows.
const BROKEN: &str = r#"
set -uo pipefail
bash /root/operator-setup.sh
atelier-provision apply --declaration /root/instance.json > /tmp/apply 2>&1
echo "apply=$?"
unit=atelier-sited@example.service
mkdir -p /etc/systemd/system/$unit.d
printf '[Service]\nEnvironment=ATELIER_SITE_COLOUR=blue\n' > /etc/systemd/system/$unit.d/50-broken.conf
systemctl daemon-reload
curl -sS -o /dev/null --max-time 5 --unix-socket /run/atelier/example/sited.sock http://sited/publication/site_builder/health
# RestartSec= is 3 s: a unit that would restart has done so well within 8.
sleep 8
echo "state=$(systemctl show -P ActiveState $unit)/$(systemctl show -P SubState $unit)"
echo "status=$(systemctl show -P ExecMainStatus $unit)"
echo "restarts=$(systemctl show -P NRestarts $unit)"
echo "err_lines=$(journalctl -b -p err -u $unit -o cat --no-pager | grep -c ATELIER_SITE_COLOUR)"
journalctl -b -u $unit -o cat --no-pager | tail -n 10 | sed 's/^/sited| /'
exit 0
"#;

#[test]
fn a_sited_with_a_broken_setting_fails_with_78_names_it_at_error_priority_and_stays_down() {
    let run = provisioning_box()
        .run(BROKEN)
        .expect("booting systemd in a container");
    run.assert_success();
    let fact = |key: &str| run.fact(key).unwrap_or("<missing>");
    assert_eq!(fact("apply"), "0", "{run:?}");
    assert_eq!(fact("state"), "failed/failed", "{run:?}");
    assert_eq!(fact("status"), "78", "{run:?}");
    // PID 1 never restarted it; the queued connection re-triggers its socket until the start
    // limit, and every attempt names the setting at error priority.
    assert_eq!(fact("restarts"), "0", "{run:?}");
    assert!(
        fact("err_lines").parse::<u32>().is_ok_and(|n| n >= 1),
        "{run:?}"
    );
}

/// A sited whose process is stopped (SIGSTOP: its event loop pings no more). The rendered
/// `WatchdogSec=30` is shortened to 2 s by a drop-in, so the test waits seconds, not half a
/// minute; the watchdog and the restart are PID 1's, as rendered.
const STALLED: &str = r#"
set -uo pipefail
bash /root/operator-setup.sh
atelier-provision apply --declaration /root/instance.json > /tmp/apply 2>&1
echo "apply=$?"
unit=atelier-sited@example.service
echo "rendered_watchdog=$(sed -n 's/^WatchdogSec=//p' /etc/systemd/system/$unit)"
mkdir -p /etc/systemd/system/$unit.d
printf '[Service]\nWatchdogSec=2\n' > /etc/systemd/system/$unit.d/50-quick-watchdog.conf
systemctl daemon-reload
health() { curl -sS -o /dev/null -w '%{http_code}' --max-time 20 --unix-socket /run/atelier/example/sited.sock http://sited/publication/site_builder/health; }
echo "first=$(health)"
# Alive and pinging: past several watchdog periods it is the same process.
pid=$(systemctl show -P MainPID $unit)
sleep 5
echo "same_after_pings=$([ "$(systemctl show -P MainPID $unit)" = "$pid" ] && echo yes || echo no)"
kill -STOP "$pid"
for _ in $(seq 150); do
  [ "$(systemctl show -P NRestarts $unit)" -ge 1 ] && [ "$(systemctl show -P MainPID $unit)" != "$pid" ] \
    && [ "$(systemctl show -P MainPID $unit)" != 0 ] && break
  sleep 0.1
done
echo "restarts=$(systemctl show -P NRestarts $unit)"
echo "new_pid=$([ "$(systemctl show -P MainPID $unit)" != "$pid" ] && echo yes || echo no)"
echo "watchdog_logged=$(journalctl -b -u $unit -o cat --no-pager | grep -c 'Watchdog timeout')"
echo "after=$(health)"
exit 0
"#;

#[test]
fn a_stalled_sited_is_killed_by_its_watchdog_and_started_again() {
    let run = provisioning_box()
        .run(STALLED)
        .expect("booting systemd in a container");
    run.assert_success();
    let fact = |key: &str| run.fact(key).unwrap_or("<missing>");
    assert_eq!(fact("apply"), "0", "{run:?}");
    assert_eq!(fact("rendered_watchdog"), "30", "{run:?}");
    assert_eq!(fact("first"), "200", "{run:?}");
    assert_eq!(fact("same_after_pings"), "yes", "{run:?}");
    assert_eq!(fact("restarts"), "1", "{run:?}");
    assert_eq!(fact("new_pid"), "yes", "{run:?}");
    assert_ne!(fact("watchdog_logged"), "0", "{run:?}");
    assert_eq!(fact("after"), "200", "{run:?}");
}

#[test]
fn harness_boots_systemd_and_reports_a_failing_script_with_its_journal() {
    let run = SystemdBox::new()
        .write("/etc/atelier-box-probe", "probe-contents\n", 0o600)
        .run("echo \"pid1=$(cat /proc/1/comm)\"; echo \"probe=$(cat /etc/atelier-box-probe)\"; exit 3")
        .expect("booting systemd in a container");
    assert_eq!(run.status, 3, "{run:?}");
    assert_eq!(run.fact("pid1"), Some("systemd"), "{run:?}");
    assert_eq!(run.fact("probe"), Some("probe-contents"), "{run:?}");
    assert!(
        !run.journal_lines("atelier-box.service").is_empty(),
        "the journal of the boot is collected: {run:?}"
    );
}
