//! atelier-sited under a real PID 1: socket activation, READY under `Type=notify`, `/health`
//! over the unix socket, and STOPPING plus a clean exit on `systemctl stop`.

use atelier_systemd_tests::{built_binaries_dir, repo_root, SystemdBox};

const INSTANCE: &str = "demo";
const TOKEN: &str = "box-service-token-0123456789abcdef0123";

/// Runs inside the box. Prints `KEY=value` facts for the test to check, and fails fast (with
/// the journal shown by the harness) when a step does not hold.
const SCRIPT: &str = r#"
set -euo pipefail
useradd --system --no-create-home --shell /usr/sbin/nologin atelier-demo
install -d -m 0700 /etc/atelier/demo/credentials
printf '%s' "$TOKEN" > /etc/atelier/demo/credentials/SERVICE_TOKEN
chmod 0600 /etc/atelier/demo/credentials/SERVICE_TOKEN
systemd-analyze log-level debug
systemctl daemon-reload
systemctl start atelier-sited@demo.socket

echo "before_connect=$(systemctl is-active atelier-sited@demo.service || true)"
echo "socket_mode=$(stat -c '%a %U %G' /run/atelier/demo/sited.sock)"

body=$(curl -sS --fail --unix-socket /run/atelier/demo/sited.sock \
  http://sited/publication/site_builder/health)
echo "health=$body"
echo "after_connect=$(systemctl is-active atelier-sited@demo.service)"
echo "unauthenticated=$(curl -sS -o /dev/null -w '%{http_code}' --unix-socket /run/atelier/demo/sited.sock \
  http://sited/publication/site_builder/v1/sites)"

pid=$(systemctl show -P MainPID atelier-sited@demo.service)
echo "main_user=$(ps -o user= -p "$pid")"
systemctl stop atelier-sited@demo.service
echo "after_stop=$(systemctl is-active atelier-sited@demo.service || true)"
echo "exit_status=$(systemctl show -P ExecMainStatus atelier-sited@demo.service)"
echo "result=$(systemctl show -P Result atelier-sited@demo.service)"
echo "socket_after_stop=$(systemctl is-active atelier-sited@demo.socket)"
"#;

#[test]
fn sited_is_socket_activated_ready_healthy_and_stops_cleanly() {
    let bins = built_binaries_dir().expect("locating the built binaries");
    let units = repo_root().join("units");
    let run = SystemdBox::new()
        .copy(bins.join("atelier-sited"), "/usr/local/bin/atelier-sited")
        .copy(
            units.join("atelier-sited@.socket"),
            "/etc/systemd/system/atelier-sited@.socket",
        )
        .copy(
            units.join("atelier-sited@.service"),
            "/etc/systemd/system/atelier-sited@.service",
        )
        .run(&format!("TOKEN={TOKEN}\n{SCRIPT}"))
        .expect("booting systemd in a container");
    run.assert_success();

    assert_eq!(run.fact("before_connect"), Some("inactive"), "{run:?}");
    assert_eq!(
        run.fact("socket_mode"),
        Some("660 atelier-demo atelier-demo"),
        "{run:?}"
    );
    let health: serde_json::Value =
        serde_json::from_str(run.fact("health").expect("health printed")).expect("health JSON");
    assert_eq!(health["status"], "ok");
    assert_eq!(health["service"], "dedalo-site-builder");
    assert_eq!(
        health["instance_fingerprint"],
        atelier_sited::instance_fingerprint(INSTANCE, TOKEN)
    );
    assert_eq!(run.fact("after_connect"), Some("active"), "{run:?}");
    assert_eq!(run.fact("unauthenticated"), Some("401"), "{run:?}");
    assert_eq!(run.fact("main_user"), Some("atelier-demo"), "{run:?}");

    // PID 1's own debug log proves which notifications arrived, from which unit.
    let unit = "atelier-sited@demo.service";
    let notifications: Vec<&str> = run
        .journal_lines(unit)
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

    assert_eq!(run.fact("after_stop"), Some("inactive"), "{run:?}");
    assert_eq!(run.fact("exit_status"), Some("0"), "{run:?}");
    assert_eq!(run.fact("result"), Some("success"), "{run:?}");
    assert_eq!(run.fact("socket_after_stop"), Some("active"), "{run:?}");
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
