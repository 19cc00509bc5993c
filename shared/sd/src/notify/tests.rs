//! Tests of the notify parsers and of real datagrams received on tempdir and abstract sockets.

use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;

/// A datagram socket standing in for PID 1's notify socket.
struct Receiver {
    socket: UnixDatagram,
    _dir: Option<tempfile::TempDir>,
    /// The address in `$NOTIFY_SOCKET` syntax.
    address: String,
}

impl Receiver {
    fn in_tempdir() -> Receiver {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let socket = UnixDatagram::bind(&path).expect("bind");
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        Receiver {
            socket,
            address: path.to_str().expect("utf-8 path").to_owned(),
            _dir: Some(dir),
        }
    }

    fn abstract_name() -> Receiver {
        let name = format!(
            "atelier-sd-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        );
        let addr = SocketAddr::from_abstract_name(&name).expect("abstract address");
        let socket = UnixDatagram::bind_addr(&addr).expect("bind");
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        Receiver {
            socket,
            address: format!("@{name}"),
            _dir: None,
        }
    }

    fn recv(&self) -> String {
        let mut buf = [0u8; 4096];
        let n = self.socket.recv(&mut buf).expect("a datagram");
        String::from_utf8(buf[..n].to_vec()).expect("utf-8")
    }

    fn assert_empty(&self) {
        self.socket.set_nonblocking(true).expect("nonblocking");
        let mut buf = [0u8; 4096];
        let got = self.socket.recv(&mut buf);
        assert!(
            got.as_ref()
                .is_err_and(|e| e.kind() == io::ErrorKind::WouldBlock),
            "unexpected datagram: {:?}",
            got.map(|n| String::from_utf8_lossy(&buf[..n]).into_owned())
        );
        self.socket.set_nonblocking(false).expect("blocking");
    }
}

/// Runs `f` with a subscriber that records log lines, and returns them.
fn capture_logs(f: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let bytes = buffer.0.lock().expect("lock").clone();
    String::from_utf8(bytes).expect("utf-8 logs")
}

#[test]
fn each_method_sends_exactly_its_message() {
    let receiver = Receiver::in_tempdir();
    let notifier = Notifier::new(Some(&receiver.address), None);
    assert!(notifier.is_enabled());

    notifier.ready();
    assert_eq!(receiver.recv(), "READY=1");
    notifier.status("serving 3 sites");
    assert_eq!(receiver.recv(), "STATUS=serving 3 sites");
    notifier.stopping();
    assert_eq!(receiver.recv(), "STOPPING=1");
    notifier.watchdog();
    assert_eq!(receiver.recv(), "WATCHDOG=1");
    notifier.ready_with_status("up");
    assert_eq!(receiver.recv(), "READY=1\nSTATUS=up");
    notifier.extend_timeout(Duration::from_secs(3));
    assert_eq!(receiver.recv(), "EXTEND_TIMEOUT_USEC=3000000");
    notifier.send(&["RELOADING=1", "MONOTONIC_USEC=5"]);
    assert_eq!(receiver.recv(), "RELOADING=1\nMONOTONIC_USEC=5");
    receiver.assert_empty();
}

#[test]
fn a_clone_sends_to_the_same_socket() {
    let receiver = Receiver::in_tempdir();
    let notifier = Notifier::new(Some(&receiver.address), None);
    let clone = notifier.clone();
    std::thread::spawn(move || clone.ready())
        .join()
        .expect("thread");
    assert_eq!(receiver.recv(), "READY=1");
}

#[test]
fn status_cannot_inject_other_keys() {
    let receiver = Receiver::in_tempdir();
    let notifier = Notifier::new(Some(&receiver.address), None);
    notifier.status("one\nREADY=1\r\0two");
    assert_eq!(receiver.recv(), "STATUS=one READY=1  two");
}

#[test]
fn malformed_lines_are_not_sent() {
    let receiver = Receiver::in_tempdir();
    let notifier = Notifier::new(Some(&receiver.address), None);
    let logs = capture_logs(|| {
        notifier.send(&["READY=1\nSTATUS=x"]);
        notifier.send(&["READY=1", "no equals sign"]);
        notifier.send(&["STATUS=a\0b"]);
        notifier.send(&[]);
    });
    receiver.assert_empty();
    assert_eq!(
        logs.matches("sd_notify message not sent").count(),
        3,
        "{logs}"
    );
}

#[test]
fn an_abstract_socket_works() {
    let receiver = Receiver::abstract_name();
    assert!(receiver.address.starts_with('@'));
    let notifier = Notifier::new(Some(&receiver.address), None);
    notifier.ready();
    assert_eq!(receiver.recv(), "READY=1");
}

#[test]
fn an_unreachable_socket_is_logged_not_fatal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let absent = dir.path().join("absent");
    let notifier = Notifier::new(Some(absent.to_str().expect("utf-8")), None);
    assert!(
        notifier.is_enabled(),
        "the address is valid; only sending fails"
    );
    let logs = capture_logs(|| {
        notifier.ready();
        notifier.status("still here");
        notifier.stopping();
    });
    assert_eq!(logs.matches("sd_notify failed").count(), 3, "{logs}");
    assert!(logs.contains("keys=READY\n"), "{logs}");
    assert!(
        !logs.contains("still here"),
        "status text is not logged: {logs}"
    );
}

