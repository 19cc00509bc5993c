//! An instance as an operator gets it, in a temporary directory: a small declaration rendered
//! by the real `atelier-provision render`, the artifacts that live inside the instance's own
//! trees installed where the declaration put them, the roots and webspaces the provisioner's
//! `apply` would make, and sited's real binary serving it in `none` confinement with the
//! rendered env file as its environment (as `EnvironmentFile=` gives it) and the token as a
//! systemd credential.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use atelier_site_client::config::{resolve, TargetOptions};
use atelier_site_client::{Actor, Client, Target};
use serde_json::{json, Value};

use super::{templates_dir, workspace_bin};

/// The instance every test declares.
pub const INSTANCE: &str = "e2e";

/// Releases the declaration keeps per surface by default: enough that 100 flips never prune
/// the release a rollback goes back to.
pub const RELEASES_RETAINED: u64 = 64;

/// One row of the rendered site table, as sited reads it.
#[derive(Debug, Clone)]
pub struct SiteRow {
    /// The slug.
    pub slug: String,
    /// The webspace.
    pub webspace: PathBuf,
    /// Preproduction's release store.
    pub preprod_store: PathBuf,
    /// Production's release store.
    pub prod_store: PathBuf,
    /// Production's served link.
    pub prod_link: PathBuf,
}

/// A rendered, installed instance with sited's binary serving it; sited gets SIGTERM (then
/// SIGKILL) when this is dropped.
pub struct Instance {
    _dir: tempfile::TempDir,
    root: PathBuf,
    socket: PathBuf,
    token_file: PathBuf,
    engine_fragment: PathBuf,
    vhosts: Vec<PathBuf>,
    env: BTreeMap<String, String>,
    sites: Vec<SiteRow>,
    sited: Option<Child>,
    sited_log: PathBuf,
}

impl Instance {
    /// Declares `sites` (slug, domain) with the default limits, renders, installs and starts
    /// sited; returns once sited accepts connections on its socket.
    pub fn start(sites: &[(&str, &str)]) -> Instance {
        Instance::start_with(sites, json!({"releases_retained": RELEASES_RETAINED}), &[])
    }

