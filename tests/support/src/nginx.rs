//! A real nginx for tests (Debian package `nginx`): its own master as a child process
//! (`daemon off;`) on a free loopback port, with configuration, pid file and logs in a
//! temporary directory. What it serves is one of:
//! - [`Nginx::start`]: a root (typically a webspace's `pre` or `web` link) served the way the
//!   provisioner's vhost serves it, under a [`SymlinkPolicy`];
//! - [`Nginx::serve`]: the provisioner's rendered vhosts, as `sites-enabled` would include
//!   them, with only their `listen` lines moved to the port and a catch-all default server
//!   answering 404, so a request reaches a site's vhost only when its `Host` names it;
//! - [`Nginx::start_servers`]: `server { … }` blocks of the caller's own.
//!
//! Every request goes to an access log that [`Nginx::stop`] returns; [`WebClient`] is a
//! keep-alive HTTP/1.1 client that sends a `Host`. `ATELIER_NGINX_BIN` overrides the binary
//! (default `/usr/sbin/nginx`). It needs root: the workers run as `user root`, so they can
//! read a test's 0700 temporary trees. A missing nginx fails the test; it never skips.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The binary when `ATELIER_NGINX_BIN` does not name another.
const DEFAULT_BIN: &str = "/usr/sbin/nginx";

/// Debian's MIME types, which the provisioner's nginx serves with; a binary from elsewhere
/// may come without them, and then [`FALLBACK_TYPES`] stand in.
const DEBIAN_MIME_TYPES: &str = "/etc/nginx/mime.types";

/// The types a test site's files need when Debian's list is absent.
const FALLBACK_TYPES: &str = "types {\n        text/html html;\n        text/css css;\n        \
     application/javascript js;\n        text/plain txt;\n    }";

/// The access log's format: status, host, path (parsed back by [`Nginx::stop`]).
const LOG_FORMAT: &str = "'$status $host $request_uri'";

/// How long nginx may take to listen, and then to stop gracefully.
const PATIENCE: Duration = Duration::from_secs(10);

/// How nginx treats symbolic links on the way to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymlinkPolicy {
    /// `disable_symlinks off`: links followed by the kernel's path resolution.
    Off,
    /// The provisioner's vhost: `disable_symlinks if_not_owner from=$realpath_root`, each link
    /// on the way followed only if it and its target have one owner.
    IfNotOwner,
}

// === impl SymlinkPolicy ===

impl SymlinkPolicy {
    fn directive(self) -> &'static str {
        match self {
            SymlinkPolicy::Off => "disable_symlinks off;",
            SymlinkPolicy::IfNotOwner => "disable_symlinks if_not_owner from=$realpath_root;",
        }
    }
}

/// One line of the access log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    /// The status sent.
    pub status: u16,
    /// The `Host` asked for.
    pub host: String,
    /// The path.
    pub path: String,
}

/// A running nginx; stopped (SIGQUIT, then SIGKILL) when dropped.
pub struct Nginx {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

// === impl Nginx ===

impl Nginx {
    /// Serves `root` the way the provisioner's vhost does: `root` at the link,
    /// `open_file_cache off` (a cached descriptor would outlive a flip), `index index.html`,
    /// `try_files $uri $uri/ =404`, and `policy`; its one server answers any `Host`.
    pub fn start(root: &Path, policy: SymlinkPolicy) -> Nginx {
        let root = root.display().to_string();
        assert!(!root.contains('"'), "root {root} needs no quoting");
        Nginx::start_servers(|port| {
            format!(
                "server {{\n    listen 127.0.0.1:{port};\n    server_name localhost;\n    \
                 root \"{root}\";\n    index index.html;\n    open_file_cache off;\n    {}\n    \
                 location / {{\n        try_files $uri $uri/ =404;\n    }}\n}}\n",
                policy.directive()
            )
        })
    }

    /// Serves the rendered `vhosts` behind a default server that answers 404.
    pub fn serve(vhosts: &[PathBuf]) -> Nginx {
        let texts: Vec<String> = vhosts
            .iter()
            .map(|p| std::fs::read_to_string(p).expect("a rendered vhost"))
            .collect();
        Nginx::start_servers(|port| {
            let mut servers = format!(
                "server {{\n    listen 127.0.0.1:{port} default_server;\n    server_name _;\n    \
                 return 404;\n}}\n"
            );
            for text in &texts {
                servers.push_str(&on_port(text, port));
            }
            servers
        })
    }

