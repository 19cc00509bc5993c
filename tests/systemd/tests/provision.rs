//! atelier-provision on a real systemd: `apply` of the example declaration creates the users,
//! groups and tree with the declared owners and modes and loads the units; a second `apply`
//! plans nothing and touches no mtime; a hand edit is `check`ed as hand_edited (exit 1) and
//! repaired by `apply`.

use atelier_systemd_tests::{built_binaries_dir, repo_root, SystemdBox};

/// Planted in the operator's credential files; must appear in no output.
const CANARY: &str = "canary-credential-value-7f3a9c";

/// Runs inside the box. Prints `KEY=value` facts for the test to check.
const SCRIPT: &str = r#"
set -uo pipefail
DECL=/root/instance.json
provision() { atelier-provision "$@" --declaration "$DECL"; }
# Everything apply may touch, with owner, mode and mtime.
snapshot() {
  find /etc/atelier/example /var/lib/atelier/example /srv/www /srv/legacy-www \
       /srv/atelier_audit/example /etc/systemd/system /etc/nginx /etc/polkit-1/rules.d \
       /etc/tmpfiles.d -printf '%p %U:%G %m %T@\n' 2>/dev/null | sort
}

# What the operator provides: the engine's group, the credentials, certificates.
CREDENTIAL_VALUE=$CANARY bash /root/operator-setup.sh

provision apply > /tmp/apply1 2>&1; echo "apply1=$?"
sed 's/^/apply1| /' /tmp/apply1

echo "svc_user=$(id -nu atelier-example) $(id -ng atelier-example) $(getent passwd atelier-example | cut -d: -f7)"
for k in 1 2; do
  id=atelier-a-example_$k
  echo "identity_$k=$(getent passwd $id | cut -d: -f5) primary=$(id -ng $id) groups=$(id -nG $id | tr ' ' ',')"
  echo "private_group_$k=$(getent group $id | cut -d: -f4)"
done
st() { stat -c '%U:%G %a' "$1" 2>&1; }
echo "stat_config=$(st /etc/atelier/example)"
echo "stat_credentials=$(st /etc/atelier/example/credentials)"
echo "stat_token=$(st /etc/atelier/example/credentials/SERVICE_TOKEN)"
echo "stat_env=$(st /etc/atelier/example/env)"
echo "stat_fragment=$(st /etc/atelier/example/engine.env.fragment)"
echo "stat_sites=$(st /var/lib/atelier/example/sites)"
echo "stat_audit_root=$(st /srv/atelier_audit/example)"
echo "stat_door_root=$(st /var/lib/atelier/example/door-root)"
echo "door_root_links=$(cd /var/lib/atelier/example/door-root && for l in bin sbin lib lib64; do printf '%s>%s ' $l "$(readlink $l)"; done)"
echo "stat_audit=$(st /srv/atelier_audit/example/audit.jsonl)"
# sited rotates its audit log by a rename in the audit root, as its service user.
echo "audit_rotatable=$(runuser -u atelier-example -- sh -c 'cd /srv/atelier_audit/example &&
  touch .probe && mv .probe .probe.1 && rm .probe.1' 2>&1 && echo yes)"