    /// [`Instance::start`] with the declaration's `limits` and development flags of sited's
    /// own added to the ones every instance gets.
    pub fn start_with(sites: &[(&str, &str)], limits: Value, sited_flags: &[&str]) -> Instance {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let root = dir.path().to_path_buf();
        let declaration = root.join("instance.json");
        std::fs::write(
            &declaration,
            serde_json::to_string_pretty(&declare(&root, sites, limits)).expect("JSON"),
        )
        .expect("writing the declaration");
        let rendered = root.join("rendered");
        let written = render(&declaration, &rendered);

        // Install what lives in the instance's own trees (env file, site table, engine
        // fragment, gate plans…) where the declaration put it; keep the host-wide artifacts
        // (units, vhosts, polkit) in the rendered tree for the tests to read.
        let mut vhosts = Vec::new();
        for file in &written {
            let target = Path::new("/").join(file.strip_prefix(&rendered).expect("inside DIR"));
            if target.starts_with(&root) {
                std::fs::create_dir_all(target.parent().expect("a parent")).expect("a parent");
                std::fs::copy(file, &target).expect("installing an artifact");
            } else if target.starts_with("/etc/nginx/sites-available") {
                vhosts.push(file.clone());
            }
        }
        assert!(!vhosts.is_empty(), "the render wrote no nginx vhost");
        let config_dir = root.join("etc").join(INSTANCE);
        let env = read_env_file(&config_dir.join("env"));
        let table = Path::new(&env["ATELIER_SITE_TABLE_FILE"]).to_path_buf();
        let sites = read_site_table(&table);

        // The trees `apply` makes, each marked for this instance.
        let marker = atelier_layout::paths::INSTANCE_MARKER_FILE;
        for key in [
            "ATELIER_SITES_ROOT",
            "ATELIER_AUDIT_DIR",
            "ATELIER_AGENT_STATE_ROOT",
        ] {
            std::fs::create_dir_all(&env[key]).expect("a root");
        }
        std::fs::write(
            Path::new(&env["ATELIER_SITES_ROOT"]).join(marker),
            format!("{INSTANCE}\n"),
        )
        .expect("the sites root's marker");
        for row in &sites {
            for store in [&row.preprod_store, &row.prod_store] {
                std::fs::create_dir_all(store).expect("a release store");
            }
            std::fs::write(row.webspace.join(marker), format!("{INSTANCE}\n"))
                .expect("a webspace's marker");
        }

        // The service token, as PID 1 hands it over (LoadCredential=).
        let credentials = root.join("credentials");
        std::fs::create_dir_all(&credentials).expect("the credentials directory");
        let token_file = credentials.join("SERVICE_TOKEN");
        std::fs::write(&token_file, format!("{}\n", fresh_token())).expect("the token");
        std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600))
            .expect("the token's mode");

        let socket = root.join("sited.sock");
        let sited_log = root.join("sited.log");
        let mut instance = Instance {
            _dir: dir,
            engine_fragment: config_dir.join("engine.env.fragment"),
            root,
            socket,
            token_file,
            vhosts,
            env,
            sites,
            sited: None,
            sited_log,
        };
        instance.spawn_sited(&credentials, sited_flags);
        instance
    }

    fn spawn_sited(&mut self, credentials: &Path, flags: &[&str]) {
        let log = std::fs::File::create(&self.sited_log).expect("sited's log");
        let mut command = Command::new(workspace_bin("atelier-sited"));
        command
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("CREDENTIALS_DIRECTORY", credentials)
            .envs(&self.env)
            // The development flags: a bound socket instead of systemd's, and unconfined runs
            // through the workspace's shim and atelier-build.
            .arg("--listen")
            .arg(&self.socket)
            .args(["--deployment", "development"])
            .args(["--agent-confinement", "none"])
            .arg("--templates-dir")
            .arg(templates_dir())
            .arg("--shim-bin")
            .arg(workspace_bin("atelier-shim"))
            .arg("--build-bin")
            .arg(workspace_bin("atelier-build"))
            .args(flags)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("sited's log"))
            .stderr(log);
        let child = command.spawn().expect("spawning atelier-sited");
        self.sited = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self
                .sited
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("atelier-sited exited {status}:\n{}", self.sited_log());
            }
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "atelier-sited did not come up:\n{}",
                self.sited_log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The temporary tree.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// sited's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The token.
    pub fn token(&self) -> String {
        std::fs::read_to_string(&self.token_file)
            .expect("the token")
            .trim()
            .to_owned()
    }

    /// The rendered nginx vhosts (in the rendered tree).
    pub fn vhosts(&self) -> &[PathBuf] {
        &self.vhosts
    }

    /// A key of the rendered env file.
    pub fn env(&self, key: &str) -> &str {
        self.env
            .get(key)
            .unwrap_or_else(|| panic!("the env file has no {key}"))
    }

    /// The site table's row of `slug`.
    pub fn site(&self, slug: &str) -> &SiteRow {
        self.sites
            .iter()
            .find(|row| row.slug == slug)
            .unwrap_or_else(|| panic!("no row {slug}"))
    }

    /// A site's workspace.
    pub fn workspace(&self, slug: &str) -> PathBuf {
        Path::new(self.env("ATELIER_SITES_ROOT")).join(slug)
    }

    /// What sited logged so far.
    pub fn sited_log(&self) -> String {
        std::fs::read_to_string(&self.sited_log).unwrap_or_default()
    }

    /// The target the engine pairs with: the rendered fragment, the token file, and `socket`
    /// (the fragment names the systemd socket under /run, which this instance does not use).
    pub fn target_at(&self, socket: &Path, instance: Option<&str>) -> Target {
        let options = TargetOptions {
            socket: Some(socket.to_owned()),
            instance: instance.map(str::to_owned),
            token_file: Some(self.token_file.clone()),
            engine_env: Some(self.engine_fragment.clone()),
            ..TargetOptions::default()
        };
        resolve(&options).expect("the target resolves").0
    }

    /// A paired-on-first-call client of sited's socket acting as (`user_id`, `username`).
    pub fn client(&self, user_id: i64, username: &str) -> Client {
        Client::new(
            self.target_at(&self.socket, None),
            Actor::new(user_id, username).expect("an actor"),
        )
    }

    /// The atelierctl binary's connection flags for `socket`, acting as ops (7).
    pub fn ctl_flags(&self, socket: &Path) -> Vec<String> {
        [
            "--engine-env",
            &self.engine_fragment.display().to_string(),
            "--socket",
            &socket.display().to_string(),
            "--token-file",
            &self.token_file.display().to_string(),
            "--actor-id",
            "7",
            "--actor-name",
            "ops",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let Some(mut child) = self.sited.take() else {
            return;
        };
        // SIGTERM: sited drains and marks live turns interrupted, as under systemd.
        atelier_test_support::process::stop(
            &mut child,
            atelier_test_support::process::Signal::TERM,
            Duration::from_secs(10),
        );
    }
}

