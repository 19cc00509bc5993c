//! sited under load over its unix socket, each figure beside a baseline run in the same
//! process: requests per second and p99 of `GET /health` and `GET /v1/sites` (8 sites) from 8
//! concurrent keep-alive connections against a bare hyper server answering a constant body (the
//! list once as an engine meets it, kept between requests; while an agent writes a page in a
//! workspace throughout, which the kept list outlives; and while a site's manifest is rewritten
//! throughout, so that most answers are read from the files again);
//! the replay of a 100,000-event session log to one SSE client against reading and parsing the
//! same file directly; and the idle resident memory of the `atelier-sited` binary.
//!
//! Run: `cargo bench -p atelier-sited --bench serving` (ATELIER_BENCH_SECONDS sets each load
//! phase's length, default 3).

#![expect(
    clippy::unwrap_used,
    reason = "a benchmark stops at the first broken fixture"
)]

use std::convert::Infallible;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use atelier_fs::Root;
use atelier_site_api::{SessionEvent, TurnState};
use atelier_sited::manifest::{self, BuildSpec, Driver, SiteManifest};
use atelier_sited::session_log::{SessionId, SessionLog};
use atelier_sited::{RawSettings, Router};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::TokioIo;
use serde_json::json;
use sha2::Digest as _;
use tokio::net::{UnixListener, UnixStream};

const TOKEN: &str = "bench-service-token-00000000000000000000000";
const CONNECTIONS: usize = 8;
const SITES: usize = 8;
const REPLAY_EVENTS: u64 = 100_000;
/// Rounds of the replay and of its baseline, taking turns.
const REPLAY_ROUNDS: usize = 7;

fn main() {
    let seconds = std::env::var("ATELIER_BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let phase = Duration::from_secs(seconds);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    make_instance(&root);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let bare = start_bare(root.join("bare.sock"));
        let (sited, router) = start_sited(&root);
        let base = "/publication/site_builder";
        println!("{CONNECTIONS} concurrent keep-alive connections, {seconds} s per phase");
        println!(
            "{:<34} {:>12} {:>10} {:>10} {:>14}",
            "load", "req/s", "p50", "p99", "req/s ratio"
        );
        let baseline = load(&bare, "/", phase).await;
        baseline.print("bare hyper, constant (baseline)", &baseline);
        let health = load(&sited, &format!("{base}/health"), phase).await;
        health.print("sited GET /health", &baseline);
        let sites = load(&sited, &format!("{base}/v1/sites"), phase).await;
        sites.print(&format!("sited GET /v1/sites ({SITES} sites)"), &baseline);
        // The same while files are written throughout: a page beside the manifest, which
        // the kept list outlives, then the manifest itself, which drops it again and again so
        // that most answers are read from the files.
        let manifest = std::fs::read(root.join("sites/site0/site.json")).unwrap();
        for (name, file, bytes) in [
            ("  ... a page written meanwhile", "sites/site0/index.html", b"<p>".to_vec()),
            ("  ... a manifest written meanwhile", "sites/site0/site.json", manifest),
        ] {
            let stop = Arc::new(AtomicBool::new(false));
            let writer = {
                let (stop, file) = (Arc::clone(&stop), root.join(file));
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::fs::write(&file, &bytes).unwrap();
                        std::thread::sleep(Duration::from_micros(200));
                    }
                })
            };
            let churned = load(&sited, &format!("{base}/v1/sites"), phase).await;
            stop.store(true, Ordering::Relaxed);
            writer.join().unwrap();
            churned.print(name, &baseline);
        }

        // Replay: one session log of 100,000 events, streamed to one client.
        let id = SessionId::new_v4().unwrap();
        let workspace = Root::open(root.join("sites/site0")).unwrap();
        atelier_sited::session_log::write_meta(
            &workspace,
            &atelier_sited::session_log::SessionMeta {
                session_id: id.to_string(),
                slug: "site0".into(),
                driver: "claude_code".into(),
                started_at: "2026-12-01T00:00:00.000Z".into(),
                turns: 1,
                state: "idle".into(),
                resume_token: None,
                identity_epoch: None,
                recovery_pending: false,
            },
        )
        .unwrap();
        let mut log = SessionLog::open(&workspace, &id).unwrap();
        for i in 0..REPLAY_EVENTS {
            log.append(SessionEvent::text(format!(
                "event number {i} of the replay benchmark"
            )))
                .unwrap();
        }
        log.append(SessionEvent::TurnEnd {
            state: TurnState::Idle,
            resume_token: None,
        })
        .unwrap();
        drop(router);
        let path = root.join(format!("sites/site0/.builder/sessions/{id}.jsonl"));
        let url = format!("{base}/v1/sessions/{id}/events");
        // The two take turns, so a slow spell of the machine falls on both alike; the first
        // replay is also reported alone (what an engine meets when it first asks).
        let (mut direct_times, mut replay_times) = (Vec::new(), Vec::new());
        let mut first = None;
        let mut replayed = (0, 0);
        for _ in 0..REPLAY_ROUNDS {
            let started = Instant::now();
            let file = path.clone();
            let direct = tokio::task::spawn_blocking(move || parse_log(&file))
                .await
                .unwrap();
            direct_times.push(started.elapsed());
            assert_eq!(direct as u64, REPLAY_EVENTS + 1);
            let started = Instant::now();
            replayed = replay(&sited, &url).await;
            let took = started.elapsed();
            first.get_or_insert(took);
            replay_times.push(took);
            assert_eq!(replayed.0 as u64, REPLAY_EVENTS + 1);
        }
        let (direct_time, replay_time) = (median(direct_times), median(replay_times));
        let (frames, bytes) = replayed;
        println!(
            "replay of {} events ({:.1} MiB of SSE), median of {REPLAY_ROUNDS}: {:.0} ms (the first: {:.0} ms); reading+parsing the file directly (baseline): {:.0} ms; ratio {:.2}x; {:.0} events/s",
            frames,
            bytes as f64 / 1_048_576.0,
            replay_time.as_secs_f64() * 1000.0,
            first.unwrap_or_default().as_secs_f64() * 1000.0,
            direct_time.as_secs_f64() * 1000.0,
            replay_time.as_secs_f64() / direct_time.as_secs_f64(),
            frames as f64 / replay_time.as_secs_f64(),
        );
    });
    idle_rss(&root);
}

