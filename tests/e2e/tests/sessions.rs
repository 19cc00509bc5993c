//! The engine's session journey end to end: sited's real binary on an instance rendered by the
//! real provisioner, driven as the engine drives it through `atelier-site-client` — pairing (a
//! wrong instance or token is refused having sent nothing but `/health`), a site from `basic`,
//! a scripted-agent turn followed live to `turn_end`, its commit, a follow-up, a stop of a
//! hanging turn, the audit log — and the atelierctl binary with `--json` on the same instance.

use std::collections::BTreeSet;

use atelier_site_client::model::Actor as AuditActor;
use atelier_site_client::{Client, Id, NewSite, SessionEvent, Slug, StreamItem, TurnState};
use futures_util::StreamExt as _;
use serde_json::{json, Value};

use crate::support::instance::Instance;
use crate::support::journey::{bodies, end_state, follow_to_end, when_free};
use crate::support::proxy::RecordingProxy;
use crate::support::{ctl, git, processes_with, WAIT};

const HEALTH: &str = "GET /publication/site_builder/health";

fn alpha() -> Slug {
    Slug::parse("alpha").unwrap()
}

fn new_site(slug: &str, domain: &str) -> NewSite {
    NewSite {
        slug: Slug::parse(slug).unwrap(),
        name: "Alpha Museum".into(),
        domain: domain.into(),
        template: Some("basic".into()),
        driver: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engines_journey_pairs_edits_follows_live_stops_and_audits() {
    let instance = Instance::start(&[("alpha", "alpha.example.org")]);
    let proxy = RecordingProxy::start(&instance.root().join("proxy.sock"), instance.socket());
    pairing_is_refused_before_any_other_byte(&instance, &proxy).await;

    let ana = instance.client(42, "ana");
    let ben = instance.client(43, "ben");
    let created = ana
        .create_site(new_site("alpha", "alpha.example.org"))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", instance.sited_log()));
    assert_eq!(created.manifest.slug, "alpha");
    assert_eq!(created.manifest.template, "basic");
    assert_eq!(created.manifest.domain, "alpha.example.org");
    assert_eq!(created.preprod.url, "http://pre.alpha.example.org/");
    let workspace = instance.workspace("alpha");
    assert_eq!(
        git(&workspace, &["log", "--format=%s"]).trim(),
        "scaffold: initial template"
    );

    let id = first_turn_is_followed_live_and_committed(&instance, &ana).await;
    let after = follow_up_is_turn_two(&instance, &ben, &id).await;
    let marker = stop_ends_a_hanging_turn(&instance, &ana, &id, after).await;
    assert!(
        processes_with(&marker).is_empty(),
        "the stopped agent is gone"
    );

    // Every mutation, newest first, with the actor that made it.
    let audit = ana.audit(Some(&alpha()), None).await.unwrap();
    let seen: Vec<(&str, &str)> = audit
        .iter()
        .map(|e| (e.action.as_str(), e.actor.username.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("session_stop", "ana"),
            ("session_message", "ana"),
            ("session_message", "ben"),
            ("session_start", "ana"),
            ("create_site", "ana"),
        ]
    );
    let ids: Vec<i64> = audit.iter().map(|e| e.actor.user_id).collect();
    assert_eq!(ids, [42, 42, 43, 42, 42]);
    for entry in &audit[..4] {
        assert_eq!(entry.detail["session_id"], id.as_str(), "{entry:?}");
        assert_eq!(entry.site.as_deref(), Some("alpha"));
    }
    let times: Vec<&str> = audit.iter().map(|e| e.ts.as_str()).collect();
    let mut newest_first = times.clone();
    newest_first.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(times, newest_first, "newest first");
    assert_eq!(
        ana.audit(None, None).await.unwrap(),
        audit,
        "one site: the unfiltered log is the same"
    );

    the_binary_lists_what_the_library_sees(&instance, &ana, &proxy, &id).await;
}

/// A client whose instance name or token does not make sited's fingerprint stops after
/// `/health`; the proxy shows that nothing else reached sited (and that it does see every
/// request a paired client makes).
async fn pairing_is_refused_before_any_other_byte(instance: &Instance, proxy: &RecordingProxy) {
    let token_file = instance.root().join("other-token");
    std::fs::write(&token_file, "another-token-000000000000000000000000000\n").unwrap();
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let mut wrong_token = instance.target_at(proxy.socket(), None);
    wrong_token.token = atelier_site_client::config::read_token_file(&token_file).unwrap();
    let cases = [
        (
            "another instance's name",
            instance.target_at(proxy.socket(), Some("museum")),
        ),
        ("another token", wrong_token),
    ];
    for (name, target) in cases {
        let before = proxy.requests().len();
        let client = Client::new(target, atelier_site_client::Actor::new(42, "ana").unwrap());
        let error = client
            .create_site(new_site("alpha", "alpha.example.org"))
            .await
            .unwrap_err();
        assert_eq!(error.code(), "instance_mismatch", "{name}: {error}");
        assert!(!client.is_paired(), "{name}");
        assert_eq!(proxy.requests()[before..], [HEALTH], "{name}");
    }
    assert!(!instance.workspace("alpha").exists(), "nothing was created");

    let paired = Client::new(
        instance.target_at(proxy.socket(), None),
        atelier_site_client::Actor::new(42, "ana").unwrap(),
    );
    let before = proxy.requests().len();
    assert_eq!(paired.list_sites().await.unwrap(), Vec::new());
    assert_eq!(
        proxy.requests()[before..],
        [HEALTH, "GET /publication/site_builder/v1/sites"],
        "the proxy sees a paired client's calls"
    );
    let audit = paired.audit(None, None).await.unwrap();
    assert!(audit.is_empty(), "no mutation happened: {audit:?}");
}

/// Turn 1 writes three files, pausing after the first: the stream delivers the first write
/// while the agent still sleeps (live, not a replay), ends with `turn_end`, and the turn's
/// commit holds exactly the files the agent wrote.
async fn first_turn_is_followed_live_and_committed(instance: &Instance, ana: &Client) -> Id {
    let workspace = instance.workspace("alpha");
    let prompt = "I will write the first pages.\n\
                  write src/index.html <h1>Alpha Museum</h1>\n\
                  sleep 1500\n\
                  write src/about.html <p>About the museum</p>\n\
                  write notes/plan.md # Plan\\n- an about page";
    let id = ana.start_session(&alpha(), prompt, None).await.unwrap();
    let mut stream = ana.follow(&id, -1).await.unwrap();
    let mut events = Vec::new();
    let mut seen_live = false;
    let deadline = tokio::time::Instant::now() + WAIT;
    while let Some(item) = tokio::time::timeout_at(deadline, stream.next())
        .await
        .expect("turn 1 ends in time")
    {
        let StreamItem::Event { event, .. } = item.unwrap() else {
            panic!("an error frame");
        };
        if let Ok(SessionEvent::Tool { name, summary }) = event.event() {
            if !seen_live && name == "Write" && summary.contains("src/index.html") {
                // The agent sleeps 1.5 s before its next write: this event arrived live.
                assert!(
                    !workspace.join("src/about.html").exists(),
                    "the first write was delivered while the agent ran"
                );
                let sessions = ana.list_sessions(&alpha()).await.unwrap();
                assert_eq!(sessions[0].session_id, id.as_str());
                assert_eq!(sessions[0].state, "running");
                seen_live = true;
            }
        }
        events.push(event);
    }
    assert!(seen_live, "the first write was streamed: {events:?}");
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..events.len() as u64).collect::<Vec<_>>());
    let typed: Vec<SessionEvent> = events
        .iter()
        .map(|e| e.event().expect("every event is of a known type"))
        .collect();
    assert_eq!(
        typed[0],
        SessionEvent::TurnStart {
            turn: 1,
            prompt: prompt.into()
        }
    );
    assert!(typed.contains(&SessionEvent::text("I will write the first pages.")));
    let writes = typed
        .iter()
        .filter(|e| matches!(e, SessionEvent::Tool { name, .. } if name == "Write"))
        .count();
    assert_eq!(writes, 3);
    assert!(
        typed
            .iter()
            .any(|e| matches!(e, SessionEvent::Result { ok: true, .. })),
        "{typed:?}"
    );
    assert!(
        !typed
            .iter()
            .any(|e| matches!(e, SessionEvent::Error { .. })),
        "{typed:?}"
    );
    assert_eq!(events.last().and_then(end_state), Some(TurnState::Idle));

    let wrote: BTreeSet<String> = ["notes/plan.md", "src/about.html", "src/index.html"]
        .map(str::to_owned)
        .into();
    let changed: Vec<BTreeSet<String>> = typed
        .iter()
        .filter_map(|e| match e {
            SessionEvent::FileChange { files } => Some(files.iter().cloned().collect()),
            _ => None,
        })
        .collect();
    assert_eq!(
        changed,
        std::slice::from_ref(&wrote),
        "one file_change with the files"
    );
    let log = git(&workspace, &["log", "--format=%s"]);
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [
            format!("agent: session {id} turn 1").as_str(),
            "scaffold: initial template"
        ]
    );
    let committed: BTreeSet<String> =
        git(&workspace, &["show", "--name-only", "--format=", "HEAD"])
            .lines()
            .map(str::to_owned)
            .collect();
    assert_eq!(
        committed, wrote,
        "the commit holds exactly the agent's files"
    );
    assert_eq!(
        git(&workspace, &["show", "HEAD:notes/plan.md"]),
        "# Plan\n- an about page\n"
    );
    assert_eq!(
        git(&workspace, &["status", "--porcelain"]),
        "",
        "nothing left uncommitted"
    );
    id
}

