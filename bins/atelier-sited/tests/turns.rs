//! Agent turns end to end in `none` confinement: the real shim spawned over a socketpair, the
//! scripted test agent as Claude Code, real git. Each fault has its one terminal error, every
//! turn its commit and `turn_end`, and sited's own binary survives a `kill -9` mid-turn.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use atelier_sited::Router;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support;
use crate::support::{actor, call, declare_sites, follow_events, make_roots, raw_settings};

const WAIT: Duration = Duration::from_secs(60);

struct Instance {
    _dir: tempfile::TempDir,
    root: PathBuf,
    socket: PathBuf,
    router: Router,
}

impl Instance {
    async fn post(&self, path: &str, body: Value) -> support::Reply {
        call(&self.socket, Method::POST, path, body).await
    }

    async fn get(&self, path: &str) -> support::Reply {
        call(&self.socket, Method::GET, path, Value::Null).await
    }

    /// Stops session `id`, as an engine's user does.
    async fn stop(&self, id: &str) -> support::Reply {
        self.post(
            &format!("/v1/sessions/{id}/stop"),
            json!({"actor": actor()}),
        )
        .await
    }

    /// Starts a session on `alpha` and returns its id.
    async fn start(&self, prompt: &str) -> String {
        let started = self
            .post(
                "/v1/sites/alpha/sessions",
                json!({"prompt": prompt, "actor": actor()}),
            )
            .await;
        assert_eq!(started.status, StatusCode::CREATED, "{}", started.body);
        started.json()["session_id"].as_str().unwrap().to_owned()
    }

    /// Sends `message` to session `id` and returns every event of its log once the turn ended.
    async fn send(&self, id: &str, message: &str) -> Vec<Value> {
        let sent = self
            .post(
                &format!("/v1/sessions/{id}/messages"),
                json!({"message": message, "actor": actor()}),
            )
            .await;
        assert_eq!(sent.status, StatusCode::OK, "{}", sent.body);
        self.events(id).await
    }

    /// Every event of the session's log, waiting for the running turn to end.
    async fn events(&self, id: &str) -> Vec<Value> {
        follow_events(&self.socket, id, -1, WAIT).await
    }

    fn workspace(&self) -> PathBuf {
        self.root.join("sites/alpha")
    }

    fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(["-c", "safe.directory=*"])
            .args(args)
            .current_dir(self.workspace())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", "/nonexistent")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    async fn wait_free(&self) {
        support::site_freed(&self.router, "alpha").await;
    }
}

async fn instance(configure: impl FnOnce(&mut atelier_sited::RawSettings)) -> Instance {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    make_roots(&root);
    declare_sites(&root, &[("alpha", "alpha.example.org")]);
    let mut raw = raw_settings(&root);
    configure(&mut raw);
    let router = Router::new(&raw.validate().unwrap()).unwrap();
    let socket = root.join("sited.sock");
    support::serve(router.clone(), &socket);
    let instance = Instance {
        _dir: dir,
        root,
        socket,
        router,
    };
    let created = support::create_site(&instance.socket, "alpha", "alpha.example.org").await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    instance
}

fn bodies(events: &[Value]) -> Vec<Value> {
    events.iter().map(|e| e["body"].clone()).collect()
}

fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["body"]["type"].as_str().unwrap().to_owned())
        .collect()
}

fn errors(events: &[Value]) -> Vec<Value> {
    bodies(events)
        .into_iter()
        .filter(|b| b["type"] == "error")
        .collect()
}

/// Processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .collect()
}