/// The declaration: every tree inside `root`, nginx, open preproduction, production without
/// TLS (so the rendered vhost serves it on plain HTTP), the scripted agent as Claude Code.
fn declare(root: &Path, sites: &[(&str, &str)], limits: Value) -> Value {
    let at = |sub: &str| root.join(sub).display().to_string();
    let rows: Vec<Value> = sites
        .iter()
        .map(|(slug, domain)| json!({"slug": slug, "domain": domain}))
        .collect();
    json!({
        "instance": INSTANCE,
        "description": "End-to-end test instance",
        "engine": {"private_dir": at("engine"), "group": "root"},
        "web": {"server": "nginx", "group": "root"},
        "publication_api": {"url": "http://127.0.0.1:3100/publication/server_api/v2"},
        "paths": {"config_base": at("etc"), "state_base": at("state")},
        "webspace_base": at("www"),
        "roots": {"sites": at("sites"), "audit": at("audit")},
        "sites": rows,
        "serving": {
            "preprod": {"enabled": true, "auth": {"mode": "none"}},
            "prod": {"tls": {"mode": "none"}},
        },
        "agent": {
            "driver": "claude_code",
            // The scripted stand-in: the journeys need exact edits per turn and hangs to stop.
            "bins": {"claude_code": workspace_bin("atelier-test-agent")},
        },
        "limits": limits,
    })
}

/// Runs `atelier-provision render` and returns the files it wrote.
fn render(declaration: &Path, dir: &Path) -> Vec<PathBuf> {
    let out = Command::new(workspace_bin("atelier-provision"))
        .arg("render")
        .arg("--json")
        .arg("--declaration")
        .arg(declaration)
        .arg(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("running atelier-provision");
    assert!(out.status.success(), "atelier-provision render: {out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("render's JSON report");
    report["written"]
        .as_array()
        .expect("render reports what it wrote")
        .iter()
        .map(|p| PathBuf::from(p.as_str().expect("a path")))
        .collect()
}

/// The `KEY="value"` lines of a rendered env file, unquoted as systemd's `EnvironmentFile=`
/// reads them (`\\` and `\"` are the only escapes the provisioner writes).
fn read_env_file(path: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(path).expect("the rendered env file");
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (key, quoted) = line.split_once('=').expect("KEY=VALUE");
            let inner = quoted
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or_else(|| panic!("{key}'s value is double-quoted: {line}"));
            let mut value = String::new();
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                value.push(if c == '\\' {
                    chars.next().expect("an escaped character")
                } else {
                    c
                });
            }
            (key.to_owned(), value)
        })
        .collect()
}

/// The rows of the stamped site table.
fn read_site_table(path: &Path) -> Vec<SiteRow> {
    let text = std::fs::read_to_string(path).expect("the site table");
    let (stamp, body) = text.split_once('\n').expect("a stamp line");
    assert!(
        stamp.starts_with("// atelier-provision: "),
        "stamped: {stamp}"
    );
    let table: Value = serde_json::from_str(body).expect("the site table's JSON");
    let path_of = |v: &Value| PathBuf::from(v.as_str().expect("a path"));
    table["sites"]
        .as_array()
        .expect("sites")
        .iter()
        .map(|row| SiteRow {
            slug: row["slug"].as_str().expect("a slug").to_owned(),
            webspace: path_of(&row["webspace"]),
            preprod_store: path_of(&row["surfaces"]["preprod"]["store_dir"]),
            prod_store: path_of(&row["surfaces"]["prod"]["store_dir"]),
            prod_link: path_of(&row["surfaces"]["prod"]["link_path"]),
        })
        .collect()
}

/// A service token nobody else has: 48 hex digits from the kernel's random source.
fn fresh_token() -> String {
    let mut bytes = [0u8; 24];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").expect("/dev/urandom"),
        &mut bytes,
    )
    .expect("random bytes");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
