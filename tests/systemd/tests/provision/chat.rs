//! The CMS's AI chat runtime as an editor meets it: the example declaration, with its chat
//! block, is applied on a real PID 1; the editor's browser talks only to nginx on the CMS's
//! host (`https://cms.example.org`, the example's self-signed certificate), with nothing but
//! its CMS session cookie. chatd is started by that first request through its socket, asks the
//! CMS who the cookie belongs to, and streams a turn from the real local model
//! (`scripts/local-model`) as NDJSON; a scripted model's tool request round-trips through
//! `tool-result`, and a result for one of the CMS's own MCP bridges reaches the CMS. The CMS
//! and the scripted model are the test's doubles, served from this process on the loopback the
//! box shares; nginx, systemd, chatd and the local model are real.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use atelier_lab_model::cms::{
    CmsState, LabCms, ADMIN_COOKIE, CLIENT_COOKIE, EDITOR_COOKIE, SESSION_COOKIE,
};
use atelier_local_model::LocalModel;
use atelier_systemd_tests::{built_binaries_dir, repo_root, SystemdBox};
use serde_json::{json, Value};

/// Where the example declares its CMS listens.
const CMS_ADDR: &str = "127.0.0.1:3001";
/// An editor bridge of the CMS's own (an MCP connector's), open in the CMS stand-in.
const CMS_BRIDGE: &str = "cms-mcp-bridge-1";
/// The scripted model's id.
const SCRIPTED_MODEL: &str = "scripted-model";
/// What the scripted model says once the browser's tool result is back.
const SCRIPTED_FINAL: &str = "The home page is read.";

/// Runs inside the box. Prints `KEY=value` facts, and each NDJSON line of a chat stream
/// prefixed with its name.
const SCRIPT: &str = r#"
set -uo pipefail
bash /root/operator-setup.sh
atelier-provision apply --declaration /root/instance.json > /tmp/apply 2>&1; echo "apply=$?"
sed 's/^/apply| /' /tmp/apply
# The host's web server, running as on any host that serves a CMS. The box shares the host's
# network: nginx gets a namespace of its own (so nothing listens on the host) and curl joins it.
# chatd reaches the CMS on the box's (the host's) loopback, as on a host.
mkdir -p /etc/systemd/system/nginx.service.d
printf '[Service]\nPrivateNetwork=yes\n' > /etc/systemd/system/nginx.service.d/own-network.conf
systemctl daemon-reload
systemctl start nginx
browser() { nsenter --target "$(systemctl show -P MainPID nginx.service)" --net -- curl "$@"; }
echo "chatd_before=$(systemctl is-active atelier-chatd@example.service)"
echo "sock=$(stat -c '%U:%G %a' /run/atelier/example/chatd.sock)"