/// An engine sends the next message as soon as it reads a turn's `turn_end`, or deletes the
/// site, without waiting: the site is free by then and reads idle, turn after turn. A site
/// created again under the deleted one's slug has no session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_site_is_free_as_soon_as_a_follower_reads_turn_end() {
    let instance = instance(|_| {}).await;
    let id = instance.start("write a.html <p>0</p>").await;
    let mut events = instance.events(&id).await;
    for turn in 1..=8 {
        let last = bodies(&events).pop().unwrap();
        assert_eq!(
            (&last["type"], &last["state"]),
            (&json!("turn_end"), &json!("idle")),
            "turn {turn}"
        );
        let site = instance.get("/v1/sites/alpha").await.json();
        assert_eq!(
            site["session"],
            json!({"state": "idle", "session_id": id}),
            "turn {turn}"
        );
        // Sends, checks it is accepted, and follows the turn to its end.
        events = instance
            .send(&id, &format!("write a.html <p>{turn}</p>"))
            .await;
    }
    let deleted = support::delete_site(&instance.socket, "/v1/sites/alpha").await;
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.body);
    let created = support::create_site(&instance.socket, "alpha", "alpha.example.org").await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let fresh = json!({"state": "idle", "session_id": null});
    assert_eq!(created.json()["session"], fresh);
    assert_eq!(
        instance.get("/v1/sites/alpha").await.json()["session"],
        fresh
    );
    let listed = instance.get("/v1/sites").await.json();
    assert_eq!(listed["data"][0]["session"], fresh, "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_streams_the_agents_events_and_commits_its_files() {
    let instance = instance(|_| {}).await;
    // What a write killed half way leaves (the agent's, or sited's own): never committed.
    let leftover = format!("{}1.0", atelier_fs::TEMP_NAME_PREFIX);
    std::fs::write(instance.workspace().join(&leftover), "half a page").unwrap();
    let id = instance
        .start("I will add a page.\nwrite index.html <h1>Hello from the agent</h1>")
        .await;
    let events = instance.events(&id).await;
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..events.len() as u64).collect::<Vec<_>>());
    let kinds = kinds(&events);
    assert_eq!(kinds.first().map(String::as_str), Some("turn_start"));
    assert_eq!(kinds.last().map(String::as_str), Some("turn_end"));
    let bodies = bodies(&events);
    assert_eq!(
        bodies[0],
        json!({"type": "turn_start", "turn": 1, "prompt": "I will add a page.\nwrite index.html <h1>Hello from the agent</h1>"})
    );
    assert!(
        bodies[1]["text"].as_str().unwrap().contains("unconfined"),
        "the first event announces the unconfined mode: {}",
        bodies[1]
    );
    assert!(bodies
        .iter()
        .any(|b| b["type"] == "text" && b["text"] == "I will add a page."));
    assert!(bodies.iter().any(|b| b["type"] == "tool"
        && b["name"] == "Write"
        && b["summary"].as_str().unwrap().contains("index.html")));
    let result = bodies.iter().find(|b| b["type"] == "result").unwrap();
    assert_eq!(result["ok"], true);
    let token = result["resumeToken"].as_str().unwrap().to_owned();
    assert!(bodies.contains(&json!({"type": "file_change", "files": ["index.html"]})));
    assert_eq!(errors(&events), Vec::<Value>::new());
    assert_eq!(
        bodies.last().unwrap(),
        &json!({"type": "turn_end", "state": "idle", "resumeToken": token})
    );
    // The commit is the turn's, with the file the agent wrote; .builder/ is never committed.
    let log = instance.git(&["log", "--format=%s"]);
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [
            format!("agent: session {id} turn 1").as_str(),
            "scaffold: initial template"
        ]
    );
    let files = instance.git(&["show", "--name-only", "--format=", "HEAD"]);
    assert_eq!(files.trim(), "index.html");
    assert!(!instance.git(&["ls-files"]).contains(".builder"));
    assert!(!instance.git(&["ls-files"]).contains(&leftover));
    assert!(
        !instance.workspace().join(".builder/mcp.json").exists(),
        "the per-turn MCP file is gone after the turn"
    );
    instance.wait_free().await;

    // A follow-up resumes the agent's own session and is turn 2 of the same log.
    let sent = instance
        .post(
            &format!("/v1/sessions/{id}/messages"),
            json!({"message": "append index.html <p>more</p>", "actor": actor()}),
        )
        .await;
    assert_eq!(sent.status, StatusCode::OK, "{}", sent.body);
    assert_eq!(sent.json(), json!({"session_id": id, "accepted": true}));
    let events = instance.events(&id).await;
    let all = self::bodies(&events);
    let turn_starts: Vec<_> = all.iter().filter(|b| b["type"] == "turn_start").collect();
    assert_eq!(turn_starts.len(), 2);
    assert_eq!(turn_starts[1]["turn"], 2);
    let second_result = all.iter().filter(|b| b["type"] == "result").nth(1).unwrap();
    assert_eq!(
        second_result["resumeToken"],
        token.as_str(),
        "--resume was passed"
    );
    let log = instance.git(&["log", "--format=%s"]);
    assert!(
        log.starts_with(&format!("agent: session {id} turn 2\n")),
        "{log}"
    );
    instance.wait_free().await;
    let list = instance.get("/v1/sites/alpha/sessions").await.json();
    assert_eq!(list["data"][0]["turns"], 2);
    assert_eq!(list["data"][0]["state"], "idle");
    let site = instance.get("/v1/sites/alpha").await.json();
    assert_eq!(site["session"], json!({"state": "idle", "session_id": id}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_gets_an_allowlisted_environment_and_its_own_home() {
    let instance = instance(|raw| {
        raw.credentials.anthropic_api_key = Some("sk-ant-test-key".into());
        raw.credentials.publication_api_key = Some("publication-canary-key".into());
    })
    .await;
    let id = instance
        .start("env HOME\nenv SERVICE_TOKEN\nenv ANTHROPIC_API_KEY\nenv PUBLICATION_API_KEY\nenv CREDENTIALS_DIRECTORY\nenv PATH")
        .await;
    let events = instance.events(&id).await;
    let said: Vec<String> = bodies(&events)
        .iter()
        .filter(|b| b["type"] == "text")
        .map(|b| b["text"].as_str().unwrap().to_owned())
        .collect();
    let home = instance.root.join("agents/unconfined/alpha/turn");
    for want in [
        format!("HOME={}", home.display()),
        "SERVICE_TOKEN unset".to_owned(),
        "ANTHROPIC_API_KEY=sk-ant-test-key".to_owned(),
        "PUBLICATION_API_KEY unset".to_owned(),
        "CREDENTIALS_DIRECTORY unset".to_owned(),
        "PATH=/usr/local/bin:/usr/bin:/bin".to_owned(),
    ] {
        assert!(said.contains(&want), "{want:?} not in {said:?}");
    }
    // The service token never reaches the log.
    let log = std::fs::read_to_string(
        instance
            .workspace()
            .join(format!(".builder/sessions/{id}.jsonl")),
    )
    .unwrap();
    assert!(!log.contains(support::TOKEN));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fault_ends_the_turn_with_one_named_error() {
    let instance = instance(|raw| raw.session_turn_timeout_ms = Some(1500)).await;
    let cases: [(&str, &str, Value, &str); 6] = [
        (
            "non-zero exit",
            "stderr the agent broke\nexit 3",
            json!({"type": "error", "reason": "turn_agent_exited", "retriable": false, "message": "The agent stopped with an error before it finished the turn."}),
            "error",
        ),
        (
            "killed by a signal",
            "kill-self",
            json!({"type": "error", "reason": "turn_agent_killed", "retriable": true, "message": "The agent was ended before it finished the turn."}),
            "error",
        ),
        (
            "deadline",
            "hang",
            json!({"type": "error", "reason": "turn_timeout", "retriable": true, "message": "The turn ran past its time limit and was stopped."}),
            "error",
        ),
        (
            "garbage lines and a clean exit without a result",
            "raw {not json\nraw []\nexit 0",
            Value::Null,
            "idle",
        ),
        (
            "a non-zero exit after the result",
            "raw {\"type\":\"result\",\"subtype\":\"error_max_turns\",\"is_error\":true,\
             \"session_id\":\"5a1d0c2e-7b3f-4c1d-9e2a-0f1b2c3d4e5f\",\"duration_ms\":5}\n\
             stderr max turns reached\nexit 1",
            Value::Null,
            "idle",
        ),
        (
            "the deadline after the result",
            "raw {\"type\":\"result\",\"subtype\":\"success\",\
             \"session_id\":\"5a1d0c2e-7b3f-4c1d-9e2a-0f1b2c3d4e5f\",\"duration_ms\":5}\nhang",
            Value::Null,
            "idle",
        ),
    ];
    for (name, prompt, want_error, want_state) in cases {
        let id = instance.start(prompt).await;
        let events = instance.events(&id).await;
        let errors = errors(&events);
        if want_error.is_null() {
            assert!(errors.is_empty(), "{name}: {errors:?}");
            let results: Vec<Value> = bodies(&events)
                .into_iter()
                .filter(|b| b["type"] == "result")
                .collect();
            let [result] = results.as_slice() else {
                panic!("{name}: one terminal result: {results:?}");
            };
            if name.ends_with("without a result") {
                assert_eq!(
                    result,
                    &json!({"type": "result", "ok": true, "durationMs": 0}),
                    "{name}: a clean exit without a result line gets a synthesized one"
                );
            } else {
                assert_eq!(
                    result["resumeToken"], "5a1d0c2e-7b3f-4c1d-9e2a-0f1b2c3d4e5f",
                    "{name}: the agent's own result"
                );
            }
        } else {
            assert_eq!(errors, [want_error], "{name}");
        }
        let end = bodies(&events).last().cloned().unwrap();
        assert_eq!(end["type"], "turn_end", "{name}");
        assert_eq!(end["state"], want_state, "{name}");
        instance.wait_free().await;
        if name == "non-zero exit" {
            let output = bodies(&events)
                .into_iter()
                .find(|b| b["type"] == "agent_output")
                .unwrap();
            assert_eq!(output["text"], "the agent broke", "{name}");
        }
    }
}

/// A stdout line too long to read is skipped, the turn goes on, and the session says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_line_too_long_to_read_is_skipped_and_said() {
    let instance = instance(|_| {}).await;
    let id = instance.start("say-long 5000000\nspam 1").await;
    let events = instance.events(&id).await;
    let texts: Vec<String> = bodies(&events)
        .into_iter()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str().map(str::to_owned))
        .collect();
    assert!(texts.contains(&"spam 0".to_owned()), "{texts:?}");
    assert!(
        texts.contains(
            &"[atelier] A line of the agent's output was over 4 MiB and was skipped: what it \
              held is not in this session."
                .to_owned()
        ),
        "{texts:?}"
    );
    assert!(
        texts.iter().all(|t| t.len() < 1000),
        "nothing long was read"
    );
    let end = bodies(&events).last().cloned().unwrap();
    assert_eq!(end["state"], "idle");
}

/// The site says its turn is running as soon as the session's start has answered: an engine
/// that reads the site right after its 201 never sees it idle, nor the turn before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_turn_shows_on_its_site_as_soon_as_the_start_answers() {
    let instance = instance(|_| {}).await;
    let id = instance.start("hang").await;
    let site = instance.get("/v1/sites/alpha").await;
    assert_eq!(site.status, StatusCode::OK, "{}", site.body);
    assert_eq!(
        site.json()["session"],
        json!({"state": "running", "session_id": id})
    );
    let stopped = instance.stop(&id).await;
    assert_eq!(stopped.status, StatusCode::OK, "{}", stopped.body);
    instance.wait_free().await;
}

