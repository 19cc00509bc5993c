//! Tests of activation parsing, classification of real sockets, the take helpers, the bind
//! fallback, and (with `systemd-socket-activate`) the whole protocol in a child process.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::*;

const OWN_PID: u32 = 4242;

/// What a parse case expects: the names, or the `Debug` of the error (which pins the variant
/// and its fields).
enum Want {
    NotActivated,
    Names(Vec<String>),
    Error(&'static str),
}

/// (case, LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES, expected)
type ParseCase<'a> = (
    &'a str,
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
    Want,
);

fn names(list: &[&str]) -> Want {
    Want::Names(list.iter().map(|s| (*s).to_owned()).collect())
}

#[test]
fn parse_activation_table() {
    let long_ok = "n".repeat(255);
    let long_bad = "n".repeat(256);
    let cases: Vec<ParseCase<'_>> = vec![
        // Not activated.
        ("not activated", None, None, None, Want::NotActivated),
        (
            "stray LISTEN_PID only",
            Some("4242"),
            None,
            None,
            Want::NotActivated,
        ),
        (
            "stray LISTEN_FDNAMES only",
            None,
            None,
            Some("web"),
            Want::NotActivated,
        ),
        // LISTEN_PID.
        (
            "pid missing",
            None,
            Some("1"),
            None,
            Want::Error("MissingPid"),
        ),
        (
            "wrong pid",
            Some("4243"),
            Some("1"),
            None,
            Want::Error("WrongPid { expected: 4242, found: 4243 }"),
        ),
        (
            "pid not a number",
            Some("abc"),
            Some("1"),
            None,
            Want::Error(r#"BadPid { value: "abc" }"#),
        ),
        (
            "pid zero",
            Some("0"),
            Some("1"),
            None,
            Want::Error(r#"BadPid { value: "0" }"#),
        ),
        (
            "pid negative",
            Some("-1"),
            Some("1"),
            None,
            Want::Error(r#"BadPid { value: "-1" }"#),
        ),
        (
            "pid with whitespace",
            Some(" 4242"),
            Some("1"),
            None,
            Want::Error(r#"BadPid { value: " 4242" }"#),
        ),
        (
            "pid empty",
            Some(""),
            Some("1"),
            None,
            Want::Error(r#"BadPid { value: "" }"#),
        ),
        // LISTEN_FDS.
        (
            "count not a number",
            Some("4242"),
            Some("two"),
            None,
            Want::Error(r#"BadFdCount { value: "two" }"#),
        ),
        (
            "count negative",
            Some("4242"),
            Some("-1"),
            None,
            Want::Error(r#"BadFdCount { value: "-1" }"#),
        ),
        (
            "count empty",
            Some("4242"),
            Some(""),
            None,
            Want::Error(r#"BadFdCount { value: "" }"#),
        ),
        (
            "count too many",
            Some("4242"),
            Some("513"),
            None,
            Want::Error("TooManyFds { count: 513, max: 512 }"),
        ),
        ("zero fds", Some("4242"), Some("0"), None, names(&[])),
        (
            "zero fds, empty names",
            Some("4242"),
            Some("0"),
            Some(""),
            names(&[]),
        ),
        // LISTEN_FDNAMES.
        (
            "names absent, 1 fd",
            Some("4242"),
            Some("1"),
            None,
            names(&["unknown"]),
        ),
        (
            "names absent, 3 fds",
            Some("4242"),
            Some("3"),
            None,
            names(&["unknown", "unknown", "unknown"]),
        ),
        (
            "good, 1 fd",
            Some("4242"),
            Some("1"),
            Some("web"),
            names(&["web"]),
        ),
        (
            "good, 3 fds",
            Some("4242"),
            Some("3"),
            Some("web:admin:metrics"),
            names(&["web", "admin", "metrics"]),
        ),
        (
            "duplicate names",
            Some("4242"),
            Some("2"),
            Some("web:web"),
            names(&["web", "web"]),
        ),
        (
            "more names than fds",
            Some("4242"),
            Some("1"),
            Some("web:admin"),
            Want::Error("NameCountMismatch { fds: 1, names: 2 }"),
        ),
        (
            "fewer names than fds",
            Some("4242"),
            Some("3"),
            Some("web:admin"),
            Want::Error("NameCountMismatch { fds: 3, names: 2 }"),
        ),
        (
            "empty names for one fd",
            Some("4242"),
            Some("1"),
            Some(""),
            Want::Error("NameCountMismatch { fds: 1, names: 0 }"),
        ),
        (
            "names but zero fds",
            Some("4242"),
            Some("0"),
            Some("web"),
            Want::Error("NameCountMismatch { fds: 0, names: 1 }"),
        ),
        (
            "empty name in the middle",
            Some("4242"),
            Some("3"),
            Some("web::metrics"),
            Want::Error(r#"BadName { index: 1, name: "", reason: "is empty" }"#),
        ),
        (
            "control character",
            Some("4242"),
            Some("1"),
            Some("we\tb"),
            Want::Error(
                r#"BadName { index: 0, name: "we\tb", reason: "contains a control or non-ASCII character" }"#,
            ),
        ),
        (
            "DEL character",
            Some("4242"),
            Some("1"),
            Some("web\u{7f}"),
            Want::Error(
                r#"BadName { index: 0, name: "web\u{7f}", reason: "contains a control or non-ASCII character" }"#,
            ),
        ),
        (
            "non-ASCII",
            Some("4242"),
            Some("1"),
            Some("café"),
            Want::Error(
                r#"BadName { index: 0, name: "café", reason: "contains a control or non-ASCII character" }"#,
            ),
        ),
        (
            "255 bytes",
            Some("4242"),
            Some("1"),
            Some(&long_ok),
            names(&[&long_ok]),
        ),
    ];
    for (case, pid, fds, fdnames, want) in cases {
        let got = parse_activation(pid, fds, fdnames, OWN_PID);
        match (want, got) {
            (Want::NotActivated, Ok(None)) => {}
            (Want::Names(want), Ok(Some(activation))) => {
                assert_eq!(activation.names, want, "case {case:?}");
            }
            (Want::Error(want), Err(e)) => assert_eq!(format!("{e:?}"), want, "case {case:?}"),
            (_, got) => panic!("case {case:?}: unexpected {got:?}"),
        }
    }

    let err = parse_activation(Some("4242"), Some("1"), Some(&long_bad), OWN_PID)
        .expect_err("a 256-byte name is refused");
    assert!(
        matches!(
            err,
            ListenError::BadName {
                index: 0,
                reason: "is longer than 255 bytes",
                ..
            }
        ),
        "{err:?}"
    );

    let max = parse_activation(Some("4242"), Some("512"), None, OWN_PID)
        .expect("512 fds is the cap")
        .expect("activated");
    assert_eq!(max.count(), 512);
}

#[test]
fn activation_numbers_fds_from_three() {
    let activation = Activation {
        names: vec!["web".to_owned(), "admin".to_owned()],
    };
    let fds: Vec<(RawFd, &str)> = activation.fds().collect();
    assert_eq!(fds, vec![(3, "web"), (4, "admin")]);
}

#[test]
fn errors_name_the_problem() {
    let err = parse_activation(Some("99"), Some("1"), None, 7).expect_err("wrong pid");
    assert_eq!(
        err.to_string(),
        "LISTEN_PID is 99, not our pid 7: the sockets are another process's"
    );
    let err = ListenError::NotPassed {
        name: "admin".to_owned(),
        passed: vec!["web".to_owned(), "metrics".to_owned()],
    };
    assert_eq!(
        err.to_string(),
        r#"no socket named "admin" was passed (passed: web, metrics)"#
    );
    let err = ListenError::NotPassed {
        name: "admin".to_owned(),
        passed: Vec::new(),
    };
    assert_eq!(
        err.to_string(),
        r#"no socket named "admin" was passed (passed: none)"#
    );
}

// === classify ===

#[test]
fn classify_unix_listener() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("l.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    let ActivatedSocket::UnixListener(listener) = classify(OwnedFd::from(listener)) else {
        panic!("not classified as a unix listener");
    };
    let mut client = UnixStream::connect(&path).expect("connect");
    client.write_all(b"hi").expect("write");
    let (mut server, _) = listener.accept().expect("accept");
    let mut buf = [0u8; 2];
    server.read_exact(&mut buf).expect("read");
    assert_eq!(&buf, b"hi");
}

#[test]
fn classify_tcp_listener() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let ActivatedSocket::TcpListener(listener) = classify(OwnedFd::from(listener)) else {
        panic!("not classified as a tcp listener");
    };
    assert_eq!(listener.local_addr().expect("addr"), addr);
    let _client = TcpStream::connect(addr).expect("connect");
    listener.accept().expect("accept");
}

#[test]
fn classify_unix_stream() {
    let (ours, mut peer) = UnixStream::pair().expect("pair");
    let ActivatedSocket::UnixStream(mut ours) = classify(OwnedFd::from(ours)) else {
        panic!("not classified as a unix stream");
    };
    ours.write_all(b"ok").expect("write");
    let mut buf = [0u8; 2];
    peer.read_exact(&mut buf).expect("read");
    assert_eq!(&buf, b"ok");
}

#[test]
fn classify_tcp_stream() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
    let (accepted, _) = listener.accept().expect("accept");
    let ActivatedSocket::TcpStream(mut accepted) = classify(OwnedFd::from(accepted)) else {
        panic!("accepted end not classified as a tcp stream");
    };
    let ActivatedSocket::TcpStream(mut client) = classify(OwnedFd::from(client)) else {
        panic!("connecting end not classified as a tcp stream");
    };
    accepted.write_all(b"yo").expect("write");
    let mut buf = [0u8; 2];
    client.read_exact(&mut buf).expect("read");
    assert_eq!(&buf, b"yo");
}

#[test]
fn classify_pipe_as_other() {
    let mut cat = Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn cat");
    let stdin = cat.stdin.take().expect("stdin pipe");
    let ActivatedSocket::Other(fd) = classify(OwnedFd::from(stdin)) else {
        panic!("a pipe is not a socket");
    };
    // Still the same, working pipe.
    let mut pipe = fs::File::from(fd);
    pipe.write_all(b"through").expect("write");
    drop(pipe);
    let mut out = String::new();
    cat.stdout
        .take()
        .expect("stdout pipe")
        .read_to_string(&mut out)
        .expect("read");
    assert_eq!(out, "through");
    cat.wait().expect("wait");
}

#[test]
fn classify_datagram_and_file_as_other() {
    let datagram = UnixDatagram::unbound().expect("datagram");
    assert_eq!(classify(OwnedFd::from(datagram)).kind(), SocketKind::Other);
    let file = tempfile::tempfile().expect("file");
    assert_eq!(classify(OwnedFd::from(file)).kind(), SocketKind::Other);
}

// === take helpers ===

fn named(name: &str, socket: ActivatedSocket) -> NamedSocket {
    NamedSocket {
        name: name.to_owned(),
        socket,
    }
}

fn unix_listener_in(dir: &Path, file: &str) -> ActivatedSocket {
    ActivatedSocket::UnixListener(UnixListener::bind(dir.join(file)).expect("bind"))
}

#[test]
fn take_helpers_pick_by_name_and_kind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (stream, _peer) = UnixStream::pair().expect("pair");
    let tcp = TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut sockets = vec![
        named("web", unix_listener_in(dir.path(), "a")),
        named("metrics", ActivatedSocket::TcpListener(tcp)),
        named("conn", ActivatedSocket::UnixStream(stream)),
        named("door", unix_listener_in(dir.path(), "b")),
        named("door", unix_listener_in(dir.path(), "c")),
    ];

    let err = take_tcp_listener(&mut sockets, "web").expect_err("web is unix");
    assert_eq!(
        err.to_string(),
        r#"the socket named "web" is a unix listener, not a tcp listener"#
    );
    assert_eq!(
        sockets.len(),
        5,
        "a socket of the wrong kind stays available"
    );

    let web = take_unix_listener(&mut sockets, "web").expect("web");
    assert!(web
        .local_addr()
        .expect("addr")
        .as_pathname()
        .is_some_and(|p| p.ends_with("a")));
    take_tcp_listener(&mut sockets, "metrics").expect("metrics");
    take_unix_stream(&mut sockets, "conn").expect("conn");

    let err = take_by_name(&mut sockets, "web").expect_err("already taken");
    assert!(
        matches!(&err, ListenError::NotPassed { name, passed }
            if name == "web" && passed == &["door", "door"]),
        "{err:?}"
    );

    let doors = take_all_by_name(&mut sockets, "door");
    assert_eq!(doors.len(), 2);
    assert!(sockets.is_empty());
    assert!(take_all_by_name(&mut sockets, "door").is_empty());
}

// === bind fallback ===

/// The entries of `dir`, to check that no staging directory is left behind.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn assert_serves(listener: &UnixListener, path: &Path) {
    let mut client = UnixStream::connect(path).expect("connect");
    client.write_all(b"ping").expect("write");
    let (mut server, _) = listener.accept().expect("accept");
    let mut buf = [0u8; 4];
    server.read_exact(&mut buf).expect("read");
    assert_eq!(&buf, b"ping");
}

#[test]
fn bind_unix_fresh_path_applies_mode() {
    for mode in [0o660, 0o600, 0o666] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("d.sock");
        let listener = bind_unix(&path, mode).expect("bind");
        let meta = fs::symlink_metadata(&path).expect("stat");
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.mode() & 0o7777, mode, "mode {mode:o}");
        assert_eq!(entries(dir.path()), ["d.sock"], "no staging leftovers");
        assert_serves(&listener, &path);
    }
}

#[test]
fn bind_unix_replaces_a_stale_socket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("stale.sock");
    drop(UnixListener::bind(&path).expect("bind the soon-stale socket"));
    assert!(fs::symlink_metadata(&path)
        .expect("stat")
        .file_type()
        .is_socket());
    assert_eq!(
        UnixStream::connect(&path).expect_err("stale").kind(),
        std::io::ErrorKind::ConnectionRefused
    );

    let listener = bind_unix(&path, 0o660).expect("replaces the stale socket");
    assert_serves(&listener, &path);
    assert_eq!(entries(dir.path()), ["stale.sock"]);
}

