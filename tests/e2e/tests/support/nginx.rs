//! A real nginx (Debian package `nginx`) serving the provisioner's rendered vhosts on a free
//! loopback port: its own master as a child process (`daemon off;`), configuration, pid file
//! and logs in a temporary directory, the vhosts included as `sites-enabled` would include
//! them with only their `listen` lines moved to the port. A catch-all default server answers
//! 404, so a request is served by a site's vhost only when its `Host` names it. Also a
//! keep-alive HTTP/1.1 client that sends a `Host`.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The access log's format: status, host, path.
const LOG_FORMAT: &str = "'$status $host $request_uri'";

/// A running nginx; stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Nginx {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
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

impl Nginx {
    /// Serves the rendered `vhosts`; waits until nginx accepts connections.
    pub fn serve(vhosts: &[PathBuf]) -> Nginx {
        let texts: Vec<String> = vhosts
            .iter()
            .map(|p| std::fs::read_to_string(p).expect("a rendered vhost"))
            .collect();
        let mut last_error = String::new();
        // A free port can be taken between the probe and nginx's bind: try a few.
        for _ in 0..5 {
            let port = free_port();
            let dir = tempfile::tempdir().expect("nginx's directory");
            let enabled = dir.path().join("sites-enabled");
            std::fs::create_dir(&enabled).expect("sites-enabled");
            for (path, text) in vhosts.iter().zip(&texts) {
                std::fs::write(
                    enabled.join(path.file_name().expect("a file name")),
                    on_port(text, port),
                )
                .expect("a vhost");
            }
            std::fs::write(dir.path().join("nginx.conf"), config(dir.path(), port))
                .expect("nginx.conf");
            let child = Command::new("/usr/sbin/nginx")
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
                    panic!("cannot start /usr/sbin/nginx (Debian package nginx): {e}")
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

    /// nginx's error log so far.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    /// `GET path` with `Host: host` on a fresh connection, off the async workers.
    pub async fn get(&self, host: &str, path: &str) -> WebResponse {
        let (port, host_owned, path_owned) = (self.port, host.to_owned(), path.to_owned());
        tokio::task::spawn_blocking(move || WebClient::new(port).get(&host_owned, &path_owned))
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
        if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::QUIT);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
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
                return Err(format!("not listening after 10 s: {}", self.error_log()));
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
/// 0700), Debian's MIME types, every vhost of `sites-enabled`, and a 404 default server.
fn config(dir: &Path, port: u16) -> String {
    let d = dir.display();
    format!(
        "daemon off;\n\
         master_process on;\n\
         user root root;\n\
         worker_processes 1;\n\
         pid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\n\
         events {{\n    worker_connections 256;\n}}\n\
         http {{\n\
         \x20   include /etc/nginx/mime.types;\n\
         \x20   default_type application/octet-stream;\n\
         \x20   log_format e2e {LOG_FORMAT};\n\
         \x20   access_log {d}/access.log e2e;\n\
         \x20   keepalive_requests 100000;\n\
         \x20   client_body_temp_path {d}/client_body;\n\
         \x20   proxy_temp_path {d}/proxy;\n\
         \x20   fastcgi_temp_path {d}/fastcgi;\n\
         \x20   uwsgi_temp_path {d}/uwsgi;\n\
         \x20   scgi_temp_path {d}/scgi;\n\
         \x20   server {{\n\
         \x20       listen 127.0.0.1:{port} default_server;\n\
         \x20       server_name _;\n\
         \x20       return 404;\n\
         \x20   }}\n\
         \x20   include {d}/sites-enabled/*.conf;\n\
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

impl WebResponse {
    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A keep-alive HTTP/1.1 client on one loopback connection; a connection nginx closed is
/// replaced before the next request, never in the middle of one.
pub struct WebClient {
    port: u16,
    connection: Option<BufReader<TcpStream>>,
}

impl WebClient {
    /// A client of 127.0.0.1:`port`; it connects on first use.
    pub fn new(port: u16) -> WebClient {
        WebClient {
            port,
            connection: None,
        }
    }

    /// `GET path` with `Host: host`. Any error is a failed request: it is not retried, so a
    /// refused or cut connection is counted, never hidden.
    pub fn get(&mut self, host: &str, path: &str) -> std::io::Result<WebResponse> {
        let connection = match self.connection.take() {
            Some(connection) => connection,
            None => {
                let stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))?;
                stream.set_read_timeout(Some(Duration::from_secs(10)))?;
                stream.set_nodelay(true)?;
                BufReader::new(stream)
            }
        };
        let (response, keep) = exchange(connection, host, path)?;
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