/// A stop that comes while the run's unit is being started (here a shim slow to say hello, as
/// a door is while a leftover run goes) starts nothing: the agent is never given its prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_while_the_run_opens_starts_nothing() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let slow_shim = dir.path().join("slow-shim");
    let (armed, opening) = (dir.path().join("armed"), dir.path().join("opening"));
    let shim = support::workspace_bin("atelier-shim");
    std::fs::write(
        &slow_shim,
        format!(
            "#!/bin/sh\nif [ -e {armed} ]; then touch {opening}; sleep 1; fi\nexec {shim} \"$@\"\n",
            armed = armed.display(),
            opening = opening.display(),
            shim = shim.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&slow_shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    let instance = instance(|raw| raw.shim_bin = Some(slow_shim.clone())).await;
    // A first turn, so the driver's probe (cached) is behind us: the armed shim's next start is
    // the next turn's own run.
    let first = instance.start("spam 1").await;
    instance.events(&first).await;
    instance.wait_free().await;
    std::fs::write(&armed, "").unwrap();
    let id = instance.start("write started.txt the agent ran").await;
    // The stop lands while the run opens: its shim has started, its hello not yet come.
    for _ in 0..500 {
        if opening.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(opening.exists(), "the run never began to open");
    let stopped = instance.stop(&id).await;
    assert_eq!(stopped.status, StatusCode::OK, "{}", stopped.body);
    let events = instance.events(&id).await;
    // Nothing between the start and the stop: no run began (a begun one says first that it
    // runs unconfined), no agent spoke.
    let kinds: Vec<Value> = bodies(&events)
        .into_iter()
        .map(|b| b["type"].clone())
        .collect();
    assert_eq!(kinds, ["turn_start", "error", "turn_end"], "{events:?}");
    assert_eq!(
        errors(&events),
        [
            json!({"type": "error", "reason": "turn_interrupted", "retriable": true, "message": "The turn was stopped before it finished."})
        ]
    );
    let end = bodies(&events).last().cloned().unwrap();
    assert_eq!(end, json!({"type": "turn_end", "state": "interrupted"}));
    assert!(
        !instance.workspace().join("started.txt").exists(),
        "the agent never ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_ends_the_agent_and_its_processes_then_commits() {
    let instance = instance(|_| {}).await;
    let marker = format!("stop-marker-{}", std::process::id());
    let id = instance
        .start(&format!("write before-stop.txt {marker}\nhang"))
        .await;
    // Wait until the agent has written its file, so it is surely running.
    let file = instance.workspace().join("before-stop.txt");
    wait_for(&file).await;
    assert!(file.exists(), "the agent started");
    // A follow-up while the turn runs is refused with the contract's detail.
    let busy = instance
        .post(
            &format!("/v1/sessions/{id}/messages"),
            json!({"message": "more", "actor": actor()}),
        )
        .await;
    assert_eq!(busy.status, StatusCode::CONFLICT);
    assert_eq!(busy.json()["reason"], "session_running");
    assert_eq!(
        busy.json()["detail"],
        "A turn is already running for 'alpha'"
    );

    let stopped = instance.stop(&id).await;
    assert_eq!(stopped.status, StatusCode::OK, "{}", stopped.body);
    assert_eq!(stopped.json(), json!({"session_id": id, "stopped": true}));
    assert!(
        processes_with(&marker).is_empty(),
        "no process of the turn survives its stop"
    );
    let events = instance.events(&id).await;
    assert_eq!(
        errors(&events),
        [
            json!({"type": "error", "reason": "turn_interrupted", "retriable": true, "message": "The turn was stopped before it finished."})
        ]
    );
    // The session the agent named in its first line is kept for the next message to resume.
    let end = bodies(&events).last().unwrap().clone();
    assert_eq!(
        (&end["type"], &end["state"]),
        (&json!("turn_end"), &json!("interrupted"))
    );
    assert_eq!(end["resumeToken"].as_str().map(str::len), Some(36), "{end}");
    assert!(instance
        .git(&["show", "--name-only", "--format=", "HEAD"])
        .contains("before-stop.txt"));

    // Stop of a finished turn, or of a session nobody knows, is not_running — never 404.
    instance.wait_free().await;
    for target in [
        id.clone(),
        "00000000-0000-4000-8000-000000000000".into(),
        "..%2Fx".into(),
    ] {
        let again = instance.stop(&target).await;
        assert_eq!(again.status, StatusCode::CONFLICT, "{target}");
        assert_eq!(again.json()["reason"], "not_running", "{target}");
    }

    // Every mutation is in the audit log with its actor, newest first.
    let audit = instance.get("/v1/audit?site=alpha").await.json();
    let actions: Vec<&str> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["session_stop", "session_start", "create_site"]);
    for entry in audit["data"].as_array().unwrap() {
        assert_eq!(entry["actor"], actor());
    }
}

/// An `atelier` turn stopped after the agent named its saved conversation (its `start` line)
/// keeps that conversation: the next message resumes it. The agent is a script speaking
/// atelier-agent's lines, the real binary answering its version and help (the real agent's own
/// stop is its tests'; its model would need the network here, which a `none` turn reaches
/// directly).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_atelier_turn_is_resumed_from_its_start_line() {
    let dir = tempfile::tempdir().unwrap();
    let real = support::workspace_bin("atelier-agent");
    let argv_log = dir.path().join("argv.log");
    let agent = dir.path().join("atelier-agent");
    std::fs::write(
        &agent,
        format!(
            r#"#!/bin/sh
case " $* " in *" --help "*|*" --version "*) exec '{real}' "$@";; esac
echo "$*" >> '{log}'
echo '{{"type":"start","resume":"tok_1"}}'
echo '{{"type":"text","text":"Working."}}'
case " $* " in
  *" --resume tok_1 "*)
    echo '{{"type":"result","stop":"end_turn","rounds":1,"usage":{{"input_tokens":0,"output_tokens":0}},"duration_ms":1,"resume":"tok_1"}}'
    exit 0;;
esac
exec sleep 600
"#,
            real = real.display(),
            log = argv_log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let instance = instance(|raw| {
        raw.atelier_bin = Some(agent.clone());
        raw.openai_base_url = Some("https://llm.example.org/v1".into());
        raw.openai_model = Some("m".into());
    })
    .await;
    let started = instance
        .post(
            "/v1/sites/alpha/sessions",
            json!({"prompt": "Write a.txt.", "driver": "atelier", "actor": actor()}),
        )
        .await;
    assert_eq!(started.status, StatusCode::CREATED, "{}", started.body);
    let id = started.json()["session_id"].as_str().unwrap().to_owned();
    // Stopped once the line after the start line is in the log: the start line was read.
    let log = instance
        .workspace()
        .join(atelier_layout::workspace::SESSIONS_DIR)
        .join(format!("{id}.jsonl"));
    for _ in 0..1000 {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("Working.") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stopped = instance.stop(&id).await;
    assert_eq!(stopped.status, StatusCode::OK, "{}", stopped.body);
    let events = instance.events(&id).await;
    assert_eq!(
        bodies(&events).last().unwrap(),
        &json!({"type": "turn_end", "state": "interrupted", "resumeToken": "tok_1"})
    );
    instance.wait_free().await;

    let sent = instance
        .post(
            &format!("/v1/sessions/{id}/messages"),
            json!({"message": "Go on.", "actor": actor()}),
        )
        .await;
    assert_eq!(sent.status, StatusCode::OK, "{}", sent.body);
    let events = instance.events(&id).await;
    assert_eq!(
        bodies(&events).last().unwrap(),
        &json!({"type": "turn_end", "state": "idle", "resumeToken": "tok_1"})
    );
    let argv = std::fs::read_to_string(&argv_log).unwrap();
    let runs: Vec<&str> = argv.lines().collect();
    assert_eq!(runs.len(), 2, "{argv}");
    assert!(!runs[0].contains("--resume"), "{argv}");
    assert!(runs[1].contains("--resume tok_1"), "{argv}");
}

#[test]
fn sited_spawns_processes_only_in_the_none_mode_spawner() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut offenders = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let rel = path
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            // Starting a process needs a process Command or a raw fork/exec/spawn call (clap's
            // `CommandFactory`, which builds a command line's definition, starts nothing).
            for needle in [
                "process::Command",
                "Command::new",
                "fork(",
                "execv",
                "posix_spawn",
                "clone3",
            ] {
                if text.contains(needle) && rel != "runs/none.rs" {
                    offenders.push(format!("{rel}: {needle}"));
                }
            }
        }
    }
    assert_eq!(offenders, Vec::<String>::new());
}