echo "stat_home=$(st /var/lib/atelier/example/agents/s2/turn)"
echo "stat_home_state=$(st /var/lib/atelier/example/agents/s2/turn/state)"
echo "stat_home_config=$(st /var/lib/atelier/example/agents/s2/turn/.config)"
echo "stat_home_gitconfig=$(st /var/lib/atelier/example/agents/s2/turn/.gitconfig)"
echo "stat_build_home=$(st /var/lib/atelier/example/agents/s2/build)"
echo "stat_retired=$(st /var/lib/atelier/example/retired)"
echo "stat_webspace=$(st /srv/www/www.example.org)"
echo "stat_store=$(st /srv/legacy-www/archive-example/.releases/web)"
echo "stat_marker=$(st /srv/www/www.example.org/.atelier_instance) $(cat /srv/www/www.example.org/.atelier_instance)"
echo "stat_unit=$(st /etc/systemd/system/atelier-example-s1-turn@.service)"
echo "stat_htpasswd=$(st /etc/atelier/example/preprod.htpasswd) $(cut -c1-15 /etc/atelier/example/preprod.htpasswd)"
echo "stat_runtime=$(st /run/atelier/example)"
echo "unit_loaded=$(systemctl show -P LoadState atelier-example-s1-turn.socket)"
echo "socket_active=$(systemctl is-active atelier-example-s1-turn.socket atelier-example-s2-gate.socket atelier-sited@example.socket | tr '\n' ',')"
echo "sock_sited=$(st /run/atelier/example/sited.sock)"
echo "sock_door=$(st /run/atelier/example/s2-build.sock)"
echo "sock_gate=$(st /run/atelier/example/egress/s1/turn.sock)"
echo "egress_dir=$(st /run/atelier/example/egress/s1)"
echo "enabled_link=$(readlink /etc/nginx/sites-enabled/atelier-example-collection.conf)"

# What PID 1 loaded for a run of site 1's turn door and its socket.
run=atelier-example-s1-turn@1-2-3.service
echo "loaded_service=$(systemctl show -p User -p PrivateNetwork -p PrivateIPC -p RootDirectory -p RestrictSUIDSGID -p ProtectSystem $run | sort | tr '\n' ' ')"
echo "loaded_socket=$(systemctl show -p Accept -p MaxConnections -p SocketMode -p SocketUser atelier-example-s1-turn.socket | sort | tr '\n' ' ')"
# polkit: the service user may stop a run of its own sites' doors; never start one, never
# touch another instance's units or sited's own.
as_service_user() { runuser -u atelier-example -- systemctl --no-ask-password "$@" >/tmp/polkit 2>&1; echo $?; }
echo "polkit_stop_own=$(as_service_user stop $run)"
echo "polkit_start_own=$(as_service_user start $run)"
echo "polkit_start_own_says=$(head -n1 /tmp/polkit)"
echo "polkit_stop_other_instance=$(as_service_user stop atelier-other-s1-turn@1-2-3.service)"
echo "polkit_stop_undeclared_site=$(as_service_user stop atelier-example-s3-turn@1-2-3.service)"
echo "polkit_stop_sited=$(as_service_user stop atelier-sited@example.socket)"

snapshot > /tmp/before
provision apply > /tmp/apply2 2>&1; echo "apply2=$?"
echo "apply2_head=$(head -n1 /tmp/apply2)"
sed "s/^/apply2| /" /tmp/apply2
snapshot > /tmp/after
if cmp -s /tmp/before /tmp/after; then echo "unchanged=yes"; else echo "unchanged=no"; diff /tmp/before /tmp/after | head -20; fi

echo 'ExecStartPre=/bin/true' >> /etc/systemd/system/atelier-example-s1-turn@.service
provision check > /tmp/check1 2>&1; echo "check1=$?"
echo "check1_drift=$(grep atelier-example-s1-turn@.service /tmp/check1 | awk '{print $1}')"
provision check --json > /tmp/check1.json 2>&1
provision apply > /tmp/apply3 2>&1; echo "apply3=$?"
sed 's/^/apply3| /' /tmp/apply3
provision check > /tmp/check2 2>&1; echo "check2=$?"
echo "repaired=$(grep -c ExecStartPre=/bin/true /etc/systemd/system/atelier-example-s1-turn@.service)"

provision plan --json > /tmp/plan.json 2>&1
if cat /tmp/apply* /tmp/check* /tmp/plan.json | grep -q "$CANARY"; then echo "canary=leaked"; else echo "canary=absent"; fi
exit 0
"#;

