//! Sessions over a real unix socket: the SSE follow's seam (no gap, no duplicate), replay of a
//! finished session, listing, admission refusals, and planted links under `.builder/`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use atelier_site_api::{SessionEvent, TurnState};
use atelier_sited::reservations::Hold;
use atelier_sited::session_log::{SessionId, SessionMeta, SESSIONS_DIR};
use atelier_sited::{RawSettings, Router};
use atelier_sse::{SseFrame as Frame, SseItem, SseParser};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::net::UnixStream;

use crate::support;

const TOKEN: &str = "test-service-token-000000000000000000000000";
const BASE: &str = "/publication/site_builder";

struct Instance {
    _dir: tempfile::TempDir,
    root: PathBuf,
    socket: PathBuf,
    router: Router,
}

struct Reply {
    status: StatusCode,
    headers: hyper::HeaderMap,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

async fn open(
    socket: &Path,
    method: Method,
    path: &str,
    body: &str,
) -> hyper::Response<hyper::body::Incoming> {
    open_with(socket, method, path, body, &[]).await
}

/// [`open`] with extra request headers.
async fn open_with(
    socket: &Path,
    method: Method,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> hyper::Response<hyper::body::Incoming> {
    let stream = UnixStream::connect(socket).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(format!("{BASE}{path}"))
        .header("host", "sited")
        .header("authorization", format!("Bearer {TOKEN}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    sender.send_request(request).await.expect("response")
}

async fn call(instance: &Instance, method: Method, path: &str, body: Value) -> Reply {
    let text = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    let response = open(&instance.socket, method, path, &text).await;
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

/// Follows `/v1/sessions/<id>/events?after=<after>` until the server closes the stream.
async fn follow(socket: &Path, id: &str, after: i64) -> (hyper::HeaderMap, Vec<Frame>) {
    follow_at(
        socket,
        &format!("/v1/sessions/{id}/events?after={after}"),
        &[],
    )
    .await
}

/// Follows the events at `path`, sent with `headers`, until the server closes the stream.
async fn follow_at(
    socket: &Path,
    path: &str,
    headers: &[(&str, &str)],
) -> (hyper::HeaderMap, Vec<Frame>) {
    let response = open_with(socket, Method::GET, path, "", headers).await;
    assert_eq!(response.status(), StatusCode::OK);
    let headers = response.headers().clone();
    (headers, frames_of(response).await)
}

/// Every frame of an open event stream, read until the server closes it.
async fn frames_of(response: hyper::Response<hyper::body::Incoming>) -> Vec<Frame> {
    let body = tokio::time::timeout(Duration::from_secs(30), response.into_body().collect())
        .await
        .expect("the stream closes")
        .unwrap()
        .to_bytes();
    parse_frames(std::str::from_utf8(&body).unwrap())
}

/// The frames of a whole stream, read by the shared SSE reader; sited writes only `id`,
/// `event` and `data` fields and comments, and a closed stream ends with a whole frame.
fn parse_frames(text: &str) -> Vec<Frame> {
    for line in text.lines() {
        assert!(
            line.is_empty()
                || [":", "id: ", "event: ", "data: "]
                    .iter()
                    .any(|p| line.starts_with(p)),
            "unexpected field in {line:?}"
        );
    }
    let mut parser = SseParser::new();
    let items = parser.push(text.as_bytes()).expect("a well-formed stream");
    parser.finish().expect("the stream ends with a whole frame");
    items
        .into_iter()
        .filter_map(|item| match item {
            SseItem::Frame(frame) => Some(frame),
            SseItem::Comment(_) => None,
        })
        .collect()
}

/// The `seq`s of event frames, checking each `id:` is its data's `seq`.
fn seqs(frames: &[Frame]) -> Vec<u64> {
    frames
        .iter()
        .map(|f| {
            assert_eq!(f.event, None, "{f:?}");
            let data: Value = serde_json::from_str(&f.data).unwrap();
            let seq = data["seq"].as_u64().unwrap();
            assert_eq!(f.id.as_deref(), Some(seq.to_string().as_str()));
            seq
        })
        .collect()
}

fn write_site_table(root: &Path) {
    let ws = root.join("www/alpha.example.org");
    let ws = ws.to_str().unwrap();
    let body = serde_json::to_string_pretty(&json!({
        "version": 1, "instance": "test", "webspace_base": root.join("www"),
        "sites": [{
            "slug": "alpha", "domain": "alpha.example.org", "webspace": ws,
            "surfaces": {
                "preprod": {"store_dir": format!("{ws}/.releases/pre"), "link_path": format!("{ws}/pre")},
                "prod": {"store_dir": format!("{ws}/.releases/web"), "link_path": format!("{ws}/web")},
            }
        }],
    }))
    .unwrap()
        + "\n";
    let stamp = format!(
        "// atelier-provision: test sites {}\n",
        hex::encode(Sha256::digest(body.as_bytes()))
    );
    std::fs::write(root.join("sites.json"), stamp + &body).unwrap();
}

/// An instance serving on a fresh socket, with site `alpha` created through the API.
async fn instance(max_concurrent_sessions: u32) -> Instance {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    support::make_roots(&root);
    std::fs::create_dir_all(root.join("www/alpha.example.org")).unwrap();
    std::fs::write(
        root.join("www/alpha.example.org/.atelier_instance"),
        "test\n",
    )
    .unwrap();
    write_site_table(&root);
    let settings = RawSettings {
        max_concurrent_sessions: Some(max_concurrent_sessions),
        ..support::raw_settings(&root)
    }
    .validate()
    .unwrap();
    let router = Router::new(&settings).unwrap();
    let socket = root.join("sited.sock");
    support::serve(router.clone(), &socket);
    let instance = Instance {
        _dir: dir,
        root,
        socket,
        router,
    };
    let created = call(
        &instance,
        Method::POST,
        "/v1/sites",
        json!({"slug": "alpha", "name": "Alpha", "domain": "alpha.example.org", "actor": actor()}),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    instance
}

fn actor() -> Value {
    json!({"user_id": 42, "username": "ana"})
}

/// A deterministic stream of numbers for cursors and pacing.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_joining_mid_turn_gets_every_event_after_its_cursor_exactly_once() {
    const EVENTS: u64 = 400;
    let instance = instance(2).await;
    let mut rng = Lcg(7);
    for round in 0..25 {
        let writing = Writing {
            events: EVENTS,
            followers: 4,
            pause_every: 8,
            pause: Duration::from_micros(100),
        };
        for (after, now, frames) in writing.follow(&instance, &mut rng).await {
            let want: Vec<u64> = (u64::try_from(after + 1).unwrap()..=EVENTS).collect();
            assert_eq!(
                seqs(&frames),
                want,
                "round {round}, after {after}, joined at {now}"
            );
            let last: Value = serde_json::from_str(&frames.last().unwrap().data).unwrap();
            assert_eq!(last["body"]["type"], "turn_end");
        }
    }
}

/// A turn written event by event on a thread of its own while followers join it, each when
/// the writing reaches a random point and at a random cursor in what exists by then. The
/// turn ends only after every follower has its stream open, so each joins mid-turn by
/// construction rather than by timing, which a fast or a loaded machine would move.
#[derive(Clone, Copy)]
struct Writing {
    events: u64,
    followers: u64,
    pause_every: u64,
    pause: Duration,
}

impl Writing {
    /// Each follower's cursor, how many events were written when it joined, and its frames.
    async fn follow(&self, instance: &Instance, rng: &mut Lcg) -> Vec<(i64, u64, Vec<Frame>)> {
        let id = SessionId::new_v4().unwrap();
        let session = instance.router.sessions().begin_turn("alpha", &id).unwrap();
        let written = Arc::new(AtomicU64::new(0));
        let joined = Arc::new(AtomicU64::new(0));
        let writer = {
            let (session, written, joined) = (
                Arc::clone(&session),
                Arc::clone(&written),
                Arc::clone(&joined),
            );
            let Writing {
                events,
                followers,
                pause_every,
                pause,
            } = *self;
            std::thread::spawn(move || {
                for i in 0..events {
                    session
                        .append(SessionEvent::text(format!("event {i}")))
                        .unwrap();
                    written.store(i + 1, Ordering::SeqCst);
                    if i % pause_every == 0 {
                        std::thread::sleep(pause);
                    }
                }
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                while joined.load(Ordering::SeqCst) < followers {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "followers never joined"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
                session.append(idle_end()).unwrap();
            })
        };
        let mut clients = Vec::new();
        for _ in 0..self.followers {
            let join_at = rng.below(self.events);
            let pick = rng.below(self.events);
            let socket = instance.socket.clone();
            let (written, joined) = (Arc::clone(&written), Arc::clone(&joined));
            let id = id.to_string();
            clients.push(tokio::spawn(async move {
                while written.load(Ordering::SeqCst) < join_at {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let now = written.load(Ordering::SeqCst);
                // A cursor anywhere in what exists so far, -1 included.
                let after = i64::try_from(pick % (now + 1)).unwrap() - 1;
                let path = format!("/v1/sessions/{id}/events?after={after}");
                let response = open_with(&socket, Method::GET, &path, "", &[]).await;
                assert_eq!(response.status(), StatusCode::OK);
                joined.fetch_add(1, Ordering::SeqCst);
                (after, now, frames_of(response).await)
            }));
        }
        let mut seen = Vec::new();
        for client in clients {
            seen.push(client.await.unwrap());
        }
        writer.join().unwrap();
        seen
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_falls_behind_the_fan_out_catches_up_from_the_log() {
    const EVENTS: u64 = 6_000;
    let instance = instance(2).await;
    let id = SessionId::new_v4().unwrap();
    let session = instance.router.sessions().begin_turn("alpha", &id).unwrap();
    // Connect and read nothing while far more events than the fan-out holds are appended.
    let response = open(
        &instance.socket,
        Method::GET,
        &format!("/v1/sessions/{id}/events"),
        "",
    )
    .await;
    let writer = std::thread::spawn(move || {
        for i in 0..EVENTS {
            session
                .append(SessionEvent::text(format!("{i} {}", "x".repeat(200))))
                .unwrap();
        }
        session.append(idle_end()).unwrap();
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let body = tokio::time::timeout(Duration::from_secs(60), response.into_body().collect())
        .await
        .unwrap()
        .unwrap()
        .to_bytes();
    writer.join().unwrap();
    let frames = parse_frames(std::str::from_utf8(&body).unwrap());
    assert_eq!(seqs(&frames), (0..=EVENTS).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_finished_turns_replay_closes_after_its_turn_end_from_any_cursor() {
    let instance = instance(2).await;
    let started = support::start_session(&instance.socket, "Make a museum page").await;
    assert_eq!(started.status, StatusCode::CREATED, "{}", started.body);
    let id = started.json()["session_id"].as_str().unwrap().to_owned();
    assert!(SessionId::parse(&id).is_some(), "{id}");

    let (headers, frames) = follow(&instance.socket, &id, -1).await;
    for (name, value) in [
        ("content-type", "text/event-stream; charset=utf-8"),
        ("cache-control", "no-store"),
        ("x-accel-buffering", "no"),
    ] {
        assert_eq!(headers[name], value, "{name}");
    }
    let n = frames.len() as u64;
    assert!(n >= 3, "{frames:?}");
    assert_eq!(seqs(&frames), (0..n).collect::<Vec<_>>());
    let bodies: Vec<Value> = frames
        .iter()
        .map(|f| serde_json::from_str::<Value>(&f.data).unwrap()["body"].clone())
        .collect();
    assert_eq!(
        bodies[0],
        json!({"type": "turn_start", "turn": 1, "prompt": "Make a museum page"})
    );
    assert_eq!(bodies[n as usize - 1]["type"], "turn_end");
    let last = i64::try_from(n).unwrap() - 1;
    let (_, tail) = follow(&instance.socket, &id, last - 1).await;
    assert_eq!(seqs(&tail), [n - 1]);
    let (_, none) = follow(&instance.socket, &id, last).await;
    assert!(none.is_empty());
    // The standard SSE reconnect: `Last-Event-ID` means what `after` means; `?after=` wins.
    let events = format!("/v1/sessions/{id}/events");
    let last_seen = (last - 1).to_string();
    let (_, resumed) = follow_at(
        &instance.socket,
        &events,
        &[("last-event-id", last_seen.as_str())],
    )
    .await;
    assert_eq!(seqs(&resumed), [n - 1], "replayed after the last id seen");
    let (_, query_wins) = follow_at(
        &instance.socket,
        &format!("{events}?after=-1"),
        &[("last-event-id", last_seen.as_str())],
    )
    .await;
    assert_eq!(seqs(&query_wins), (0..n).collect::<Vec<_>>());
    let (_, everything) = follow_at(&instance.socket, &events, &[]).await;
    assert_eq!(seqs(&everything), (0..n).collect::<Vec<_>>());

    // The site is freed just after the turn_end, and the list shows the finished session.
    site_freed(&instance).await;
    let list = call(
        &instance,
        Method::GET,
        "/v1/sites/alpha/sessions",
        Value::Null,
    )
    .await;
    assert_eq!(list.status, StatusCode::OK);
    let data = &list.json()["data"];
    assert_eq!(data[0]["session_id"], id.as_str());
    assert_eq!(data[0]["turns"], 1);
    assert_eq!(data[0]["state"], "idle");

    // A second turn: the replay runs through the first turn's turn_end and stops at the second.
    let sid = SessionId::parse(&id).unwrap();
    let session = second_turn(&instance, &sid);
    session.append(idle_end()).unwrap();
    let (_, frames) = follow(&instance.socket, &id, -1).await;
    assert_eq!(seqs(&frames), (0..n + 2).collect::<Vec<_>>());

    // A fresh router (a restart) finds the session from its meta and continues its seq.
    let restarted = Router::new(&instance_settings(&instance)).unwrap();
    let session = restarted.sessions().begin_turn("alpha", &sid).unwrap();
    assert_eq!(session.append(SessionEvent::text("x")).unwrap().seq, n + 2);

    // Once its site is deleted the session is unknown (404), though this process knew it.
    let deleted = call(
        &instance,
        Method::DELETE,
        "/v1/sites/alpha",
        json!({"actor": actor()}),
    )
    .await;
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.body);
    let response = open(&instance.socket, Method::GET, &events, "").await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

/// A turn that ends without its `turn_end` (its append failed: a full disk) still ends the
/// streams tailing it, after what was logged; they used to wait for an event that never came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_ended_without_its_turn_end_ends_the_streams_tailing_it() {
    let instance = instance(2).await;
    let (id, first) = a_finished_session(&instance).await;
    let last = first.len() as u64 - 1;

    // The first turn's task is done once the site is freed (it marks its turn finished just
    // before): a second turn begun earlier would be marked finished by it.
    site_freed(&instance).await;
    let sid = SessionId::parse(&id).unwrap();
    let session = second_turn(&instance, &sid);
    let tail = tokio::spawn({
        let socket = instance.socket.clone();
        let id = id.clone();
        async move { follow(&socket, &id, i64::try_from(last).unwrap()).await.1 }
    });
    // Time for the follower to replay and start tailing (had it not, it would end at once
    // after the replay, fix or no fix).
    tokio::time::sleep(Duration::from_millis(300)).await;
    session.append(SessionEvent::text("half")).unwrap();
    session.mark_finished();
    let frames = tail.await.unwrap();
    assert_eq!(seqs(&frames), [last + 1, last + 2]);
}

/// While a delete holds the site, its sessions answer 409 `site_deleting`, as every other
/// request on it does: their workspace is on its way out, they are neither unknown nor
/// readable yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sites_sessions_answer_site_deleting_while_a_delete_holds_it() {
    let instance = instance(2).await;
    let (id, _) = a_finished_session(&instance).await;
    site_freed(&instance).await;

    let deleting = instance
        .router
        .sites()
        .reservations()
        .reserve("alpha", atelier_sited::reservations::Hold::Deleting)
        .unwrap();
    let message = call(
        &instance,
        Method::POST,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "again", "actor": actor()}),
    )
    .await;
    let events = call(
        &instance,
        Method::GET,
        &format!("/v1/sessions/{id}/events"),
        Value::Null,
    )
    .await;
    for (name, reply) in [("message", message), ("events", events)] {
        assert_eq!(reply.status, StatusCode::CONFLICT, "{name}: {}", reply.body);
        assert_eq!(reply.json()["reason"], "site_deleting", "{name}");
    }
    drop(deleting);
}

/// A stream's session is looked up before its cursor: an unknown one is 404 whatever `after`
/// says, a known one with a cursor that is no number 400; an empty `Last-Event-ID` names no
/// event, so the replay starts at seq 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streams_session_is_looked_up_before_its_cursor() {
    let instance = instance(2).await;
    let (id, all) = a_finished_session(&instance).await;
    let unknown = "00000000-0000-4000-8000-000000000000";
    for (session, status) in [
        (unknown, StatusCode::NOT_FOUND),
        (&id, StatusCode::BAD_REQUEST),
    ] {
        let reply = call(
            &instance,
            Method::GET,
            &format!("/v1/sessions/{session}/events?after=x"),
            Value::Null,
        )
        .await;
        assert_eq!(reply.status, status, "{session}: {}", reply.body);
    }
    let response = support::open_with(
        &instance.socket,
        Method::GET,
        &format!("/v1/sessions/{id}/events"),
        "",
        &[("last-event-id", "")],
    )
    .await;
    let frames = frames_of(response).await;
    assert_eq!(seqs(&frames), seqs(&all), "from seq 0");
}

/// Starts a session on alpha and follows its first turn to its end: its id and frames.
async fn a_finished_session(instance: &Instance) -> (String, Vec<Frame>) {
    let started = call(
        instance,
        Method::POST,
        "/v1/sites/alpha/sessions",
        json!({"prompt": "Make a museum page", "actor": actor()}),
    )
    .await;
    assert_eq!(started.status, StatusCode::CREATED, "{}", started.body);
    let id = started.json()["session_id"].as_str().unwrap().to_owned();
    let (_, frames) = follow(&instance.socket, &id, -1).await;
    (id, frames)
}

/// Waits until no turn holds alpha (a turn's task frees it last, after its `turn_end`).
async fn site_freed(instance: &Instance) {
    support::site_freed(&instance.router, "alpha").await;
}

/// Begins turn 2 of session `sid` of alpha in the instance's process, its `turn_start`
/// logged.
fn second_turn(
    instance: &Instance,
    sid: &SessionId,
) -> Arc<atelier_sited::live_session::LiveSession> {
    let session = instance.router.sessions().begin_turn("alpha", sid).unwrap();
    session
        .append(SessionEvent::TurnStart {
            turn: 2,
            prompt: "again".into(),
        })
        .unwrap();
    session
}

fn instance_settings(instance: &Instance) -> atelier_sited::Settings {
    support::raw_settings(&instance.root).validate().unwrap()
}

#[tokio::test]
async fn session_routes_refuse_in_the_contracts_order() {
    let instance = instance(1).await;
    let post = |body: Value| call(&instance, Method::POST, "/v1/sites/alpha/sessions", body);
    let good = json!({"prompt": "hi", "actor": actor()});

    // 404 for an unknown site wins over a missing actor; then actor, then prompt.
    let got = call(
        &instance,
        Method::POST,
        "/v1/sites/nosuch/sessions",
        json!({}),
    )
    .await;
    assert_eq!(got.status, StatusCode::NOT_FOUND);
    assert_eq!(
        post(json!({"prompt": "hi"})).await.status,
        StatusCode::BAD_REQUEST
    );
    let got = post(json!({"prompt": "  ", "actor": actor()})).await;
    assert_eq!(got.json()["detail"], "prompt must be a non-empty string");

    // 409 with the holder's reason while anything holds the site.
    let held = instance
        .router
        .sites()
        .reservations()
        .reserve("alpha", Hold::Build)
        .unwrap();
    let got = post(good.clone()).await;
    assert_eq!(got.status, StatusCode::CONFLICT);
    assert_eq!(got.json()["reason"], "build_running");
    drop(held);

    // 429 when every global turn slot is taken.
    let slot = instance.router.sessions().take_slot().unwrap();
    let got = post(good.clone()).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(got.json()["reason"], "max_concurrent_sessions");
    drop(slot);

    // 503 when the site has no driver record and the body names none.
    let record = instance.root.join("sites/.driver_records/alpha.json");
    let saved = std::fs::read(&record).unwrap();
    std::fs::remove_file(&record).unwrap();
    let got = post(good.clone()).await;
    assert_eq!(got.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(got.json()["reason"], "confinement_unavailable");
    std::fs::write(&record, saved).unwrap();
    assert_eq!(post(good).await.status, StatusCode::CREATED);

    // Unknown sessions and bad cursors; a stale id shape never reaches a path.
    let unknown = SessionId::new_v4().unwrap();
    let got = call(
        &instance,
        Method::GET,
        &format!("/v1/sessions/{unknown}/events"),
        Value::Null,
    )
    .await;
    assert_eq!(got.status, StatusCode::NOT_FOUND);
    assert_eq!(got.json()["detail"], format!("No session '{unknown}'"));
    let got = call(
        &instance,
        Method::GET,
        "/v1/sessions/..%2F..%2Fsite.json/events",
        Value::Null,
    )
    .await;
    assert_eq!(got.status, StatusCode::NOT_FOUND);
    let got = call(
        &instance,
        Method::GET,
        &format!("/v1/sessions/{unknown}/events?after=x"),
        Value::Null,
    )
    .await;
    assert_eq!(
        got.status,
        StatusCode::NOT_FOUND,
        "the session before the cursor"
    );
    let got = call(
        &instance,
        Method::GET,
        "/v1/sites/nosuch/sessions",
        Value::Null,
    )
    .await;
    assert_eq!(got.status, StatusCode::NOT_FOUND);
    let got = call(
        &instance,
        Method::DELETE,
        "/v1/sites/alpha/sessions",
        Value::Null,
    )
    .await;
    assert_eq!(got.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(got.headers["allow"], "GET, POST");
}

#[tokio::test]
async fn a_planted_log_link_is_refused_and_nothing_outside_is_touched() {
    let instance = instance(2).await;
    let outside = instance.root.join("outside.jsonl");
    let secret = "{\"seq\":0,\"ts\":\"x\",\"body\":{\"type\":\"text\",\"text\":\"SECRET\"}}\n";
    std::fs::write(&outside, secret).unwrap();
    let id = SessionId::new_v4().unwrap();
    let ws = instance.root.join("sites/alpha");
    let sessions_dir = ws.join(SESSIONS_DIR);
    std::fs::create_dir_all(&sessions_dir).unwrap();
    // A genuine meta, so the session resolves, beside a log that is a link out.
    let meta = SessionMeta {
        session_id: id.to_string(),
        slug: "alpha".into(),
        driver: "claude_code".into(),
        started_at: "2026-01-01T00:00:00.000Z".into(),
        turns: 1,
        state: "idle".into(),
        resume_token: None,
        identity_epoch: None,
        recovery_pending: false,
    };
    let workspace = atelier_fs::Root::open(&ws).unwrap();
    atelier_sited::session_log::write_meta(&workspace, &meta).unwrap();
    std::os::unix::fs::symlink(&outside, sessions_dir.join(format!("{id}.jsonl"))).unwrap();

    let err = instance
        .router
        .sessions()
        .begin_turn("alpha", &id)
        .unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    let (_, frames) = follow(&instance.socket, id.as_str(), -1).await;
    assert_eq!(
        frames,
        [Frame {
            id: None,
            event: Some("error".into()),
            data: r#"{"reason":"replay_failed","message":"The session's earlier events could not be read, so its stream ended; following it again tries once more."}"#.into()
        }]
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), secret);

    // A planted meta link is left out of the list, never followed.
    let other = SessionId::new_v4().unwrap();
    let planted = instance.root.join("planted.meta.json");
    std::fs::write(
        &planted,
        serde_json::to_vec(&SessionMeta {
            session_id: other.to_string(),
            ..meta.clone()
        })
        .unwrap(),
    )
    .unwrap();
    std::os::unix::fs::symlink(&planted, sessions_dir.join(format!("{other}.meta.json"))).unwrap();
    let list = call(
        &instance,
        Method::GET,
        "/v1/sites/alpha/sessions",
        Value::Null,
    )
    .await;
    assert_eq!(
        list.json()["data"],
        json!([{"session_id": id.as_str(), "started_at": meta.started_at, "turns": 1, "state": "idle"}])
    );
    let got = call(
        &instance,
        Method::GET,
        &format!("/v1/sessions/{other}/events"),
        Value::Null,
    )
    .await;
    assert_eq!(got.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_events_and_twenty_followers_at_random_cursors_see_each_event_once() {
    const EVENTS: u64 = 10_000;
    let instance = instance(2).await;
    let writing = Writing {
        events: EVENTS,
        followers: 20,
        pause_every: 64,
        pause: Duration::from_micros(200),
    };
    for (after, now, frames) in writing.follow(&instance, &mut Lcg(20_251_202)).await {
        let want: Vec<u64> = (u64::try_from(after + 1).unwrap()..=EVENTS).collect();
        assert_eq!(seqs(&frames), want, "after {after}, joined at {now}");
    }
}

/// The `turn_end` of a turn that finished.
fn idle_end() -> SessionEvent {
    SessionEvent::TurnEnd {
        state: TurnState::Idle,
        resume_token: None,
    }
}
