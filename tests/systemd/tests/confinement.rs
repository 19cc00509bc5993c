//! Confined runs on a real PID 1: the provisioned example instance, sited started through its
//! socket in `systemd_scope` mode, turns run by PID 1 as the site's identity; the isolation
//! matrix tried from inside real door units; tampered doors refused by name before anything
//! starts; a shim started by hand refusing; `kill -9` of sited during a turn recovered on the
//! next boot; and the start latency of a door against its twin unit and the unconfined shim,
//! measured and printed.
//!
//! Each test boots its own box; boxes take turns machine-wide (`SystemdBox` holds a lock), so
//! two never share the two cores or the host's network (and the latencies are measured on a
//! quiet machine).

#![expect(
    clippy::expect_used,
    reason = "test code: a box that cannot boot must fail the test"
)]

use std::time::Duration;

use atelier_lab_model::mcp::{fingerprint, McpServer, RECORD_CANARY, SEARCH_TOOL};
use atelier_systemd_tests::{
    built_binaries_dir, real_agent, real_claude, repo_root, BoxRun, SystemdBox,
};
use serde_json::Value;

/// Every script starts with the operator's part, `apply`, and helpers for sited's API and
/// the door client run as the service user.
const PREAMBLE: &str = r#"
set -uo pipefail
bash /root/operator-setup.sh >/dev/null 2>&1
atelier-provision apply --declaration /root/instance.json > /tmp/apply 2>&1
echo "apply=$?"
sock=/run/atelier/example/sited.sock
base=http://sited/publication/site_builder
token=$(cat /etc/atelier/example/credentials/SERVICE_TOKEN)
actor='"actor":{"user_id":1,"username":"admin"}'
probe=/usr/local/bin/atelier-isolation-probe
ws1=/var/lib/atelier/example/sites/collection
ws2=/var/lib/atelier/example/sites/archive
api() { curl -sS --unix-socket $sock -H "Authorization: Bearer $token" -H 'Content-Type: application/json' "$@"; }
client() { runuser -u atelier-example -- /usr/local/bin/atelier-door-client "$@"; }
create_site() { # slug domain [template]
  api -o /tmp/create-$1 -w "create_$1=%{http_code}\n" -d "{\"slug\":\"$1\",\"name\":\"$1\",\"domain\":\"$2\",\"template\":\"${3:-basic}\",$actor}" $base/v1/sites
}
start_session() { # slug prompt-json-string -> prints the id
  api -o /tmp/start -w '%{http_code}' -d "{\"prompt\":$2,$actor}" $base/v1/sites/$1/sessions > /tmp/start-status
  sed -n 's/.*"session_id":"\([^"]*\)".*/\1/p' /tmp/start
}
follow() { # id -> the SSE stream until turn_end, as data lines
  timeout 60 curl -sS -N --unix-socket $sock -H "Authorization: Bearer $token" "$base/v1/sessions/$1/events?after=-1" | sed -n 's/^data: //p'
}
git_in() { git -c safe.directory='*' -C "$@"; }
sited_log() { journalctl -b -u atelier-sited@example.service -o cat --no-pager; }
door_log() { journalctl -b -u "atelier-example-s$1-*" -o cat --no-pager | grep -v mount_setattr; }
"#;

/// A box with the provisioner, sited, the shim, the gate, the scripted agent installed as
/// the declaration's Claude Code, this crate's probe and door client, and the example.
fn confined_box() -> SystemdBox {
    let bins = built_binaries_dir().expect("locating the built binaries");
    SystemdBox::new()
        .install_binaries(
            &bins,
            &[
                "atelier-provision",
                "atelier-sited",
                "atelier-shim",
                "atelier-gate",
            ],
        )
        // The scripted stand-in, for what no real CLI shows on demand: a hang to kill -9, the
        // same exact edits in two modes, a turn that must not start (the real CLI: below).
        .copy(bins.join("atelier-test-agent"), "/usr/local/bin/claude")
        .copy(
            env!("CARGO_BIN_EXE_atelier-isolation-probe"),
            "/usr/local/bin/atelier-isolation-probe",
        )
        .copy(
            env!("CARGO_BIN_EXE_atelier-door-client"),
            "/usr/local/bin/atelier-door-client",
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

fn run_in_box(script: &str, timeout: Duration) -> BoxRun {
    let run = confined_box()
        .timeout(timeout)
        .run(&format!("{PREAMBLE}\n{script}"))
        .expect("booting systemd in a container");
    run.assert_success();
    assert_eq!(run.fact("apply"), Some("0"), "{run:?}");
    run
}

fn fact<'r>(run: &'r BoxRun, key: &str) -> &'r str {
    run.fact(key).unwrap_or("<missing>")
}

/// The output lines that start with `prefix| `, without it.
fn tagged<'r>(run: &'r BoxRun, prefix: &str) -> Vec<&'r str> {
    let tag = format!("{prefix}| ");
    run.output
        .lines()
        .filter_map(|l| l.strip_prefix(tag.as_str()))
        .collect()
}

/// The lab model's record of the requests it received (printed under `request`), in order.
fn recorded_requests(run: &BoxRun) -> Vec<Value> {
    tagged(run, "request")
        .into_iter()
        .map(|l| serde_json::from_str(l).expect("a recorded request"))
        .collect()
}

/// The names of the tools a recorded model request offered the model, on either wire (a chat
/// completion's `function.name`, a Messages request's `name`).
/// The tools a model request shows the model, by name. A tool sent with `defer_loading` is
/// not shown (Claude Code sends a reserved placeholder so).
fn offered_tools(call: &Value) -> Vec<&str> {
    call["body"]["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter(|t| t["defer_loading"] != true)
                .filter_map(|t| t["function"]["name"].as_str().or(t["name"].as_str()))
                .collect()
        })
        .unwrap_or_default()
}

/// Asserts that none of `canaries` is in the body of the model request `call`, naming every
/// one that is.
fn assert_nothing_planted(call: &Value, canaries: &[&str]) {
    let body = call["body"].to_string();
    let surfaced: Vec<&str> = canaries
        .iter()
        .copied()
        .filter(|canary| body.contains(canary))
        .collect();
    assert!(
        surfaced.is_empty(),
        "{surfaced:?} reached the model: {body}"
    );
}

/// The text of every user message of a chat-completions request body.
fn user_texts(body: &Value) -> Vec<&str> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| match &m["content"] {
            Value::String(text) => vec![text.as_str()],
            Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
            _ => Vec::new(),
        })
        .collect()
}

/// The session events a script printed under `prefix`, each body with what differs between
/// two runs of the same prompt (times, the driver's token, the workspace's path) replaced.
fn normalized_events(run: &BoxRun, prefix: &str, workspace: &str) -> Vec<Value> {
    events(run, prefix)
        .into_iter()
        .map(|mut body| {
            if let Some(object) = body.as_object_mut() {
                for (key, stand_in) in [("resumeToken", "<token>"), ("durationMs", "<ms>")] {
                    if object.contains_key(key) {
                        object.insert(key.into(), stand_in.into());
                    }
                }
                if let Some(Value::String(summary)) = object.get_mut("summary") {
                    *summary = summary.replace(workspace, "<workspace>");
                }
            }
            body
        })
        .collect()
}

/// The bodies of the session events a script printed under `prefix`, in order.
fn events(run: &BoxRun, prefix: &str) -> Vec<Value> {
    tagged(run, prefix)
        .into_iter()
        .map(|line| {
            let event: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{prefix}: {line:?} is not an event: {e}\n{run:?}"));
            event["body"].clone()
        })
        .collect()
}

/// Turn 1 writes a file through the scripted agent under PID 1; the follow-up is turn 2;
/// then sited is restarted in `none` mode (a development drop-in) and the same prompt runs on
/// the other site, for the comparison.
const TURN: &str = r#"
create_site collection www.example.org
prompt='"I will write the probe.\nwrite src/probe.txt written by the agent"'
id=$(start_session collection "$prompt")
echo "start=$(cat /tmp/start-status)"
follow "$id" | sed 's/^/systemd| /'
echo "probe_owner=$(stat -c %U $ws1/src/probe.txt)"
echo "probe_text=$(cat $ws1/src/probe.txt)"
echo "commit1=$(git_in $ws1 log -1 --format=%s)"
echo "commit1_files=$(git_in $ws1 show --name-only --format= HEAD | tr '\n' ',')"
echo "live_after_turn1=$(systemctl list-units --all --no-legend --plain 'atelier-example-s1-*@*.service' | wc -l)"
echo "site_state=$(api $base/v1/sites/collection | grep -o '"session":{[^}]*}')"

api -o /tmp/msg -w 'message=%{http_code}\n' -d "{\"message\":\"peek-parent\\nwrite src/second.txt the second turn\",$actor}" $base/v1/sessions/$id/messages
timeout 60 curl -sS -N --unix-socket $sock -H "Authorization: Bearer $token" "$base/v1/sessions/$id/events?after=5" | sed -n 's/^data: //p' | sed 's/^/second| /'
echo "second_owner=$(stat -c %U $ws1/src/second.txt)"
echo "commit2=$(git_in $ws1 log -1 --format=%s)"

# The same prompt in none mode, on the other site: sited spawns the shim itself.
systemctl stop atelier-sited@example.service
mkdir -p /etc/systemd/system/atelier-sited@example.service.d
cat > /etc/systemd/system/atelier-sited@example.service.d/50-none.conf <<'UNIT'
[Service]
ExecStart=
ExecStart=/usr/bin/atelier-sited --instance example --deployment development --agent-confinement none --agent-state-root /var/lib/atelier/example/unconfined-agents
ReadWritePaths=/var/lib/atelier/example/unconfined-agents
UNIT
install -d -o atelier-example -g atelier-example -m 0700 /var/lib/atelier/example/unconfined-agents
systemctl daemon-reload
create_site archive archive.example.net
id2=$(start_session archive "$prompt")
echo "none_start=$(cat /tmp/start-status)"
follow "$id2" | sed 's/^/none| /'
echo "none_owner=$(stat -c %U $ws2/src/probe.txt)"
echo "none_commit=$(git_in $ws2 log -1 --format=%s)"
echo "none_commit_files=$(git_in $ws2 show --name-only --format= HEAD | tr '\n' ',')"
sited_log | tail -n 30 | sed 's/^/sited-log| /'
exit 0
"#;

#[test]
fn a_turn_on_real_systemd_runs_as_the_site_identity_and_streams_as_none_mode_does() {
    let run = run_in_box(TURN, Duration::from_secs(240));
    assert_eq!(fact(&run, "create_collection"), "201", "{run:?}");
    assert_eq!(fact(&run, "start"), "201", "{run:?}");

    let confined = normalized_events(&run, "systemd", "/var/lib/atelier/example/sites/collection");
    let types: Vec<&str> = confined
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("<none>"))
        .collect();
    assert_eq!(
        types,
        [
            "turn_start",
            "text",
            "tool",
            "result",
            "file_change",
            "turn_end"
        ],
        "{run:?}"
    );
    assert_eq!(confined[5]["state"], "idle", "{run:?}");
    assert_eq!(
        confined[4]["files"],
        serde_json::json!(["src/probe.txt"]),
        "{run:?}"
    );
    // PID 1 ran the agent as the site's identity, not as sited's service user.
    assert_eq!(fact(&run, "probe_owner"), "atelier-a-example_1", "{run:?}");
    assert_eq!(fact(&run, "probe_text"), "written by the agent", "{run:?}");
    let commit = fact(&run, "commit1");
    assert!(
        commit.starts_with("agent: session ") && commit.ends_with(" turn 1"),
        "{run:?}"
    );
    assert_eq!(fact(&run, "commit1_files"), "src/probe.txt,", "{run:?}");

    // The site is free afterwards: no run unit is left, the site is idle, a second turn works.
    assert_eq!(fact(&run, "live_after_turn1"), "0", "{run:?}");
    assert!(
        fact(&run, "site_state").contains("\"state\":\"idle\""),
        "{run:?}"
    );
    assert_eq!(fact(&run, "message"), "200", "{run:?}");
    let second = tagged(&run, "second");
    assert!(
        second.last().is_some_and(
            |l| l.contains("\"type\":\"turn_end\"") && l.contains("\"state\":\"idle\"")
        ),
        "{run:?}"
    );
    assert_eq!(fact(&run, "second_owner"), "atelier-a-example_1", "{run:?}");
    // The agent runs as the shim's user, yet cannot reach into the shim that speaks for it: a
    // process it may not trace is not even shown to it (ProtectProc=invisible).
    assert!(
        second
            .iter()
            .any(|l| l.contains("\"parent mem: No such file or directory (os error 2)\"")),
        "{run:?}"
    );
    assert!(fact(&run, "commit2").ends_with(" turn 2"), "{run:?}");

    // The same prompt through none mode: the same events, but for the unconfined announcement.
    assert_eq!(fact(&run, "none_start"), "201", "{run:?}");
    let mut unconfined = normalized_events(&run, "none", "/var/lib/atelier/example/sites/archive");
    let announcement = unconfined
        .iter()
        .position(|e| {
            e["type"] == "text"
                && e["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("[atelier] This turn runs unconfined"))
        })
        .unwrap_or_else(|| panic!("none mode announces itself: {run:?}"));
    unconfined.remove(announcement);
    assert_eq!(confined, unconfined, "{run:?}");
    assert_eq!(fact(&run, "none_owner"), "atelier-example", "{run:?}");
    let none_commit = fact(&run, "none_commit");
    assert!(
        none_commit.starts_with("agent: session ") && none_commit.ends_with(" turn 1"),
        "{run:?}"
    );
    assert_eq!(fact(&run, "none_commit_files"), "src/probe.txt,", "{run:?}");
}

/// Site 2's turn door holds a `/dev/shm` file and a SysV segment in a long run; site 1's turn
/// door runs the matrix, and its build door too (it runs what the turn wrote); site 1's git
/// door tries the gate; its build door tries the repository; then the same matrix runs as root
/// outside any unit, to prove each target is there to be reached.
const ISOLATION: &str = r#"
install -o root -g root -m 4755 /usr/bin/id /usr/local/bin/atelier-suid-id
echo "suid_as_nobody=$(runuser -u nobody -- /usr/local/bin/atelier-suid-id -u)"
echo "site1_uid=$(id -u atelier-a-example_1)"
# A database's directory, which every door masks when it exists.
mkdir -p /var/lib/mysql && echo rows > /var/lib/mysql/ibdata1
# Another instance's configuration: its declaration copy is readable by all, and names its
# sites and their domains.
mkdir -p /etc/atelier/other && echo '{"sites":{"elsewhere":{}}}' > /etc/atelier/other/instance.json
$probe listen --tcp-port 18081 --abstract-name atelier-iso-host > /tmp/listen.out 2>&1 &
for _ in $(seq 1 100); do grep -q listening /tmp/listen.out && break; sleep 0.05; done
create_site collection www.example.org
create_site archive archive.example.net

client run --socket /run/atelier/example/s2-turn.sock --door turn -- \
  $probe hold --marker atelier-iso-marker-s2 --shm atelier-iso-shm --ipc-key 1518211408 > /tmp/hold.out 2>/tmp/hold.err &
holder=$!
for _ in $(seq 1 200); do grep -q '^held' /tmp/hold.out && break; sleep 0.05; done
sed 's/^/hold| /' /tmp/hold.out
other_pid=$(sed -n 's/^pid=//p' /tmp/hold.out)
echo "other_pid=$other_pid"
echo "other_pid_user=$(ps -o user= -p "$other_pid")"

common=(--host-tcp-port 18081 --host-abstract atelier-iso-host --sited-socket $sock
  --other-gate /run/atelier/example/egress/s2/turn.sock /run/atelier/example/egress/s2/mcp.sock /run/atelier/example/egress/s2/build.sock
  --host-socket /run/dbus/system_bus_socket /run/systemd/private /run/systemd/journal/stdout /run/systemd/notify
    /run/atelier/example/s2-turn.sock /run/atelier/example/s1-git.sock
  --other-workspace $ws2 --own-repository $ws1/.git --own-builder $ws1/.builder
  --masked-dir /etc/atelier/example /etc/atelier/other /srv/atelier_audit/example /var/lib/mysql /var/log /proc/sys /root --other-pid "$other_pid" --other-marker atelier-iso-marker-s2
  --vhost-dir /etc/nginx/sites-available --unit-dir /etc/systemd/system
  --other-shm atelier-iso-shm --other-ipc-key 1518211408 --setuid /usr/local/bin/atelier-suid-id
  --own-forward-port 3128)
args=("${common[@]}" --own-socket /run/atelier-egress/turn.sock /run/atelier-egress/mcp.sock)
client run --socket /run/atelier/example/s1-turn.sock --door turn -- $probe matrix "${args[@]}" 2>&1 | sed 's/^/turn| /'
# The build door runs what the turn wrote: the same matrix, with its own gate socket.
client run --socket /run/atelier/example/s1-build.sock --door build -- $probe matrix "${common[@]}" \
  --own-socket /run/atelier-egress/build.sock 2>&1 | sed 's/^/buildm| /'
echo "other_workspace_probes=$(ls -a $ws2 | grep -c isolation-probe)"
client run --socket /run/atelier/example/s1-git.sock --door git -- $probe git-door \
  --gate-socket /run/atelier-egress/turn.sock /run/atelier-egress/build.sock /run/atelier-egress/mcp.sock \
    /run/atelier/example/egress/s1/turn.sock /run/atelier/example/egress/s1/build.sock /run/atelier/example/egress/s1/mcp.sock \
  --forward-port 3128 3129 2>&1 | sed 's/^/git| /'
client run --socket /run/atelier/example/s1-build.sock --door build -- $probe build-door \
  --repository $ws1/.git 2>&1 | sed 's/^/build| /'
echo "hold_still_running=$(ps -o user= -p "$other_pid")"