/// A follow-up by another actor is turn 2 of the same session, with its own commit; returns
/// the seq of its `turn_end`.
async fn follow_up_is_turn_two(instance: &Instance, ben: &Client, id: &Id) -> i64 {
    let workspace = instance.workspace("alpha");
    let before = follow_to_end(ben, id, -1).await;
    let accepted = when_free(|| ben.send_message(id, "append src/index.html <p>Open daily</p>"))
        .await
        .unwrap();
    assert_eq!(accepted.session_id, id.as_str());
    assert!(accepted.accepted);
    let after = before.last().unwrap().seq as i64;
    let events = follow_to_end(ben, id, after).await;
    assert_eq!(events[0].seq, after as u64 + 1, "the cursor is honoured");
    assert_eq!(
        events[0].event(),
        Ok(SessionEvent::TurnStart {
            turn: 2,
            prompt: "append src/index.html <p>Open daily</p>".into()
        })
    );
    assert_eq!(end_state(events.last().unwrap()), Some(TurnState::Idle));
    assert!(bodies(&events).contains(&json!({"type": "file_change", "files": ["src/index.html"]})));
    assert!(git(&workspace, &["log", "-1", "--format=%s"])
        .starts_with(&format!("agent: session {id} turn 2")));
    assert_eq!(
        std::fs::read_to_string(workspace.join("src/index.html")).unwrap(),
        "<h1>Alpha Museum</h1>\n<p>Open daily</p>\n"
    );
    events.last().unwrap().seq as i64
}