/// Reads and parses a session log line by line, as the replay's baseline: its events.
fn parse_log(path: &Path) -> usize {
    let file = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    let mut events = 0;
    for line in file.lines() {
        let event: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        assert!(event.is_object());
        events += 1;
    }
    events
}

/// The median of `times`.
fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

struct Load {
    requests: usize,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
}

impl Load {
    fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    fn print(&self, name: &str, baseline: &Load) {
        println!(
            "{:<34} {:>12.0} {:>10.1?} {:>10.1?} {:>13.2}x",
            name,
            self.rate(),
            self.p50,
            self.p99,
            self.rate() / baseline.rate()
        );
    }
}

async fn load(socket: &Path, path: &str, phase: Duration) -> Load {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONNECTIONS {
        let (socket, path) = (socket.to_path_buf(), path.to_owned());
        tasks.push(tokio::spawn(async move {
            let stream = UnixStream::connect(&socket).await.unwrap();
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .unwrap();
            tokio::spawn(connection);
            let mut samples = Vec::new();
            while started.elapsed() < phase {
                let request = hyper::Request::get(&path)
                    .header("host", "bench")
                    .header("authorization", format!("Bearer {TOKEN}"))
                    .body(Empty::<Bytes>::new())
                    .unwrap();
                let sent = Instant::now();
                sender.ready().await.unwrap();
                let response = sender.send_request(request).await.unwrap();
                assert!(response.status().is_success(), "{}", response.status());
                let body = response.into_body().collect().await.unwrap().to_bytes();
                assert!(!body.is_empty());
                samples.push(sent.elapsed());
            }
            samples
        }));
    }
    let mut samples = Vec::new();
    for task in tasks {
        samples.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    Load {
        requests: samples.len(),
        elapsed,
        p50: at(0.50),
        p99: at(0.99),
    }
}

async fn replay(socket: &Path, path: &str) -> (usize, usize) {
    let stream = UnixStream::connect(socket).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::get(path)
        .header("host", "bench")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let mut body = sender.send_request(request).await.unwrap().into_body();
    let (mut frames, mut bytes) = (0, 0);
    // A blank line may straddle two reads: the last byte of the one before counts too.
    let mut last = 0u8;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            bytes += data.len();
            let mut previous = last;
            for &byte in data.iter() {
                if previous == b'\n' && byte == b'\n' {
                    frames += 1;
                }
                previous = byte;
            }
            last = previous;
        }
    }
    (frames, bytes)
}