# Outside any unit, as root: the same targets are there to be reached.
(cd /tmp && $probe matrix "${args[@]}") 2>&1 | sed 's/^/host| /'
rm -f $ws2/isolation-probe-*
kill $holder; wait $holder
exit 0
"#;

/// The cases of the matrix, the door that runs them, whether root outside any unit reaches the
/// same target (`true`: the case's target exists and is reachable unconfined, so the refusal
/// inside is the unit's doing), and whether the build door, which runs what the turn wrote,
/// must refuse it too (all the turn's cases but the repository's metadata, which a build reads:
/// `build_repository_write` holds it to reading).
const MATRIX: [(&str, &str, bool, bool); 20] = [
    ("host_loopback_tcp", "turn", true, true),
    ("host_abstract_socket", "turn", true, true),
    ("sited_socket", "turn", true, true),
    ("other_site_gate_socket", "turn", true, true),
    ("host_run_sockets", "turn", true, true),
    ("other_site_workspace_write", "turn", true, true),
    ("other_site_workspace_read", "turn", true, true),
    ("own_repository_metadata", "turn", true, false),
    ("builder_rename", "turn", true, true),
    ("other_site_process", "turn", true, true),
    // Site 2's /dev/shm and IPC namespace are its unit's own: root outside does not see them
    // either; the hold's controls prove they exist.
    ("other_site_shm_file", "turn", false, true),
    ("other_site_sysv_ipc", "turn", false, true),
    // Root is uid 0 already; `suid_as_nobody` is this case's control.
    ("setuid_binary", "turn", false, true),
    ("host_sysfs", "turn", true, true),
    ("masked_dirs", "turn", true, true),
    // What names every site of the host: another site's name and domains are there.
    ("web_server_vhosts", "turn", true, true),
    ("unit_files", "turn", true, true),
    ("git_door_gate_socket", "git", false, false),
    ("git_door_gate_forward", "git", false, false),
    // The build reads the repository (its control) but writes none of it.
    ("build_repository_write", "build", false, false),
];

/// The controls that must pass inside the units, each proving the probe's attempt can work, and
/// whether the build door's run of the matrix must pass it too.
const CONTROLS: [(&str, &str, bool); 8] = [
    ("own_forward_tcp", "turn", true),
    ("own_gate_socket", "turn", true),
    ("own_workspace_write", "turn", true),
    ("own_process_visible", "turn", true),
    ("no_new_privs", "turn", true),
    ("hold_shm_file", "hold", false),
    ("hold_sysv_ipc", "hold", false),
    ("build_repository_read", "build", false),
];

/// The outcomes (`blocked`, `OPEN`, `ok`, `FAILED`) printed for `name` under `prefix`.
fn outcomes<'r>(run: &'r BoxRun, prefix: &str, kind: &str, name: &str) -> Vec<&'r str> {
    let head = format!("{kind} {name} ");
    tagged(run, prefix)
        .into_iter()
        .filter_map(|l| l.strip_prefix(head.as_str()))
        .collect()
}

#[test]
fn isolation_matrix_inside_real_turn_and_git_units_refuses_every_case() {
    let run = run_in_box(ISOLATION, Duration::from_secs(240));
    assert_eq!(fact(&run, "create_collection"), "201", "{run:?}");
    assert_eq!(fact(&run, "create_archive"), "201", "{run:?}");
    assert_eq!(
        fact(&run, "suid_as_nobody"),
        "0",
        "the planted setuid works: {run:?}"
    );
    assert_eq!(
        fact(&run, "other_pid_user"),
        "atelier-a-example_2",
        "site 2's run is live as its own identity: {run:?}"
    );
    assert_eq!(
        fact(&run, "hold_still_running"),
        "atelier-a-example_2",
        "site 2's run outlived the matrix: {run:?}"
    );
    assert!(
        tagged(&run, "turn").contains(&format!("uid={}", fact(&run, "site1_uid")).as_str()),
        "the matrix ran as site 1's identity: {run:?}"
    );

    let mut failures = Vec::new();
    for (name, door, reachable_outside, _) in MATRIX {
        let inside = outcomes(&run, door, "case", name);
        if inside.is_empty() || inside.iter().any(|o| !o.starts_with("blocked ")) {
            failures.push(format!("{name} ({door} door): {inside:?}"));
        }
        if reachable_outside {
            let outside = outcomes(&run, "host", "case", name);
            if outside.len() != 1 || !outside[0].starts_with("OPEN ") {
                failures.push(format!(
                    "{name}: outside any unit it should be reachable: {outside:?}"
                ));
            }
        }
    }
    for (name, ..) in MATRIX.into_iter().filter(|case| case.3) {
        let inside = outcomes(&run, "buildm", "case", name);
        if inside.is_empty() || inside.iter().any(|o| !o.starts_with("blocked ")) {
            failures.push(format!("{name} (build door): {inside:?}"));
        }
    }
    for (name, ..) in CONTROLS.into_iter().filter(|control| control.2) {
        let seen = outcomes(&run, "buildm", "control", name);
        if seen.is_empty() || seen.iter().any(|o| !o.starts_with("ok ")) {
            failures.push(format!("control {name} (build door): {seen:?}"));
        }
    }
    for (name, prefix, _) in CONTROLS {
        let seen = outcomes(&run, prefix, "control", name);
        if seen.is_empty() || seen.iter().any(|o| !o.starts_with("ok ")) {
            failures.push(format!("control {name} ({prefix}): {seen:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "failed cases:\n{}\n{run:?}",
        failures.join("\n")
    );
    assert_eq!(
        fact(&run, "other_workspace_probes"),
        "0",
        "site 2's workspace is unchanged: {run:?}"
    );
    for door in ["turn", "git", "build", "buildm"] {
        assert!(
            tagged(&run, door).contains(&"door_exit=0"),
            "the {door} probe ran to its end: {run:?}"
        );
    }
}

/// Each tampering is made, a session is asked for, the tampering is undone; PID 1's count of
/// accepted connections on the door socket and its journal show whether anything started.
const TAMPER: &str = r#"
create_site collection www.example.org
dropin=/etc/systemd/system/atelier-example-s1-turn@.service.d
turn_starts() { journalctl --sync; journalctl -b -o cat --no-pager | grep -c 'Starting atelier-example-s1-turn@'; }
accepted() { systemctl show -P NAccepted atelier-example-s1-turn.socket; }
attempt() { # name
  local starts log_lines accepted_before
  starts=$(turn_starts); accepted_before=$(accepted); log_lines=$(sited_log | wc -l)
  api -o /tmp/t-$1 -w "$1_status=%{http_code}\n" -d "{\"prompt\":\"write src/tampered-$1.txt must not run\",$actor}" $base/v1/sites/collection/sessions
  echo "$1_body=$(cat /tmp/t-$1)"
  sleep 0.5
  echo "$1_runs_started=$(( $(turn_starts) - starts ))"
  echo "$1_accepted=$(( $(accepted) - accepted_before ))"
  echo "$1_file=$(test -e $ws1/src/tampered-$1.txt && echo present || echo absent)"
  sited_log | tail -n +$((log_lines + 1)) | sed "s/^/$1-log| /"
}

mkdir -p $dropin
printf '[Service]\nPrivateNetwork=no\n' > $dropin/50-tamper.conf; systemctl daemon-reload
attempt private_network
rm -r $dropin; systemctl daemon-reload

mkdir -p $dropin
printf '[Service]\nUser=atelier-a-example_2\n' > $dropin/50-tamper.conf; systemctl daemon-reload
attempt user
rm -r $dropin; systemctl daemon-reload

systemctl stop atelier-example-s1-turn.socket
mv /etc/systemd/system/atelier-example-s1-turn.socket /root/; systemctl daemon-reload
attempt missing_socket
mv /root/atelier-example-s1-turn.socket /etc/systemd/system/; systemctl daemon-reload
systemctl start atelier-example-s1-turn.socket

# The turn HOME is a closed world: a file planted at its top is configuration a turn would read.
home=/var/lib/atelier/example/agents/s1/turn
echo "[credential]" > $home/.bashrc
attempt home_planted
rm $home/.bashrc
chmod 0777 $home/.config
attempt home_config_writable
chmod 0755 $home/.config

# Undone, the same door runs a turn again: the refusals were the tampering's.
id=$(start_session collection '"write src/restored.txt after the tampering"')
echo "restored_start=$(cat /tmp/start-status)"
follow "$id" | tail -n 1 | sed 's/^/restored| /'
echo "restored_owner=$(stat -c %U $ws1/src/restored.txt)"

# Tampered again after a turn ran: sited has the agent's probe answer by now, and the session's
# start is refused all the same, by confinement admission.
mkdir -p $dropin
printf '[Service]\nPrivateNetwork=no\n' > $dropin/50-tamper.conf; systemctl daemon-reload
starts=$(turn_starts); accepted_before=$(accepted); log_lines=$(sited_log | wc -l)
id=$(start_session collection '"write src/tampered-warm.txt must not run"')
echo "warm_status=$(cat /tmp/start-status)"
echo "warm_body=$(cat /tmp/start)"
[ -n "$id" ] && follow "$id" | sed 's/^/warm| /'
echo "warm_runs_started=$(( $(turn_starts) - starts ))"
echo "warm_accepted=$(( $(accepted) - accepted_before ))"
echo "warm_file=$(test -e $ws1/src/tampered-warm.txt && echo present || echo absent)"
sited_log | tail -n +$((log_lines + 1)) | sed "s/^/warm-log| /"
rm -r $dropin; systemctl daemon-reload

# The build door tampered with: the build's start is refused, and no build record is written.
build_dropin=/etc/systemd/system/atelier-example-s1-build@.service.d
mkdir -p $build_dropin
printf '[Service]\nPrivateNetwork=no\n' > $build_dropin/50-tamper.conf; systemctl daemon-reload
api -o /tmp/b-tamper -w "build_status=%{http_code}\n" -d "{$actor}" $base/v1/sites/collection/build
echo "build_body=$(cat /tmp/b-tamper)"
echo "build_records=$(ls $ws1/.builder/builds 2>/dev/null | wc -l)"

# sited started again with the build door still tampered: its boot check names the door and
# the property in the journal, at error priority, before any run is asked for.
err_lines=$(journalctl -b -u atelier-sited@example.service -p err -o cat --no-pager | wc -l)
log_lines=$(sited_log | wc -l)
systemctl restart atelier-sited@example.service
for _ in $(seq 100); do
  sited_log | tail -n +$((log_lines + 1)) | grep -q "boot check of every site's doors done" && break
  sleep 0.1
done
journalctl -b -u atelier-sited@example.service -p err -o cat --no-pager \
  | tail -n +$((err_lines + 1)) | sed "s/^/boot-err| /"
rm -r $build_dropin; systemctl daemon-reload
exit 0
"#;

#[test]
fn tampered_doors_are_refused_naming_the_property_before_anything_starts() {
    let run = run_in_box(TAMPER, Duration::from_secs(240));
    assert_eq!(fact(&run, "create_collection"), "201", "{run:?}");
    // Each case and what its refusal's detail must name.
    let cases = [
        ("private_network", ": PrivateNetwork is "),
        ("user", ": User is "),
        ("missing_socket", ": LoadState is "),
        ("home_planted", "the turn HOME: "),
        ("home_config_writable", "turn/.config is uid 0 mode 777"),
    ];
    let mut failures = Vec::new();
    for (name, property) in cases {
        let mut check = |what: &str, ok: bool| {
            if !ok {
                failures.push(format!("{name}: {what}"));
            }
        };
        check(
            "answered 503",
            fact(&run, &format!("{name}_status")) == "503",
        );
        let body: Value =
            serde_json::from_str(fact(&run, &format!("{name}_body"))).unwrap_or(Value::Null);
        check(
            "the reason is confinement.unit_nonconformant",
            body["reason"] == "confinement.unit_nonconformant",
        );
        check(
            "no run unit started",
            fact(&run, &format!("{name}_runs_started")) == "0",
        );
        if name != "missing_socket" {
            check(
                "the door socket accepted nothing",
                fact(&run, &format!("{name}_accepted")) == "0",
            );
        }
        check(
            "the agent wrote nothing",
            fact(&run, &format!("{name}_file")) == "absent",
        );
        check(
            &format!("the refusal names {property:?}"),
            body["detail"]
                .as_str()
                .is_some_and(|d| d.contains(property)),
        );
    }
    assert!(
        failures.is_empty(),
        "failed cases:\n{}\n{run:?}",
        failures.join("\n")
    );
    assert_eq!(fact(&run, "restored_start"), "201", "{run:?}");
    let restored = tagged(&run, "restored");
    assert!(
        restored.len() == 1
            && restored[0].contains("\"type\":\"turn_end\"")
            && restored[0].contains("\"state\":\"idle\""),
        "{run:?}"
    );
    assert_eq!(
        fact(&run, "restored_owner"),
        "atelier-a-example_1",
        "{run:?}"
    );

    // A start refused by confinement admission: 503 naming the tampered property.
    let refused_at_start = |name: &str| {
        assert_eq!(fact(&run, &format!("{name}_status")), "503", "{run:?}");
        let body: Value =
            serde_json::from_str(fact(&run, &format!("{name}_body"))).unwrap_or(Value::Null);
        assert_eq!(body["reason"], "confinement.unit_nonconformant", "{run:?}");
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(": PrivateNetwork is "), "{run:?}");
    };
    // After a turn, with the driver's probe answered: refused at the session's start all the
    // same (confinement admission comes before anything is held), and nothing started.
    refused_at_start("warm");
    assert_eq!(fact(&run, "warm_runs_started"), "0", "{run:?}");
    assert_eq!(fact(&run, "warm_accepted"), "0", "{run:?}");
    assert_eq!(fact(&run, "warm_file"), "absent", "{run:?}");

    // A build's start is refused the same way, before its record exists.
    refused_at_start("build");
    assert_eq!(fact(&run, "build_records"), "0", "{run:?}");

    // Restarted, sited names the tampered door at boot, and only that one.
    let boot = tagged(&run, "boot-err");
    let checks: Vec<&&str> = boot.iter().filter(|l| l.contains("boot check: ")).collect();
    assert_eq!(checks.len(), 1, "{run:?}");
    assert!(
        checks[0].contains(": PrivateNetwork is ") && checks[0].contains("every build run"),
        "{run:?}"
    );
}

/// A door tampered with before the first turn: the session's start is refused.
const TAMPER_LOGGED: &str = r#"
create_site collection www.example.org
dropin=/etc/systemd/system/atelier-example-s1-turn@.service.d
mkdir -p $dropin
printf '[Service]\nPrivateNetwork=no\n' > $dropin/50-tamper.conf; systemctl daemon-reload
log_lines=$(sited_log | wc -l)
start_session collection '"write src/tampered.txt must not run"' >/dev/null
echo "status=$(cat /tmp/start-status)"
sited_log | tail -n +$((log_lines + 1)) | sed "s/^/log| /"
exit 0
"#;

/// A `confinement.*` 503 at a session's start is in sited's journal with the property it
/// names, not only in the response's `detail` (which the engine never shows).
#[test]
fn a_refused_session_start_is_logged_naming_the_property() {
    let run = run_in_box(TAMPER_LOGGED, Duration::from_secs(180));
    assert_eq!(fact(&run, "create_collection"), "201", "{run:?}");
    assert_eq!(fact(&run, "status"), "503", "{run:?}");
    assert!(
        tagged(&run, "log")
            .iter()
            .any(|l| l.contains("confinement.unit_nonconformant") || l.contains("PrivateNetwork")),
        "sited's journal names the refusal and the property: {run:?}"
    );
}

/// The shim as the site's identity, started by hand in the box's own network namespace with
/// the turn unit's environment; then specs that set a key the turn unit fixes, through the
/// real door.
const BY_HAND: &str = r#"
create_site collection www.example.org
unit_env=(--shim-env ATELIER_DOOR=turn --shim-env ATELIER_UNIT_WORKDIR=$ws1
  --shim-env HOME=/var/lib/atelier/example/agents/s1/turn
  --shim-env ATELIER_GATE_SOCKET=/run/atelier-egress/turn.sock --shim-env ATELIER_MCP_SOCKET=/run/atelier-egress/mcp.sock)
by_hand() { # name, then door-client spec arguments
  local name=$1; shift
  runuser -u atelier-a-example_1 -- /usr/local/bin/atelier-door-client shim --shim /usr/bin/atelier-shim \
    "${unit_env[@]}" "$@" -- /usr/bin/touch /tmp/ran-$name > /tmp/$name.out 2>/tmp/$name.err
  sed "s/^/$name| /" /tmp/$name.out /tmp/$name.err
  echo "${name}_ran=$(test -e /tmp/ran-$name && echo yes || echo no)"
}
by_hand own_namespace
by_hand other_identity --host-netns 'net:[4026531999]'

through_door() { # name, then door-client spec arguments
  local name=$1; shift
  client run --socket /run/atelier/example/s1-turn.sock --door turn "$@" -- /usr/bin/touch $ws1/ran-$name > /tmp/$name.out 2>/tmp/$name.err
  sed "s/^/$name| /" /tmp/$name.out /tmp/$name.err
  unit=$(sed -n 's/^door_unit=//p' /tmp/$name.err)
  for _ in $(seq 1 100); do [ "$(systemctl is-active "$unit")" = active ] || break; sleep 0.05; done
  journalctl --sync
  journalctl -b -u "$unit" -o cat --no-pager | sed "s/^/$name-unit| /"
  echo "${name}_ran=$(test -e $ws1/ran-$name && echo yes || echo no)"
}
through_door spec_home --unchecked --env HOME=/tmp
through_door spec_xdg_config --env XDG_CONFIG_HOME=/tmp
through_door spec_plain
exit 0
"#;

#[test]
fn a_shim_started_by_hand_exits_78_and_a_spec_setting_a_fixed_key_exits_65() {
    let run = run_in_box(BY_HAND, Duration::from_secs(180));
    assert_eq!(fact(&run, "create_collection"), "201", "{run:?}");
    // Outside a private network namespace: refused after the spec, nothing run, exit 78.
    for (name, why) in [
        (
            "own_namespace",
            "this unit shares the daemon's network namespace",
        ),
        ("other_identity", "this unit can see a host interface"),
    ] {
        let lines = tagged(&run, name);
        assert!(lines.contains(&"shim_exit=78"), "{name}: {run:?}");
        assert!(
            lines.iter().any(|l| l.starts_with("door_exit=lost:")),
            "{name}: no exit record: {run:?}"
        );
        assert!(
            lines.iter().any(
                |l| l.starts_with("[confinement] network namespace not in effect: ")
                    && l.contains(why)
            ),
            "{name}: {run:?}"
        );
        assert_eq!(fact(&run, &format!("{name}_ran")), "no", "{name}: {run:?}");
    }
    // Through the real door, as the unit sees it: exit 65, one line naming the key, nothing run.
    for (name, key) in [
        ("spec_home", "HOME"),
        ("spec_xdg_config", "XDG_CONFIG_HOME"),
    ] {
        let unit = tagged(&run, &format!("{name}-unit"));
        assert!(
            unit.iter().any(|l| l.contains("status=65")),
            "{name}: the unit's shim exits 65: {run:?}"
        );
        assert!(
            unit.iter()
                .any(|l| l.starts_with("[confinement] shim: refused")
                    && l.contains(key)
                    && l.ends_with("Nothing was run.")),
            "{name}: {run:?}"
        );
        assert!(
            tagged(&run, name)
                .iter()
                .any(|l| l.starts_with("door_exit=lost:")),
            "{name}: {run:?}"
        );
        assert_eq!(fact(&run, &format!("{name}_ran")), "no", "{name}: {run:?}");
    }
    // The same door with a spec that sets no fixed key runs the program.
    assert!(
        tagged(&run, "spec_plain").contains(&"door_exit=0"),
        "{run:?}"
    );
    assert_eq!(fact(&run, "spec_plain_ran"), "yes", "{run:?}");
}

/// A turn whose agent writes a file and hangs; sited is killed with SIGKILL while it runs.
const KILLED: &str = r#"
create_site collection www.example.org
id=$(start_session collection '"write src/before-kill.txt written before sited died\nhang"')
echo "start=$(cat /tmp/start-status)"
for _ in $(seq 1 200); do [ -e $ws1/src/before-kill.txt ] && break; sleep 0.05; done
run_unit=$(systemctl list-units --no-legend --plain --state=active 'atelier-example-s1-turn@*.service' | awk '{print $1}' | head -n1)
echo "run_unit=$run_unit"
echo "agent_before=$(pgrep -u atelier-a-example_1 -c -f /usr/local/bin/claude)"
for _ in $(seq 1 100); do
  systemctl show -P StatusText atelier-sited@example.service | grep -q '1 turn' && break
  sleep 0.05
done
echo "status_during=$(systemctl show -P StatusText atelier-sited@example.service)"
# The engine's client follows the turn across the kill: it must reconnect by itself.
atelierctl --engine-env /etc/atelier/example/engine.env.fragment --token-file /etc/atelier/example/credentials/SERVICE_TOKEN \
  --actor-id 1 --actor-name admin session follow "$id" --json > /tmp/followed.jsonl 2> /tmp/followed.err &
follower=$!
for _ in $(seq 1 100); do [ -s /tmp/followed.jsonl ] && break; sleep 0.05; done
sited_pid=$(systemctl show -P MainPID atelier-sited@example.service)
kill -9 "$sited_pid"
for _ in $(seq 1 200); do
  state=$(systemctl show -P ActiveState "$run_unit")
  [ "$state" = active ] || [ "$state" = deactivating ] || break
  sleep 0.05
done
echo "run_after_kill=$(systemctl show -P ActiveState "$run_unit")"
echo "agent_after=$(pgrep -u atelier-a-example_1 -c -f /usr/local/bin/claude)"
echo "sited_after_kill=$(systemctl show -P ActiveState atelier-sited@example.service)"
# The next boot: the socket starts sited again (PID 1 may already have restarted it).
for _ in $(seq 1 200); do
  [ "$(curl -sS -o /dev/null -w '%{http_code}' --unix-socket $sock $base/health)" = 200 ] && break
  sleep 0.1
done
echo "sited_pid_changed=$([ "$(systemctl show -P MainPID atelier-sited@example.service)" != "$sited_pid" ] && echo yes)"
echo "sessions=$(api $base/v1/sites/collection/sessions)"
timeout 20 curl -sS -N --unix-socket $sock -H "Authorization: Bearer $token" "$base/v1/sessions/$id/events?after=-1" > /tmp/all-events
sed -n 's/^data: //p' /tmp/all-events | sed 's/^/events| /'
timeout 60 tail --pid=$follower -f /dev/null
wait $follower; echo "follower_exit=$?"
echo "followed_ids=$(python3 -c 'import json,sys; print(",".join(str(e["seq"]) for e in map(json.loads, open(sys.argv[1])) if "seq" in e))' /tmp/followed.jsonl)"
echo "log_ids=$(sed -n 's/^id: //p' /tmp/all-events | paste -sd ',')"
sed 's/^/follower-err| /' /tmp/followed.err
sed 's/^/followed| /' /tmp/followed.jsonl
# The recovery commit goes through the git door once sited is ready: wait for it.
for _ in $(seq 1 200); do
  git_in $ws1 log -1 --format=%s | grep -q '^agent: recovered' && break
  sleep 0.1
done
echo "recovery_commit=$(git_in $ws1 log -1 --format=%s)"
echo "recovery_files=$(git_in $ws1 show --name-only --format= HEAD | tr '\n' ',')"
echo "session_id=$id"
sited_log | grep -E 'reconcil|recover|sweep' | sed 's/^/sited-log| /'
journalctl -b -u atelier-sited@example.service -o json --no-pager | grep 'recovery failed' | grep -o '"F_ERROR":"[^"]*"' | sed 's/^/sweep-error| /'
door_log 1 | grep -v 'Reached target\|Stopped target' | tail -n 30 | sed 's/^/door-log| /'
exit 0
"#;

/// `kill -9` of sited mid-turn: PID 1 stops the run (BindsTo=), the socket starts sited again,
/// its boot marks the session interrupted before it listens, and once it is ready (door units
/// are ordered after sited) the recovery point is committed through the git door. The engine's
/// client, following the turn the whole time, reconnects by itself and shows every event once.
#[test]
fn kill_9_of_sited_during_a_confined_turn_stops_the_run_and_the_next_boot_recovers_it() {
    let bins = built_binaries_dir().expect("locating the built binaries");
    let run = confined_box()
        .install_binaries(&bins, &["atelierctl"])
        .timeout(Duration::from_secs(240))
        .run(&format!("{PREAMBLE}\n{KILLED}"))
        .expect("booting systemd in a container");
    run.assert_success();
    assert_eq!(fact(&run, "apply"), "0", "{run:?}");
    assert_eq!(fact(&run, "start"), "201", "{run:?}");
    let unit = fact(&run, "run_unit");
    assert!(unit.starts_with("atelier-example-s1-turn@"), "{run:?}");
    assert_eq!(fact(&run, "agent_before"), "1", "the agent hangs: {run:?}");
    assert_eq!(
        fact(&run, "status_during"),
        "serving instance example: 1 turn and 0 builds running",
        "systemctl status tells of the turn: {run:?}"
    );
    // BindsTo=atelier-sited@example.service: PID 1 stops the run with sited.
    assert!(
        matches!(fact(&run, "run_after_kill"), "inactive" | "failed"),
        "{run:?}"
    );
    assert_eq!(fact(&run, "agent_after"), "0", "the agent is gone: {run:?}");
    assert_eq!(fact(&run, "sited_pid_changed"), "yes", "{run:?}");

    let id = fact(&run, "session_id");
    let sessions: Value = serde_json::from_str(fact(&run, "sessions")).unwrap_or(Value::Null);
    let session = sessions["data"]
        .as_array()
        .and_then(|list| list.iter().find(|s| s["session_id"] == id))
        .unwrap_or_else(|| panic!("the session is listed: {run:?}"));
    assert_eq!(session["state"], "interrupted", "{run:?}");
    let events = tagged(&run, "events");
    assert!(
        events.last().is_some_and(
            |l| l.contains("\"type\":\"turn_end\"") && l.contains("\"state\":\"interrupted\"")
        ),
        "{run:?}"
    );
    // The follower's output is the session's whole log, each event once, in order; it ended
    // with the interrupted turn (exit 4 and its failure line: the turn did not end idle).
    let log_ids = fact(&run, "log_ids");
    assert!(log_ids.split(',').count() >= 3, "{run:?}");
    assert_eq!(fact(&run, "followed_ids"), log_ids, "{run:?}");
    assert_eq!(fact(&run, "follower_exit"), "4", "{run:?}");
    assert!(
        tagged(&run, "follower-err")
            .iter()
            .any(|l| l.starts_with("note: stream_lost")),
        "the follower lost its stream with sited and followed again: {run:?}"
    );
    assert_eq!(
        tagged(&run, "sweep-error"),
        Vec::<&str>::new(),
        "the boot sweep's recovery failed: {run:?}"
    );
    assert_eq!(
        fact(&run, "recovery_commit"),
        format!("agent: recovered after restart (session {id})"),
        "{run:?}"
    );
    assert!(
        fact(&run, "recovery_files")
            .split(',')
            .any(|f| f == "src/before-kill.txt"),
        "the recovery point holds the agent's file: {run:?}"
    );
}

/// The door, its twin (the same unit and socket, the probe as `ExecStart=`: what PID 1's
/// sandbox alone costs), the bare twin (the probe as the same identity on the same kind of
/// socket, no sandbox directive: what PID 1 costs without the sandbox) and the shim spawned
/// unconfined as sited's `none` mode does, each timed from the connect (or spawn) to the
/// probe's first instant, 100 runs each.
const LATENCY: &str = r#"
create_site collection www.example.org
sed -e "s#^ExecStart=.*#ExecStart=$probe timestamp#" -e 's#^Description=.*#Description=Twin of the s1 turn door#' \
  /etc/systemd/system/atelier-example-s1-turn@.service > /etc/systemd/system/atelier-bench-twin@.service
sed -e 's#^ListenStream=.*#ListenStream=/run/atelier/example/twin.sock#' -e 's#^Description=.*#Description=Twin socket#' \
  /etc/systemd/system/atelier-example-s1-turn.socket > /etc/systemd/system/atelier-bench-twin.socket
sed -e 's#^ListenStream=.*#ListenStream=/run/atelier/example/bare.sock#' -e 's#^Description=.*#Description=Bare socket#' \
  /etc/systemd/system/atelier-example-s1-turn.socket > /etc/systemd/system/atelier-bench-bare.socket
{ printf '[Unit]\nDescription=Bare twin of the s1 turn door\n[Service]\nType=exec\n'
  grep -E '^(User|Group|StandardInput|StandardOutput|StandardError)=' /etc/systemd/system/atelier-bench-twin@.service
  echo "ExecStart=$probe timestamp"; } > /etc/systemd/system/atelier-bench-bare@.service
systemctl daemon-reload
systemctl start atelier-bench-twin.socket atelier-bench-bare.socket
echo "bare_lines=$(grep -c . /etc/systemd/system/atelier-bench-bare@.service)"
echo "twin_diff=$(diff /etc/systemd/system/atelier-example-s1-turn@.service /etc/systemd/system/atelier-bench-twin@.service | grep -c '^[<>]')"
rounds=100
client bench --mode twin --socket /run/atelier/example/twin.sock --socket-unit atelier-bench-twin.socket --rounds $rounds -- $probe timestamp 2>&1 | sed 's/^/result| /'
client bench --mode bare --socket /run/atelier/example/bare.sock --socket-unit atelier-bench-bare.socket --rounds $rounds -- $probe timestamp 2>&1 | sed 's/^/result| /'
client bench --mode door --socket /run/atelier/example/s1-turn.sock --socket-unit atelier-example-s1-turn.socket --rounds $rounds -- $probe timestamp 2>&1 | sed 's/^/result| /'
install -d -o atelier-example -g atelier-example -m 0700 /tmp/unconfined-home
client bench --mode none --shim /usr/bin/atelier-shim --shim-env ATELIER_DOOR=turn --shim-env ATELIER_UNIT_WORKDIR=$ws1 \
  --shim-env HOME=/tmp/unconfined-home --rounds $rounds -- $probe timestamp 2>&1 | sed 's/^/result| /'
echo "door_runs=$(systemctl show -P NAccepted atelier-example-s1-turn.socket)"
echo "twin_runs=$(systemctl show -P NAccepted atelier-bench-twin.socket)"
echo "bare_runs=$(systemctl show -P NAccepted atelier-bench-bare.socket)"
exit 0
"#;

/// One `bench <mode> key=value ...` line's values.
fn bench_line<'r>(run: &'r BoxRun, mode: &str) -> Vec<(&'r str, u64)> {
    let head = format!("bench {mode} ");
    let line = tagged(run, "result")
        .into_iter()
        .find_map(|l| l.strip_prefix(head.as_str()))
        .unwrap_or_else(|| panic!("no {mode} result: {run:?}"));
    line.split_whitespace()
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = value
                .parse()
                .unwrap_or_else(|_| panic!("{mode}: {pair:?} is not a number: {run:?}"));
            (key, value)
        })
        .collect()
}