base=https://cms.example.org/admin/api/ai
origin=https://cms.example.org
web() { # method path cookie [body] -> prints the status, body in /tmp/body
  local args=(-sk --resolve cms.example.org:443:127.0.0.1 -o /tmp/body -w '%{http_code}' -X "$1")
  [ -n "$3" ] && args+=(-H "Cookie: $SESSION_COOKIE=$3")
  [ $# -ge 4 ] && args+=(-H "Origin: $origin" -H 'Content-Type: application/json' --data-binary "$4")
  browser "${args[@]}" "$base$2"
}
field() { python3 -c 'import json,sys; v=json.load(open("/tmp/body")); print(eval("v"+sys.argv[1]))' "$1"; }

# No session, then a user whose role lacks ai.chat: the CMS's own answers.
echo "nosession=$(web GET '/conversations?scope=site' '') $(cat /tmp/body)"
echo "chatd_after=$(systemctl is-active atelier-chatd@example.service)"
echo "client=$(web GET '/conversations?scope=site' "$CLIENT_COOKIE") $(cat /tmp/body)"
# chatd's metrics socket, scraped around and during each turn below.
metric() { # series -> its value, 0 while the series is absent
  curl -sS --max-time 20 --unix-socket /run/atelier/example/metrics/chatd.sock http://metrics/metrics \
    | awk -v s="$1" '$1 == s { v = $2 } END { print (v == "" ? 0 : v) }'
}
snapshot() { # tag
  echo "$1_started=$(metric 'atelier_chatd_turns_started_total{scope="site"}')"
  echo "$1_done=$(metric 'atelier_chatd_turns_ended_total{outcome="done"}')"
  echo "$1_errors=$(metric 'atelier_chatd_turns_ended_total{outcome="error"}')"
  echo "$1_in_flight=$(metric atelier_chatd_turns_in_flight)"
  echo "$1_first_bytes=$(metric 'atelier_chatd_first_byte_seconds_count{provider="openai-compatible"}')"
  echo "$1_provider_errors=$(metric 'atelier_chatd_provider_errors_total{provider="openai-compatible",class="request"}')"
}
snapshot before

# The administrator configures the local model and chats with it on the site's snapshot.
echo "credential=$(web POST /credentials "$ADMIN_COOKIE" "{\"providerId\":\"openai-compatible\",\"authMode\":\"baseUrl\",\"displayLabel\":\"Local llama\",\"baseUrl\":\"$LLAMA_BASE/v1\"}")"
local_credential=$(field '["credential"]["id"]')
echo "conversation=$(web POST /conversations "$ADMIN_COOKIE" "{\"scope\":\"site\",\"credentialId\":\"$local_credential\",\"modelId\":\"$LLAMA_MODEL\"}")"
conversation=$(field '["conversation"]["id"]')
python3 - "$conversation" > /tmp/turn.json <<'PY'
import json, sys
snapshot = json.load(open("/root/snapshot.json"))
print(json.dumps({"conversationId": sys.argv[1], "snapshot": snapshot,
                  "content": [{"kind": "text", "text": "Say hello to the museum's visitors."}]}))
PY
browser -skN --resolve cms.example.org:443:127.0.0.1 -H "Cookie: $SESSION_COOKIE=$ADMIN_COOKIE" \
  -H "Origin: $origin" -H 'Content-Type: application/json' --data-binary @/tmp/turn.json \
  -D /tmp/turn-headers "$base/chat/site" | sed 's/^/local| /'
echo "turn_type=$(grep -i '^content-type' /tmp/turn-headers | tr -d '\r' | cut -d' ' -f2)"
echo "chatd_running=$(systemctl is-active atelier-chatd@example.service)"
snapshot after_local

# A scripted model asks for a browser tool; the browser answers through tool-result.
web POST /credentials "$ADMIN_COOKIE" "{\"providerId\":\"openai-compatible\",\"authMode\":\"baseUrl\",\"displayLabel\":\"Scripted\",\"baseUrl\":\"$SCRIPTED_BASE/v1\"}" > /dev/null
scripted_credential=$(field '["credential"]["id"]')
web POST /conversations "$ADMIN_COOKIE" "{\"scope\":\"site\",\"credentialId\":\"$scripted_credential\",\"modelId\":\"$SCRIPTED_MODEL\"}" > /dev/null
conversation=$(field '["conversation"]["id"]')
python3 - "$conversation" > /tmp/turn.json <<'PY'
import json, sys
snapshot = json.load(open("/root/snapshot.json"))
print(json.dumps({"conversationId": sys.argv[1], "snapshot": snapshot,
                  "content": [{"kind": "text", "text": "Read the home page."}]}))
PY
browser -skN --resolve cms.example.org:443:127.0.0.1 -H "Cookie: $SESSION_COOKIE=$ADMIN_COOKIE" \
  -H "Origin: $origin" -H 'Content-Type: application/json' --data-binary @/tmp/turn.json \
  "$base/chat/site" > /tmp/tool-stream &
stream=$!
for _ in $(seq 200); do grep -q '"toolRequest"' /tmp/tool-stream && break; sleep 0.1; done
request=$(grep '"toolRequest"' /tmp/tool-stream | head -n 1)
# While the turn waits on the browser, systemctl status tells of it.
status_of_chatd() { systemctl show -P StatusText atelier-chatd@example.service; }
for _ in $(seq 50); do status_of_chatd | grep -q '^1 turn in flight' && break; sleep 0.1; done
echo "status_during=$(status_of_chatd)"
snapshot during_tool
bridge=$(grep '"bridgeReady"' /tmp/tool-stream | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["bridgeId"])')
request_id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["requestId"])' "$request")
echo "tool_result=$(web POST /tool-result "$ADMIN_COOKIE" "{\"bridgeId\":\"$bridge\",\"requestId\":\"$request_id\",\"result\":{\"ok\":true,\"data\":{\"html\":\"<main uid=\\\"n-root\\\"></main>\",\"css\":\"\",\"pageInfo\":{\"part\":1,\"totalParts\":1,\"nextPart\":null}}}}") $(cat /tmp/body)"
wait $stream
sed 's/^/tool| /' /tmp/tool-stream
for _ in $(seq 50); do status_of_chatd | grep -q '^idle' && break; sleep 0.1; done
echo "status_after=$(status_of_chatd)"
snapshot after_tool