/// Returns true if and only if sited answers a request on `socket`: its socket listens from
/// the start of its boot, its answers only once the boot's sweep is done.
fn answers(socket: &Path) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = std::os::unix::net::UnixStream::connect(socket) else {
        return false;
    };
    let mut first = [0u8; 1];
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .is_ok()
        && stream
            .write_all(b"GET / HTTP/1.1\r\nHost: sited\r\nConnection: close\r\n\r\n")
            .is_ok()
        && stream.read(&mut first).is_ok_and(|n| n == 1)
}

/// sited's own binary, serving a temp instance in `none` confinement.
struct Daemon {
    child: std::process::Child,
}

impl Daemon {
    fn start(root: &Path) -> Daemon {
        let socket = root.join("sited.sock");
        let _ = std::fs::remove_file(&socket);
        let child = Command::new(support::workspace_bin("atelier-sited"))
            .args(support::sited_args(root, &socket))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        // Dropped (killed and reaped) if it never comes up.
        let daemon = Daemon { child };
        for _ in 0..500 {
            if answers(&socket) {
                return daemon;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("sited did not come up");
    }
}

impl Daemon {
    /// A daemon serving a temp instance below `root` with site `alpha` created through it;
    /// and its socket.
    async fn with_alpha(root: &Path) -> (Daemon, PathBuf) {
        make_roots(root);
        declare_sites(root, &[("alpha", "alpha.example.org")]);
        let socket = root.join("sited.sock");
        let daemon = Daemon::start(root);
        let created = support::create_site(&socket, "alpha", "alpha.example.org").await;
        assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
        (daemon, socket)
    }

    /// SIGKILL, no shutdown of any kind; returns once the daemon is reaped and the agent whose
    /// command line holds `marker` is gone (the orphaned shim sees its connection close and
    /// ends it).
    async fn kill_9(mut self, marker: &str) {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.child.id() as i32).unwrap(),
            rustix::process::Signal::KILL,
        )
        .unwrap();
        self.child.wait().unwrap();
        for _ in 0..1000 {
            if processes_with(marker).is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            processes_with(marker).is_empty(),
            "the agent died with its connection"
        );
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (up to 5 s) until the agent has written `file`.
async fn wait_for(file: &Path) {
    for _ in 0..500 {
        if file.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// POSTs `body` to `path` until the site is no longer held by its boot recovery
/// (`site_recovering` is the retryable busy the engine waits out); the first other answer.
async fn post_past_recovery(socket: &Path, path: &str, body: Value) -> support::Reply {
    for _ in 0..250 {
        let reply = call(socket, Method::POST, path, body.clone()).await;
        if reply.status != StatusCode::CONFLICT || reply.json()["reason"] != "site_recovering" {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the site stayed in recovery");
}

/// A create cut short by a kill leaves its workspace half made and marked (here: filled up to
/// its manifest, with no repository yet, as a kill before the git door's init leaves it). The
/// next boot removes it before serving, so the slug can be created again; a finished create
/// leaves no mark, so a boot never removes a real site.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_cut_short_by_a_kill_is_undone_at_the_next_boot() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    make_roots(root);
    declare_sites(
        root,
        &[("alpha", "alpha.example.org"), ("beta", "beta.example.org")],
    );
    let socket = root.join("sited.sock");
    let daemon = Daemon::start(root);
    let created = support::create_site(&socket, "alpha", "alpha.example.org").await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let records = root.join("sites/.driver_records");
    let mut names: Vec<String> = std::fs::read_dir(&records)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["alpha.json"], "a finished create leaves no mark");
    daemon.kill_9("no-agent-runs-here").await;

    // What a kill during beta's create leaves.
    let alpha = root.join("sites/alpha");
    let beta = root.join("sites/beta");
    std::fs::create_dir(&beta).unwrap();
    for file in ["index.html", "AGENTS.md"] {
        if alpha.join(file).exists() {
            std::fs::copy(alpha.join(file), beta.join(file)).unwrap();
        }
    }
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(alpha.join("site.json")).unwrap()).unwrap();
    manifest["slug"] = json!("beta");
    manifest["domain"] = json!("beta.example.org");
    std::fs::write(beta.join("site.json"), manifest.to_string()).unwrap();
    std::fs::copy(records.join("alpha.json"), records.join("beta.json")).unwrap();
    std::fs::write(records.join("beta.creating"), "").unwrap();

    let _daemon = Daemon::start(root);
    assert!(
        !beta.exists(),
        "the half-made workspace is gone before anything is served"
    );
    assert!(!records.join("beta.json").exists());
    assert!(!records.join("beta.creating").exists());
    let listed = call(&socket, Method::GET, "/v1/sites", Value::Null)
        .await
        .json();
    let slugs: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|site| site["manifest"]["slug"].as_str().unwrap())
        .collect();
    assert_eq!(slugs, ["alpha"], "{listed}");
    let created = support::create_site(&socket, "beta", "beta.example.org").await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let log = Command::new("git")
        .args(["-c", "safe.directory=*", "log", "--format=%s"])
        .current_dir(&beta)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&log.stdout),
        "scaffold: initial template\n"
    );
    assert!(alpha.join("site.json").exists(), "alpha is untouched");
}