fn value(line: &[(&str, u64)], key: &str) -> u64 {
    line.iter().find(|(k, _)| *k == key).map_or(0, |(_, v)| *v)
}

/// Reported, not asserted as a speed: the numbers are the lead's to publish. What is asserted
/// is that every run happened where it was meant to (100 accepted connections per socket, the
/// twin differing from the door only in its program and description, the bare twin holding
/// nothing but its type, identity, streams and program).
#[test]
fn start_latency_of_a_door_against_its_twin_unit_and_the_unconfined_shim() {
    let run = run_in_box(LATENCY, Duration::from_secs(600));
    assert_eq!(fact(&run, "create_collection"), "201", "{run:?}");
    assert_eq!(fact(&run, "twin_diff"), "4", "two lines changed: {run:?}");
    // [Unit], Description, [Service], Type, User, Group, three streams, ExecStart.
    assert_eq!(fact(&run, "bare_lines"), "10", "{run:?}");
    let door = bench_line(&run, "door");
    let twin = bench_line(&run, "twin");
    let bare = bench_line(&run, "bare");
    let none = bench_line(&run, "none");
    for (mode, line) in [
        ("door", &door),
        ("twin", &twin),
        ("bare", &bare),
        ("none", &none),
    ] {
        assert_eq!(value(line, "rounds"), 100, "{mode}: {run:?}");
        assert!(value(line, "p50_us") > 0, "{mode}: {run:?}");
    }
    // Every door run started a unit: the sited-created site's runs plus these 100.
    let door_runs: u64 = fact(&run, "door_runs").parse().unwrap_or(0);
    assert!(door_runs >= 100, "{run:?}");
    assert_eq!(fact(&run, "twin_runs"), "100", "{run:?}");
    assert_eq!(fact(&run, "bare_runs"), "100", "{run:?}");

    let ratio = |a: &[(&str, u64)], b: &[(&str, u64)], key: &str| {
        value(a, key) as f64 / value(b, key).max(1) as f64
    };
    eprintln!(
        "connect() to the agent's first instant, 100 runs each (debug build):\n  \
         door (shim, full sandbox): p50 {} us, p95 {} us\n  \
         twin (same sandbox, the probe as ExecStart): p50 {} us, p95 {} us\n  \
         bare (the twin without its sandbox directives): p50 {} us, p95 {} us\n  \
         none (shim spawned unconfined): p50 {} us, p95 {} us\n  \
         door/twin: p50 x{:.2}, p95 x{:.2}; twin/bare (the sandbox's share): p50 x{:.1}; \
         door/none: p50 x{:.1}",
        value(&door, "p50_us"),
        value(&door, "p95_us"),
        value(&twin, "p50_us"),
        value(&twin, "p95_us"),
        value(&bare, "p50_us"),
        value(&bare, "p95_us"),
        value(&none, "p50_us"),
        value(&none, "p95_us"),
        ratio(&door, &twin, "p50_us"),
        ratio(&door, &twin, "p95_us"),
        ratio(&twin, &bare, "p50_us"),
        ratio(&door, &none, "p50_us"),
    );
}

/// The lab model's name, on the lab range the gate counts as public only in development.
const LAB_HOST: &str = "model.lab.example";
/// What the lab model's scripted write puts in `src/index.html`.
const LAB_PAGE: &str = "<h1>Written by the real agent</h1>";

/// The example declaration with the real Claude Code as its agent and `hosts` as the turn
/// door's provider hosts; `base_url` declared when given.
fn lab_declaration(hosts: &[&str], base_url: Option<&str>, turn_timeout_ms: u64) -> String {
    let text = std::fs::read_to_string(repo_root().join("deploy/examples/instance.json"))
        .expect("reading the example declaration");
    let mut decl: Value = serde_json::from_str(&text).expect("the example is JSON");
    decl["agent"]["bins"]["claude_code"] = real_claude().expect("the real Claude Code").into();
    decl["agent"]["provider_hosts"] = serde_json::json!(hosts);
    if let Some(url) = base_url {
        decl["agent"]["anthropic_base_url"] = url.into();
    }
    decl["limits"]["session_turn_timeout_ms"] = turn_timeout_ms.into();
    serde_json::to_string_pretty(&decl).expect("serializing the declaration")
}

