//! The provisioned gate on a real systemd: the first connection to site 1's turn socket starts
//! `atelier-example-s1-gate.service` (DynamicUser, the full sandbox), which serves its three
//! listeners; the MCP relay adds the Publication API key from `LoadCredential=` — the key
//! reaches the upstream (nginx on the declared 127.0.0.1:3100) and neither the agent nor the
//! journal; a drop-in adding `--allow-benchmark-range` makes the gate refuse to start, by name.

use atelier_systemd_tests::{built_binaries_dir, repo_root, SystemdBox};

/// The operator's credential value; must reach the upstream's log and nothing else.
const CANARY: &str = "gate-canary-key-41d9e7";

/// A Publication API stand-in on the declared URL: it logs the key it receives and tries to
/// echo it back in a header of its own.
const STAND_IN: &str = r#"
log_format seen_key '$request_method $uri key=$http_x_api_key auth=$http_authorization';
server {
    listen 127.0.0.1:3100;
    access_log /var/log/nginx/stand-in.log seen_key;
    location = /publication/server_api/v2/mcp {
        add_header X-Echoed-Key $http_x_api_key;
        add_header Mcp-Session-Id box-session;
        default_type application/json;
        return 200 '{"jsonrpc":"2.0","id":1,"result":{}}';
    }
}
"#;

/// Runs inside the box, as root; the agent's side runs as the site's identity.
const SCRIPT: &str = r#"
set -uo pipefail
CREDENTIAL_VALUE=$CANARY bash /root/operator-setup.sh
atelier-provision apply --declaration /root/instance.json > /tmp/apply 2>&1; echo "apply=$?"
systemctl start nginx; echo "nginx=$?"
as_site() { runuser -u atelier-a-example_1 -- "$@"; }
egress=/run/atelier/example/egress/s1
echo "sockets=$(ls $egress | sort | tr '\n' ',')"
echo "gate_before=$(systemctl is-active atelier-example-s1-gate.service)"

# CONNECT to a host on no plan: the connection starts the gate, which answers 403.
as_site curl -s -o /dev/null -w '%{http_code}' --max-time 20 --unix-socket $egress/turn.sock \
  -X CONNECT --request-target not-planned.example.com:443 http://gate/ > /tmp/connect 2>/dev/null
echo "connect_status=$(cat /tmp/connect)"
echo "gate_after=$(systemctl is-active atelier-example-s1-gate.service)"
# The decision is a structured journal entry, not only text.
echo "journal_fields=$(journalctl -b -u atelier-example-s1-gate.service -o verbose --no-pager | grep -e 'F_HOST=not-planned.example.com' -e 'F_VERDICT=refused' -e 'F_REASON=not_in_plan' -e 'F_DOOR=turn' | sort -u | wc -l)"
echo "gate_user=$(systemctl show -P DynamicUser atelier-example-s1-gate.service)"

# The MCP relay, as the agent would call it: a forged key and an Authorization header.
as_site curl -s -D /tmp/mcp_headers -o /tmp/mcp_body --max-time 20 --unix-socket $egress/mcp.sock \
  -H 'content-type: application/json' -H 'x-api-key: forged-by-the-agent' \
  -H 'authorization: Bearer agent' -d '{"jsonrpc":"2.0","id":1,"method":"ping"}' http://127.0.0.1:3129/mcp
echo "mcp_status=$(head -n1 /tmp/mcp_headers | tr -d '\r')"
echo "mcp_session=$(grep -i '^mcp-session-id:' /tmp/mcp_headers | tr -d '\r' | cut -d' ' -f2)"
echo "mcp_echoed_header=$(grep -ci '^x-echoed-key' /tmp/mcp_headers)"
echo "mcp_body=$(cat /tmp/mcp_body)"
echo "upstream_saw=$(tail -n1 /var/log/nginx/stand-in.log)"
if cat /tmp/mcp_headers /tmp/mcp_body | grep -q "$CANARY"; then echo "agent_saw_key=yes"; else echo "agent_saw_key=no"; fi
as_site curl -s -o /dev/null -w '%{http_code}' --max-time 20 --unix-socket $egress/mcp.sock \
  -X PUT http://127.0.0.1:3129/mcp > /tmp/put