# A turn with a provider at base URL $2: its stream printed under the tag $1.
turn_at() {
  web POST /credentials "$ADMIN_COOKIE" "{\"providerId\":\"openai-compatible\",\"authMode\":\"baseUrl\",\"displayLabel\":\"$1\",\"baseUrl\":\"$2\"}" > /dev/null
  local credential=$(field '["credential"]["id"]')
  web POST /conversations "$ADMIN_COOKIE" "{\"scope\":\"site\",\"credentialId\":\"$credential\",\"modelId\":\"$SCRIPTED_MODEL\"}" > /dev/null
  local conversation=$(field '["conversation"]["id"]')
  web POST /chat/site "$ADMIN_COOKIE" "{\"conversationId\":\"$conversation\",\"content\":[{\"kind\":\"text\",\"text\":\"Hello?\"}]}" > /dev/null
  sed "s/^/$1| /" /tmp/body
}

# A provider nobody answers: the turn fails, counted by the failure's class.
turn_at gone http://127.0.0.1:9/v1
snapshot after_gone

# A provider at a link-local address (where a cloud's metadata service answers): reachable from
# the host, never from chatd's unit. The address is the box's, which is the host's: removed at
# once, and never the metadata service's own.
ip addr add 169.254.77.1/32 dev lo
python3 - > /tmp/link-local.log 2>&1 <<'PY' &
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("169.254.77.1", 8099))
s.listen(8)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    print("connected", flush=True)
    c.close()
PY
listener=$!
for _ in $(seq 100); do grep -q listening /tmp/link-local.log && break; sleep 0.1; done
curl -s -o /dev/null --max-time 5 http://169.254.77.1:8099/
echo "link_local_from_host=$(grep -c connected /tmp/link-local.log)"
turn_at link-local http://169.254.77.1:8099/v1
echo "link_local_from_chatd=$(( $(grep -c connected /tmp/link-local.log) - 1 ))"
kill $listener
ip addr del 169.254.77.1/32 dev lo
curl -sS --unix-socket /run/atelier/example/metrics/chatd.sock http://metrics/metrics | sed 's/^/chatd-metrics| /'

# A result for one of the CMS's own bridges is the CMS's to answer.
echo "cms_bridge=$(web POST /tool-result "$EDITOR_COOKIE" "{\"bridgeId\":\"$CMS_BRIDGE\",\"requestId\":\"r-1\",\"result\":{\"ok\":true,\"data\":{\"answer\":42}}}") $(cat /tmp/body)"

# The CMS's own routes under the chat prefix are not chatd's: nginx sends them to the CMS,
# which is beyond nginx's private network here (its 502), never to chatd.
echo "editor_bridge=$(web GET '/editor-bridge?scope=site' "$EDITOR_COOKIE")"
echo "mcp_connectors=$(web GET '/mcp/connectors' "$EDITOR_COOKIE")"
# A 2 MB upload reaches the CMS (its 502 here), which sets its own limits: not nginx's 413.
head -c 2000000 /dev/zero > /tmp/upload
echo "cms_upload=$(browser -sk --resolve cms.example.org:443:127.0.0.1 -o /dev/null \
  -w '%{http_code}' -H "Cookie: $SESSION_COOKIE=$EDITOR_COOKIE" --data-binary @/tmp/upload \
  https://cms.example.org/admin/api/cms/media)"
# A chat body over nginx's limit: chatd's own JSON 413, never nginx's HTML.
head -c 34000000 /dev/zero > /tmp/huge
echo "chat_too_large=$(web POST /chat/site "$ADMIN_COOKIE" @/tmp/huge) $(cat /tmp/body)"
# chatd gone: a 502 whose JSON the editor shows, never nginx's HTML.
systemctl stop atelier-chatd@example.socket atelier-chatd@example.service
echo "chatd_gone=$(web GET '/conversations?scope=site' "$ADMIN_COOKIE") [$(cat /tmp/body)]"
journalctl -b -u atelier-chatd@example.service -o cat --no-pager | sed 's/^/chatd-log| /'
exit 0
"#;

/// A scripted OpenAI-compatible model on loopback: without a tool result in the request it
/// streams a call of the browser tool `site_read_document`; with one, it says
/// [`SCRIPTED_FINAL`]. One request per connection.
#[expect(
    clippy::expect_used,
    reason = "test helper: a double that cannot listen must fail the test"
)]
fn scripted_model() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding the scripted model");
    let addr = listener.local_addr().expect("its address");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || answer(stream));
        }
    });
    addr
}