/// After `apply`: the lab network (a namespace of its own joined by veth, the lab model in
/// it on port 443 of a random address of the lab range, with a fresh test CA), the lab name in
/// the box's /etc/hosts, and the two development drop-ins — the gate counts the lab range as
/// public and its model relay trusts the test CA (`SSL_CERT_FILE`), sited's agents (and
/// builds) trust it too. The door units stay exactly as rendered.
const LAB: &str = r#"
sed 's/^/apply| /' /tmp/apply
# The box shares the host's network, so each box takes a /30 of the lab range at random: two
# boxes at once (two test binaries, a demo beside a test) never answer for each other.
lab_id=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')
lab_prefix=198.18.$(( lab_id / 64 % 256 ))
lab_base=$(( lab_id % 64 * 4 ))
lab_ip=$lab_prefix.$(( lab_base + 2 ))
labns=atlab$lab_id
ip netns add $labns
ip link add labh$lab_id type veth peer name labm$lab_id
ip link set labm$lab_id netns $labns
ip addr add $lab_prefix.$(( lab_base + 1 ))/30 dev labh$lab_id && ip link set labh$lab_id up
ip -n $labns addr add $lab_ip/30 dev labm$lab_id && ip -n $labns link set labm$lab_id up && ip -n $labns link set lo up
echo "$lab_ip model.lab.example" >> /etc/hosts
mkdir -p /etc/atelier-lab
echo "$lab_ip registry.lab.example" >> /etc/hosts
ip netns exec $labns /usr/local/bin/atelier-lab-model --listen $lab_ip:443 --host model.lab.example \
  --host registry.lab.example --package escape-html@1.0.3 $LAB_ARGS \
  --ca-out /etc/atelier-lab/ca.pem --record /root/lab-requests.jsonl \
  --write-path $ws1/src/index.html --write-content "$LAB_PAGE" > /root/lab-model.log 2>&1 &
for _ in $(seq 100); do [ -f /etc/atelier-lab/ca.pem ] && break; sleep 0.1; done
echo "lab_ready=$([ -f /etc/atelier-lab/ca.pem ] && echo yes || echo no)"
# Site $1's gate counts the lab range as public and its model relay trusts the lab's test CA
# (its unit must exist: call again for a site added later).
lab_gate() {
  local gate=atelier-example-s$1-gate.service
  mkdir -p /etc/systemd/system/$gate.d
  cat > /etc/systemd/system/$gate.d/50-lab.conf <<UNIT
[Service]
Environment=ATELIER_DEPLOYMENT=development SSL_CERT_FILE=/etc/atelier-lab/ca.pem
ExecStart=
ExecStart=$(sed -n 's/^ExecStart=//p' /etc/systemd/system/$gate) --allow-benchmark-range
UNIT
  systemctl daemon-reload
}
lab_gate 1
mkdir -p /etc/systemd/system/atelier-sited@example.service.d
cat > /etc/systemd/system/atelier-sited@example.service.d/50-lab.conf <<UNIT
[Service]
Environment=ATELIER_DEPLOYMENT=development ATELIER_AGENT_EXTRA_CA_CERTS=/etc/atelier-lab/ca.pem $SITED_EXTRA
UNIT
systemctl daemon-reload
lab_down() { kill %1 2>/dev/null; wait; ip link del labh$lab_id 2>/dev/null; ip netns del $labns 2>/dev/null; }
requests() { cat /root/lab-requests.jsonl 2>/dev/null | sed 's/^/request| /'; }
# The model's key (every declaration here names this file), as the lab fingerprints what came:
# the gate's model relay sends it as Anthropic's x-api-key or as an OpenAI bearer.
model_key=/etc/atelier/example/credentials/ANTHROPIC_API_KEY
echo "model_key_sha256=$(sha256sum < $model_key | cut -d' ' -f1)"
echo "model_bearer_sha256=$(printf 'Bearer %s' "$(cat $model_key)" | sha256sum | cut -d' ' -f1)"
# Where the key is not: sited's credentials, and anything the turns left in their HOMEs.
key_facts() {
  echo "sited_credentials=$(ls /run/credentials/atelier-sited@example.service | tr '\n' ',')"
  echo "key_in_turn_homes=$(grep -rslF -f $model_key /var/lib/atelier/example/agents | wc -l)"
}
"#;

/// The real Claude Code runs a turn in the turn door as the site's identity: its only way
/// to the (lab) model is the shim's forward and the site's gate, whose model relay decisions
/// (`model relay POST /model/anthropic 200`) are events of the session; the scripted `Write` lands in the turn's commit; the prompt and
/// AGENTS.md reach the model. A second turn resumes the first with the CLI's session id.
const REAL_TURN: &str = r#"
create_site collection www.example.org
printf '# Brief\nThe museum prefers plain HTML. brief-canary-7f3a\n' > /tmp/agents.md
install -o atelier-example -g atelier-example -m 0660 /tmp/agents.md $ws1/AGENTS.md
id=$(start_session collection '"Write the home page. prompt-canary-91c2"')
echo "start=$(cat /tmp/start-status)"
follow "$id" | sed 's/^/turn1| /'
echo "page=$(cat $ws1/src/index.html)"
echo "page_owner=$(stat -c %U $ws1/src/index.html)"
echo "commit1_files=$(git_in $ws1 show --name-only --format= HEAD | tr '\n' ',')"
echo "commit1_page=$(git_in $ws1 show HEAD:src/index.html)"
echo "requests_after_turn1=$(wc -l < /root/lab-requests.jsonl)"
echo "health=$(curl -sS --unix-socket $sock $base/health)"
api -o /tmp/msg -w 'message=%{http_code}\n' -d "{\"message\":\"Now say you are done. second-canary-55d0\",$actor}" $base/v1/sessions/$id/messages
timeout 120 curl -sS -N --unix-socket $sock -H "Authorization: Bearer $token" "$base/v1/sessions/$id/events?after=-1" | sed -n 's/^data: //p' | sed 's/^/all| /'
requests
key_facts
# A build whose step reaches for the network: the build door's plan holds no host (the example
# declares no registry), so the gate refuses, and the refusal is a line of the build's log.
printf 'curl -sS -o /dev/null --max-time 20 https://model.lab.example/ || echo "the build went on without it"\n' >> $ws1/build.sh
# A step runs as atelier-build's user; were atelier-build dumpable, the step could open its
# stdout, the frame stream sited reads, and write frames of its own.
printf '(exec 3>/proc/$PPID/fd/1) 2>/dev/null && echo "frames: opened" || echo "frames: refused"\n' >> $ws1/build.sh
api -o /tmp/build -w 'build_start=%{http_code}\n' -d "{$actor}" $base/v1/sites/collection/build
build=$(sed -n 's/.*"build_id":"\([^"]*\)".*/\1/p' /tmp/build)
for _ in $(seq 300); do
  api -o /tmp/build-record $base/v1/sites/collection/builds/$build
  grep -q '"outcome":"running"' /tmp/build-record || break
  sleep 0.2
done
echo "build_outcome=$(sed -n 's/.*"outcome":"\([a-z_]*\)".*/\1/p' /tmp/build-record)"
python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["log"])' /tmp/build-record | sed 's/^/build-log| /'
door_log 1 | grep -i -e egress -e refused | tail -n 20 | sed 's/^/door-log| /'
journalctl -b -u atelier-example-s1-gate.service -o cat --no-pager | tail -n 20 | sed 's/^/gate-log| /'
sited_log | tail -n 20 | sed 's/^/sited-log| /'
lab_down
exit 0
"#;

/// Waits for build `$1` of site `$2` to end; prints its outcome, error and log under `$3`.
const WAIT_BUILD: &str = r#"
wait_build() { # build-id slug prefix
  for _ in $(seq 600); do
    api -o /tmp/build-record $base/v1/sites/$2/builds/$1
    grep -q '"outcome":"running"' /tmp/build-record || break
    sleep 0.2
  done
  echo "$3_outcome=$(sed -n 's/.*"outcome":"\([a-z_]*\)".*/\1/p' /tmp/build-record)"
  echo "$3_error=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("error") or "")' /tmp/build-record)"
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["log"])' /tmp/build-record | sed "s/^/$3-log| /"
}
start_build() { # slug -> prints the build id
  api -o /tmp/build -w '%{http_code}' -d "{$actor}" $base/v1/sites/$1/build > /tmp/build-status
  sed -n 's/.*"build_id":"\([^"]*\)".*/\1/p' /tmp/build
}
"#;

fn real_agent_box(declaration: String) -> SystemdBox {
    let bins = built_binaries_dir().expect("locating the built binaries");
    confined_box()
        .copy(
            bins.join("atelier-lab-model"),
            "/usr/local/bin/atelier-lab-model",
        )
        .install_binaries(&bins, &["atelier-build", "atelier-agent"])
        .write("/root/instance.json", declaration, 0o644)
}

fn run_real_agent(declaration: String, script: &str, sited_extra: &str) -> BoxRun {
    run_real_agent_with_lab(declaration, script, sited_extra, "")
}

/// [`run_real_agent`] with `lab_args` added to the lab model's command line.
fn run_real_agent_with_lab(
    declaration: String,
    script: &str,
    sited_extra: &str,
    lab_args: &str,
) -> BoxRun {
    let lab = LAB
        .replace("$LAB_PAGE", LAB_PAGE)
        .replace("$SITED_EXTRA", sited_extra)
        .replace("$LAB_ARGS", lab_args);
    let run = real_agent_box(declaration)
        .timeout(Duration::from_secs(300))
        .run(&format!("{PREAMBLE}\n{WAIT_BUILD}\n{lab}\n{script}"))
        .expect("booting systemd in a container");
    run.assert_success();
    assert_eq!(run.fact("apply"), Some("0"), "{run:?}");
    assert_eq!(run.fact("lab_ready"), Some("yes"), "{run:?}");
    run
}

#[test]
fn the_real_claude_code_reaches_its_model_only_through_the_gate_and_resumes() {
    let declaration = lab_declaration(&[LAB_HOST], Some("https://model.lab.example"), 120_000);
    let run = run_real_agent(declaration, REAL_TURN, "");
    assert_eq!(fact(&run, "start"), "201", "{run:?}");

    let turn1 = events(&run, "turn1");
    let types: Vec<&str> = turn1
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("<none>"))
        .collect();
    // The CLI's real events, mapped as for the stand-in, with the gate's decision among them.
    for wanted in [
        "turn_start",
        "text",
        "tool",
        "result",
        "file_change",
        "turn_end",
    ] {
        assert!(types.contains(&wanted), "no {wanted} in {types:?}\n{run:?}");
    }
    assert_eq!(types.first(), Some(&"turn_start"), "{run:?}");
    assert_eq!(types.last(), Some(&"turn_end"), "{run:?}");
    assert_eq!(
        turn1.last().map(|e| e["state"].clone()),
        Some("idle".into()),
        "{run:?}"
    );
    assert_model_relayed(&run, &turn1, "anthropic");
    let relayed = turn1
        .iter()
        .find(|e| e["egress"]["host"] == "model")
        .expect("a model relay decision");
    assert!(
        relayed["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("[egress] model relay POST /model/anthropic 200")),
        "{run:?}"
    );
    // (The MCP relay's requests are decisions too: the box has no Publication API behind the
    // relay, so those are refused as unreachable.)
    assert!(
        turn1.iter().any(|e| e["egress"]["host"] == "mcp"),
        "the agent reached for the MCP relay, and that is in the session too: {run:?}"
    );
    let tool = turn1
        .iter()
        .find(|e| e["type"] == "tool")
        .expect("a tool event");
    assert_eq!(tool["name"], "Write", "{run:?}");
    let change = turn1
        .iter()
        .find(|e| e["type"] == "file_change")
        .expect("a file change");
    // The brief the test wrote before the turn is new to git too.
    assert_eq!(
        change["files"],
        serde_json::json!(["AGENTS.md", "src/index.html"]),
        "{run:?}"
    );

    // The file, written by the site's identity, is in the turn's commit.
    assert_eq!(fact(&run, "page"), LAB_PAGE, "{run:?}");
    assert_eq!(fact(&run, "page_owner"), "atelier-a-example_1", "{run:?}");
    assert!(
        fact(&run, "commit1_files").contains("src/index.html,"),
        "{run:?}"
    );
    assert_eq!(fact(&run, "commit1_page"), LAB_PAGE, "{run:?}");
    assert_health_reports(&run, "claude_code", "claude");

    // What reached the model: the prompt sited sent and the AGENTS.md brief; then the tool's
    // result; the key never in the record.
    let requests = recorded_requests(&run);
    let messages: Vec<&Value> = requests
        .iter()
        .filter(|r| r["path"] == "/v1/messages")
        .collect();
    let turn1_calls: usize = fact(&run, "requests_after_turn1").parse().unwrap_or(0);
    assert!(messages.len() >= 2, "two model calls at least: {run:?}");
    // The model is offered the stated file tools and nothing else built in (no subagents,
    // skills or scheduled wake-ups); the relay's tools, when it lists any, are the MCP server's.
    let mut offered = offered_tools(messages[0]);
    offered.retain(|name| !name.starts_with("mcp__dedalo_publication__"));
    offered.sort_unstable();
    assert_eq!(
        offered,
        ["Edit", "Glob", "Grep", "Read", "Write"],
        "{run:?}"
    );
    let first = messages[0]["body"].to_string();
    assert!(first.contains("prompt-canary-91c2"), "the prompt: {first}");
    assert!(first.contains("brief-canary-7f3a"), "the brief: {first}");
    assert!(
        messages[1]["body"].to_string().contains("tool_result"),
        "the second call carries the tool's result: {run:?}"
    );
    assert_model_key_added(&run, "/v1/messages", "x-api-key", "model_key_sha256");
    assert_key_held_by_the_gate_alone(&run);

    // The second turn resumed the first: the model sees the earlier conversation.
    assert_eq!(fact(&run, "message"), "200", "{run:?}");
    let all = events(&run, "all");
    let ends: Vec<&Value> = all.iter().filter(|e| e["type"] == "turn_end").collect();
    assert_eq!(ends.len(), 2, "{run:?}");
    assert_eq!(ends[1]["state"], "idle", "{run:?}");
    let later: Vec<&Value> = requests[turn1_calls..]
        .iter()
        .filter(|r| r["path"] == "/v1/messages")
        .collect();
    let resumed = later
        .first()
        .map(|r| r["body"].to_string())
        .unwrap_or_default();
    assert!(
        resumed.contains("second-canary-55d0"),
        "the follow-up: {run:?}"
    );
    assert!(
        resumed.contains("prompt-canary-91c2"),
        "the follow-up carries the first turn's conversation: {run:?}"
    );

    // The build door's decisions are its log's: the refused CONNECT, by name.
    assert_eq!(fact(&run, "build_start"), "202", "{run:?}");
    assert_eq!(fact(&run, "build_outcome"), "success", "{run:?}");
    let log = tagged(&run, "build-log");
    assert!(
        log.contains(&"[egress] refused CONNECT model.lab.example:443 — not_in_plan"),
        "{log:#?}\n{run:?}"
    );
    assert!(log.contains(&"the build went on without it"), "{run:?}");
    assert!(log.contains(&"frames: refused"), "{log:#?}\n{run:?}");
}

/// The real Claude Code runs a turn with every configuration source a workspace or the turn
/// HOME's Claude directory (the CLI's own, which a turn writes) can hold planted: memory files,
/// settings with hooks, skills, subagents, commands, rules, MCP servers (the project's file, the
/// CLI's own config at user and local scope) and an auto-memory of the workspace. The model
/// sees only what the driver states; without `autoMemoryEnabled: false` the auto-memory reached
/// it.
const CLAUDE_PLANTED_TURN: &str = r#"
create_site collection www.example.org
plant() { # owner path content
  install -D -o "$1" -g atelier-example -m 0660 /dev/stdin "$2" <<<"$3"
}
ws_plant() { plant atelier-example "$ws1/$1" "$2"; }
claude_dir=/var/lib/atelier/example/agents/s1/turn/state/claude
home_plant() { plant atelier-a-example_1 "$claude_dir/$1" "$2"; }
ws_plant AGENTS.md '# Brief. brief-canary-7f3a'
ws_plant CLAUDE.md 'planted-claude-md-canary'
ws_plant CLAUDE.local.md 'planted-claude-local-md-canary'
ws_plant .claude/CLAUDE.md 'planted-dot-claude-md-canary'
ws_plant .claude/rules/planted.md 'planted-rule-canary'
ws_plant .claude/settings.json '{"env":{"PLANTED":"planted-settings-env-canary"},"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"echo planted-hook-canary"}]}]}}'
ws_plant .claude/settings.local.json '{"env":{"PLANTED_LOCAL":"planted-local-settings-canary"}}'
ws_plant .claude/skills/planted/SKILL.md $'---\nname: planted\ndescription: planted-skill-canary\n---\nplanted'
ws_plant .claude/agents/planted.md $'---\nname: planted-agent\ndescription: planted-subagent-canary\n---\nplanted'
ws_plant .claude/commands/planted.md 'planted-command-canary'
ws_plant .mcp.json '{"mcpServers":{"planted_mcp_canary":{"type":"http","url":"http://127.0.0.1:9/mcp"}}}'
home_plant CLAUDE.md 'planted-home-claude-md-canary'
home_plant settings.json '{"env":{"PLANTED_HOME":"planted-home-settings-canary"}}'
home_plant skills/home/SKILL.md $'---\nname: home\ndescription: planted-home-skill-canary\n---\nplanted'
home_plant agents/home.md $'---\nname: home-agent\ndescription: planted-home-subagent-canary\n---\nplanted'
home_plant projects/-var-lib-atelier-example-sites-collection/memory/MEMORY.md 'planted-auto-memory-canary'
home_plant .claude.json '{"mcpServers":{"planted_user_mcp_canary":{"type":"http","url":"http://127.0.0.1:9/mcp"}},"projects":{"'$ws1'":{"mcpServers":{"planted_local_mcp_canary":{"type":"http","url":"http://127.0.0.1:9/mcp"}}}}}'
chown -R atelier-a-example_1 $claude_dir
id=$(start_session collection '"Write the home page. prompt-canary-91c2"')
echo "start=$(cat /tmp/start-status)"
follow "$id" | sed 's/^/turn1| /'
echo "page=$(cat $ws1/src/index.html)"
# An editor's follow-up that begins like one of the CLI's own commands is no command.
api -o /tmp/msg -w 'message=%{http_code}\n' -d "{\"message\":\"/context\",$actor}" $base/v1/sessions/$id/messages
timeout 120 curl -sS -N --unix-socket $sock -H "Authorization: Bearer $token" "$base/v1/sessions/$id/events?after=-1" | sed -n 's/^data: //p' | sed 's/^/all| /'
requests
sited_log | tail -n 20 | sed 's/^/sited-log| /'
lab_down
exit 0
"#;