#[test]
fn no_socket_means_no_op() {
    let notifier = Notifier::new(None, Some(Duration::from_secs(1)));
    assert!(!notifier.is_enabled());
    assert_eq!(notifier.watchdog_ping_interval(), None);
    let logs = capture_logs(|| {
        notifier.ready();
        notifier.status("x");
        notifier.stopping();
        notifier.watchdog();
    });
    assert_eq!(logs, "", "a disabled notifier is silent");
    assert!(!Notifier::default().is_enabled());
    assert!(!Notifier::disabled().is_enabled());
}

#[test]
fn an_unusable_address_disables_with_a_warning() {
    for value in ["", "@", "relative/path", "vsock:2:1234", "/nul\0byte"] {
        let logs = capture_logs(|| {
            let notifier = Notifier::new(Some(value), None);
            assert!(!notifier.is_enabled(), "{value:?}");
            notifier.ready();
        });
        assert!(logs.contains("sd_notify disabled"), "{value:?}: {logs}");
    }
}

#[test]
fn parse_notify_socket_table() {
    let long = format!("/{}", "x".repeat(120));
    let cases: [(&str, &str, Result<&str, &str>); 7] = [
        ("path", "/run/systemd/notify", Ok("path")),
        ("abstract", "@atelier/notify", Ok("abstract")),
        ("empty", "", Err("Empty")),
        ("at alone", "@", Err("Empty")),
        ("relative", "run/notify", Err("Unsupported")),
        ("vsock", "vsock:2:1234", Err("Unsupported")),
        ("too long", &long, Err("BadAddress")),
    ];
    for (case, value, want) in cases {
        match (parse_notify_socket(value), want) {
            (Ok(addr), Ok("path")) => {
                assert_eq!(
                    addr.as_pathname(),
                    Some(std::path::Path::new(value)),
                    "{case}"
                );
            }
            (Ok(addr), Ok("abstract")) => {
                assert_eq!(
                    addr.as_abstract_name(),
                    Some(&value.as_bytes()[1..]),
                    "{case}"
                );
            }
            (Err(e), Err(variant)) => {
                assert!(format!("{e:?}").starts_with(variant), "{case}: {e:?}");
            }
            (got, want) => panic!("{case}: got {got:?}, want {want:?}"),
        }
    }
}

/// (case, WATCHDOG_USEC, WATCHDOG_PID, expected interval)
type WatchdogCase = (
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    Option<Duration>,
);

