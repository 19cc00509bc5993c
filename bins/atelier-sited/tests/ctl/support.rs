//! What the ctl tests share: a real sited `Router` of instance `test` served on a temporary
//! unix socket, a log of every request it received, a client for it and the atelierctl binary
//! pointed at it.

#![allow(
    dead_code,
    reason = "the client benchmark includes this module too and uses only part of it"
)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use atelier_site_client::{Actor, BasePath, Client, ServiceToken, Target};
use atelier_sited::{RawSettings, Router};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::support;
pub use crate::support::TOKEN;

/// The instance.
pub const INSTANCE: &str = "test";
/// The sites the instance's `sites.json` declares (slug, domain).
pub const DECLARED: &[(&str, &str)] = &[
    ("alpha", "alpha.example.org"),
    ("beta", "beta.example.org"),
    ("gamma", "gamma.example.org"),
];

/// A request as sited received it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The method.
    pub method: String,
    /// The path and query.
    pub path: String,
    /// The headers.
    pub headers: hyper::HeaderMap,
}

impl Seen {
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A sited instance serving on a temporary socket.
pub struct Instance {
    /// Keeps the tree alive: it is removed when the instance is dropped.
    _dir: tempfile::TempDir,
    /// The tree: sites/, audit/, agents/, www/, sites.json, sited.sock, token.
    pub root: PathBuf,
    /// The socket.
    pub socket: PathBuf,
    /// The router behind it.
    pub router: Router,
    /// A file holding the token, mode 0600.
    pub token_file: PathBuf,
    /// Every request received, in order.
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

/// sited's settings for instance `test` under `root` with `token`: unconfined runs through
/// the real shim, the scripted test agent standing in for Claude Code (the client's tests need
/// turns that end, hang or fail on demand), the real `atelier-build` for builds.
pub fn settings(root: &Path, token: &str) -> atelier_sited::Settings {
    RawSettings {
        service_token: Some(token.into()),
        ..support::raw_settings(root)
    }
    .validate()
    .unwrap()
}

/// Makes the roots and a stamped `sites.json` declaring [`DECLARED`], each with a webspace and
/// its release stores, as the provisioner makes them.
fn provision(root: &Path) {
    support::make_roots(root);
    support::declare_sites(root, DECLARED);
}

/// Serves `GET /health` from `health` and everything else from `rest` (the same router
/// unless a test pairs with one token and calls with another), logging every request.
fn serve(socket: &Path, health: Router, rest: Router, seen: Arc<Mutex<Vec<Seen>>>) {
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    tokio::spawn(atelier_http::serve(
        listener.into(),
        move |request: atelier_http::Request| {
            let (health, rest, seen) = (health.clone(), rest.clone(), Arc::clone(&seen));
            async move {
                let path = request
                    .uri()
                    .path_and_query()
                    .map(|p| p.as_str().to_owned())
                    .unwrap_or_default();
                seen.lock().unwrap().push(Seen {
                    method: request.method().to_string(),
                    path: path.clone(),
                    headers: request.headers().clone(),
                });
                if request.method() == hyper::Method::GET && path.ends_with("/health") {
                    health.handle(request).await
                } else {
                    rest.handle(request).await
                }
            }
        },
        std::future::pending(),
        Duration::from_secs(1),
    ));
}

/// An instance whose `/health` and routes share the token.
pub async fn instance() -> Instance {
    instance_with(TOKEN, TOKEN).await
}

/// An instance whose `/health` is served by sited with `health_token` and every other route
/// by sited with `routes_token` (a token rotated after the client paired).
pub async fn instance_with(health_token: &str, routes_token: &str) -> Instance {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    provision(&root);
    let router = Router::new(&settings(&root, routes_token)).unwrap();
    let health = if health_token == routes_token {
        router.clone()
    } else {
        Router::new(&settings(&root, health_token)).unwrap()
    };
    let socket = root.join("sited.sock");
    let seen = Arc::new(Mutex::new(Vec::new()));
    serve(&socket, health, router.clone(), Arc::clone(&seen));
    let token_file = root.join("token");
    std::fs::write(&token_file, format!("{health_token}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    Instance {
        _dir: dir,
        root,
        socket,
        router,
        token_file,
        seen,
    }
}

impl Instance {
    /// A client of this instance acting as ana (42), with `token`.
    pub fn client_with(&self, instance: &str, token: &str) -> Client {
        Client::new(
            Target {
                socket: self.socket.clone(),
                base_path: BasePath::default(),
                instance: atelier_layout::InstanceName::new(instance).unwrap(),
                token: ServiceToken::new(token, "test").unwrap(),
            },
            Actor::new(42, "ana").unwrap(),
        )
    }

    /// A client of this instance acting as ana (42).
    pub fn client(&self) -> Client {
        self.client_with(INSTANCE, TOKEN)
    }

    /// The requests received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Runs the atelierctl binary against this instance (connection flags first).
    pub async fn ctl(&self, args: &[&str]) -> Ctl {
        ctl(self.argv(args)).await
    }

    /// The arguments that run `args` against this instance (connection flags first).
    pub fn argv(&self, args: &[&str]) -> Vec<String> {
        self.argv_via(&self.socket, args)
    }

    /// The arguments that run `args` against this instance through `socket` (a relay).
    pub fn argv_via(&self, socket: &Path, args: &[&str]) -> Vec<String> {
        let mut argv: Vec<String> = vec![
            "--socket".into(),
            socket.display().to_string(),
            "--instance".into(),
            INSTANCE.into(),
            "--token-file".into(),
            self.token_file.display().to_string(),
            "--actor-id".into(),
            "7".into(),
            "--actor-name".into(),
            "ops".into(),
        ];
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        argv
    }
}

/// What a run of the binary printed and how it exited.
#[derive(Debug)]
pub struct Ctl {
    /// The exit code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs the atelierctl binary with exactly `argv`, off the async workers.
pub async fn ctl(argv: Vec<String>) -> Ctl {
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(support::workspace_bin("atelierctl"))
            .args(&argv)
            .env_clear()
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    Ctl {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// A unix-socket relay in front of sited that the test can cut, dropping every connection
/// through it at once as a restart or a fault would drop it, or take down, dropping each new
/// connection as it comes, as while sited is restarting.
pub struct Relay {
    /// Where the relay listens.
    pub path: PathBuf,
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    down: Arc<AtomicBool>,
    /// Every byte relayed from sited to the client.
    downstream: Arc<Mutex<Vec<u8>>>,
}

impl Relay {
    /// Relays `path` to `upstream`.
    pub fn start(upstream: PathBuf, path: PathBuf) -> Relay {
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let downstream: Arc<Mutex<Vec<u8>>> = Arc::default();
        let down = Arc::new(AtomicBool::new(false));
        let (held, seen, is_down) = (
            Arc::clone(&connections),
            Arc::clone(&downstream),
            Arc::clone(&down),
        );
        tokio::spawn(async move {
            loop {
                let (client, _) = listener.accept().await.unwrap();
                if is_down.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let server = tokio::net::UnixStream::connect(&upstream).await.unwrap();
                let seen = Arc::clone(&seen);
                let task = tokio::spawn(async move {
                    let (mut client_read, mut client_write) = client.into_split();
                    let (mut server_read, mut server_write) = server.into_split();
                    let up = tokio::io::copy(&mut client_read, &mut server_write);
                    let down = async {
                        let mut buf = [0u8; 8192];
                        loop {
                            let n = server_read.read(&mut buf).await.unwrap_or(0);
                            if n == 0 {
                                break;
                            }
                            seen.lock().unwrap().extend_from_slice(&buf[..n]);
                            if client_write.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        let _ = client_write.shutdown().await;
                    };
                    let _ = tokio::join!(up, down);
                });
                held.lock().unwrap().push(task.abort_handle());
            }
        });
        Relay {
            path,
            connections,
            down,
            downstream,
        }
    }

    /// While `down`, every new connection is dropped as it is accepted.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Drops every connection open through the relay.
    pub fn cut(&self) {
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    /// Waits until sited has sent `needle` through the relay.
    pub async fn wait_for(&self, needle: &str) {
        let waited = std::time::Instant::now();
        while !String::from_utf8_lossy(&self.downstream.lock().unwrap()).contains(needle) {
            assert!(
                waited.elapsed() < Duration::from_secs(30),
                "sited never sent {needle:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