fn start_bare(socket: PathBuf) -> PathBuf {
    let listener = UnixListener::bind(&socket).unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_request| async {
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(
                        br#"{"status":"ok"}"#,
                    ))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    socket
}

/// Roots, a stamped site table and `SITES` site manifests written through the library (a
/// listing reads manifests only, so no repository is needed).
fn make_instance(root: &Path) {
    for sub in ["sites", "audit", "agents", "templates"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    std::fs::write(root.join("sites/.atelier_instance"), "bench\n").unwrap();
    let mut rows = Vec::new();
    let sites = Root::open(root.join("sites")).unwrap();
    for i in 0..SITES {
        let (slug, domain) = (format!("site{i}"), format!("site{i}.example.org"));
        sites.create_dir_all(&slug, 0o2770).unwrap();
        let manifest = SiteManifest {
            slug: slug.clone(),
            name: format!("Site {i}"),
            domain: domain.clone(),
            owner_user_id: 1,
            created_at: "2026-12-01T00:00:00.000Z".into(),
            driver: Driver::ClaudeCode,
            template: "basic".into(),
            build: BuildSpec::default(),
            published: None,
        };
        manifest::write_manifest(&sites.open_dir(&slug).unwrap(), &manifest).unwrap();
        let ws = root.join("www").join(&domain);
        let ws = ws.to_str().unwrap();
        rows.push(json!({
            "slug": slug, "domain": domain, "webspace": ws,
            "surfaces": {
                "preprod": {"store_dir": format!("{ws}/.releases/pre"), "link_path": format!("{ws}/pre")},
                "prod": {"store_dir": format!("{ws}/.releases/web"), "link_path": format!("{ws}/web")},
            }
        }));
    }
    let body = serde_json::to_string_pretty(&json!({
        "version": 1, "instance": "bench", "webspace_base": root.join("www"), "sites": rows,
    }))
    .unwrap()
        + "\n";
    let stamp = format!(
        "// atelier-provision: bench sites {}\n",
        hex::encode(sha2::Sha256::digest(body.as_bytes()))
    );
    std::fs::write(root.join("sites.json"), stamp + &body).unwrap();
}

fn raw_settings(root: &Path) -> RawSettings {
    RawSettings {
        instance: "bench".into(),
        service_token: Some(TOKEN.into()),
        sites_root: Some(root.join("sites")),
        audit_dir: Some(root.join("audit")),
        site_table_file: Some(root.join("sites.json")),
        publication_api_url: Some("http://127.0.0.1:9/api".into()),
        templates_dir: Some(root.join("templates")),
        agent_confinement: Some("none".into()),
        deployment: Some("development".into()),
        agent_state_root: Some(root.join("agents")),
        ..RawSettings::default()
    }
}

fn start_sited(root: &Path) -> (PathBuf, Arc<Router>) {
    let router = Arc::new(Router::new(&raw_settings(root).validate().unwrap()).unwrap());
    let socket = root.join("sited.sock");
    let listener = atelier_http::Listener::from(UnixListener::bind(&socket).unwrap());
    let served = Arc::clone(&router);
    tokio::spawn(atelier_http::serve(
        listener,
        move |request| {
            let router = Arc::clone(&served);
            async move { router.handle(request).await }
        },
        std::future::pending(),
        Duration::from_secs(1),
    ));
    (socket, router)
}

/// Starts the real binary on the same instance, lets it settle and reads its resident set.
fn idle_rss(root: &Path) {
    let socket = root.join("idle.sock");
    let token = root.join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_atelier-sited"))
        .args(["--instance", "bench", "--deployment", "development"])
        .args(["--agent-confinement", "none"])
        .arg("--listen")
        .arg(&socket)
        .arg("--token-file")
        .arg(&token)
        .arg("--sites-root")
        .arg(root.join("sites"))
        .arg("--audit-dir")
        .arg(root.join("audit"))
        .arg("--site-table-file")
        .arg(root.join("sites.json"))
        .args(["--publication-api-url", "http://127.0.0.1:9/api"])
        .arg("--templates-dir")
        .arg(root.join("templates"))
        .arg("--agent-state-root")
        .arg(root.join("agents"))
        .env_clear()
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..500 {
        if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(500));
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .unwrap_or("VmRSS: ?")
        .to_owned();
    let _ = child.kill();
    let _ = child.wait();
    println!("idle atelier-sited (after boot and sweep, {SITES} sites): {rss}");
}
