//! The daemons' outbound TLS trusts the operating system's store: a default `reqwest` client,
//! the one chatd hands its providers and the gate's MCP relay builds, reaches the lab model
//! (whose CA is private) once that CA is in the store OpenSSL's conventions name
//! (`SSL_CERT_FILE`), and is refused while the store is the host's own. So an operator's
//! private CA works by installing it where every other program looks, and no copy of the web's
//! roots compiled into the binaries stands in the way.
//!
//! The store is read when a client is built, from the environment, which a test must not
//! change in its own process: each client is built in a child run of this test binary.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the child: the URL to fetch with a default client.
const CHILD_URL: &str = "ATELIER_TEST_OS_STORE_URL";
/// Set in the child: `trusted` or `refused`, what the fetch must come to.
const CHILD_EXPECT: &str = "ATELIER_TEST_OS_STORE_EXPECT";

/// How long the lab model may take to write its CA: a deadline, not a pace.
const WAIT: Duration = Duration::from_secs(60);

/// The lab model on a free loopback port, with a certificate for 127.0.0.1; killed on drop.
struct Lab {
    child: Child,
    port: u16,
    /// Holds `ca.pem`, the lab's CA.
    dir: tempfile::TempDir,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_lab() -> Lab {
    let dir = tempfile::tempdir().unwrap();
    let ca_out = dir.path().join("ca.pem");
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(env!("CARGO_BIN_EXE_atelier-lab-model"))
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--host",
            "127.0.0.1",
        ])
        .arg("--ca-out")
        .arg(&ca_out)
        .args(["--write-path", "/tmp/unused", "--write-content", "unused"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut lab = Lab { child, port, dir };
    let deadline = Instant::now() + WAIT;
    while !ca_out.exists() {
        if let Some(status) = lab.child.try_wait().unwrap() {
            panic!("the lab model exited ({status})");
        }
        assert!(Instant::now() < deadline, "no CA after {WAIT:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    lab
}

/// In the child: one GET with `reqwest::Client::new()`; any HTTP answer means TLS held.
fn child(url: &str, expect: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let answer = runtime.block_on(async { reqwest::Client::new().get(url).send().await });
    match expect {
        "trusted" => assert!(answer.is_ok(), "{answer:?}"),
        _ => assert!(
            answer.is_err(),
            "a CA outside the store was trusted: {answer:?}"
        ),
    }
}

#[test]
fn a_default_client_trusts_the_os_store_and_nothing_else() {
    if let (Ok(url), Ok(expect)) = (std::env::var(CHILD_URL), std::env::var(CHILD_EXPECT)) {
        child(&url, &expect);
        return;
    }
    let lab = start_lab();
    let ca = lab.dir.path().join("ca.pem");
    let url = format!("https://127.0.0.1:{}/v1/models", lab.port);
    let host_store = Path::new("/etc/ssl/certs/ca-certificates.crt");
    for (store, expect) in [(ca.as_path(), "trusted"), (host_store, "refused")] {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "os_trust_store::a_default_client_trusts_the_os_store_and_nothing_else",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("SSL_CERT_FILE", store)
            .env_remove("SSL_CERT_DIR")
            .env(CHILD_URL, &url)
            .env(CHILD_EXPECT, expect)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "with SSL_CERT_FILE={} the fetch was not {expect}:\n{}{}",
            store.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // A filter that matched no test would pass without fetching anything.
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("1 passed"),
            "the child ran no test: {stdout}"
        );
    }
}