#[test]
fn the_real_claude_code_loads_nothing_planted() {
    let declaration = lab_declaration(&[LAB_HOST], Some("https://model.lab.example"), 120_000);
    let run = run_real_agent(declaration, CLAUDE_PLANTED_TURN, "");
    assert_eq!(fact(&run, "start"), "201", "{run:?}");
    let turn = events(&run, "turn1");
    assert_eq!(
        turn.last().map(|e| e["state"].clone()),
        Some("idle".into()),
        "{run:?}"
    );
    assert_eq!(fact(&run, "page"), LAB_PAGE, "{run:?}");
    let requests = recorded_requests(&run);
    let messages: Vec<&Value> = requests
        .iter()
        .filter(|r| r["path"] == "/v1/messages")
        .collect();
    assert!(messages.len() >= 2, "two model calls at least: {run:?}");
    for call in &messages {
        assert_nothing_planted(
            call,
            &[
                "planted-claude-md-canary",
                "planted-claude-local-md-canary",
                "planted-dot-claude-md-canary",
                "planted-rule-canary",
                "planted-settings-env-canary",
                "planted-hook-canary",
                "planted-local-settings-canary",
                "planted-skill-canary",
                "planted-subagent-canary",
                "planted-command-canary",
                "planted_mcp_canary",
                "planted-home-claude-md-canary",
                "planted-home-settings-canary",
                "planted-home-skill-canary",
                "planted-home-subagent-canary",
                "planted-auto-memory-canary",
                "planted_user_mcp_canary",
                "planted_local_mcp_canary",
            ],
        );
    }
    let first = messages[0]["body"].to_string();
    assert!(first.contains("prompt-canary-91c2"), "the prompt: {first}");
    assert!(first.contains("brief-canary-7f3a"), "the brief: {first}");

    // The follow-up `/context` ran none of the CLI's commands (which would have answered with
    // the context's usage without the model) and the turn ended.
    assert_eq!(fact(&run, "message"), "200", "{run:?}");
    let all = events(&run, "all");
    let second: Vec<&Value> = all
        .iter()
        .skip_while(|e| e["type"] != "turn_end")
        .skip(1)
        .collect();
    assert_eq!(
        second.last().map(|e| e["type"].clone()),
        Some("turn_end".into()),
        "{run:?}"
    );
    assert!(
        second
            .iter()
            .all(|e| !e["text"].to_string().contains("Context Usage")),
        "{run:?}"
    );
}

/// The same agent with its model gone: the lab model is stopped before the turn, its address
/// answers each connection with a reset, so the gate's model relay refuses every request as
/// `upstream_unreachable`; the refusal is an event of the session, the turn ends with an error
/// inside the turn timeout and the site is free again.
const REFUSED_TURN: &str = r#"
create_site collection www.example.org
# The model's server goes away; its address stays, and answers each connection with a reset.
kill %1 2>/dev/null; wait %1 2>/dev/null
id=$(start_session collection '"Write the home page."')
echo "start=$(cat /tmp/start-status)"
follow "$id" | sed 's/^/refused| /'
echo "site_state=$(api $base/v1/sites/collection | grep -o '"session":{[^}]*}')"
echo "live_after=$(systemctl list-units --all --no-legend --plain 'atelier-example-s1-*@*.service' | wc -l)"
id2=$(start_session collection '"Again."')
echo "second_start=$(cat /tmp/start-status)"
lab_down
exit 0
"#;

/// The agent's model is unreachable (the lab's server is gone): the gate's model relay
/// refuses each request by name, in the session, and the turn ends with a stated error; the
/// site is free again.
#[test]
fn an_unreachable_model_is_refused_in_the_session_and_the_turn_ends() {
    let declaration = lab_declaration(&[LAB_HOST], Some("https://model.lab.example"), 45_000);
    let run = run_real_agent(declaration, REFUSED_TURN, "");
    assert_eq!(fact(&run, "start"), "201", "{run:?}");
    let turn = events(&run, "refused");
    let refused: Vec<&Value> = turn
        .iter()
        .filter(|e| e["egress"]["verdict"] == "refused" && e["egress"]["host"] != "mcp")
        .collect();
    assert!(
        !refused.is_empty(),
        "the refusal is in the session: {run:?}"
    );
    for decision in &refused {
        assert_eq!(decision["egress"]["host"], "model", "{run:?}");
        assert_eq!(
            decision["egress"]["reason"], "POST /model/anthropic upstream_unreachable",
            "{run:?}"
        );
        assert!(
            decision["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("[egress] refused model relay")),
            "{run:?}"
        );
    }
    let end = turn.last().expect("the stream ends");
    assert_eq!(end["type"], "turn_end", "{run:?}");
    // The CLI retries a failed request by itself; its giving up or the turn's deadline ends
    // the turn, by name.
    assert!(
        turn.iter().any(|e| e["type"] == "error"
            && e["reason"].as_str().is_some_and(|r| !r.is_empty())
            && e["message"].as_str().is_some_and(|m| !m.is_empty())),
        "the turn ends with a stated error: {run:?}"
    );
    assert_eq!(end["state"], "error", "{run:?}");
    assert_eq!(fact(&run, "live_after"), "0", "{run:?}");
    assert!(!fact(&run, "site_state").contains("running"), "{run:?}");
    assert_eq!(
        fact(&run, "second_start"),
        "201",
        "the site is free again: {run:?}"
    );
}

/// `/health` (printed as `health=`) reports `driver` available with the version its probe of
/// the real binary read: the pin `scripts/agents` installed for `cli`.
fn assert_health_reports(run: &BoxRun, driver: &str, cli: &str) {
    let pins = std::process::Command::new("bash")
        .arg(repo_root().join("scripts/agents"))
        .arg("pins")
        .output()
        .expect("scripts/agents pins");
    let pins = String::from_utf8_lossy(&pins.stdout);
    let version = pins
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{cli} ")))
        .and_then(|pin| pin.rsplit('@').next())
        .expect("the CLI's pin");
    let health: Value = serde_json::from_str(fact(run, "health")).expect("/health is JSON");
    let entry = health["drivers"]
        .as_array()
        .and_then(|drivers| drivers.iter().find(|d| d["id"] == driver))
        .expect("the driver in /health");
    assert_eq!(entry["available"], true, "{health}");
    assert_eq!(entry["version"], version, "{health}");
    assert_eq!(entry["is_default"], true, "{health}");
}

/// The gate's decisions in a turn's events (`turn`): the model was reached through the turn
/// door's model relay on `api`'s route, relayed and answered, and nothing was reached but the
/// model relay and the MCP relay (whose upstream, the example's Publication API, does not run
/// in these boxes): no CONNECT at all, the model's host included, since the agent was given
/// only the relay's loopback URL.
fn assert_model_relayed(run: &BoxRun, turn: &[Value], api: &str) {
    let relayed = format!("POST /model/{api} 200");
    assert!(
        turn.iter().any(|e| e["egress"]["host"] == "model"
            && e["egress"]["verdict"] == "relayed"
            && e["egress"]["reason"] == relayed.as_str()),
        "the model was reached through the gate's model relay ({relayed}): {run:?}"
    );
    assert!(
        turn.iter()
            .filter(|e| !e["egress"].is_null() && e["egress"]["host"] != "mcp")
            .all(|e| e["egress"]["host"] == "model" && e["egress"]["verdict"] == "relayed"),
        "the agent reached for nothing else: {run:?}"
    );
}

/// Every request the lab model recorded at `path` carried the declared model key as `header`
/// (its fingerprint the box printed as `fact`): the gate's model relay added it, in place of
/// the placeholder the agent sent.
fn assert_model_key_added(run: &BoxRun, path: &str, header: &str, fact_name: &str) {
    let declared = format!("sha256:{}", fact(run, fact_name));
    let calls: Vec<Value> = recorded_requests(run)
        .into_iter()
        .filter(|r| r["path"] == path)
        .collect();
    assert!(!calls.is_empty(), "no request at {path}: {run:?}");
    for call in &calls {
        assert_eq!(call["keys"][header], declared.as_str(), "{call}\n{run:?}");
    }
}

/// The model's key is the gate's alone: sited was not handed it, and no file a turn left in
/// the turn HOMEs holds it (the box printed both with `key_facts`).
fn assert_key_held_by_the_gate_alone(run: &BoxRun) {
    let sited: Vec<&str> = fact(run, "sited_credentials")
        .split(',')
        .filter(|id| !id.is_empty())
        .collect();
    assert!(
        !sited.is_empty(),
        "sited's credentials were listed: {run:?}"
    );
    assert!(
        !sited
            .iter()
            .any(|id| ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"].contains(id)),
        "{sited:?}"
    );
    assert_eq!(fact(run, "key_in_turn_homes"), "0", "{run:?}");
}

/// A turn of the lab model's script, whatever the driver, in the session's common shapes: it
/// starts, calls `write`, says text, changes a file, ends idle with a resume token, and reached
/// the model through the gate's model relay and nothing else but the MCP relay.
fn assert_scripted_write_turn(run: &BoxRun, tag: &str) {
    let turn = events(run, tag);
    let types: Vec<&str> = turn
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("<none>"))
        .collect();
    for wanted in [
        "turn_start",
        "tool",
        "text",
        "result",
        "file_change",
        "turn_end",
    ] {
        assert!(types.contains(&wanted), "no {wanted} in {types:?}\n{run:?}");
    }
    assert_eq!(
        turn.last().map(|e| e["state"].clone()),
        Some("idle".into()),
        "{run:?}"
    );
    let tool = turn
        .iter()
        .find(|e| e["type"] == "tool")
        .expect("a tool event");
    assert_eq!(tool["name"], "write", "{run:?}");
    assert_model_relayed(run, &turn, "openai");
    let result = turn
        .iter()
        .find(|e| e["type"] == "result")
        .expect("a result");
    assert!(result["resumeToken"].is_string(), "{run:?}");
}

/// The example declaration with the real pi as its agent, talking to the lab model's OpenAI
/// chat completions through the gate.
fn pi_declaration() -> String {
    openai_declaration("pi")
}

/// The example declaration with the real `driver` (`pi`, `opencode`) as its agent, talking to
/// the lab model's OpenAI chat completions through the gate.
fn openai_declaration(driver: &str) -> String {
    openai_declaration_with(driver, &real_agent(driver).expect("the real CLI"))
}

/// [`openai_declaration`] with the agent's binary at `bin`.
fn openai_declaration_with(driver: &str, bin: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join("deploy/examples/instance.json"))
        .expect("reading the example declaration");
    let mut decl: Value = serde_json::from_str(&text).expect("the example is JSON");
    decl["agent"] = serde_json::json!({
        "driver": driver,
        "bins": { driver: bin },
        "provider_hosts": [LAB_HOST],
        "openai_base_url": "https://model.lab.example/v1",
        "openai_model": "lab-model",
    });
    // The model's key, which the gate's relay adds (any credential file the operator made will
    // do: the lab checks its fingerprint).
    decl["secrets"]["OPENAI_API_KEY"] = "/etc/atelier/example/credentials/ANTHROPIC_API_KEY".into();
    decl["limits"]["session_turn_timeout_ms"] = 120_000.into();
    serde_json::to_string_pretty(&decl).expect("serializing the declaration")
}

/// The real pi runs a turn as the site's identity with every configuration source a workspace
/// can hold planted in it: pi's project settings, system prompt files and an extension, a
/// Claude skill tree and context files. The model sees only what the driver states.
const PI_TURN: &str = r#"
create_site collection www.example.org
plant() { # path content
  install -D -o atelier-example -g atelier-example -m 0660 /dev/stdin "$ws1/$1" <<<"$2"
}
plant AGENTS.md '# Brief. brief-canary-7f3a'
plant .pi/settings.json '{"defaultProvider":"planted","extensions":["./planted.ts"],"shellPath":"/bin/false"}'
plant .pi/SYSTEM.md 'planted-system-canary'
plant .pi/APPEND_SYSTEM.md 'planted-append-canary'
plant .pi/extensions/planted.ts 'export default function (pi) { pi.registerTool({ name: "planted_tool", label: "p", description: "planted-extension-canary", parameters: { type: "object", properties: {} }, execute: async () => ({ content: [] }) }); }'
plant .pi/planted.ts "$(cat $ws1/.pi/extensions/planted.ts)"
plant .claude/skills/planted/SKILL.md $'---\nname: planted\ndescription: planted-skill-canary\n---\nplanted'
plant .agents/skills/planted/SKILL.md $'---\nname: planted2\ndescription: planted-agents-skill-canary\n---\nplanted'
plant CLAUDE.md 'planted-claude-md-canary'
plant .pi/prompts/planted.md 'planted-prompt-canary'
id=$(start_session collection '"Write the home page. prompt-canary-91c2"')
echo "start=$(cat /tmp/start-status)"
follow "$id" | sed 's/^/turn1| /'
echo "page=$(cat $ws1/src/index.html)"
echo "stated=$(ls /var/lib/atelier/example/agents/s1/turn/stated/pi | tr '\n' ',')"
echo "stated_owner=$(stat -c %U:%G:%a /var/lib/atelier/example/agents/s1/turn/stated/pi/models.json)"
echo "sessions=$(ls /var/lib/atelier/example/agents/s1/turn/state/pi-sessions | wc -l)"
echo "session_owner=$(stat -c %U /var/lib/atelier/example/agents/s1/turn/state/pi-sessions/*.jsonl)"
echo "requests_after_turn1=$(wc -l < /root/lab-requests.jsonl)"
echo "health=$(curl -sS --unix-socket $sock $base/health)"
api -o /tmp/msg -w 'message=%{http_code}\n' -d "{\"message\":\"Now say you are done. second-canary-55d0\",$actor}" $base/v1/sessions/$id/messages
timeout 120 curl -sS -N --unix-socket $sock -H "Authorization: Bearer $token" "$base/v1/sessions/$id/events?after=-1" | sed -n 's/^data: //p' | sed 's/^/all| /'
requests
sited_log | tail -n 20 | sed 's/^/sited-log| /'
journalctl -b -u atelier-example-s1-gate.service -o cat --no-pager | tail -n 20 | sed 's/^/gate-log| /'
sed 's/^/lab-log| /' /root/lab-model.log
lab_down
exit 0
"#;

#[test]
fn the_real_pi_runs_confined_reaches_its_model_only_through_the_gate_and_loads_nothing_planted() {
    let run = run_real_agent(pi_declaration(), PI_TURN, "");
    assert_eq!(fact(&run, "start"), "201", "{run:?}");
    assert_scripted_write_turn(&run, "turn1");
    assert_model_key_added(
        &run,
        "/v1/chat/completions",
        "authorization",
        "model_bearer_sha256",
    );
    // pi writes the template's page in place (it stays the file sited made); what pi itself
    // creates, its session, is the site identity's.
    assert_eq!(fact(&run, "page"), LAB_PAGE, "{run:?}");
    assert_eq!(
        fact(&run, "session_owner"),
        "atelier-a-example_1",
        "{run:?}"
    );
    // The statement is sited's, read-only to the turn; the sessions are the CLI's own.
    assert_eq!(
        fact(&run, "stated"),
        "brief.md,models.json,settings.json,",
        "{run:?}"
    );
    assert_eq!(
        fact(&run, "stated_owner"),
        "atelier-example:atelier-example:640",
        "{run:?}"
    );
    assert_eq!(fact(&run, "sessions"), "1", "{run:?}");
    assert_health_reports(&run, "pi", "pi");

    // What reached the model is the driver's statement and nothing planted.
    let requests = recorded_requests(&run);
    let calls: Vec<&Value> = requests
        .iter()
        .filter(|r| r["path"] == "/v1/chat/completions")
        .collect();
    assert!(calls.len() >= 2, "two model calls at least: {run:?}");
    for call in &calls {
        assert_nothing_planted(
            call,
            &[
                "planted-system-canary",
                "planted-append-canary",
                "planted-extension-canary",
                "planted_tool",
                "planted-skill-canary",
                "planted-agents-skill-canary",
                "planted-claude-md-canary",
                "planted-prompt-canary",
            ],
        );
        assert_eq!(call["body"]["model"], "lab-model", "{run:?}");
        let tools = offered_tools(call);
        assert_eq!(
            tools,
            ["read", "write", "edit", "grep", "find", "ls"],
            "{run:?}"
        );
    }
    let first = calls[0]["body"].to_string();
    assert!(first.contains("prompt-canary-91c2"), "the prompt: {first}");
    assert!(first.contains("brief-canary-7f3a"), "the brief: {first}");
    // The editor's words exactly, read from pi's stdin.
    let texts = user_texts(&calls[0]["body"]);
    assert!(
        texts.contains(&"Write the home page. prompt-canary-91c2"),
        "{texts:?}"
    );
    assert!(
        first.contains("You are a coding agent editing a website"),
        "the stated system prompt: {first}"
    );

    // The second turn resumed pi's own session.
    assert_eq!(fact(&run, "message"), "200", "{run:?}");
    let all = events(&run, "all");
    let ends: Vec<&Value> = all.iter().filter(|e| e["type"] == "turn_end").collect();
    assert_eq!(ends.len(), 2, "{run:?}");
    assert_eq!(ends[1]["state"], "idle", "{run:?}");
    let turn1_calls: usize = fact(&run, "requests_after_turn1").parse().unwrap_or(0);
    let resumed = requests[turn1_calls..]
        .iter()
        .find(|r| r["path"] == "/v1/chat/completions")
        .map(|r| r["body"].to_string())
        .unwrap_or_default();
    assert!(
        resumed.contains("second-canary-55d0") && resumed.contains("prompt-canary-91c2"),
        "the follow-up carries the first turn's conversation: {run:?}"
    );
}