#[test]
fn apply_creates_the_instance_then_is_idempotent_and_repairs_a_hand_edit() {
    let bins = built_binaries_dir().expect("locating the built binaries");
    let run = SystemdBox::new()
        .copy(
            bins.join("atelier-provision"),
            "/usr/local/bin/atelier-provision",
        )
        .copy(
            repo_root().join("deploy/examples/instance.json"),
            "/root/instance.json",
        )
        .copy(
            repo_root().join("deploy/examples/operator-setup.sh"),
            "/root/operator-setup.sh",
        )
        .run(&format!("CANARY={CANARY}\n{SCRIPT}"))
        .expect("booting systemd in a container");
    run.assert_success();
    let fact = |key: &str| run.fact(key).unwrap_or("<missing>");

    assert_eq!(fact("apply1"), "0", "{run:?}");
    assert_eq!(
        fact("svc_user"),
        "atelier-example atelier-example /usr/sbin/nologin",
        "{run:?}"
    );
    assert_eq!(
        fact("identity_1"),
        "atelier site collection primary=atelier-example groups=atelier-example,atelier-a-example_1"
    );
    assert_eq!(
        fact("identity_2"),
        "atelier site archive primary=atelier-example groups=atelier-example,atelier-a-example_2"
    );
    for k in 1..=2 {
        let mut members: Vec<String> = fact(&format!("private_group_{k}"))
            .split(',')
            .map(str::to_owned)
            .collect();
        members.sort();
        let mut expected = vec![
            "atelier-example".to_owned(),
            format!("atelier-a-example_{k}"),
        ];
        expected.sort();
        assert_eq!(members, expected, "private group of site {k}\n{run:?}");
    }
    for (key, expected) in [
        ("stat_config", "root:root 755"),
        ("stat_credentials", "root:root 700"),
        ("stat_token", "root:root 600"),
        ("stat_env", "root:atelier-example 640"),
        ("stat_fragment", "root:dedalo-example 640"),
        ("stat_sites", "atelier-example:atelier-example 2770"),
        ("stat_audit_root", "atelier-example:atelier-example 750"),
        ("audit_rotatable", "yes"),
        ("stat_door_root", "root:root 755"),
        (
            "door_root_links",
            "bin>usr/bin sbin>usr/sbin lib>usr/lib lib64>usr/lib64 ",
        ),
        ("stat_audit", "atelier-example:atelier-example 600"),
        ("stat_home", "root:root 755"),
        ("stat_home_state", "atelier-a-example_2:atelier-example 700"),
        ("stat_home_config", "root:root 755"),
        ("stat_home_gitconfig", "root:root 644"),
        ("stat_build_home", "atelier-a-example_2:atelier-example 700"),
        ("stat_retired", "root:root 700"),
        ("stat_webspace", "atelier-example:www-data 2750"),
        ("stat_store", "atelier-example:www-data 2750"),
        ("stat_marker", "root:root 644 example"),
        ("stat_unit", "root:root 644"),
        ("stat_htpasswd", "root:www-data 640 preview:$2y$12$"),
        ("unit_loaded", "loaded"),
        ("socket_active", "active,active,active,"),
        ("sock_sited", "atelier-example:dedalo-example 660"),
        ("sock_door", "atelier-example:atelier-example 600"),
        ("sock_gate", "atelier-a-example_1:atelier-a-example_1 600"),
        ("egress_dir", "root:atelier-a-example_1 750"),
        (
            "enabled_link",
            "../sites-available/atelier-example-collection.conf",
        ),
    ] {
        assert_eq!(fact(key), expected, "{key}\n{run:?}");
    }
    assert_eq!(
        fact("loaded_service"),
        "PrivateIPC=yes PrivateNetwork=yes ProtectSystem=strict RestrictSUIDSGID=yes \
         RootDirectory=/var/lib/atelier/example/door-root User=atelier-a-example_1 ",
        "{run:?}"
    );
    assert_eq!(
        fact("loaded_socket"),
        "Accept=yes MaxConnections=1 SocketMode=0600 SocketUser=atelier-example ",
        "{run:?}"
    );
    assert_eq!(fact("polkit_stop_own"), "0", "{run:?}");
    assert_ne!(fact("polkit_start_own"), "0", "{run:?}");
    assert!(
        fact("polkit_start_own_says").contains("authentication required"),
        "{run:?}"
    );
    for key in [
        "polkit_stop_other_instance",
        "polkit_stop_undeclared_site",
        "polkit_stop_sited",
    ] {
        assert_ne!(fact(key), "0", "{key}\n{run:?}");
    }
    // PID 1 loads every rendered unit without a complaint.
    let complaints: Vec<&str> = run
        .journal
        .lines()
        .filter(|l| l.contains("atelier"))
        .filter(|l| {
            [
                "Unknown key",
                "Unknown section",
                "Failed to parse",
                "Ignoring",
                "bad-setting",
            ]
            .iter()
            .any(|w| l.contains(w))
        })
        .collect();
    assert!(complaints.is_empty(), "{complaints:#?}");
    assert!(
        fact("stat_runtime").starts_with("root:root"),
        "systemd-tmpfiles made the runtime dir: {run:?}"
    );

    assert_eq!(fact("apply2"), "0", "{run:?}");
    assert_eq!(fact("apply2_head"), "0 actions", "{run:?}");
    assert_eq!(fact("unchanged"), "yes", "{run:?}");

    assert_eq!(fact("check1"), "1", "{run:?}");
    assert_eq!(fact("check1_drift"), "hand_edited", "{run:?}");
    assert_eq!(fact("apply3"), "0", "{run:?}");
    assert_eq!(fact("check2"), "0", "{run:?}");
    assert_eq!(fact("repaired"), "0", "{run:?}");
    assert_eq!(fact("canary"), "absent", "{run:?}");
    assert!(
        !run.journal.contains(CANARY),
        "the canary reached the journal: {run:?}"
    );
}