/// A turn writes its meta, then its `turn_end`; a kill between the two (or a failed append)
/// leaves a finished turn with no end in its log. The next boot appends it, with the meta's
/// state and resume token, so a replay of the session ends as the turn did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_end_a_killed_process_did_not_write_is_written_at_the_next_boot() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (daemon, socket) = Daemon::with_alpha(root).await;
    let started = support::start_session(&socket, "write a.html <p>a</p>").await;
    assert_eq!(started.status, StatusCode::CREATED, "{}", started.body);
    let id = started.json()["session_id"].as_str().unwrap().to_owned();
    let ended = follow_events(&socket, &id, -1, WAIT).await;
    let last = ended.last().unwrap().clone();
    assert_eq!(last["body"]["type"], "turn_end");
    daemon.kill_9("no-agent-runs-here").await;

    // The log as a kill after the meta's write leaves it: without its last line.
    let log = root.join(format!("sites/alpha/.builder/sessions/{id}.jsonl"));
    let text = std::fs::read_to_string(&log).unwrap();
    let kept = text.trim_end().rsplit_once('\n').unwrap().0.to_owned() + "\n";
    std::fs::write(&log, kept).unwrap();

    let _daemon = Daemon::start(root);
    let replayed = follow_events(&socket, &id, -1, WAIT).await;
    assert_eq!(&replayed[..ended.len() - 1], &ended[..ended.len() - 1]);
    assert_eq!(replayed.len(), ended.len(), "{replayed:?}");
    let end = replayed.last().unwrap();
    assert_eq!(end["seq"], last["seq"]);
    assert_eq!(
        end["body"], last["body"],
        "the meta's state and resume token"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_turn_then_restart_recovers_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (daemon, socket) = Daemon::with_alpha(root).await;
    let marker = format!("kill-marker-{}", std::process::id());
    let started = support::start_session(
        &socket,
        format!("Working.\nwrite unsaved.txt {marker}\nhang"),
    )
    .await;
    assert_eq!(started.status, StatusCode::CREATED, "{}", started.body);
    let id = started.json()["session_id"].as_str().unwrap().to_owned();
    let file = root.join("sites/alpha/unsaved.txt");
    wait_for(&file).await;
    assert!(file.exists());
    // Wait until the agent's tool use is in the log: the turn is well under way.
    let log_path = root.join(format!("sites/alpha/.builder/sessions/{id}.jsonl"));
    let mut before: Vec<Value> = Vec::new();
    for _ in 0..500 {
        before = std::fs::read_to_string(&log_path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if before.iter().any(|e| e["body"]["type"] == "tool") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        before.iter().any(|e| e["body"]["type"] == "tool"),
        "{before:?}"
    );

    daemon.kill_9(&marker).await;

    let _daemon = Daemon::start(root);
    let events = follow_events(&socket, &id, -1, WAIT).await;
    assert_eq!(
        &events[..before.len()],
        &before[..],
        "the log before the kill is intact"
    );
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (0..events.len() as u64).collect::<Vec<_>>(),
        "seq continues without reuse"
    );
    assert_eq!(
        bodies(&events[before.len()..]),
        [
            json!({"type": "error", "reason": "turn_interrupted", "retriable": true, "message": "The turn was stopped before it finished."}),
            json!({"type": "turn_end", "state": "interrupted"}),
        ]
    );
    let list = call(
        &socket,
        Method::GET,
        "/v1/sites/alpha/sessions",
        Value::Null,
    )
    .await;
    assert_eq!(list.json()["data"][0]["state"], "interrupted");
    // The recovery commit goes through the git door once sited is ready.
    let mut out = String::new();
    for _ in 0..500 {
        let log = Command::new("git")
            .args([
                "-c",
                "safe.directory=*",
                "log",
                "-1",
                "--name-only",
                "--format=%s",
            ])
            .current_dir(root.join("sites/alpha"))
            .output()
            .unwrap();
        out = String::from_utf8(log.stdout).unwrap();
        if out.starts_with("agent: recovered") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            format!("agent: recovered after restart (session {id})").as_str(),
            "",
            "unsaved.txt"
        ]
    );
    // The site is usable again once the recovery has released it (site_recovering is the
    // retryable busy the engine waits out).
    let again = post_past_recovery(
        &socket,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "write after.txt back", "actor": actor()}),
    )
    .await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    let events = follow_events(&socket, &id, -1, WAIT).await;
    assert_eq!(
        events.last().unwrap()["body"]["state"],
        "idle",
        "{:?}",
        events.last()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_token_from_another_identity_epoch_is_dropped_with_resume_unavailable() {
    let instance = instance(|_| {}).await;
    let id = instance.start("write a.txt one").await;
    let first = instance.events(&id).await;
    let token = bodies(&first)
        .into_iter()
        .find(|b| b["type"] == "result")
        .unwrap()["resumeToken"]
        .as_str()
        .unwrap()
        .to_owned();
    instance.wait_free().await;

    // The same instance after the site's identity moved: a new epoch.
    let mut raw = raw_settings(&instance.root);
    raw.identity_epoch = Some(1);
    let moved = Router::new(&raw.validate().unwrap()).unwrap();
    let socket = instance.root.join("moved.sock");
    support::serve(moved, &socket);
    let sent = call(
        &socket,
        Method::POST,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "write b.txt two", "actor": actor()}),
    )
    .await;
    assert_eq!(sent.status, StatusCode::OK, "{}", sent.body);
    let events = follow_events(&socket, &id, -1, WAIT).await;
    let after: Vec<Value> = bodies(&events[first.len()..]);
    assert_eq!(
        after[0],
        json!({"type": "resume_unavailable", "reason": "agent identity migrated"})
    );
    assert_eq!(after[1]["type"], "turn_start");
    let second = after.iter().find(|b| b["type"] == "result").unwrap();
    assert_ne!(
        second["resumeToken"],
        token.as_str(),
        "no --resume of the old token"
    );
}