/// A build of the npm-basic template: with the lab registry's host declared, the install
/// fetches the package through the build door's gate and the build uses it; with the host
/// left out (the same box before the operator declares it), the gate refuses and the build
/// fails, the refusal in its log. Declaring the host is an `apply`, which restarts the running
/// gate: the next CONNECT is decided by the new plan.
const DEPENDENCY_BUILD: &str = r#"
create_site collection www.example.org npm-basic
# The site's own choice of registry, as a site states it (with the lab's CA: a host's npm may
# name its own CA file, and then NODE_EXTRA_CA_CERTS is not read).
printf 'registry=https://registry.lab.example/\ncafile=/etc/atelier-lab/ca.pem\nfetch-retries=0\n' | install -o atelier-example -g atelier-example -m 0660 /dev/stdin $ws1/.npmrc
build=$(start_build collection)
echo "refused_start=$(cat /tmp/build-status)"
wait_build "$build" collection refused
# The operator declares the registry host: apply, and the site's gate takes the new plan.
python3 - <<'PY'
import json
d = json.load(open("/root/instance.json"))
d["agent"]["registry_hosts"] = ["registry.lab.example"]
json.dump(d, open("/root/instance.json", "w"))
PY
atelier-provision apply --declaration /root/instance.json > /tmp/apply2 2>&1
echo "apply2=$?"
sed 's/^/apply2| /' /tmp/apply2
build=$(start_build collection)
echo "allowed_start=$(cat /tmp/build-status)"
wait_build "$build" collection allowed
echo "notes=$(grep -c '&lt;, &gt; and &amp;' $ws1/dist/notes.html)"
echo "package=$(grep -c 'from the lab registry' $ws1/node_modules/escape-html/index.js)"
echo "registry_requests=$(grep -c '"path":"/escape-html' /root/lab-requests.jsonl)"
lab_down
exit 0
"#;

#[test]
fn a_build_installs_its_dependency_from_a_declared_registry_through_the_gate_and_not_otherwise() {
    let declaration = lab_declaration(&[LAB_HOST], Some("https://model.lab.example"), 60_000);
    let run = run_real_agent(declaration, DEPENDENCY_BUILD, "");
    assert_eq!(fact(&run, "create_collection"), "201", "{run:?}");

    assert_eq!(fact(&run, "refused_start"), "202", "{run:?}");
    assert_eq!(fact(&run, "refused_outcome"), "failed", "{run:?}");
    assert_eq!(fact(&run, "refused_error"), "install failed", "{run:?}");
    let refused_log = tagged(&run, "refused-log");
    assert!(
        refused_log.contains(&"[egress] refused CONNECT registry.lab.example:443 — not_in_plan"),
        "{refused_log:#?}\n{run:?}"
    );

    assert_eq!(fact(&run, "apply2"), "0", "{run:?}");
    assert!(
        tagged(&run, "apply2")
            .iter()
            .any(|l| l.ends_with("run systemctl try-restart atelier-example-s1-gate.service")),
        "{run:?}"
    );
    assert_eq!(fact(&run, "allowed_start"), "202", "{run:?}");
    assert_eq!(fact(&run, "allowed_outcome"), "success", "{run:?}");
    let allowed_log = tagged(&run, "allowed-log");
    assert!(
        allowed_log.iter().any(
            |l| l.starts_with("[egress] CONNECT registry.lab.example:443 →")
                && l.ends_with("(allowed)")
        ),
        "{allowed_log:#?}\n{run:?}"
    );
    assert!(
        allowed_log.contains(&"rendered notes.txt -> notes.html"),
        "{allowed_log:#?}"
    );
    // The page was rendered with the package, which came from the lab registry.
    assert_eq!(fact(&run, "notes"), "1", "the note, escaped: {run:?}");
    assert_eq!(fact(&run, "package"), "1", "{run:?}");
    assert_ne!(fact(&run, "registry_requests"), "0", "{run:?}");
}

/// A site added to the declaration while sited runs: `apply` restarts sited, and the new
/// site's first turn runs with no manual step. A later change while a build of that site runs
/// is deferred by name (and `check` reports it, and an apply run again says so) until an apply
/// finds the build ended.
const ADDED_SITE: &str = r#"
echo "health=$(curl -sS -o /dev/null -w '%{http_code}' --unix-socket $sock $base/health)"
pid_before=$(systemctl show -P MainPID atelier-sited@example.service)
echo "pid_before=$pid_before"
# Runs `atelier-provision $1`, printing its exit status as `$2=` and its output under `$2| `.
provision() {
  atelier-provision "$1" --declaration /root/instance.json > "/tmp/$2" 2>&1
  echo "$2=$?"
  sed "s/^/$2| /" "/tmp/$2"
}
edit() { python3 -c "import json,sys; d=json.load(open('/root/instance.json')); exec(sys.argv[1]); json.dump(d, open('/root/instance.json','w'))" "$1"; }
edit 'd["sites"].append({"slug": "collection", "domain": "www.example.org"}); d["serving"]["aliases"] = {"example.org": "collection"}'
provision apply apply2
lab_gate 2
echo "sited_restarted=$([ "$(systemctl show -P MainPID atelier-sited@example.service)" != "$pid_before" ] && echo yes || echo no)"
create_site collection www.example.org
id=$(start_session collection '"Write the home page."')
echo "start=$(cat /tmp/start-status)"
follow "$id" | sed 's/^/turn| /'
echo "page=$(cat $ws1/src/index.html)"
# The build goes on until the script lets it (a file in the workspace, which the door shows;
# the template's build.sh ends in src/).
printf 'while [ ! -e ../release-build ]; do sleep 0.1; done\n' >> $ws1/build.sh
build=$(start_build collection)
for _ in $(seq 100); do
  systemctl list-units --plain --no-legend --state=active 'atelier-example-s2-build@*' | grep -q . && break
  sleep 0.1
done
edit 'd["limits"]["releases_retained"] = 5'
provision apply apply3
provision check check3
provision apply apply3b
touch $ws1/release-build
wait_build "$build" collection build
provision apply apply4
provision check check4
if tr '\0' '\n' < /proc/$(systemctl show -P MainPID atelier-sited@example.service)/environ | grep -qx 'ATELIER_RELEASES_RETAINED=5'; then
  echo "sited_reads_new_env=yes"
else
  echo "sited_reads_new_env=no"
fi
lab_down
exit 0
"#;

#[test]
fn a_site_added_while_sited_runs_gets_its_first_turn_and_a_restart_waits_for_live_runs() {
    let declaration = lab_declaration(&[LAB_HOST], Some("https://model.lab.example"), 120_000);
    let mut decl: Value = serde_json::from_str(&declaration).expect("the declaration");
    decl["sites"] = serde_json::json!([{ "slug": "archive", "domain": "archive.example.net",
        "webspace": "/srv/legacy-www/archive-example" }]);
    decl["serving"]["aliases"] = serde_json::json!({});
    let run = run_real_agent(decl.to_string(), ADDED_SITE, "");
    let restarts_sited = |l: &&str| {
        l.contains("run systemctl try-restart") && l.contains("atelier-sited@example.service")
    };

    assert_eq!(fact(&run, "health"), "200", "{run:?}");
    assert_eq!(fact(&run, "apply2"), "0", "{run:?}");
    assert!(tagged(&run, "apply2").iter().any(restarts_sited), "{run:?}");
    assert_eq!(fact(&run, "sited_restarted"), "yes", "{run:?}");
    assert_eq!(fact(&run, "create_collection"), "201", "{run:?}");
    assert_eq!(fact(&run, "start"), "201", "{run:?}");
    let turn = events(&run, "turn");
    assert_eq!(
        turn.last().map(|e| (e["type"].clone(), e["state"].clone())),
        Some(("turn_end".into(), "idle".into())),
        "{run:?}"
    );
    assert_eq!(fact(&run, "page"), LAB_PAGE, "{run:?}");

    // Under the live build: deferred, named, reported as drift.
    assert_eq!(fact(&run, "apply3"), "3", "{run:?}");
    let deferred: Vec<&str> = tagged(&run, "apply3")
        .into_iter()
        .filter(|l| l.starts_with("deferred"))
        .collect();
    assert_eq!(deferred.len(), 1, "{run:?}");
    assert!(
        deferred[0].contains("restart atelier-sited@example.service deferred")
            && deferred[0].contains("/etc/atelier/example/env")
            && deferred[0].contains("atelier-example-s2-build@"),
        "{run:?}"
    );
    assert_eq!(fact(&run, "check3"), "1", "{run:?}");
    // Run again with nothing else to change: the restart is still deferred, and said so.
    assert_eq!(fact(&run, "apply3b"), "3", "{run:?}");
    let held: Vec<&str> = tagged(&run, "apply3b")
        .into_iter()
        .filter(|l| !l.ends_with(" actions"))
        .collect();
    assert!(
        held.iter().any(|l| l.starts_with("deferred")
            && l.contains("restart atelier-sited@example.service deferred")),
        "{run:?}"
    );
    assert!(!held.iter().any(|l| l.starts_with("awaiting")), "{run:?}");
    assert!(
        tagged(&run, "check3")
            .iter()
            .any(|l| l.contains("restart_pending") && l.contains("atelier-sited@example.service")),
        "{run:?}"
    );
    assert_eq!(fact(&run, "build_outcome"), "success", "{run:?}");
    // Once the build ended: restarted, and nothing drifts.
    assert_eq!(fact(&run, "apply4"), "0", "{run:?}");
    assert!(tagged(&run, "apply4").iter().any(restarts_sited), "{run:?}");
    assert_eq!(fact(&run, "check4"), "0", "{run:?}");
    assert_eq!(fact(&run, "sited_reads_new_env"), "yes", "{run:?}");
}

/// The real pi against the real local model (llama.cpp serving SmolLM2, from
/// `scripts/local-model`) on the lab network's loopback, fronted by the lab model under the
/// lab's TLS name: the session carries what the model really said.
const LOCAL_MODEL_TURN: &str = r#"
create_site collection www.example.org
ip netns exec $labns $LLAMA_PYTHON -m llama_cpp.server --model $LLAMA_MODEL --host 127.0.0.1 \
  --port 8081 --n_ctx 2048 > /root/llama.log 2>&1 &
for _ in $(seq 240); do
  ip netns exec $labns curl -sf -o /dev/null http://127.0.0.1:8081/v1/models && break
  sleep 0.5
done
echo "llama_ready=$(ip netns exec $labns curl -sf -o /dev/null http://127.0.0.1:8081/v1/models && echo yes || echo no)"
id=$(start_session collection '"Say hello to the visitors of the museum in one sentence."')
echo "start=$(cat /tmp/start-status)"
follow "$id" | sed 's/^/local| /'
echo "forwarded=$(grep -c '"path":"/v1/chat/completions"' /root/lab-requests.jsonl)"
tail -n 5 /root/llama.log | sed 's/^/llama-log| /'
kill %2 2>/dev/null
lab_down
exit 0
"#;

#[test]
fn the_real_pi_talks_to_the_real_local_model_through_the_gate() {
    assert_local_model_turn(pi_declaration());
}

#[test]
fn atelier_agent_talks_to_the_real_local_model_through_the_gate() {
    let bin = format!("{}/atelier-agent", atelier_layout::paths::BIN_DIR);
    assert_local_model_turn(openai_declaration_with("atelier", &bin));
}

/// Runs [`LOCAL_MODEL_TURN`] with the agent `declaration` names: the session carries the real
/// model's words.
fn assert_local_model_turn(declaration: String) {
    let install = atelier_local_model::Install::find().expect("the real local model");
    let script = LOCAL_MODEL_TURN
        .replace("$LLAMA_PYTHON", &install.python.to_string_lossy())
        .replace("$LLAMA_MODEL", &install.model.to_string_lossy());
    let run = run_real_agent_with_lab(declaration, &script, "", "--upstream http://127.0.0.1:8081");
    assert_eq!(fact(&run, "llama_ready"), "yes", "{run:?}");
    assert_eq!(fact(&run, "start"), "201", "{run:?}");
    let turn = events(&run, "local");
    assert_eq!(
        turn.last().map(|e| e["state"].clone()),
        Some("idle".into()),
        "{run:?}"
    );
    assert_model_relayed(&run, &turn, "openai");
    // The model's own words: a text event that is neither a gate decision nor an error.
    let said: Vec<&str> = turn
        .iter()
        .filter(|e| e["type"] == "text" && e["egress"].is_null())
        .filter_map(|e| e["text"].as_str())
        .filter(|t| !t.starts_with("pi error") && !t.contains("error"))
        .collect();
    assert!(
        said.iter().any(|t| t.split_whitespace().count() >= 3),
        "the model said something: {said:?}\n{run:?}"
    );
    assert!(turn.iter().any(|e| e["type"] == "result"), "{run:?}");
    assert_ne!(fact(&run, "forwarded"), "0", "{run:?}");
}

/// The real opencode runs a turn as the site's identity with every configuration source a
/// workspace or its own state can hold planted: a project `opencode.json` (an instruction
/// file, a local MCP server), `.opencode/` agents, commands and a plugin, Claude Code's files
/// and skill trees, a credential store with a `wellknown` entry and a provider SDK in its
/// cache. The model sees only the driver's statement, and nothing planted runs. Then a console
/// account in the turn's database refuses the driver by name.
const OPENCODE_TURN: &str = r#"
create_site collection www.example.org
plant() { # path content
  install -D -o atelier-example -g atelier-example -m 0660 /dev/stdin "$ws1/$1" <<<"$2"
}
state=/var/lib/atelier/example/agents/s1/turn/state
plant_state() { # path content
  install -D -o atelier-a-example_1 -g atelier-example -m 0600 /dev/stdin "$state/$1" <<<"$2"
  chown -R atelier-a-example_1 "$state"
}
plant AGENTS.md '# Brief. brief-canary-7f3a'
plant opencode.json '{"instructions":["planted-instructions.md"],"mcp":{"planted":{"type":"local","command":["/usr/bin/touch","/tmp/planted-mcp-ran"]}}}'
plant planted-instructions.md 'planted-instructions-canary'
plant .opencode/agent/planted.md $'---\ndescription: planted-agent-canary\n---\nplanted'
plant .opencode/command/planted.md $'---\ndescription: planted-command-canary\n---\nplanted'
plant .opencode/plugin/planted.js 'require("fs").writeFileSync("/var/lib/atelier/example/sites/collection/planted-plugin-ran", "yes"); export const Planted = async () => ({});'
plant CLAUDE.md 'planted-claude-md-canary'
plant .claude/skills/planted/SKILL.md $'---\nname: planted\ndescription: planted-skill-canary\n---\nplanted'
plant .agents/skills/planted/SKILL.md $'---\nname: planted2\ndescription: planted-agents-skill-canary\n---\nplanted'
plant_state data/opencode/auth.json '{"planted":{"type":"wellknown","key":"k","token":"planted-wellknown-canary"}}'
plant_state cache/opencode/package.json '{"dependencies":{"@ai-sdk/openai-compatible":"9.9.9"}}'
plant_state cache/opencode/node_modules/@ai-sdk/openai-compatible/package.json '{"name":"@ai-sdk/openai-compatible","version":"9.9.9","main":"index.js"}'
plant_state cache/opencode/node_modules/@ai-sdk/openai-compatible/index.js 'require("fs").writeFileSync("/var/lib/atelier/example/sites/collection/planted-sdk-ran", "yes"); throw new Error("planted sdk");'
id=$(start_session collection '"Write the home page. prompt-canary-91c2"')
echo "start=$(cat /tmp/start-status)"
follow "$id" | sed 's/^/turn1| /'
echo "page=$(cat $ws1/src/index.html)"
echo "ran=$(ls $ws1/planted-plugin-ran $ws1/planted-sdk-ran /tmp/planted-mcp-ran 2>/dev/null | wc -l)"
echo "stated=$(ls /var/lib/atelier/example/agents/s1/turn/stated/opencode | tr '\n' ',')"
echo "db_owner=$(stat -c %U $state/opencode.db)"
echo "canary=$(sited_log | grep -c 'the opencode canary probe passed')"
echo "canary_scratch_left=$(ls $state | grep -c canary-probe)"
echo "requests_after_turn1=$(wc -l < /root/lab-requests.jsonl)"
echo "health=$(curl -sS --unix-socket $sock $base/health)"
# A console account in the turn's database: the next session is refused, naming it.
python3 - "$state/opencode.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("insert into account values ('acc_planted', 'someone@example.org', 'https://console.example.org', 'a', 'r', null, 0, 0)")
db.commit()
PY
id2=$(start_session collection '"Again."')
echo "account_start=$(cat /tmp/start-status)"
echo "account_body=$(cat /tmp/start)"
requests
sited_log | tail -n 20 | sed 's/^/sited-log| /'
journalctl -b -u atelier-example-s1-gate.service -o cat --no-pager | grep egress | tail -n 20 | sed 's/^/gate-log| /'
sed 's/^/lab-log| /' /root/lab-model.log
lab_down
exit 0
"#;