echo "mcp_put=$(cat /tmp/put)"

# The test-only flag on a provisioned (production) host: refused before READY.
mkdir -p /etc/systemd/system/atelier-example-s1-gate.service.d
exec_start=$(grep '^ExecStart=' /etc/systemd/system/atelier-example-s1-gate.service)
printf '[Service]\nExecStart=\n%s --allow-benchmark-range\nRestart=no\n' "$exec_start" \
  > /etc/systemd/system/atelier-example-s1-gate.service.d/lab.conf
systemctl daemon-reload
systemctl restart atelier-example-s1-gate.service; echo "restart_with_flag=$?"
echo "gate_with_flag=$(systemctl is-active atelier-example-s1-gate.service)"
echo "gate_status=$(systemctl show -P ExecMainStatus atelier-example-s1-gate.service)"
echo "gate_restarts=$(systemctl show -P NRestarts atelier-example-s1-gate.service)"
echo "gate_err=$(journalctl -b -p err -u atelier-example-s1-gate.service -o cat --no-pager | grep -c benchmark_range_in_production)"
exit 0
"#;

#[test]
fn the_provisioned_gate_starts_on_demand_relays_mcp_with_its_own_key_and_refuses_the_lab_flag() {
    let bins = built_binaries_dir().expect("locating the built binaries");
    let run = SystemdBox::new()
        .install_binaries(&bins, &["atelier-provision", "atelier-gate"])
        .copy(
            repo_root().join("deploy/examples/instance.json"),
            "/root/instance.json",
        )
        .copy(
            repo_root().join("deploy/examples/operator-setup.sh"),
            "/root/operator-setup.sh",
        )
        .write("/etc/nginx/conf.d/mcp-stand-in.conf", STAND_IN, 0o644)
        .run(&format!("CANARY={CANARY}\n{SCRIPT}"))
        .expect("booting systemd in a container");
    run.assert_success();
    let fact = |key: &str| run.fact(key).unwrap_or("<missing>");

    assert_eq!(fact("apply"), "0", "{run:?}");
    assert_eq!(fact("nginx"), "0", "{run:?}");
    assert_eq!(fact("sockets"), "build.sock,mcp.sock,turn.sock,", "{run:?}");
    assert_eq!(fact("gate_before"), "inactive", "{run:?}");
    assert_eq!(fact("connect_status"), "403", "{run:?}");
    assert_eq!(fact("gate_after"), "active", "{run:?}");
    assert_eq!(fact("gate_user"), "yes", "{run:?}");
    assert!(
        !run.journal_lines("[egress] refused CONNECT not-planned.example.com:443 — not_in_plan")
            .is_empty(),
        "{run:?}"
    );
    assert_eq!(
        fact("journal_fields"),
        "4",
        "host, verdict, reason and door as fields\n{run:?}"
    );

    assert_eq!(fact("mcp_status"), "HTTP/1.1 200 OK", "{run:?}");
    assert_eq!(fact("mcp_session"), "box-session", "{run:?}");
    assert_eq!(fact("mcp_echoed_header"), "0", "{run:?}");
    assert_eq!(
        fact("mcp_body"),
        r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        "{run:?}"
    );
    assert_eq!(
        fact("upstream_saw"),
        format!("POST /publication/server_api/v2/mcp key={CANARY} auth=-"),
        "the gate's key, not the agent's, and no Authorization\n{run:?}"
    );
    assert_eq!(fact("agent_saw_key"), "no", "{run:?}");
    assert_eq!(fact("mcp_put"), "405", "{run:?}");

    assert_ne!(fact("restart_with_flag"), "0", "{run:?}");
    assert_ne!(fact("gate_with_flag"), "active", "{run:?}");
    // A setting the gate must not run with: 78, named at error priority, never restarted.
    assert_eq!(fact("gate_status"), "78", "{run:?}");
    assert_eq!(fact("gate_restarts"), "0", "{run:?}");
    assert_ne!(fact("gate_err"), "0", "{run:?}");
    assert!(
        !run.journal_lines("benchmark_range_in_production")
            .is_empty(),
        "{run:?}"
    );
    assert!(
        !run.journal.contains(CANARY),
        "the key reached the journal: {run:?}"
    );
}