/// An agent that gives its result and then does not exit (Claude Code has been seen to) is
/// stopped a few seconds later, and the turn ends on its result: the site is not held until
/// the turn's timeout, and no fault follows the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_hanging_after_its_result_is_stopped_and_the_turn_ends_on_it() {
    let instance = instance(|raw| raw.session_turn_timeout_ms = Some(120_000)).await;
    let id = instance
        .start(
            "raw {\"type\":\"result\",\"subtype\":\"success\",\
             \"session_id\":\"5a1d0c2e-7b3f-4c1d-9e2a-0f1b2c3d4e5f\",\"duration_ms\":5}\nhang",
        )
        .await;
    let events = instance.events(&id).await;
    assert!(errors(&events).is_empty(), "{events:?}");
    assert_eq!(
        bodies(&events).last().unwrap(),
        &json!({"type": "turn_end", "state": "idle",
                "resumeToken": "5a1d0c2e-7b3f-4c1d-9e2a-0f1b2c3d4e5f"})
    );
    instance.wait_free().await;
}

/// A turn that never ran (its setup failed) keeps the session the one before it named, so the
/// next message resumes the agent's conversation instead of starting it afresh. Between turns
/// the session holds no log descriptor, and its seq goes on across them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_never_ran_keeps_the_session_to_resume() {
    let instance = instance(|_| {}).await;
    let id = instance.start("write a.txt one").await;
    let first = instance.events(&id).await;
    let token = bodies(&first).last().unwrap()["resumeToken"].clone();
    assert!(token.is_string(), "{first:?}");
    instance.wait_free().await;
    // Idle, the session holds no log descriptor: the next turn opens the log again.
    let sid = atelier_sited::session_log::SessionId::parse(&id).unwrap();
    for _ in 0..500 {
        if instance.router.sessions().live(&sid).is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        instance.router.sessions().live(&sid).is_none(),
        "still live"
    );

    // No argv can carry a NUL byte: the turn's setup fails before any run.
    let brief = instance.workspace().join("AGENTS.md");
    std::fs::write(&brief, "Be brief.\0").unwrap();
    let second = instance.send(&id, "write b.txt two").await;
    let after = bodies(&second[first.len()..]);
    assert_eq!(errors(&second).len(), 1, "{after:?}");
    assert_eq!(
        after.last().unwrap(),
        &json!({"type": "turn_end", "state": "error", "resumeToken": token})
    );
    instance.wait_free().await;

    std::fs::remove_file(&brief).unwrap();
    let third = instance.send(&id, "write c.txt three").await;
    let seqs: Vec<u64> = third.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(
        seqs.iter().enumerate().all(|(i, seq)| *seq == i as u64),
        "one seq per event across turns: {seqs:?}"
    );
    let result = bodies(&third[second.len()..])
        .into_iter()
        .find(|b| b["type"] == "result")
        .unwrap();
    assert_eq!(result["resumeToken"], token, "the session was resumed");
}