/// Runs inside the box: the ledger's life over add, remove and re-add of a site, the serving
/// proof, then decommissioning: refused while production serves a release, then purged.
const LIFECYCLE: &str = r#"
set -uo pipefail
CREDENTIAL_VALUE=operator-value bash /root/operator-setup.sh journal.example.org
expiry() { getent shadow "$1" | cut -d: -f8; }

atelier-provision apply --declaration /root/two.json > /tmp/a1 2>&1; echo "apply_two=$?"
atelier-provision verify --declaration /root/two.json > /tmp/v1 2>&1; echo "verify=$?"
echo "verify_line=$(grep '^collection web' /tmp/v1)"
atelier-provision apply --declaration /root/three.json > /tmp/a2 2>&1; echo "apply_three=$?"
echo "added=$(getent passwd atelier-a-example_3 | cut -d: -f5)"
atelier-provision apply --declaration /root/two.json > /tmp/a3 2>&1; echo "apply_removed=$?"
echo "removed_kept=$(getent passwd atelier-a-example_3 | cut -d: -f1) expiry=$(expiry atelier-a-example_3) shell=$(getent passwd atelier-a-example_3 | cut -d: -f7)"
echo "live_expiry=$(expiry atelier-a-example_1)"
echo "journal_units=$(ls /etc/systemd/system | grep -c 'atelier-example-s3-')"
echo "journal_archived=$(ls /var/lib/atelier/example/retired | grep -c '^s3\.')"
echo "journal_vhost_gone=$(test -e /etc/nginx/sites-available/atelier-example-journal.conf && echo no || echo yes)"
atelier-provision plan --declaration /root/two.json > /tmp/p3 2>&1; echo "plan_two_after=$(head -n1 /tmp/p3)"
atelier-provision apply --declaration /root/three.json > /tmp/a4 2>&1; echo "apply_readded=$?"
echo "readded=$(getent passwd atelier-a-example_4 | cut -d: -f5)"
echo "old_still_retired=$(expiry atelier-a-example_3)"
atelier-provision plan --declaration /root/three.json > /tmp/p5 2>&1; echo "plan_after=$(head -n1 /tmp/p5)"

