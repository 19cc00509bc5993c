//! A real nginx for tests (Debian package `nginx`), started on a free loopback port with a
//! generated configuration in a temporary directory, and a minimal keep-alive HTTP/1.1 client.
//!
//! Self-contained (std, `tempfile`, `rustix`) so another crate's tests can include it:
//! `#[path = "../../../shared/releases/tests/support/nginx.rs"] mod nginx;` — then
//! [`Nginx::start`] for a root served like the provisioner's vhost, or [`Nginx::start_servers`]
//! with `server { … }` blocks of your own (e.g. the rendered vhost with its `listen` lines
//! replaced by the given port). `ATELIER_NGINX_BIN` overrides the binary (default
//! `/usr/sbin/nginx`). It needs root (it runs `user root`, so temporary directories of mode
//! 0700 are readable) and fails, never skips, when nginx is missing.

#![allow(dead_code, reason = "each including test uses a different part")]
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helper: a failed setup step must fail the test"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// A running nginx; stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Nginx {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

// === impl Nginx ===

impl Nginx {
    /// Serves `root` (typically a webspace's `pre` or `web` link) the way the provisioner's
    /// vhost does: `root` at the link, `open_file_cache off` (a cached descriptor would outlive
    /// a flip), `index index.html`, `try_files $uri $uri/ =404`, and `policy`.
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

    /// Starts nginx with the `server { … }` blocks `servers(port)` returns, on a free loopback
    /// port; waits until it accepts connections.
    pub fn start_servers(servers: impl Fn(u16) -> String) -> Nginx {
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = free_port();
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(
                dir.path().join("nginx.conf"),
                config(dir.path(), &servers(port)),
            )
            .unwrap();
            let bin = std::env::var_os("ATELIER_NGINX_BIN")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/usr/sbin/nginx"));
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
                    std::fs::File::create(dir.path().join("stderr")).unwrap(),
                ))
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("cannot start {} (Debian package nginx): {e}", bin.display())
                });
            let mut nginx = Nginx { child, port, dir };
            match nginx.wait_ready() {
                Ok(()) => return nginx,
                Err(why) => last_error = why,
            }
        }
        panic!("nginx did not start: {last_error}");
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// nginx's error log so far, for failure messages.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    /// A keep-alive client of this nginx.
    pub fn client(&self) -> Client {
        Client::new(self.port)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let stderr =
                    std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default();
                return Err(format!("exited {status}: {stderr}{}", self.error_log()));
            }
            if TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("not listening after 10 s: {}", self.error_log()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM lets the master stop its workers; SIGKILL would orphan them.
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(dir: &Path, servers: &str) -> String {
    let d = dir.display();
    format!(
        "daemon off;\nmaster_process on;\nuser root root;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\nevents {{\n    worker_connections 512;\n}}\nhttp {{\n    \
         access_log off;\n    keepalive_requests 1000000;\n    client_body_temp_path {d}/client_body;\n    \
         proxy_temp_path {d}/proxy;\n    fastcgi_temp_path {d}/fastcgi;\n    uwsgi_temp_path {d}/uwsgi;\n    \
         scgi_temp_path {d}/scgi;\n    types {{\n        text/html html;\n        text/css css;\n        \
         application/javascript js;\n        text/plain txt;\n    }}\n    default_type application/octet-stream;\n\
         {servers}}}\n"
    )
}

fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    listener.local_addr().unwrap().port()
}

/// One HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The body (by `Content-Length`).
    pub body: Vec<u8>,
}

/// A keep-alive HTTP/1.1 client on one loopback connection, reconnecting when nginx closes it.
pub struct Client {
    port: u16,
    conn: Option<BufReader<TcpStream>>,
}

// === impl Client ===

impl Client {
    /// A client of `127.0.0.1:port`; connects on first use.
    pub fn new(port: u16) -> Client {
        Client { port, conn: None }
    }

    /// `GET path`; an error is a failed request (connection refused or cut, bad response).
    pub fn get(&mut self, path: &str) -> std::io::Result<Response> {
        // A kept-alive connection nginx closed meanwhile fails on first use: retry once fresh.
        match self.try_get(path) {
            Ok(response) => Ok(response),
            Err(_) if self.conn.is_none() => self.try_get(path),
            Err(e) => Err(e),
        }
    }

    fn try_get(&mut self, path: &str) -> std::io::Result<Response> {
        let reused = self.conn.is_some();
        if self.conn.is_none() {
            let stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))?;
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            self.conn = Some(BufReader::new(stream));
        }
        let result = self.exchange(path);
        if result.is_err() {
            self.conn = None;
            if reused {
                return Err(std::io::Error::other("stale keep-alive connection"));
            }
        }
        result.map(|(response, keep)| {
            if !keep {
                self.conn = None;
            }
            response
        })
    }

    fn exchange(&mut self, path: &str) -> std::io::Result<(Response, bool)> {
        let conn = self.conn.as_mut().expect("connected");
        conn.get_mut()
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())?;
        let mut line = String::new();
        if conn.read_line(&mut line)? == 0 {
            return Err(std::io::Error::other(
                "connection closed before the status line",
            ));
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
        let (mut length, mut keep) = (None, true);
        loop {
            line.clear();
            conn.read_line(&mut line)?;
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').unwrap_or((header, ""));
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse::<usize>().ok(),
                "connection" => keep = !value.trim().eq_ignore_ascii_case("close"),
                _ => {}
            }
        }
        let length = length.ok_or_else(|| std::io::Error::other("no Content-Length"))?;
        let mut body = vec![0; length];
        conn.read_exact(&mut body)?;
        Ok((Response { status, body }, keep))
    }
}