/// Two sessions of one site to recover at boot: a newer one whose commit failed (still marked
/// pending) and an older one cut mid-turn by the kill. The sweep recovers both under one hold:
/// the cut turn ends `interrupted`, the pending mark is cleared, and the site is free after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_of_a_site_are_recovered_at_one_boot() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (daemon, socket) = Daemon::with_alpha(root).await;
    let mut ids = Vec::new();
    for prompt in ["write a.txt one", "write b.txt two"] {
        let started = support::start_session(&socket, prompt).await;
        assert_eq!(started.status, StatusCode::CREATED, "{}", started.body);
        let id = started.json()["session_id"].as_str().unwrap().to_owned();
        follow_events(&socket, &id, -1, WAIT).await;
        ids.push(id);
        // Started one after the other, the sessions sort newest first by their start.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (older, newer) = (ids[0].clone(), ids[1].clone());
    let meta_of = |id: &str| root.join(format!("sites/alpha/.builder/sessions/{id}.meta.json"));
    // The newer session's commit failed: its meta still says so.
    let mut meta: Value =
        serde_json::from_str(&std::fs::read_to_string(meta_of(&newer)).unwrap()).unwrap();
    meta["recovery_pending"] = Value::Bool(true);
    std::fs::write(meta_of(&newer), meta.to_string()).unwrap();
    // The older session's follow-up is cut by the kill.
    let marker = format!("two-sessions-marker-{}", std::process::id());
    let sent = call(
        &socket,
        Method::POST,
        &format!("/v1/sessions/{older}/messages"),
        json!({"message": format!("write cut.txt {marker}\nhang"), "actor": actor()}),
    )
    .await;
    assert_eq!(sent.status, StatusCode::OK, "{}", sent.body);
    let file = root.join("sites/alpha/cut.txt");
    wait_for(&file).await;
    assert!(file.exists());
    daemon.kill_9(&marker).await;

    let _daemon = Daemon::start(root);
    let events = follow_events(&socket, &older, -1, WAIT).await;
    assert_eq!(
        events.last().map(|e| e["body"].clone()),
        Some(json!({"type": "turn_end", "state": "interrupted"})),
        "the cut turn ends"
    );
    // Both recoveries commit and give the site back.
    let mut metas = (Value::Null, Value::Null);
    for _ in 0..500 {
        let read = |id: &str| -> Value {
            serde_json::from_str(&std::fs::read_to_string(meta_of(id)).unwrap()).unwrap()
        };
        metas = (read(&older), read(&newer));
        let pending = |m: &Value| m["recovery_pending"] == true;
        if !pending(&metas.0) && !pending(&metas.1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(metas.0["state"], "interrupted", "{metas:?}");
    assert_eq!(metas.0["recovery_pending"], Value::Null, "{metas:?}");
    assert_eq!(metas.1["recovery_pending"], Value::Null, "{metas:?}");
    let again = post_past_recovery(
        &socket,
        "/v1/sites/alpha/sessions",
        json!({"prompt": "write after.txt back", "actor": actor()}),
    )
    .await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.body);
}