    /// Starts nginx with the `server { … }` blocks `servers(port)` returns, on a free loopback
    /// port; waits until it accepts connections.
    pub fn start_servers(servers: impl Fn(u16) -> String) -> Nginx {
        let bin = std::env::var_os("ATELIER_NGINX_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_BIN));
        let mut last_error = String::new();
        // A free port can be taken between the probe and nginx's bind: try a few.
        for _ in 0..5 {
            let port = free_port();
            let dir = tempfile::tempdir().expect("nginx's directory");
            std::fs::write(
                dir.path().join("nginx.conf"),
                config(dir.path(), &servers(port)),
            )
            .expect("nginx.conf");
            let child = Command::new(&bin)
                .arg("-p")
                .arg(dir.path())
                .arg("-e")
                .arg(dir.path().join("error.log"))
                .arg("-c")
                .arg(dir.path().join("nginx.conf"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(
                    std::fs::File::create(dir.path().join("stderr")).expect("stderr file"),
                ))
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("cannot start {} (Debian package nginx): {e}", bin.display())
                });
            let mut nginx = Nginx {
                child: Some(child),
                port,
                dir,
            };
            match nginx.wait_ready() {
                Ok(()) => return nginx,
                Err(why) => last_error = why,
            }
        }
        panic!("nginx did not start: {last_error}");
    }

    /// The port it listens on, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// nginx's error log so far, for failure messages.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    /// A keep-alive client of this nginx that sends `Host: localhost`.
    pub fn client(&self) -> WebClient {
        WebClient::new(self.port, "localhost")
    }

    /// `GET path` with `Host: host` on a fresh connection, off the async workers; a failed
    /// request fails the test.
    pub async fn get(&self, host: &str, path: &str) -> WebResponse {
        let mut client = WebClient::new(self.port, host);
        let path_owned = path.to_owned();
        tokio::task::spawn_blocking(move || client.get(&path_owned))
            .await
            .expect("the request thread")
            .unwrap_or_else(|e| panic!("GET {path} (Host {host}): {e}"))
    }

    /// Stops nginx (its workers finish their log lines first) and returns the access log.
    pub fn stop(mut self) -> Vec<Logged> {
        self.terminate();
        let text =
            std::fs::read_to_string(self.dir.path().join("access.log")).expect("the access log");
        text.lines()
            .map(|line| {
                let mut parts = line.splitn(3, ' ');
                let mut next = || parts.next().unwrap_or_default().to_owned();
                Logged {
                    status: next().parse().unwrap_or(0),
                    host: next(),
                    path: next(),
                }
            })
            .collect()
    }