#[test]
fn the_real_opencode_runs_confined_loads_nothing_planted_and_a_console_account_refuses_it() {
    let run = run_real_agent(openai_declaration("opencode"), OPENCODE_TURN, "");
    assert_eq!(fact(&run, "start"), "201", "{run:?}");
    let turn1 = events(&run, "turn1");
    let types: Vec<&str> = turn1
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("<none>"))
        .collect();
    for wanted in ["turn_start", "tool", "text", "result", "turn_end"] {
        assert!(types.contains(&wanted), "no {wanted} in {types:?}\n{run:?}");
    }
    assert_eq!(
        turn1.last().map(|e| e["state"].clone()),
        Some("idle".into()),
        "{run:?}"
    );
    // Through the model relay, and nothing else (no registry, no update, no console).
    assert_model_relayed(&run, &turn1, "openai");
    assert_model_key_added(
        &run,
        "/v1/chat/completions",
        "authorization",
        "model_bearer_sha256",
    );
    assert_eq!(fact(&run, "page"), LAB_PAGE, "{run:?}");
    assert_eq!(fact(&run, "ran"), "0", "no planted code ran: {run:?}");
    assert_eq!(fact(&run, "stated"), "brief.md,", "{run:?}");
    assert_eq!(fact(&run, "db_owner"), "atelier-a-example_1", "{run:?}");
    assert_health_reports(&run, "opencode", "opencode");
    // Before the first turn the probe planted a canary in each source in a scratch tree: the
    // control saw every one, the turn's restriction none (`shared/agents`' test runs the same
    // probe with a switch missing and names the source).
    assert_eq!(fact(&run, "canary"), "1", "{run:?}");
    assert_eq!(fact(&run, "canary_scratch_left"), "0", "{run:?}");

    let requests = recorded_requests(&run);
    let turn1_calls: usize = fact(&run, "requests_after_turn1").parse().unwrap_or(0);
    let calls: Vec<&Value> = requests[..turn1_calls]
        .iter()
        .filter(|r| r["path"] == "/v1/chat/completions")
        .collect();
    assert!(calls.len() >= 2, "two model calls at least: {run:?}");
    for call in &calls {
        assert_nothing_planted(
            call,
            &[
                "planted-instructions-canary",
                "planted-agent-canary",
                "planted-command-canary",
                "planted-claude-md-canary",
                "planted-skill-canary",
                "planted-agents-skill-canary",
                "planted-wellknown-canary",
                "planted_",
            ],
        );
        let tools = offered_tools(call);
        for denied in ["bash", "webfetch", "websearch"] {
            assert!(!tools.contains(&denied), "{denied} offered: {tools:?}");
        }
    }
    let with_tools: Vec<&&Value> = calls
        .iter()
        .filter(|c| c["body"]["tools"].as_array().is_some_and(|t| !t.is_empty()))
        .collect();
    let first_call = with_tools.first().map(|c| &c["body"]);
    let first = first_call.map(Value::to_string).unwrap_or_default();
    assert!(first.contains("prompt-canary-91c2"), "the prompt: {first}");
    assert!(first.contains("brief-canary-7f3a"), "the brief: {first}");
    // The editor's words exactly (on opencode's argv they arrived in quotes).
    let texts = first_call.map(user_texts).unwrap_or_default();
    assert!(
        texts.contains(&"Write the home page. prompt-canary-91c2"),
        "{texts:?}"
    );

    // The planted console account refuses the driver before anything runs.
    assert_eq!(fact(&run, "account_start"), "503", "{run:?}");
    let body = fact(&run, "account_body");
    assert!(
        body.contains("confinement.agent_cli_unsupported"),
        "{body}\n{run:?}"
    );
    assert!(
        tagged(&run, "sited-log")
            .iter()
            .any(|l| l.contains("console account")),
        "the log names the account: {run:?}"
    );
}

/// Atelier's own agent, `atelier-agent`, runs a turn confined like the real CLIs: as the site's
/// identity in the turn door, its model (the lab's OpenAI chat completions) reached only through
/// the gate. Its scripted write lands and is committed alone; a second message resumes the
/// conversation (the lab sees the first turn's prompt again) and its write through a symlink
/// planted in the workspace is refused by name, the model reading the refusal, the link's
/// target untouched.
const ATELIER_TURN: &str = r#"
create_site collection www.example.org
state=/var/lib/atelier/example/agents/s1/turn/state
id=$(start_session collection '"Write the home page. prompt-canary-91c2"')
echo "start=$(cat /tmp/start-status)"
follow "$id" | sed 's/^/turn1| /'
echo "page=$(cat $ws1/src/index.html)"
echo "commit1_files=$(git_in $ws1 show --name-only --format= HEAD | tr '\n' ',')"
echo "style=$(grep -c 'max-width: 60rem' $ws1/src/style.css)"
echo "conversation_owner=$(stat -c %U $state/atelier-agent/*.json)"
echo "requests_after_turn1=$(wc -l < /root/lab-requests.jsonl)"
echo "health=$(curl -sS --unix-socket $sock $base/health)"
echo "gate_status=$(systemctl show -P StatusText atelier-example-s1-gate.service)"
# The page becomes a link out of the workspace; the next scripted write goes through it.
printf 'outside-untouched\n' > /root/outside.html
ln -sfn /root/outside.html $ws1/src/index.html
chown -h atelier-example:atelier-example $ws1/src/index.html
api -o /tmp/msg -w 'message=%{http_code}\n' -d "{\"message\":\"Write it again. second-canary-55d0\",$actor}" $base/v1/sessions/$id/messages
timeout 120 curl -sS -N --unix-socket $sock -H "Authorization: Bearer $token" "$base/v1/sessions/$id/events?after=-1" | sed -n 's/^data: //p' | sed 's/^/all| /'
echo "outside=$(cat /root/outside.html)"
requests
key_facts
sited_log | tail -n 20 | sed 's/^/sited-log| /'
lab_down
exit 0
"#;

/// The lab model's opt-in replace for an atelier turn: after its write, one exact span of the
/// basic template's stylesheet changes through the agent's `edit` tool.
const ATELIER_REPLACE: &str =
    "--replace-path $ws1/src/style.css --replace-old 'max-width: 48rem' --replace-new 'max-width: 60rem'";

#[test]
fn atelier_agent_runs_confined_reaches_its_model_only_through_the_gate_and_resumes() {
    let bin = format!("{}/atelier-agent", atelier_layout::paths::BIN_DIR);
    let declaration = openai_declaration_with("atelier", &bin);
    let run = run_real_agent_with_lab(declaration, ATELIER_TURN, "", ATELIER_REPLACE);
    assert_eq!(fact(&run, "start"), "201", "{run:?}");
    assert_scripted_write_turn(&run, "turn1");
    let tools: Vec<Value> = events(&run, "turn1")
        .iter()
        .filter(|e| e["type"] == "tool")
        .map(|e| e["name"].clone())
        .collect();
    assert_eq!(tools, ["write", "edit"], "{run:?}");
    assert_eq!(fact(&run, "page"), LAB_PAGE, "{run:?}");
    assert_eq!(fact(&run, "style"), "1", "the exact replace: {run:?}");
    assert_eq!(
        fact(&run, "commit1_files"),
        "src/index.html,src/style.css,",
        "the commit holds the write and the replace: {run:?}"
    );
    assert_eq!(
        fact(&run, "conversation_owner"),
        "atelier-a-example_1",
        "{run:?}"
    );
    let health: Value = serde_json::from_str(fact(&run, "health")).expect("/health is JSON");
    let entry = health["drivers"]
        .as_array()
        .and_then(|drivers| drivers.iter().find(|d| d["id"] == "atelier"))
        .expect("atelier in /health");
    assert_eq!(entry["available"], true, "{health}");
    assert_eq!(entry["is_default"], true, "{health}");
    // The gate is idle after the turn, and says so.
    let gate_status = fact(&run, "gate_status");
    assert!(
        gate_status.starts_with("idle; serving ") && gate_status.contains("turn"),
        "{run:?}"
    );

    // The second turn: resumed, and refused through the planted link.
    assert_eq!(fact(&run, "message"), "200", "{run:?}");
    let all = events(&run, "all");
    assert_eq!(
        all.last().map(|e| e["state"].clone()),
        Some("idle".into()),
        "{run:?}"
    );
    assert_eq!(fact(&run, "outside"), "outside-untouched", "{run:?}");
    let requests = recorded_requests(&run);
    let completions = || {
        requests
            .iter()
            .filter(|r| r["path"] == "/v1/chat/completions")
    };
    // Every call carried the declared key, which the gate's relay added.
    assert_model_key_added(
        &run,
        "/v1/chat/completions",
        "authorization",
        "model_bearer_sha256",
    );
    assert_key_held_by_the_gate_alone(&run);
    let calls: Vec<String> = completions().map(|r| r["body"].to_string()).collect();
    let turn1_calls: usize = fact(&run, "requests_after_turn1").parse().unwrap_or(0);
    // The editor's words exactly, read from atelier-agent's stdin, in both turns.
    let first_body: Value = serde_json::from_str(&calls[0]).expect("a JSON body");
    assert_eq!(
        user_texts(&first_body),
        ["Write the home page. prompt-canary-91c2"],
        "{run:?}"
    );
    let last_body: Value = serde_json::from_str(calls.last().expect("calls")).expect("a JSON body");
    assert_eq!(
        user_texts(&last_body),
        [
            "Write the home page. prompt-canary-91c2",
            "Write it again. second-canary-55d0"
        ],
        "{run:?}"
    );
    let second: Vec<&String> = calls
        .iter()
        .filter(|body| body.contains("second-canary-55d0"))
        .collect();
    assert!(
        !second.is_empty(),
        "the second turn reached the model: {run:?}"
    );
    assert!(
        second
            .iter()
            .all(|body| body.contains("prompt-canary-91c2")),
        "the resumed turn carries the first turn's messages: {run:?}"
    );
    assert!(
        second.iter().any(|body| body.contains("refused: symlink")),
        "the model read the named refusal: {run:?}"
    );
    assert!(turn1_calls >= 2, "{run:?}");
}

/// atelier-agent's and Claude Code's name for the Publication API stand-in's one tool: the
/// server every driver attaches (`dedalo_publication`) and the tool.
const MCP_SEARCH_TOOL: &str = "mcp__dedalo_publication__publication_search";
/// opencode's name for the same tool: the server's name and the tool's, joined by `_`.
const OPENCODE_SEARCH_TOOL: &str = "dedalo_publication_publication_search";

/// A confined turn whose model (the lab's, opted in) first calls the Publication API's search
/// tool through the turn door's MCP relay, then writes. The key file's SHA-256 is printed; the
/// key itself is looked for in everything the agent kept in its HOME or sent its model.
const MCP_TURN: &str = r#"
create_site collection www.example.org
home=/var/lib/atelier/example/agents/s1/turn
key=/etc/atelier/example/credentials/PUBLICATION_API_KEY
echo "key_sha256=$(sha256sum < $key | cut -d' ' -f1)"
id=$(start_session collection '"Look the collection up, then write the home page."')
echo "start=$(cat /tmp/start-status)"
follow "$id" > /tmp/turn1
sed 's/^/turn1| /' /tmp/turn1
echo "page=$(cat $ws1/src/index.html)"
echo "key_held_by_agent=$(grep -rslF -f $key $home /root/lab-requests.jsonl /tmp/turn1 | wc -l)"
requests
journalctl -b -u atelier-example-s1-gate.service -o cat --no-pager | tail -n 20 | sed 's/^/gate-log| /'
sited_log | tail -n 20 | sed 's/^/sited-log| /'
lab_down
exit 0
"#;

#[test]
fn atelier_agent_calls_the_publication_api_through_the_relay_which_alone_adds_the_key() {
    let bin = format!("{}/atelier-agent", atelier_layout::paths::BIN_DIR);
    let declaration = serde_json::from_str(&openai_declaration_with("atelier", &bin))
        .expect("the declaration is JSON");
    assert_publication_api_call_through_the_relay(
        declaration,
        "/v1/chat/completions",
        &[MCP_SEARCH_TOOL, "write"],
        &["edit", "glob", "grep", "list", "read", "write"],
    );
}

#[test]
fn the_real_claude_code_calls_the_publication_api_through_the_relay_which_alone_adds_the_key() {
    let declaration = lab_declaration(&[LAB_HOST], Some("https://model.lab.example"), 120_000);
    let declaration = serde_json::from_str(&declaration).expect("the declaration is JSON");
    // With only the stated built-in tools (no ToolSearch), Claude Code offers the MCP tools
    // themselves, so the model calls the search first.
    assert_publication_api_call_through_the_relay(
        declaration,
        "/v1/messages",
        &[MCP_SEARCH_TOOL, "Write"],
        &["Edit", "Glob", "Grep", "Read", "Write"],
    );
}

#[test]
fn the_real_opencode_calls_the_publication_api_through_the_relay_which_alone_adds_the_key() {
    let declaration =
        serde_json::from_str(&openai_declaration("opencode")).expect("the declaration is JSON");
    assert_publication_api_call_through_the_relay(
        declaration,
        "/v1/chat/completions",
        &[OPENCODE_SEARCH_TOOL, "write"],
        // opencode's own to-do list stays: it writes only to opencode's database.
        &["edit", "glob", "grep", "read", "todowrite", "write"],
    );
}

/// [`MCP_TURN`] with `declaration`'s driver, whose model requests go to `model_path` and whose
/// session shows the calls of `tools` (the search among them, the write last), ending idle;
/// the search offered beside exactly `offered` (sorted); the relay's decisions in the session; the stand-in's record back at the model; every
/// request the stand-in saw carrying the declared key, which the agent never held.
fn assert_publication_api_call_through_the_relay(
    mut declaration: Value,
    model_path: &str,
    tools: &[&str],
    offered: &[&str],
) {
    // The Publication API stand-in, on the loopback the box shares; the declaration points
    // the relay at it (the relay posts to the declared URL's `/mcp`).
    let publication = McpServer::start().expect("the MCP stand-in");
    declaration["publication_api"]["url"] = format!("http://{}", publication.addr).into();
    let declaration = serde_json::to_string_pretty(&declaration).expect("serializing it");
    let run = run_real_agent_with_lab(
        declaration,
        MCP_TURN,
        "",
        &format!("--call-mcp-tool {SEARCH_TOOL}"),
    );
    assert_eq!(fact(&run, "start"), "201", "{run:?}");

    // The turn: the search, then the write, ending idle; the relay's decisions are events.
    let turn = events(&run, "turn1");
    assert_eq!(
        turn.last().map(|e| e["state"].clone()),
        Some("idle".into()),
        "{run:?}"
    );
    let called: Vec<&str> = turn
        .iter()
        .filter(|e| e["type"] == "tool")
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(called, tools, "{run:?}");
    assert_eq!(fact(&run, "page"), LAB_PAGE, "{run:?}");
    let relayed: Vec<&Value> = turn
        .iter()
        .filter(|e| e["egress"]["host"] == "mcp")
        .collect();
    assert!(!relayed.is_empty(), "the relay's decisions: {run:?}");
    assert!(
        relayed.iter().all(|e| e["egress"]["verdict"] == "relayed"),
        "every MCP request was relayed: {run:?}"
    );

    // The model was offered the tool, called it, and read the stand-in's record.
    let calls: Vec<Value> = recorded_requests(&run)
        .into_iter()
        .filter(|r| r["path"] == model_path)
        .collect();
    assert!(
        calls.len() > tools.len(),
        "each call, then the final text: {run:?}"
    );
    // (Not by position: a CLI may ask its model other things too, as opencode asks a title.)
    let search = tools
        .iter()
        .find(|tool| tool.ends_with(SEARCH_TOOL))
        .expect("the search is among the calls");
    let offering = calls
        .iter()
        .map(offered_tools)
        .find(|offered| offered.contains(search))
        .unwrap_or_else(|| panic!("no request offered {search}: {run:?}"));
    // Beside it, exactly the driver's stated tools: a CLI's new release that offers more fails
    // here rather than in a user's turn.
    let mut offering: Vec<&str> = offering.into_iter().filter(|t| t != search).collect();
    offering.sort_unstable();
    assert_eq!(offering, offered, "{run:?}");
    // A request after the search ends with its result (a `tool` message, or the user's
    // `tool_result` block), which holds the record.
    let last_message = |call: &Value| call["body"]["messages"].as_array()?.last().cloned();
    assert!(
        calls
            .iter()
            .filter_map(last_message)
            .any(|last| last["content"].to_string().contains(RECORD_CANARY)),
        "the tool's result reached the model: {run:?}"
    );

    // The stand-in: listed and called through the relay, every request with the declared key
    // as the relay's X-API-Key, which the agent never held.
    let seen = publication.seen();
    let methods: Vec<String> = seen
        .iter()
        .filter_map(|r| r.json()["method"].as_str().map(str::to_owned))
        .collect();
    assert!(
        methods.iter().any(|m| m == "tools/list") && methods.iter().any(|m| m == "tools/call"),
        "{methods:?}"
    );
    let call = seen
        .iter()
        .map(|r| r.json())
        .find(|body| body["method"] == "tools/call")
        .expect("the call");
    assert_eq!(call["params"]["name"], SEARCH_TOOL, "{call}");
    let declared = format!("sha256:{}", fact(&run, "key_sha256"));
    for request in &seen {
        let keys: Vec<String> = request
            .headers
            .iter()
            .filter(|(name, _)| name == "x-api-key")
            .map(|(_, value)| fingerprint(value.as_bytes()))
            .collect();
        assert_eq!(
            keys,
            std::slice::from_ref(&declared),
            "{} {}",
            request.method,
            request.path
        );
    }
    assert_eq!(fact(&run, "key_held_by_agent"), "0", "{run:?}");
}

/// How many turns each driver runs in the agent benchmark.
const BENCH_ROUNDS: usize = 5;

/// The agent benchmark: in one box, one site, the three drivers take turns (atelier, Claude
/// Code, opencode, then again, `$ROUNDS` times), each a new session against the lab model.
/// Each round prints the instants before the session request and after its last event; the
/// lab stamps each request it receives; the sampler prints each turn unit's peak memory.
const AGENTS_BENCH: &str = r#"
create_site collection www.example.org
/usr/local/bin/atelier-peak-rss --root /sys/fs/cgroup --unit-prefix atelier-example-s1-turn@ \
  --stop-file /tmp/rss.stop > /tmp/rss.out 2>&1 &