/// Turn 3 writes a file and hangs; a stop ends it (one `turn_interrupted` error, `turn_end`
/// interrupted), the work is committed, and a second stop is `not_running`. Returns the
/// marker the agent's command line carried.
async fn stop_ends_a_hanging_turn(
    instance: &Instance,
    ana: &Client,
    id: &Id,
    after: i64,
) -> String {
    let workspace = instance.workspace("alpha");
    let marker = format!("e2e-hang-{}", std::process::id());
    let message = format!("write src/draft.html <p>{marker}</p>\nhang");
    when_free(|| ana.send_message(id, &message)).await.unwrap();
    let mut stream = ana.follow(id, after).await.unwrap();
    let mut events = Vec::new();
    let mut stopped = false;
    let deadline = tokio::time::Instant::now() + WAIT;
    while let Some(item) = tokio::time::timeout_at(deadline, stream.next())
        .await
        .expect("turn 3 ends in time")
    {
        let StreamItem::Event { event, .. } = item.unwrap() else {
            panic!("an error frame");
        };
        if !stopped && matches!(event.event(), Ok(SessionEvent::Tool { .. })) {
            assert!(!processes_with(&marker).is_empty(), "the agent hangs");
            let reply = ana.stop_session(id).await.unwrap();
            assert_eq!(reply.session_id, id.as_str());
            assert!(reply.stopped);
            stopped = true;
        }
        events.push(event);
    }
    assert!(stopped, "the turn was under way: {events:?}");
    let errors: Vec<Value> = bodies(&events)
        .into_iter()
        .filter(|b| b["type"] == "error")
        .collect();
    assert_eq!(
        errors,
        [
            json!({"type": "error", "reason": "turn_interrupted", "retriable": true, "message": "The turn was stopped before it finished."})
        ]
    );
    assert_eq!(
        end_state(events.last().unwrap()),
        Some(TurnState::Interrupted)
    );
    assert!(
        git(&workspace, &["show", "--name-only", "--format=", "HEAD"])
            .lines()
            .any(|f| f == "src/draft.html")
    );
    let again = ana.stop_session(id).await.unwrap_err();
    assert_eq!(again.code(), "not_running", "{again}");
    assert_eq!(again.problem().map(|p| p.status), Some(409));
    marker
}

