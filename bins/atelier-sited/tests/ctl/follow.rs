//! Following a session's stream against a real sited: a turn run by the real shim and the
//! scripted test agent (framing and termination, whatever events the turn produces), and a
//! scripted live stream (rendering as events arrive, escaping, and the exit status the last
//! `turn_end` decides).

use std::time::Duration;

use atelier_site_api::SessionId;
use atelier_site_client::{Id, NewSite, SessionEvent, Slug, StreamItem, TurnState};
use futures_util::StreamExt as _;
use serde_json::{json, Value};

use crate::ctl::support;

async fn with_site(instance: &support::Instance, slug: &str) {
    instance
        .client()
        .create_site(NewSite {
            slug: Slug::parse(slug).unwrap(),
            name: "Alpha".into(),
            domain: format!("{slug}.example.org"),
            template: None,
            driver: None,
        })
        .await
        .unwrap();
}

/// Reads a whole stream: the events' raw data, in order.
async fn drain(
    client: &atelier_site_client::Client,
    session: &Id,
    after: i64,
) -> Vec<(atelier_site_client::StoredEvent, String)> {
    let mut stream = client.follow(session, after).await.unwrap();
    let mut events = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(item) = stream.next().await {
            match item.unwrap() {
                StreamItem::Event { event, raw } => events.push((event, raw)),
                StreamItem::Error { raw, .. } => panic!("stream error {raw}"),
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream ends");
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_turn_is_followed_to_its_end_by_the_binary_and_the_library() {
    let instance = support::instance().await;
    with_site(&instance, "alpha").await;

    let out = instance
        .ctl(&[
            "session",
            "start",
            "alpha",
            "hello from the operator",
            "--follow",
        ])
        .await;
    let mut lines = out.stdout.lines();
    let session = Id::parse("session", lines.next().unwrap()).unwrap();
    let rendered: Vec<&str> = lines.collect();
    assert!(!rendered.is_empty(), "{out:?}");
    for (i, line) in rendered.iter().enumerate() {
        let mut words = line.split_whitespace();
        assert_eq!(
            words.next(),
            Some(i.to_string().as_str()),
            "seq of {line:?}"
        );
        assert!(words.next().is_some(), "a type in {line:?}");
    }
    let last = rendered.last().unwrap();
    assert!(
        last.split_whitespace().nth(1) == Some("turn_end"),
        "{out:?}"
    );
    let idle = last.ends_with("state idle");
    assert_eq!(
        out.code,
        if idle { 0 } else { 4 },
        "the last turn_end decides: {out:?}"
    );
    if !idle {
        assert!(out.stderr.starts_with("error: turn_"), "{out:?}");
    }

    // The library replays the finished session: the same events, framed id == seq, closed
    // after the turn_end.
    let client = instance.client();
    let events = drain(&client, &session, -1).await;
    let seqs: Vec<u64> = events.iter().map(|(e, _)| e.seq).collect();
    assert_eq!(seqs, (0..rendered.len() as u64).collect::<Vec<_>>());
    assert!(matches!(
        events.last().unwrap().0.event(),
        Ok(SessionEvent::TurnEnd { .. })
    ));
    assert!(
        matches!(
            events[0].0.event(),
            Ok(SessionEvent::TurnStart { turn: 1, .. }
                | SessionEvent::Text { .. }
                | SessionEvent::ResumeUnavailable { .. })
        ),
        "{:?}",
        events[0]
    );

    // --json prints each stored event's data line as received, then, when the turn did not
    // end idle, the failure with its reason.
    let json = instance
        .ctl(&["--json", "session", "follow", session.as_str()])
        .await;
    let want: String = events.iter().map(|(_, raw)| format!("{raw}\n")).collect();
    assert_eq!(json.code, out.code);
    if idle {
        assert_eq!(json.stdout, want);
    } else {
        let failure = json.stdout.strip_prefix(&want).expect("the events first");
        let failure: serde_json::Value = serde_json::from_str(failure.trim_end()).unwrap();
        assert!(
            failure["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("turn_")),
            "{failure}"
        );
    }

    // Nothing after the last seq: the stream closes at once, with nothing to report.
    let last_seq = events.len() as i64 - 1;
    let after = instance
        .ctl(&[
            "session",
            "follow",
            session.as_str(),
            "--after",
            &last_seq.to_string(),
        ])
        .await;
    assert_eq!((after.code, after.stdout.as_str()), (0, ""), "{after:?}");
    assert!(after.stderr.contains("no turn_end"), "{after:?}");
    assert!(drain(&client, &session, last_seq).await.is_empty());

    // A follow-up message followed from where the log ended: only the new turn's events.
    let next = instance
        .ctl(&[
            "session",
            "send",
            session.as_str(),
            "and a second turn",
            "--follow",
        ])
        .await;
    let mut lines = next.stdout.lines();
    assert_eq!(
        lines.next(),
        Some(format!("accepted: session {session}").as_str()),
        "{next:?}"
    );
    let turn: Vec<&str> = lines.collect();
    assert!(!turn.is_empty(), "{next:?}");
    for (i, line) in turn.iter().enumerate() {
        let seq = events.len() + i;
        assert_eq!(
            line.split_whitespace().next(),
            Some(seq.to_string().as_str()),
            "{next:?}"
        );
    }
    let end = turn.last().unwrap();
    assert_eq!(end.split_whitespace().nth(1), Some("turn_end"), "{next:?}");
    assert_eq!(
        next.code,
        if end.ends_with("state idle") { 0 } else { 4 },
        "{next:?}"
    );

    let stop = instance.ctl(&["session", "stop", session.as_str()]).await;
    assert_eq!(stop.code, 1, "{stop:?}");
    assert!(
        stop.stderr.starts_with("error: not_running (409): "),
        "{stop:?}"
    );

    let listed = client
        .list_sessions(&Slug::parse("alpha").unwrap())
        .await
        .unwrap();
    assert_eq!(listed[0].session_id, session.as_str());
    assert_eq!(listed[0].turns, 2);
    let table = instance.ctl(&["session", "list", "alpha"]).await;
    assert!(table.stdout.starts_with("SESSION"), "{table:?}");
    assert!(table.stdout.contains(session.as_str()), "{table:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_stream_is_rendered_as_it_arrives_and_its_last_turn_end_decides_the_exit() {
    let instance = support::instance().await;
    with_site(&instance, "alpha").await;
    let sessions = instance.router.sessions().clone();
    let cases = [
        (
            "error",
            4,
            "error: turn_error: the session's last turn ended error\n",
        ),
        (
            "interrupted",
            4,
            "error: turn_interrupted: the session's last turn ended interrupted\n",
        ),
        ("idle", 0, ""),
    ];
    for (state, code, stderr) in cases {
        let id = SessionId::new_v4().unwrap();
        let live = sessions.begin_turn("alpha", &id).unwrap();
        let session = Id::parse("session", &id.to_string()).unwrap();
        let events_path = format!("/v1/sessions/{id}/events");
        let before = instance.seen().len();

        // The binary and a library stream both connect before any event exists.
        let binary = {
            let session = session.to_string();
            let instance = &instance;
            async move { instance.ctl(&["session", "follow", &session]).await }
        };
        let client = instance.client();
        let mut stream = client.follow(&session, -1).await.unwrap();
        let writer = async {
            let waited = std::time::Instant::now();
            while instance.seen()[before..]
                .iter()
                .filter(|s| s.path.contains(&events_path))
                .count()
                < 2
            {
                assert!(
                    waited.elapsed() < Duration::from_secs(30),
                    "the binary never followed"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let bodies = [
                json!({"type": "turn_start", "turn": 1, "prompt": "make it blue"}),
                json!({"type": "text", "text": "Working\u{1b}[2J on it\n"}),
                json!({"type": "tool", "name": "Edit", "summary": "Edit: index.html"}),
                json!({"type": "error", "reason": "turn_timeout", "retriable": true}),
                json!({"type": "turn_end", "state": state}),
            ];
            for (i, body) in bodies.into_iter().enumerate() {
                live.append(event(body)).unwrap();
                // The library follower sees each event while the turn still runs.
                let item = tokio::time::timeout(Duration::from_secs(10), stream.next())
                    .await
                    .unwrap()
                    .unwrap()
                    .unwrap();
                let StreamItem::Event { event, .. } = item else {
                    panic!("{item:?}")
                };
                assert_eq!(event.seq, i as u64);
            }
            assert!(stream.next().await.is_none(), "closed after turn_end");
        };
        let (out, ()) = tokio::join!(binary, writer);
        assert_eq!(
            out.stdout,
            format!(
                "     0  turn_start         turn 1: make it blue\n\
                 \x20    1  text               Working\\u{{1b}}[2J on it\\n\n\
                 \x20    2  tool               Edit: index.html\n\
                 \x20    3  error              turn_timeout (retriable)\n\
                 \x20    4  turn_end           state {state}\n"
            ),
            "{state}"
        );
        assert_eq!((out.code, out.stderr.as_str()), (code, stderr), "{state}");
        let end = drain(&client, &session, 3).await;
        assert_eq!(end.len(), 1);
        let Ok(SessionEvent::TurnEnd { state: ended, .. }) = end[0].0.event() else {
            panic!("{end:?}")
        };
        assert_eq!(ended.as_str(), state);
        assert_eq!(ended == TurnState::Idle, code == 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_to_a_running_session_is_refused_at_once_even_with_follow() {
    let instance = support::instance().await;
    with_site(&instance, "alpha").await;
    // A turn that runs until it is stopped.
    let started = instance.ctl(&["session", "start", "alpha", "hang"]).await;
    assert_eq!(started.code, 0, "{started:?}");
    let session = started.stdout.trim().to_owned();
    // The session's stream stays open while its turn runs; the send must not wait for it.
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        instance.ctl(&["session", "send", &session, "and more", "--follow"]),
    )
    .await
    .expect("the send waited for the running turn");
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.starts_with("error: session_running (409): "),
        "{out:?}"
    );
    assert_eq!(out.stdout, "", "{out:?}");
    let stop = instance.ctl(&["session", "stop", &session]).await;
    assert_eq!(stop.code, 0, "{stop:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_cut_off_mid_turn_follows_again_without_a_gap_or_a_repeat() {
    let instance = support::instance().await;
    with_site(&instance, "alpha").await;
    let id = SessionId::new_v4().unwrap();
    let live = instance.router.sessions().begin_turn("alpha", &id).unwrap();
    live.append(event(
        json!({"type": "turn_start", "turn": 1, "prompt": "make it blue"}),
    ))
    .unwrap();
    live.append(event(json!({"type": "text", "text": "before the cut"})))
        .unwrap();
    let relay = support::Relay::start(instance.socket.clone(), instance.root.join("relay.sock"));
    let events_path = format!("/v1/sessions/{id}/events");
    let before = instance.seen().len();

    let session = id.to_string();
    let binary = support::ctl(instance.argv_via(&relay.path, &["session", "follow", &session]));
    let cutter = async {
        relay.wait_for("\"seq\":1").await;
        relay.cut();
        live.append(event(json!({"type": "text", "text": "after the cut"})))
            .unwrap();
        live.append(event(json!({"type": "turn_end", "state": "idle"})))
            .unwrap();
    };
    let (out, ()) = tokio::join!(binary, cutter);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        out.stdout,
        "     0  turn_start         turn 1: make it blue\n\
         \x20    1  text               before the cut\n\
         \x20    2  text               after the cut\n\
         \x20    3  turn_end           state idle\n",
        "every event once, in order: {out:?}"
    );
    assert!(
        out.stderr.contains("following again after seq 1"),
        "{out:?}"
    );
    let follows: Vec<String> = instance.seen()[before..]
        .iter()
        .filter(|s| s.path.contains(&events_path))
        .map(|s| s.path.clone())
        .collect();
    assert_eq!(follows.len(), 2, "{follows:?}");
    assert!(follows[1].ends_with("?after=1"), "{follows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_an_unknown_session_is_sited_s_404() {
    let instance = support::instance().await;
    let unknown = "0b6f3c2e-5d0a-4c55-9f0e-3b1c2d4e5f60";
    let client = instance.client();
    let error = client
        .follow(&Id::parse("session", unknown).unwrap(), -1)
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(error.problem().map(|p| p.status), Some(404), "{error}");
    let out = instance.ctl(&["session", "follow", unknown]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.starts_with("error: Not Found (404): "),
        "{out:?}"
    );
}

/// A session event from its wire form, written here independently of the types.
fn event(body: Value) -> SessionEvent {
    serde_json::from_value(body).expect("a session event")
}
