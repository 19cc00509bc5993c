//! What atelierctl's integration tests share: a real sited `Router` of instance `test` served
//! on a temporary unix socket, a log of every request it received, and a client for it.

#![allow(
    dead_code,
    reason = "the client benchmark includes this module too and uses only part of it"
)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use atelier_site_client::{Actor, BasePath, Client, ServiceToken, Target};
use atelier_sited::{RawSettings, Router};
use sha2::Digest as _;

/// The service token of the test instance.
pub const TOKEN: &str = "test-service-token-000000000000000000000000";
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

/// A binary the workspace builds (`cargo build --workspace --bins`, as scripts/test does).
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test> → target/<profile>/<name>
    exe.parent().and_then(Path::parent).unwrap().join(name)
}

/// Asserts the binaries a real turn or build needs exist.
pub fn require_turn_binaries() {
    for name in ["atelier-shim", "atelier-test-agent", "atelier-build"] {
        let bin = workspace_bin(name);
        assert!(
            bin.is_file(),
            "{} is missing: run `cargo build --workspace --bins` first (scripts/test does)",
            bin.display()
        );
    }
}

fn templates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../templates")
        .canonicalize()
        .unwrap()
}

/// sited's settings for instance `test` under `root` with `token`: unconfined runs through
/// the real shim, the scripted test agent standing in for Claude Code, the real
/// `atelier-build` for builds.
pub fn settings(root: &Path, token: &str) -> atelier_sited::Settings {
    RawSettings {
        instance: INSTANCE.into(),
        service_token: Some(token.into()),
        sites_root: Some(root.join("sites")),
        audit_dir: Some(root.join("audit")),
        site_table_file: Some(root.join("sites.json")),
        publication_api_url: Some("https://api.example.org/publication/v2".into()),
        templates_dir: Some(templates_dir()),
        agent_confinement: Some("none".into()),
        deployment: Some("development".into()),
        agent_state_root: Some(root.join("agents")),
        shim_bin: Some(workspace_bin("atelier-shim")),
        // The scripted stand-in: the client's tests need turns that end, hang or fail on demand.
        claude_code_bin: Some(workspace_bin("atelier-test-agent")),
        build_bin: Some(workspace_bin("atelier-build")),
        ..RawSettings::default()
    }
    .validate()
    .unwrap()
}

/// Makes the roots and a stamped `sites.json` declaring [`DECLARED`], each with a webspace
/// and its release stores.
fn provision(root: &Path) {
    let marker = atelier_layout::paths::INSTANCE_MARKER_FILE;
    for sub in ["sites", "audit", "agents"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    std::fs::write(root.join("sites").join(marker), format!("{INSTANCE}\n")).unwrap();
    let rows: Vec<serde_json::Value> = DECLARED
        .iter()
        .map(|(slug, domain)| {
            let ws = root.join("www").join(domain);
            std::fs::create_dir_all(&ws).unwrap();
            std::fs::write(ws.join(marker), format!("{INSTANCE}\n")).unwrap();
            // The release stores exist from the start, as the provisioner makes them.
            for store in [".releases/pre", ".releases/web"] {
                std::fs::create_dir_all(ws.join(store)).unwrap();
            }
            let ws = ws.to_str().unwrap();
            serde_json::json!({
                "slug": slug, "domain": domain, "webspace": ws,
                "surfaces": {
                    "preprod": {"store_dir": format!("{ws}/.releases/pre"), "link_path": format!("{ws}/pre")},
                    "prod": {"store_dir": format!("{ws}/.releases/web"), "link_path": format!("{ws}/web")},
                }
            })
        })
        .collect();
    let body = serde_json::to_string_pretty(&serde_json::json!({
        "version": 1, "instance": INSTANCE, "webspace_base": root.join("www"), "sites": rows,
    }))
    .unwrap()
        + "\n";
    let stamp = format!(
        "// atelier-provision: {INSTANCE} sites {}\n",
        hex::encode(sha2::Sha256::digest(body.as_bytes()))
    );
    std::fs::write(root.join("sites.json"), stamp + &body).unwrap();
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
        let mut argv: Vec<String> = vec![
            "--socket".into(),
            self.socket.display().to_string(),
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
        std::process::Command::new(env!("CARGO_BIN_EXE_atelierctl"))
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