fn answer(stream: TcpStream) {
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        line.clear();
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let answered = request["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "c1", "object": "chat.completion.chunk", "model": SCRIPTED_MODEL,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let chunks = if answered {
        vec![
            chunk(
                json!({"role": "assistant", "content": SCRIPTED_FINAL}),
                Value::Null,
            ),
            chunk(json!({}), json!("stop")),
        ]
    } else {
        vec![
            chunk(
                json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call-1",
                       "type": "function", "function": {"name": "site_read_document",
                       "arguments": "{}"}}]}),
                Value::Null,
            ),
            chunk(json!({}), json!("tool_calls")),
        ]
    };
    let mut out = String::from(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
    );
    for chunk in chunks {
        out.push_str(&format!("data: {chunk}\n\n"));
    }
    out.push_str("data: [DONE]\n\n");
    let mut stream = reader.into_inner();
    let _ = stream.write_all(out.as_bytes());
}

/// The lines of the stream named `tag`, parsed.
fn stream(run: &atelier_systemd_tests::BoxRun, tag: &str) -> Vec<Value> {
    let prefix = format!("{tag}| ");
    run.output
        .lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn the_cms_editor_chats_through_nginx_with_only_its_session_cookie() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime for the doubles");
    let _inside = runtime.enter();
    let model = runtime
        .block_on(LocalModel::start())
        .unwrap_or_else(|e| panic!("the real local model: {e}"));
    let state = Arc::new(CmsState::with_lab_users());
    state.open_bridge(CMS_BRIDGE);
    let cms = LabCms::spawn(
        CMS_ADDR.parse().expect("the CMS's address"),
        Arc::clone(&state),
    )
    .expect("the CMS stand-in on the example's cms_origin");
    let scripted = scripted_model();

    let bins = built_binaries_dir().expect("locating the built binaries");
    let script = SCRIPT
        .replace("$SESSION_COOKIE", SESSION_COOKIE)
        .replace("$EDITOR_COOKIE", EDITOR_COOKIE)
        .replace("$ADMIN_COOKIE", ADMIN_COOKIE)
        .replace("$CLIENT_COOKIE", CLIENT_COOKIE)
        .replace("$CMS_BRIDGE", CMS_BRIDGE)
        .replace("$LLAMA_BASE", &model.base_url)
        .replace("$LLAMA_MODEL", &model.model_id)
        .replace("$SCRIPTED_BASE", &format!("http://{scripted}"))
        .replace("$SCRIPTED_MODEL", SCRIPTED_MODEL);
    let run = SystemdBox::new()
        .timeout(Duration::from_secs(300))
        .install_binaries(&bins, &["atelier-provision", "atelier-chatd"])
        .copy(
            repo_root().join("deploy/examples/instance.json"),
            "/root/instance.json",
        )
        .copy(
            repo_root().join("deploy/examples/operator-setup.sh"),
            "/root/operator-setup.sh",
        )
        .copy(
            repo_root().join("bins/atelier-chatd/tests/fixtures/instatic_example_snapshot.json"),
            "/root/snapshot.json",
        )
        .run(&script)
        .expect("booting systemd in a container");
    run.assert_success();
    let fact = |key: &str| run.fact(key).unwrap_or("<missing>").to_owned();

    assert_eq!(fact("apply"), "0", "{run:?}");
    assert_eq!(fact("sock"), "root:www-data 660", "{run:?}");
    // Socket-activated: nothing runs until the first request arrives through nginx.
    assert_eq!(fact("chatd_before"), "inactive", "{run:?}");
    assert_eq!(
        fact("nosession"),
        r#"401 {"error":"Unauthorized"}"#,
        "{run:?}"
    );
    assert_eq!(fact("chatd_after"), "active", "{run:?}");
    assert_eq!(fact("client"), r#"403 {"error":"Forbidden"}"#, "{run:?}");
    assert_eq!(fact("credential"), "201", "{run:?}");
    assert_eq!(fact("conversation"), "201", "{run:?}");

    // The real model's words, streamed as NDJSON to the end.
    assert_eq!(fact("turn_type"), "application/x-ndjson", "{run:?}");
    let local = stream(&run, "local");
    assert_eq!(local.last(), Some(&json!({"type": "done"})), "{run:?}");
    let said: String = local
        .iter()
        .filter(|l| l["type"] == "text")
        .filter_map(|l| l["text"].as_str())
        .collect();
    assert!(said.split_whitespace().count() >= 2, "{said:?}\n{run:?}");

    // systemctl status tells of the turn in flight, then of none.
    let serving = "serving /var/lib/atelier-chatd-example/chat.sqlite3";
    assert_eq!(
        fact("status_during"),
        format!("1 turn in flight; {serving}"),
        "{run:?}"
    );
    assert_eq!(fact("status_after"), format!("idle; {serving}"), "{run:?}");
    // The browser tool's round trip, and the model's answer after it.
    assert_eq!(fact("tool_result"), r#"200 {"ok":true}"#, "{run:?}");
    let tool = stream(&run, "tool");
    let kinds: Vec<&str> = tool.iter().filter_map(|l| l["type"].as_str()).collect();
    for kind in ["bridgeReady", "toolRequest", "toolResult", "done"] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}\n{run:?}");
    }
    let request = tool
        .iter()
        .find(|l| l["type"] == "toolRequest")
        .unwrap_or(&Value::Null);
    assert_eq!(request["toolName"], "site_read_document", "{run:?}");
    let text: String = tool
        .iter()
        .filter(|l| l["type"] == "text")
        .filter_map(|l| l["text"].as_str())
        .collect();
    assert_eq!(text, SCRIPTED_FINAL, "{run:?}");

    // The CMS's bridge: forwarded with the same cookie and body, the CMS's answer relayed.
    let forwarded = state.tool_results();
    assert_eq!(forwarded.len(), 1, "{run:?}");
    let body: Value = serde_json::from_slice(&forwarded[0].body).unwrap_or_default();
    assert_eq!(body["bridgeId"], CMS_BRIDGE, "{run:?}");
    assert_eq!(
        forwarded[0].header("cookie"),
        Some(format!("{SESSION_COOKIE}={EDITOR_COOKIE}").as_str()),
        "{run:?}"
    );
    assert!(fact("cms_bridge").starts_with("200 "), "{run:?}");
    // The CMS's own routes under the chat prefix went to the CMS's upstream (beyond nginx's
    // private network here: its 502), never to chatd.
    assert_eq!(fact("editor_bridge"), "502", "{run:?}");
    assert_eq!(fact("mcp_connectors"), "502", "{run:?}");
    // nginx's own answers are the editor's: the CMS's uploads are the CMS's to limit, a chat
    // body over the limit is chatd's JSON 413, and no chatd a JSON 502.
    assert_eq!(fact("cms_upload"), "502", "{run:?}");
    // A link-local provider: reachable from the host, refused to chatd by its unit, so the
    // turn ends in an error and the listener never saw a connection from it.
    assert_eq!(fact("link_local_from_host"), "1", "{run:?}");
    assert_eq!(fact("link_local_from_chatd"), "0", "{run:?}");
    let link_local = stream(&run, "link-local");
    assert_eq!(
        link_local.last().map(|l| l["type"].clone()),
        Some(json!("error")),
        "{run:?}"
    );
    assert_eq!(
        fact("chat_too_large"),
        r#"413 {"error":"Chat request is too large."}"#,
        "{run:?}"
    );
    assert_eq!(
        fact("chatd_gone"),
        r#"502 [{"error":"The AI service is not available right now. Try again shortly."}]"#,
        "{run:?}"
    );
    assert!(
        !run.output
            .lines()
            .any(|l| l.starts_with("chatd-log|")
                && (l.contains("editor-bridge") || l.contains("/mcp/"))),
        "{run:?}"
    );
    // chatd never logs a cookie.
    for cookie in [EDITOR_COOKIE, ADMIN_COOKIE, CLIENT_COOKIE] {
        assert!(
            !run.output
                .lines()
                .any(|l| l.starts_with("chatd-log|") && l.contains(cookie)),
            "{run:?}"
        );
    }
    // The metrics moved by exactly these turns: (started, done, errors, in flight, first
    // bytes, provider errors of the request class).
    let snapshot = |tag: &str| -> Vec<String> {
        [
            "started",
            "done",
            "errors",
            "in_flight",
            "first_bytes",
            "provider_errors",
        ]
        .iter()
        .map(|series| fact(&format!("{tag}_{series}")))
        .collect()
    };
    let expected = |values: [u8; 6]| -> Vec<String> { values.iter().map(u8::to_string).collect() };
    for (tag, values) in [
        ("before", [0, 0, 0, 0, 0, 0]),
        ("after_local", [1, 1, 0, 0, 1, 0]),
        ("during_tool", [2, 1, 0, 1, 2, 0]),
        ("after_tool", [2, 2, 0, 0, 2, 0]),
        ("after_gone", [3, 2, 1, 0, 2, 1]),
    ] {
        assert_eq!(snapshot(tag), expected(values), "{tag}: {run:?}");
    }
    drop(cms);
    drop(model);
}