# Preproduction turned off: its vhosts go, and the host then matches the declaration.
pre_vhosts() { ls /etc/nginx/sites-available /etc/nginx/sites-enabled | grep -c -- '-pre\.conf$'; }
echo "pre_vhosts_before=$(pre_vhosts)"
atelier-provision apply --declaration /root/three-nopre.json > /tmp/a6 2>&1; echo "apply_nopre=$?"
echo "pre_vhosts_after=$(pre_vhosts)"
atelier-provision check --declaration /root/three-nopre.json > /tmp/c6 2>&1; echo "check_nopre=$?"

echo 'foreign' > /etc/systemd/system/atelier-example-foreign.conf
# Production serves a release: removal would take it offline, so it waits for the operator's word.
release=20260101T000000000Z-000001
mkdir -p /srv/www/www.example.org/.releases/web/$release
echo '<h1>live</h1>' > /srv/www/www.example.org/.releases/web/$release/index.html
ln -sfn .releases/web/$release /srv/www/www.example.org/web
atelier-provision remove --declaration /root/three.json > /tmp/r0 2>&1; echo "remove_published=$?"
sed 's/^/remove_published| /' /tmp/r0
named="collection (site_published): production of collection .* serves release $release"
echo "published_named=$(grep -c "$named" /tmp/r0)"
unit=/etc/systemd/system/atelier-example-s1-turn.socket
echo "published_untouched=$(test -e $unit && echo yes || echo no),$(ls /srv/www | grep -c retired)"
# A dry run is refused alike, and with the operator's word lists the steps and changes nothing.
atelier-provision remove --dry-run --declaration /root/three.json > /tmp/d0 2>&1
echo "dry_published=$?"
atelier-provision remove --dry-run --purge-published --declaration /root/three.json > /tmp/d1 2>&1
echo "dry_run=$?"
sed 's/^/dry_run| /' /tmp/d1
echo "dry_head=$(head -n1 /tmp/d1 | sed 's/^[0-9]* //')"
echo "dry_lists_unit=$(grep -cx "unlink $unit" /tmp/d1)"
echo "dry_untouched=$(test -e $unit && echo yes || echo no),$(ls /srv/www | grep -c retired),$(expiry atelier-a-example_1)"
atelier-provision remove --purge-published --declaration /root/three.json >/tmp/r1 2>&1
echo "remove=$?"
echo "removed_unit=$(grep -c " unlink $unit\$" /tmp/r1)"
sed 's/^/remove| /' /tmp/r1
echo "unit_gone=$(test -e /etc/systemd/system/atelier-example-s1-turn.socket && echo no || echo yes)"
echo "archived=$(ls /srv/www | grep -c '^www.example.org.retired-')"
echo "sites_archived=$(ls /var/lib/atelier/example | grep -c '^sites.retired-')"
echo "credential_left=$(cat /etc/atelier/example/credentials/ANTHROPIC_API_KEY)"
echo "identities_kept=$(getent passwd | grep -c '^atelier-a-example_')"
echo "locked=$(expiry atelier-a-example_1),$(expiry atelier-a-example_2),$(expiry atelier-a-example_4)"
for a in /tmp/a1 /tmp/a2 /tmp/a3 /tmp/a4; do sed "s#^#$a| #" $a | grep -v '^/tmp/a[0-9]| done' | grep -v '^/tmp/a[0-9]| unchanged' ; done
exit 0
"#;