#[test]
fn bind_unix_refuses_a_live_socket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("live.sock");
    let original = UnixListener::bind(&path).expect("bind");

    let err = bind_unix(&path, 0o660).expect_err("live");
    assert!(
        matches!(&err, BindError::AlreadyServed { path: p } if p == &path),
        "{err:?}"
    );
    // The probe's connection is queued first; the original still serves the path after it.
    original.accept().expect("accept the probe");
    assert_serves(&original, &path);
    assert_eq!(entries(dir.path()), ["live.sock"]);
}

#[test]
fn bind_unix_refuses_what_is_not_a_socket() {
    let dir = tempfile::tempdir().expect("tempdir");

    let file = dir.path().join("file");
    fs::write(&file, b"keep me").expect("write");
    let err = bind_unix(&file, 0o660).expect_err("a regular file");
    assert!(
        matches!(&err, BindError::NotASocket { path } if path == &file),
        "{err:?}"
    );
    assert_eq!(fs::read(&file).expect("read"), b"keep me");

    let subdir = dir.path().join("dir");
    fs::create_dir(&subdir).expect("mkdir");
    let err = bind_unix(&subdir, 0o660).expect_err("a directory");
    assert!(matches!(err, BindError::NotASocket { .. }), "{err:?}");

    // A symlink to a live socket is not ours to replace or probe through.
    let target = dir.path().join("target.sock");
    let _live = UnixListener::bind(&target).expect("bind");
    let link = dir.path().join("link.sock");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let err = bind_unix(&link, 0o660).expect_err("a symlink");
    assert!(matches!(err, BindError::NotASocket { .. }), "{err:?}");
    assert!(fs::symlink_metadata(&link)
        .expect("stat")
        .file_type()
        .is_symlink());

    assert_eq!(
        entries(dir.path()),
        ["dir", "file", "link.sock", "target.sock"]
    );
}