/// The atelierctl binary, paired through the rendered engine fragment: `sites list` and
/// `session list` print sited's JSON exactly as the library reads it, `audit` too, and a
/// wrong `--instance` exits 3 having sent nothing but `/health`.
async fn the_binary_lists_what_the_library_sees(
    instance: &Instance,
    ana: &Client,
    proxy: &RecordingProxy,
    id: &Id,
) {
    let run = |args: &[&str]| {
        let mut argv = instance.ctl_flags(instance.socket());
        argv.push("--json".into());
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        ctl(argv)
    };
    let sites = run(&["sites", "list"]).await.json();
    let library: Value = serde_json::from_slice(
        &ana.send(&atelier_site_client::Route::ListSites)
            .await
            .unwrap()
            .body,
    )
    .unwrap();
    assert_eq!(sites, library);
    assert_eq!(sites["data"][0]["manifest"]["slug"], "alpha");
    assert_eq!(sites["data"][0]["session"]["state"], "interrupted");

    let sessions = run(&["session", "list", "alpha"]).await.json();
    assert_eq!(sessions["data"].as_array().unwrap().len(), 1, "{sessions}");
    assert_eq!(sessions["data"][0]["session_id"], id.as_str());
    assert_eq!(sessions["data"][0]["turns"], 3);
    assert_eq!(sessions["data"][0]["state"], "interrupted");

    let audit = run(&["audit", "--site", "alpha"]).await.json();
    let entries: Vec<atelier_site_client::model::AuditEntry> =
        serde_json::from_value(audit["data"].clone()).unwrap();
    assert_eq!(entries, ana.audit(Some(&alpha()), None).await.unwrap());
    assert_eq!(
        entries[0].actor,
        AuditActor {
            user_id: 42,
            username: "ana".into()
        }
    );

    let before = proxy.requests().len();
    let mut argv = instance.ctl_flags(proxy.socket());
    argv.extend(
        [
            "--instance",
            "museum",
            "sites",
            "create",
            "beta",
            "--name",
            "Beta",
            "--domain",
            "beta.example.org",
        ]
        .map(str::to_owned),
    );
    let refused = ctl(argv).await;
    assert_eq!(refused.code, 3, "{refused:?}");
    assert!(refused.stderr.contains("instance_mismatch"), "{refused:?}");
    assert!(
        !refused.stderr.contains(&instance.token()),
        "the token never shows"
    );
    assert_eq!(proxy.requests()[before..], [HEALTH]);
}