#[test]
fn watchdog_interval_table() {
    const OWN: u32 = 4242;
    let cases: [WatchdogCase; 12] = [
        ("absent", None, None, None),
        ("absent usec, our pid", None, Some("4242"), None),
        ("not a number", Some("soon"), None, None),
        ("negative", Some("-5"), None, None),
        ("zero", Some("0"), None, None),
        ("other pid", Some("30000000"), Some("4243"), None),
        ("pid not a number", Some("30000000"), Some("me"), None),
        (
            "good, no pid",
            Some("30000000"),
            None,
            Some(Duration::from_secs(15)),
        ),
        (
            "good, our pid",
            Some("30000000"),
            Some("4242"),
            Some(Duration::from_secs(15)),
        ),
        ("odd", Some("3"), None, Some(Duration::from_micros(1))),
        (
            "one microsecond",
            Some("1"),
            None,
            Some(Duration::from_micros(1)),
        ),
        ("with whitespace", Some(" 30000000"), None, None),
    ];
    for (case, usec, pid, want) in cases {
        assert_eq!(watchdog_interval(usec, pid, OWN), want, "case {case:?}");
    }
}

#[tokio::test]
async fn spawn_watchdog_pings_at_the_interval() {
    let receiver = Receiver::in_tempdir();
    let socket = tokio::net::UnixDatagram::from_std({
        let socket = receiver.socket.try_clone().expect("clone");
        socket.set_nonblocking(true).expect("nonblocking");
        socket
    })
    .expect("tokio socket");
    let notifier = Notifier::new(Some(&receiver.address), Some(Duration::from_millis(20)));
    assert_eq!(
        notifier.watchdog_ping_interval(),
        Some(Duration::from_millis(20))
    );
    let started = tokio::time::Instant::now();
    let task = notifier.spawn_watchdog().expect("watchdog task");
    let mut buf = [0u8; 64];
    for _ in 0..3 {
        let n = tokio::time::timeout(Duration::from_secs(5), socket.recv(&mut buf))
            .await
            .expect("a ping in time")
            .expect("recv");
        assert_eq!(&buf[..n], b"WATCHDOG=1");
    }
    // The first ping is immediate, then one per interval.
    assert!(started.elapsed() >= Duration::from_millis(40));
    task.abort();
    assert!(task.await.expect_err("aborted").is_cancelled());
}

#[tokio::test]
async fn spawn_watchdog_needs_a_watchdog() {
    let receiver = Receiver::in_tempdir();
    assert!(Notifier::new(Some(&receiver.address), None)
        .spawn_watchdog()
        .is_none());
    assert!(Notifier::new(None, Some(Duration::from_millis(20)))
        .spawn_watchdog()
        .is_none());
}

#[test]
fn spawn_watchdog_outside_a_runtime_is_refused_not_a_panic() {
    let receiver = Receiver::in_tempdir();
    let notifier = Notifier::new(Some(&receiver.address), Some(Duration::from_millis(20)));
    let logs = capture_logs(|| assert!(notifier.spawn_watchdog().is_none()));
    assert!(logs.contains("no tokio runtime"), "{logs}");
}

#[test]
fn notifier_is_clone_send_sync() {
    fn assert_traits<T: Clone + Send + Sync + 'static>() {}
    assert_traits::<Notifier>();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_task_sends_each_change_once_and_nothing_after_its_abort() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let receiver = Receiver::in_tempdir();
    let notifier = Notifier::new(Some(&receiver.address), None);
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    let task = notifier.spawn_status(Duration::from_millis(5), "0 open".to_owned(), move || {
        format!("{} open", seen.load(Ordering::SeqCst))
    });
    count.store(1, Ordering::SeqCst);
    // Blocking here is fine: the task ticks on the other worker.
    assert_eq!(receiver.recv(), "STATUS=1 open");
    count.store(2, Ordering::SeqCst);
    assert_eq!(receiver.recv(), "STATUS=2 open");
    // Unchanged across many ticks: nothing more is sent.
    tokio::time::sleep(Duration::from_millis(50)).await;
    receiver.assert_empty();
    task.abort();
    assert!(task.await.is_err_and(|e| e.is_cancelled()));
    count.store(3, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(30)).await;
    receiver.assert_empty();
}