#[test]
fn bind_unix_refuses_overlong_and_nameless_paths() {
    let dir = tempfile::tempdir().expect("tempdir");
    let long = dir.path().join("x".repeat(120));
    let err = bind_unix(&long, 0o660).expect_err("too long");
    assert!(
        matches!(err, BindError::PathTooLong { max: 107, .. }),
        "{err:?}"
    );

    let err = bind_unix(Path::new("/"), 0o660).expect_err("no file name");
    assert!(matches!(err, BindError::NoFileName { .. }), "{err:?}");
    assert!(entries(dir.path()).is_empty());
}

#[test]
fn bind_unix_reports_a_missing_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("absent").join("d.sock");
    let err = bind_unix(&path, 0o660).expect_err("no parent directory");
    assert!(
        matches!(
            err,
            BindError::Io {
                action: "create a staging directory",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn bind_tcp_binds_and_reports_failure() {
    let listener = bind_tcp("127.0.0.1:0".parse().expect("addr")).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let err = bind_tcp(addr).expect_err("port in use");
    assert!(
        matches!(err, BindError::Tcp { addr: a, .. } if a == addr),
        "{err:?}"
    );
}

// === the whole protocol, in a child started by systemd-socket-activate ===

const CHILD_MARKER: &str = "ATELIER_SD_ACTIVATION_CHILD";
const CHILD_LINE: &str = "atelier-sd-child:";

/// The child half of the tests below: run in a process started by `systemd-socket-activate`,
/// it reports what `listeners_from_env` found. Ignored, and a no-op, unless that is the case.
#[test]
#[ignore = "run as a child by the activation tests"]
fn activation_child() {
    if std::env::var_os(CHILD_MARKER).is_none() {
        return;
    }
    let sockets = listeners_from_env().expect("listeners_from_env");
    for socket in &sockets {
        let cloexec = match &socket.socket {
            ActivatedSocket::UnixListener(s) => s.as_fd(),
            ActivatedSocket::TcpListener(s) => s.as_fd(),
            ActivatedSocket::UnixStream(s) => s.as_fd(),
            ActivatedSocket::TcpStream(s) => s.as_fd(),
            ActivatedSocket::Other(s) => s.as_fd(),
        };
        let flags = rustix::io::fcntl_getfd(cloexec).expect("F_GETFD");
        println!(
            "{CHILD_LINE} {} {} cloexec={}",
            socket.name,
            socket.socket.kind(),
            flags.contains(FdFlags::CLOEXEC)
        );
    }
    let again = listeners_from_env();
    println!(
        "{CHILD_LINE} second call {}",
        match again {
            Err(ListenError::AlreadyTaken) => "refused".to_owned(),
            other => format!("{other:?}"),
        }
    );
    println!("{CHILD_LINE} done");
}

/// Runs `systemd-socket-activate <args> <this test binary> activation_child`, calls `trigger`
/// once `ready_path` exists, and returns the child's report lines.
fn run_activated_child(args: &[&str], ready_path: &Path, trigger: impl FnOnce()) -> Vec<String> {
    let exe = std::env::current_exe().expect("current_exe");
    // One stream for stdout and stderr, so a failure shows everything in order.
    let (output, child_output) = UnixStream::pair().expect("pair");
    let child_stderr = child_output.try_clone().expect("clone");
    let spawned = Command::new("systemd-socket-activate")
        .args(args)
        .arg(format!("-E{CHILD_MARKER}=1"))
        .arg(exe)
        .args([
            "--exact",
            "listen::tests::activation_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::from(OwnedFd::from(child_output)))
        .stderr(Stdio::from(OwnedFd::from(child_stderr)))
        .spawn();
    // Debian's systemd package ships the tool; a test that cannot run it fails, never skips.
    let mut activator = spawned.expect("spawn systemd-socket-activate (package systemd)");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready_path.exists() {
        assert!(Instant::now() < deadline, "activator never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    trigger();

    let mut report = Vec::new();
    let mut output = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = rx.recv_timeout(left) else {
            let _ = activator.kill();
            let _ = activator.wait();
            panic!("child did not finish; its output:\n{}", output.join("\n"));
        };
        output.push(line.clone());
        // libtest may print "test … " on the same line, before the child's first report.
        if let Some(at) = line.find(CHILD_LINE) {
            let rest = line[at + CHILD_LINE.len()..].trim().to_owned();
            if rest == "done" {
                break;
            }
            report.push(rest);
        }
    }
    // In --accept mode the activator keeps listening; it is our child to end.
    let _ = activator.kill();
    let _ = activator.wait();
    report
}

#[test]
fn listeners_from_env_adopts_named_listeners() {
    let dir = tempfile::tempdir().expect("tempdir");
    let web = dir.path().join("web.sock");
    let admin = dir.path().join("admin.sock");
    let (web_arg, admin_arg) = (
        format!("--listen={}", web.display()),
        format!("--listen={}", admin.display()),
    );
    let args = [web_arg.as_str(), admin_arg.as_str(), "--fdname=web:admin"];
    // The activator execs the child on the first connection to any of its sockets.
    let report = run_activated_child(&args, &admin, || {
        UnixStream::connect(&web).expect("trigger");
    });
    assert_eq!(
        report,
        [
            "web unix listener cloexec=true",
            "admin unix listener cloexec=true",
            "second call refused",
        ]
    );
}

#[test]
fn listeners_from_env_adopts_an_accepted_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let door = dir.path().join("door.sock");
    let door_arg = format!("--listen={}", door.display());
    let args = ["--accept", door_arg.as_str()];
    let mut connection = None;
    let report = run_activated_child(&args, &door, || {
        // The activator's socket file exists from its bind, a moment before it listens: a
        // connection refused in between reached nobody, so it is tried again.
        let deadline = Instant::now() + Duration::from_secs(30);
        connection = Some(loop {
            match UnixStream::connect(&door) {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    assert!(Instant::now() < deadline, "the activator never listened");
                    std::thread::sleep(Duration::from_millis(10));
                }
                connected => break connected.expect("connect"),
            }
        });
    });
    // systemd names an accepted connection "connection"; systemd-socket-activate 252 sets no
    // LISTEN_FDNAMES for it, so our default applies there.
    assert_eq!(report.len(), 2, "{report:?}");
    assert!(
        [
            "unknown unix stream cloexec=true",
            "connection unix stream cloexec=true"
        ]
        .contains(&report[0].as_str()),
        "{report:?}"
    );
    assert_eq!(report[1], "second call refused");
    drop(connection);
}