rss_pid=$!
for round in $(seq $ROUNDS); do
  for driver in atelier claude_code opencode; do
    t0=$(date +%s%6N)
    api -o /tmp/start -w '%{http_code}' -d "{\"prompt\":\"Write the home page.\",\"driver\":\"$driver\",$actor}" \
      $base/v1/sites/collection/sessions > /tmp/start-status
    id=$(sed -n 's/.*"session_id":"\([^"]*\)".*/\1/p' /tmp/start)
    follow "$id" > /tmp/turn
    t1=$(date +%s%6N)
    echo "round| $driver $(cat /tmp/start-status) $t0 $t1 $(tail -n 1 /tmp/turn | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p')"
  done
done
touch /tmp/rss.stop
wait $rss_pid
sed 's/^/rss| /' /tmp/rss.out
# sited's connect() to the door, then PID 1's lines for the instance it makes: Starting once
# the run's process is forked and in its cgroup, Started once the program runs in the sandbox.
journalctl -b -o short-unix --no-pager -u atelier-sited@example.service | grep 'connected to the door' | sed 's/^/door-connect| /'
journalctl -b -o short-unix --no-pager _PID=1 | grep 'Starting atelier-example-s1-turn@' | sed 's/^/door-starting| /'
journalctl -b -o short-unix --no-pager _PID=1 | grep 'Started atelier-example-s1-turn@' | sed 's/^/door-started| /'
journalctl -b -o short-unix --no-pager -u atelier-example-s1-gate.service | grep -i connect | sed 's/^/gate-connect| /'
requests
lab_down
exit 0
"#;

/// One round of the benchmark as the box printed it.
#[derive(Debug)]
struct Round<'r> {
    driver: &'r str,
    status: &'r str,
    started_us: u128,
    ended_us: u128,
    end_state: &'r str,
}

/// The rounds, in order.
fn rounds(run: &BoxRun) -> Vec<Round<'_>> {
    tagged(run, "round")
        .into_iter()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let instant = |i: usize| fields.get(i).and_then(|f| f.parse().ok()).unwrap_or(0);
            Round {
                driver: fields.first().copied().unwrap_or(""),
                status: fields.get(1).copied().unwrap_or(""),
                started_us: instant(2),
                ended_us: instant(3),
                end_state: fields.get(4).copied().unwrap_or(""),
            }
        })
        .collect()
}

/// One driver's medians in the agent benchmark.
struct Measured<'d> {
    driver: &'d str,
    first_request_us: u128,
    connect_to_request_us: u128,
    started_to_request_us: u128,
    door_connect_us: u128,
    door_starting_us: u128,
    door_started_us: u128,
    gate_connect_us: u128,
    peak_kib: u128,
}

/// The instants (wall clock, µs) of the `short-unix` journal lines printed under `tag`.
fn journal_instants(run: &BoxRun, tag: &str) -> Vec<u128> {
    tagged(run, tag)
        .into_iter()
        .filter_map(|line| {
            let (seconds, fraction) = line.split_whitespace().next()?.split_once('.')?;
            let micros = format!("{fraction:0<6}");
            Some(
                seconds.parse::<u128>().ok()? * 1_000_000
                    + micros.get(..6)?.parse::<u128>().ok()?,
            )
        })
        .collect()
}

/// The median of `values` (sorted here); 0 for none.
fn median(mut values: Vec<u128>) -> u128 {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or(0)
}

/// Reported, not asserted as a speed: atelier-agent, the real Claude Code and the real
/// opencode side by side in the same turn door, each timed from sited's connect() to the door
/// (its debug line in the journal) to the lab model's receipt of the first model request,
/// with the same from the session request and where that time goes (the connect(), PID 1's
/// Starting line, the door's program started, its CONNECT reached the gate), and measured by
/// its peak resident memory. The time from the program's
/// start is reported apart: PID 1's set-up of the door's sandbox (its mount namespace above
/// all) comes before any driver's program runs and is the same for all three. Run by `scripts/bench-agents`
/// (release builds); ignored by `cargo test`, as it is a measurement. What is asserted is that
/// every round ran where it was meant to: each session started, ended idle, its door was
/// connected, it reached the model, and its turn unit was sampled.
#[test]
#[ignore = "a benchmark: run scripts/bench-agents"]
fn agents_side_by_side_start_to_first_model_request_and_peak_rss() {
    let mut declaration: Value = serde_json::from_str(&lab_declaration(
        &[LAB_HOST],
        Some("https://model.lab.example"),
        120_000,
    ))
    .expect("the declaration is JSON");
    let agent = &mut declaration["agent"];
    agent["driver"] = "atelier".into();
    agent["bins"]["opencode"] = real_agent("opencode").expect("the real opencode").into();
    agent["bins"]["atelier"] = format!("{}/atelier-agent", atelier_layout::paths::BIN_DIR).into();
    agent["openai_base_url"] = "https://model.lab.example/v1".into();
    agent["openai_model"] = "lab-model".into();
    let script = AGENTS_BENCH.replace("$ROUNDS", &BENCH_ROUNDS.to_string());
    let lab = LAB
        .replace("$LAB_PAGE", LAB_PAGE)
        .replace(
            "$SITED_EXTRA",
            "RUST_LOG=info,atelier_sited::runs::systemd=debug",
        )
        .replace("$LAB_ARGS", "");
    let run = real_agent_box(declaration.to_string())
        .copy(
            env!("CARGO_BIN_EXE_atelier-peak-rss"),
            "/usr/local/bin/atelier-peak-rss",
        )
        .timeout(Duration::from_secs(1800))
        .run(&format!("{PREAMBLE}\n{WAIT_BUILD}\n{lab}\n{script}"))
        .expect("booting systemd in a container");
    run.assert_success();
    assert_eq!(run.fact("apply"), Some("0"), "{run:?}");

    let rounds = rounds(&run);
    assert_eq!(rounds.len(), 3 * BENCH_ROUNDS, "{run:?}");
    let model_requests: Vec<u128> = recorded_requests(&run)
        .iter()
        .filter(|r| {
            r["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/messages") || p.ends_with("/chat/completions"))
        })
        .filter_map(|r| r["received_unix_us"].as_u64().map(u128::from))
        .collect();
    let peaks: Vec<(u128, u128)> = tagged(&run, "rss")
        .into_iter()
        .filter_map(|line| {
            let value = |key: &str| {
                line.split_whitespace()
                    .find_map(|pair| pair.strip_prefix(key))
                    .and_then(|v| v.parse::<u128>().ok())
            };
            Some((value("first_seen_us=")?, value("agent_kib=")?))
        })
        .collect();
    let door_connects = journal_instants(&run, "door-connect");
    let door_starting = journal_instants(&run, "door-starting");
    let door_started = journal_instants(&run, "door-started");
    let gate_connects = journal_instants(&run, "gate-connect");
    let mut report = Vec::new();
    for driver in ["atelier", "claude_code", "opencode"] {
        let (mut starts, mut rss, mut doors, mut connects) = (vec![], vec![], vec![], vec![]);
        let (mut connect_to_request, mut started_to_request) = (vec![], vec![]);
        let (mut door_connects_at, mut door_starting_at) = (vec![], vec![]);
        for round in rounds.iter().filter(|r| r.driver == driver) {
            assert_eq!(round.status, "201", "{round:?}\n{run:?}");
            assert_eq!(round.end_state, "idle", "{round:?}\n{run:?}");
            let within = |at: &u128| (round.started_us..=round.ended_us).contains(at);
            let first_after = |instants: &[u128]| {
                instants
                    .iter()
                    .copied()
                    .filter(within)
                    .min()
                    .map(|at| at - round.started_us)
            };
            let request = first_after(&model_requests)
                .unwrap_or_else(|| panic!("{round:?} reached no model\n{run:?}"));
            let connected = first_after(&door_connects)
                .unwrap_or_else(|| panic!("{round:?}: sited connected to no door\n{run:?}"));
            starts.push(request);
            connect_to_request.push(request.saturating_sub(connected));
            door_connects_at.push(connected);
            door_starting_at.push(first_after(&door_starting).unwrap_or(0));
            let started = first_after(&door_started).unwrap_or(0);
            started_to_request.push(request.saturating_sub(started));
            doors.push(started);
            connects.push(first_after(&gate_connects).unwrap_or(0));
            let peak = peaks
                .iter()
                .filter(|(seen, _)| within(seen))
                .map(|(_, kib)| *kib)
                .max()
                .unwrap_or_else(|| panic!("{round:?}: no turn unit sampled\n{run:?}"));
            rss.push(peak);
        }
        report.push(Measured {
            driver,
            first_request_us: median(starts),
            connect_to_request_us: median(connect_to_request),
            started_to_request_us: median(started_to_request),
            door_connect_us: median(door_connects_at),
            door_starting_us: median(door_starting_at),
            door_started_us: median(doors),
            gate_connect_us: median(connects),
            peak_kib: median(rss),
        });
    }
    let best_cli = |figure: fn(&Measured<'_>) -> u128| {
        report
            .iter()
            .filter(|m| m.driver != "atelier")
            .map(figure)
            .min()
            .unwrap_or(1)
            .max(1) as f64
    };
    let best_connect = best_cli(|m| m.connect_to_request_us);
    let best_started = best_cli(|m| m.started_to_request_us);
    let best_request = best_cli(|m| m.first_request_us);
    let ms = |us: u128| us as f64 / 1000.0;
    let mut text = format!(
        "median of {BENCH_ROUNDS} turns each in the same turn door; connect() is sited's, \
         from its journal line:\n"
    );
    for m in &report {
        text.push_str(&format!(
            "  {:<12} connect() -> first model request {:>8.1} ms ({:.3}x the best CLI)   \
             peak RSS {:>7.1} MiB\n               program started (PID 1's Started line, the \
             sandbox set up) -> first model request {:.1} ms ({:.3}x)\n               from the \
             session request: first model request {:.1} ms ({:.3}x), connect() {:.1} ms, \
             PID 1's Starting line {:.1} ms, door started {:.1} ms, CONNECT at the gate {:.1} \
             ms\n",
            m.driver,
            ms(m.connect_to_request_us),
            m.connect_to_request_us as f64 / best_connect,
            m.peak_kib as f64 / 1024.0,
            ms(m.started_to_request_us),
            m.started_to_request_us as f64 / best_started,
            ms(m.first_request_us),
            m.first_request_us as f64 / best_request,
            ms(m.door_connect_us),
            ms(m.door_starting_us),
            ms(m.door_started_us),
            ms(m.gate_connect_us),
        ));
    }
    eprintln!("{text}");
}

/// The metrics sockets of sited and the site's gate, scraped around and during the events that
/// must move them: a turn (followed over SSE while it runs, then stopped), a build, a refused
/// CONNECT. The monitoring group reads them; anyone else is refused by the socket's mode.
const METRICS: &str = r#"
metrics_dir=/run/atelier/example/metrics
scrape() { curl -sS --max-time 20 --unix-socket $metrics_dir/$1.sock http://metrics/metrics; }
metric() { # daemon series -> its value, 0 while the series is absent
  scrape "$1" | awk -v s="$2" '$1 == s { v = $2 } END { print (v == "" ? 0 : v) }'
}
snapshot() { # tag: every series this test reads, as facts
  echo "$1_started=$(metric sited atelier_sited_turns_started_total)"
  echo "$1_running=$(metric sited atelier_sited_turns_running)"
  echo "$1_interrupted=$(metric sited 'atelier_sited_turns_ended_total{state="interrupted"}')"
  echo "$1_followers=$(metric sited atelier_sited_sse_followers)"
  echo "$1_builds=$(metric sited 'atelier_sited_builds_total{outcome="success"}')"
  echo "$1_build_durations=$(metric sited 'atelier_sited_build_duration_seconds_count{outcome="success"}')"
  echo "$1_refused=$(metric s1-gate 'atelier_gate_connects_refused_total{door="turn",reason="not_in_plan"}')"
  echo "$1_allowed=$(metric s1-gate 'atelier_gate_connects_allowed_total{door="turn"}')"
}
echo "modes=$(stat -c '%n %U:%G %a' $metrics_dir/*.sock | sed "s|$metrics_dir/||" | sort | paste -sd ',')"
useradd --system --no-create-home --groups prometheus scraper
echo "scraper_reads=$(runuser -u scraper -- curl -s -o /dev/null -w '%{http_code}' --unix-socket $metrics_dir/sited.sock http://metrics/metrics)"
runuser -u nobody -- curl -s -o /dev/null --unix-socket $metrics_dir/sited.sock http://metrics/metrics
echo "nobody_curl_exit=$?"
echo "content_type=$(curl -s -o /dev/null -w '%{content_type}' --unix-socket $metrics_dir/sited.sock http://metrics/metrics)"
create_site collection www.example.org
snapshot before

# A turn that writes, then hangs until it is stopped; its stream followed meanwhile.
id=$(start_session collection '"write src/metrics.txt counted\nhang"')
echo "start=$(cat /tmp/start-status)"
for _ in $(seq 1 200); do [ -e $ws1/src/metrics.txt ] && break; sleep 0.05; done
follow "$id" > /tmp/followed &
follower=$!
for _ in $(seq 1 100); do [ "$(metric sited atelier_sited_sse_followers)" = 1 ] && break; sleep 0.05; done
snapshot during
# STATUS= is brought up to date every second.
sited_status() { systemctl show -P StatusText atelier-sited@example.service; }
for _ in $(seq 1 100); do sited_status | grep -q ': 1 turn and' && break; sleep 0.05; done
echo "status_during=$(sited_status)"
api -o /dev/null -w 'stop=%{http_code}\n' -d "{$actor}" $base/v1/sessions/$id/stop
wait $follower
echo "followed_last=$(tail -n 1 /tmp/followed)"
# The turn's end and the stream's close reach the gauges a moment after the client sees them.
for _ in $(seq 1 100); do
  [ "$(metric sited atelier_sited_turns_running)/$(metric sited atelier_sited_sse_followers)" = 0/0 ] && break
  sleep 0.05
done
snapshot after_turn
for _ in $(seq 1 100); do sited_status | grep -q ': 0 turns and' && break; sleep 0.05; done
echo "status_after=$(sited_status)"

build=$(start_build collection)
wait_build "$build" collection build
for _ in $(seq 1 100); do
  [ "$(metric sited 'atelier_sited_builds_total{outcome="success"}')" = 1 ] && break
  sleep 0.05
done
snapshot after_build

# A CONNECT to a host on no plan, as the site's identity would send it.
runuser -u atelier-a-example_1 -- curl -s -o /dev/null -w '%{http_code}' --max-time 20 \
  --unix-socket /run/atelier/example/egress/s1/turn.sock \
  -X CONNECT --request-target not-planned.example.com:443 http://gate/ > /tmp/connect
echo "connect=$(cat /tmp/connect)"
snapshot after_connect
scrape sited | sed 's/^/sited-metrics| /'
scrape s1-gate | sed 's/^/gate-metrics| /'
exit 0
"#;

#[test]
fn the_metrics_sockets_count_a_turn_a_build_and_a_refused_connect_exactly() {
    let bins = built_binaries_dir().expect("locating the built binaries");
    let run = confined_box()
        .install_binaries(&bins, &["atelier-build"])
        .timeout(Duration::from_secs(300))
        .run(&format!("{PREAMBLE}\n{WAIT_BUILD}\n{METRICS}"))
        .expect("booting systemd in a container");
    run.assert_success();
    assert_eq!(fact(&run, "apply"), "0", "{run:?}");
    assert_eq!(
        fact(&run, "modes"),
        "chatd.sock root:prometheus 660,s1-gate.sock root:prometheus 660,\
         s2-gate.sock root:prometheus 660,sited.sock root:prometheus 660",
        "{run:?}"
    );
    assert_eq!(fact(&run, "scraper_reads"), "200", "{run:?}");
    assert_eq!(
        fact(&run, "nobody_curl_exit"),
        "7",
        "a user outside the monitoring group cannot connect: {run:?}"
    );
    assert_eq!(
        fact(&run, "content_type"),
        "application/openmetrics-text; version=1.0.0; charset=utf-8",
        "{run:?}"
    );
    assert_eq!(fact(&run, "start"), "201", "{run:?}");
    assert_eq!(fact(&run, "stop"), "200", "{run:?}");
    // systemctl status tells of the turn while it runs, and of none after.
    assert_eq!(
        fact(&run, "status_during"),
        "serving instance example: 1 turn and 0 builds running",
        "{run:?}"
    );
    assert_eq!(
        fact(&run, "status_after"),
        "serving instance example: 0 turns and 0 builds running",
        "{run:?}"
    );
    assert_eq!(fact(&run, "build_outcome"), "success", "{run:?}");
    assert_eq!(fact(&run, "connect"), "403", "{run:?}");
    // Each snapshot: (started, running, interrupted, followers, builds, build durations,
    // refused, allowed).
    let snapshot = |tag: &str| -> Vec<String> {
        [
            "started",
            "running",
            "interrupted",
            "followers",
            "builds",
            "build_durations",
            "refused",
            "allowed",
        ]
        .iter()
        .map(|series| fact(&run, &format!("{tag}_{series}")).to_owned())
        .collect()
    };
    let expected = |values: [u8; 8]| -> Vec<String> { values.iter().map(u8::to_string).collect() };
    for (tag, values) in [
        ("before", [0, 0, 0, 0, 0, 0, 0, 0]),
        ("during", [1, 1, 0, 1, 0, 0, 0, 0]),
        ("after_turn", [1, 0, 1, 0, 0, 0, 0, 0]),
        ("after_build", [1, 0, 1, 0, 1, 1, 0, 0]),
        ("after_connect", [1, 0, 1, 0, 1, 1, 1, 0]),
    ] {
        assert_eq!(snapshot(tag), expected(values), "{tag}: {run:?}");
    }
}