#[test]
fn ordinals_are_allocated_retired_and_never_reused_and_remove_archives() {
    let bins = built_binaries_dir().expect("locating the built binaries");
    let example = std::fs::read_to_string(repo_root().join("deploy/examples/instance.json"))
        .expect("reading the example");
    let two: serde_json::Value = serde_json::from_str(&example).expect("example JSON");
    let mut three = two.clone();
    three["sites"]
        .as_array_mut()
        .expect("sites")
        .push(serde_json::json!({ "slug": "journal", "domain": "journal.example.org" }));
    let mut three_nopre = three.clone();
    three_nopre["serving"]["preprod"]["enabled"] = serde_json::Value::Bool(false);
    let run = SystemdBox::new()
        .copy(
            bins.join("atelier-provision"),
            "/usr/local/bin/atelier-provision",
        )
        .copy(
            repo_root().join("deploy/examples/operator-setup.sh"),
            "/root/operator-setup.sh",
        )
        .write("/root/two.json", two.to_string(), 0o644)
        .write("/root/three.json", three.to_string(), 0o644)
        .write("/root/three-nopre.json", three_nopre.to_string(), 0o644)
        .run(LIFECYCLE)
        .expect("booting systemd in a container");
    run.assert_success();
    let fact = |key: &str| run.fact(key).unwrap_or("<missing>");

    assert_eq!(fact("apply_two"), "0", "{run:?}");
    assert_eq!(fact("verify"), "0", "{run:?}");
    assert_eq!(fact("verify_line"), "collection web unpublished", "{run:?}");
    assert_eq!(fact("apply_three"), "0", "{run:?}");
    assert_eq!(fact("added"), "atelier site journal", "{run:?}");
    assert_eq!(fact("apply_removed"), "0", "{run:?}");
    assert_eq!(
        fact("removed_kept"),
        "atelier-a-example_3 expiry=1 shell=/usr/sbin/nologin",
        "{run:?}"
    );
    assert_eq!(fact("live_expiry"), "", "{run:?}");
    assert_eq!(fact("journal_units"), "0", "{run:?}");
    assert_eq!(fact("journal_archived"), "1", "{run:?}");
    assert_eq!(fact("journal_vhost_gone"), "yes", "{run:?}");
    assert_eq!(fact("plan_two_after"), "0 actions", "{run:?}");
    assert_eq!(fact("apply_readded"), "0", "{run:?}");
    assert_eq!(fact("readded"), "atelier site journal", "{run:?}");
    assert_eq!(fact("old_still_retired"), "1", "{run:?}");
    assert_eq!(fact("plan_after"), "0 actions", "{run:?}");

    assert_eq!(fact("pre_vhosts_before"), "6", "{run:?}");
    assert_eq!(fact("apply_nopre"), "0", "{run:?}");
    assert_eq!(fact("pre_vhosts_after"), "0", "{run:?}");
    assert_eq!(fact("check_nopre"), "0", "{run:?}");
    assert_eq!(fact("remove_published"), "3", "{run:?}");
    assert_eq!(fact("published_named"), "1", "{run:?}");
    assert_eq!(fact("published_untouched"), "yes,0", "{run:?}");
    assert_eq!(fact("dry_published"), "3", "{run:?}");
    assert_eq!(fact("dry_run"), "0", "{run:?}");
    assert_eq!(
        fact("dry_head"),
        "actions (dry run: nothing was changed)",
        "{run:?}"
    );
    assert_eq!(fact("dry_lists_unit"), "1", "{run:?}");
    assert_eq!(fact("dry_untouched"), "yes,0,", "{run:?}");
    assert_eq!(fact("remove"), "0", "{run:?}");
    assert_eq!(fact("removed_unit"), "1", "{run:?}");
    assert_eq!(fact("unit_gone"), "yes", "{run:?}");
    assert_eq!(fact("archived"), "1", "{run:?}");
    assert_eq!(fact("sites_archived"), "1", "{run:?}");
    assert_eq!(fact("credential_left"), "operator-value", "{run:?}");
    assert_eq!(fact("identities_kept"), "4", "{run:?}");
    assert_eq!(fact("locked"), "1,1,1", "{run:?}");
}

#[path = "provision/chat.rs"]
mod chat;
#[path = "provision/package.rs"]
mod package;
#[path = "provision/tls.rs"]
mod tls;