    fn terminate(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SIGQUIT is nginx's graceful stop: the master waits for its workers, which finish
        // their requests and log lines; SIGKILL would orphan the workers.
        crate::process::stop(&mut child, crate::process::Signal::QUIT, PATIENCE);
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.child = None;
                let stderr =
                    std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default();
                return Err(format!("exited {status}: {stderr}{}", self.error_log()));
            }
            if TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "not listening after {PATIENCE:?}: {}",
                    self.error_log()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// The rendered vhost with its `listen` lines moved to 127.0.0.1:`port`: the IPv4 one
/// rewritten, the IPv6 one dropped. Anything else in the vhost is served as rendered.
fn on_port(vhost: &str, port: u16) -> String {
    let mut moved = 0;
    let lines: Vec<String> = vhost
        .lines()
        .filter_map(|line| match line.trim() {
            "listen 80;" => {
                moved += 1;
                Some(line.replace("listen 80;", &format!("listen 127.0.0.1:{port};")))
            }
            "listen [::]:80;" => None,
            trimmed => {
                assert!(
                    !trimmed.starts_with("listen "),
                    "a listen line this harness does not know how to move: {line}"
                );
                Some(line.to_owned())
            }
        })
        .collect();
    assert!(moved > 0, "the vhost listens on no port 80:\n{vhost}");
    lines.join("\n") + "\n"
}

/// nginx.conf: everything under `dir`, workers as root (the test's temporary trees are
/// 0700), MIME types, the access log, keep-alive for as many requests as a load test makes,
/// and `servers`.
fn config(dir: &Path, servers: &str) -> String {
    let d = dir.display();
    let types = if Path::new(DEBIAN_MIME_TYPES).is_file() {
        format!("include {DEBIAN_MIME_TYPES};")
    } else {
        FALLBACK_TYPES.to_owned()
    };
    format!(
        "daemon off;\n\
         master_process on;\n\
         user root root;\n\
         worker_processes 1;\n\
         pid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\n\
         events {{\n    worker_connections 512;\n}}\n\
         http {{\n\
         \x20   {types}\n\
         \x20   default_type application/octet-stream;\n\
         \x20   log_format harness {LOG_FORMAT};\n\
         \x20   access_log {d}/access.log harness;\n\
         \x20   keepalive_requests 1000000;\n\
         \x20   client_body_temp_path {d}/client_body;\n\
         \x20   proxy_temp_path {d}/proxy;\n\
         \x20   fastcgi_temp_path {d}/fastcgi;\n\
         \x20   uwsgi_temp_path {d}/uwsgi;\n\
         \x20   scgi_temp_path {d}/scgi;\n\
         {servers}\
         }}\n"
    )
}

fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// One response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebResponse {
    /// The status code.
    pub status: u16,
    /// The `Content-Type`, when sent.
    pub content_type: Option<String>,
    /// The body (read by `Content-Length`).
    pub body: Vec<u8>,
}

// === impl WebResponse ===

impl WebResponse {
    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A keep-alive HTTP/1.1 client of one `Host` on one loopback connection; a connection nginx
/// closed is replaced before the next request, never in the middle of one.
pub struct WebClient {
    port: u16,
    host: String,
    connection: Option<BufReader<TcpStream>>,
}

// === impl WebClient ===

impl WebClient {
    /// A client of 127.0.0.1:`port` sending `Host: host`; it connects on first use.
    pub fn new(port: u16, host: &str) -> WebClient {
        WebClient {
            port,
            host: host.to_owned(),
            connection: None,
        }
    }

    /// `GET path`. Any error is a failed request: it is not retried, so a refused or cut
    /// connection is counted, never hidden.
    pub fn get(&mut self, path: &str) -> std::io::Result<WebResponse> {
        let connection = match self.connection.take() {
            Some(connection) => connection,
            None => {
                let stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))?;
                stream.set_read_timeout(Some(Duration::from_secs(10)))?;
                stream.set_nodelay(true)?;
                BufReader::new(stream)
            }
        };
        let (response, keep) = exchange(connection, &self.host, path)?;
        if let Some(connection) = keep {
            self.connection = Some(connection);
        }
        Ok(response)
    }
}

/// One request and its response; gives the connection back when it may be reused.
fn exchange(
    mut connection: BufReader<TcpStream>,
    host: &str,
    path: &str,
) -> std::io::Result<(WebResponse, Option<BufReader<TcpStream>>)> {
    let bad = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    connection
        .get_mut()
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())?;
    let mut line = String::new();
    if connection.read_line(&mut line)? == 0 {
        return Err(bad("the connection closed before a status line".into()));
    }
    let status = line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| bad(format!("not an HTTP/1.1 status line: {line:?}")))?;
    let mut length = None;
    let mut content_type = None;
    let mut reusable = true;
    loop {
        line.clear();
        if connection.read_line(&mut line)? == 0 {
            return Err(bad("the connection closed inside the head".into()));
        }
        let header = line.trim_end_matches(['\r', '\n']);
        if header.is_empty() {
            break;
        }
        let Some((name, value)) = header.split_once(':') else {
            return Err(bad(format!("not a header: {header:?}")));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| bad(format!("Content-Length {value:?}")))?,
            );
        } else if name.eq_ignore_ascii_case("content-type") {
            content_type = Some(value.to_owned());
        } else if name.eq_ignore_ascii_case("connection") && value.eq_ignore_ascii_case("close") {
            reusable = false;
        }
    }
    let length = length.ok_or_else(|| bad("a response without Content-Length".into()))?;
    let mut body = vec![0; length];
    connection.read_exact(&mut body)?;
    let response = WebResponse {
        status,
        content_type,
        body,
    };
    Ok((response, reusable.then_some(connection)))
}
