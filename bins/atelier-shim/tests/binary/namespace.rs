//! The namespace proof and the gate forwards for real: as root, each shim runs in a fresh
//! network namespace made by `unshare --net` (util-linux), its loopback brought up with `ip`
//! (iproute2), or in the test's own namespace to be refused.

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::thread::JoinHandle;

use atelier_proto::ExitRecord;

use crate::support::{own_netns, spec_json, Launch, Scratch, Shim};

/// A marker argv: creates `marker` if it runs.
fn marker_argv(marker: &Path) -> Vec<String> {
    vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        r#"touch "$0""#.to_owned(),
        marker.display().to_string(),
    ]
}

/// Sends a marker spec for `door` with `host_netns` and returns the shim's end.
async fn run_marker(
    mut shim: Shim,
    door: &str,
    marker: &Path,
    host_netns: &str,
) -> (Shim, Option<ExitRecord>) {
    let hello = shim.hello().await;
    assert_eq!(hello["door"], door);
    let argv = marker_argv(marker);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    shim.send_spec(&spec_json(door, &argv, &[], host_netns))
        .await;
    let transcript = shim.transcript().await;
    (shim, transcript.exit)
}

#[tokio::test]
async fn in_a_private_namespace_the_proof_passes_and_the_run_proceeds() {
    let scratch = Scratch::new();
    let marker = scratch.path("ran");
    let launch = Launch::in_private_netns("build", &scratch.workdir());
    let mut shim = launch.start();
    // The unit name comes from the cgroup the test runs in (no service here).
    let expected_unit = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|cgroup| atelier_shim::procfs::unit_from_cgroup(&cgroup))
        .unwrap_or_else(|| "unconfined".to_owned());
    let hello = shim.hello().await;
    assert_eq!(hello["unit"], expected_unit.as_str());
    let argv = marker_argv(&marker);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    shim.send_spec(&spec_json("build", &argv, &[], &own_netns()))
        .await;
    let transcript = shim.transcript().await;
    assert_eq!(transcript.exit, Some(ExitRecord::exited(0)));
    let ended = shim.wait();
    assert_eq!(ended.code(), 0, "{}", ended.stderr);
    assert!(marker.exists());
}

/// A host with a tunnel module loaded puts its fallback devices (`tunl0`, `gre0`, ...) into every
/// new namespace, down; the proof lets such a namespace through. A bridge that is never set up
/// stands in for one (this machine loads no tunnel module).
#[tokio::test]
async fn a_private_namespace_with_a_down_interface_passes_and_the_run_proceeds() {
    let scratch = Scratch::new();
    let marker = scratch.path("ran");
    let mut launch = Launch::in_private_netns("build", &scratch.workdir());
    launch.wrapper =
        Some(r#"ip link set lo up && ip link add d0 type bridge && exec "$@""#.to_owned());
    let (shim, exit) = run_marker(launch.start(), "build", &marker, &own_netns()).await;
    assert_eq!(exit, Some(ExitRecord::exited(0)));
    let ended = shim.wait();
    assert_eq!(ended.code(), 0, "{}", ended.stderr);
    assert!(marker.exists());
}

/// One way the proof must fail: exit 78, the contract's line, nothing run.
struct NotInEffect {
    name: &'static str,
    /// `None`: start in the test's own namespace; `Some(script)`: this wrapper under
    /// `unshare --net` (`$NETNS_FILE` is a path it may write its namespace identity to).
    wrapper: Option<&'static str>,
    /// The spec's `hostNetns`: the test's own, a fixed string, or what the wrapper wrote.
    host: Host,
    says: &'static str,
}

enum Host {
    TestsOwn,
    Literal(&'static str),
    WrittenByWrapper,
}

#[tokio::test]
async fn without_the_private_namespace_the_shim_exits_78_and_runs_nothing() {
    let cases = [
        NotInEffect {
            name: "started in the daemon's namespace",
            wrapper: None,
            host: Host::TestsOwn,
            says: "this unit shares the daemon's network namespace",
        },
        NotInEffect {
            name: "a private namespace that is the spec's own",
            wrapper: Some(
                r#"ip link set lo up && readlink /proc/self/ns/net > "$NETNS_FILE" && exec "$@""#,
            ),
            host: Host::WrittenByWrapper,
            says: "this unit shares the daemon's network namespace",
        },
        NotInEffect {
            name: "a private namespace with another interface that is up",
            // The dummy driver is not in every kernel (this machine's has none); a bridge is
            // an interface all the same. Either is made down, so it is set up.
            wrapper: Some(concat!(
                r#"ip link set lo up && { ip link add d0 type dummy 2>/dev/null "#,
                r#"|| ip link add d0 type bridge; } && ip link set d0 up && exec "$@""#,
            )),
            host: Host::TestsOwn,
            says: "this unit can see a host interface that is up (d0)",
        },
        NotInEffect {
            name: "a daemon identity that is not one",
            wrapper: Some(r#"ip link set lo up && exec "$@""#),
            host: Host::Literal("net:[]"),
            says: "is not of the form net:[<inode>]",
        },
        NotInEffect {
            name: "a daemon identity of another kind",
            wrapper: Some(r#"ip link set lo up && exec "$@""#),
            host: Host::Literal("mnt:[4026531841]"),
            says: "is not of the form net:[<inode>]",
        },
    ];
    for case in cases {
        let scratch = Scratch::new();
        let marker = scratch.path("ran");
        let netns_file = scratch.path("netns");
        let mut launch = Launch::in_private_netns("build", &scratch.workdir())
            .with_env("NETNS_FILE", &netns_file.display().to_string());
        match case.wrapper {
            None => {
                launch.wrapper = None;
                launch.private_netns = false;
            }
            Some(script) => launch.wrapper = Some(script.to_owned()),
        }
        let mut shim = launch.start();
        shim.hello().await;
        let host = match case.host {
            Host::TestsOwn => own_netns(),
            Host::Literal(text) => text.to_owned(),
            Host::WrittenByWrapper => std::fs::read_to_string(&netns_file)
                .unwrap()
                .trim()
                .to_owned(),
        };
        let argv = marker_argv(&marker);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        shim.send_spec(&spec_json("build", &argv, &[], &host)).await;
        assert!(
            shim.frame().await.is_none(),
            "{}: a frame after the hello",
            case.name
        );
        let ended = shim.wait();
        assert_eq!(ended.code(), 78, "{}: {}", case.name, ended.stderr);
        let lines = ended.stderr_lines();
        assert_eq!(lines.len(), 1, "{}: {lines:?}", case.name);
        assert!(
            lines[0].starts_with("[confinement] network namespace not in effect: "),
            "{}: {}",
            case.name,
            lines[0]
        );
        assert!(lines[0].contains(case.says), "{}: {}", case.name, lines[0]);
        assert!(!marker.exists(), "{}: the argv ran", case.name);
    }
}

/// A gate stand-in: accepts one connection on `path`, reads until the client half-closes,
/// answers `<name> got <bytes>` and closes.
fn gate(path: &Path, name: &'static str) -> JoinHandle<String> {
    let listener = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut got = String::new();
        conn.read_to_string(&mut got).unwrap();
        // A client that only closed (the unreached case) does not read the answer.
        let _ = write!(conn, "{name} got {got}");
        got
    })
}

/// A program that connects to 3128 and 3129, sends `ping-<port>`, half-closes, and prints each
/// answer on a line (or `<port> refused`).
const CLIENT: &str = r#"
use IO::Socket::INET;
for my $port (3128, 3129) {
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port");
    if (!$s) { print "$port refused\n"; next; }
    print $s "ping-$port";
    $s->shutdown(1);
    local $/;
    my $answer = <$s>;
    print "$answer\n";
}
"#;

async fn run_client(door: &str, with_mcp: bool) -> (String, Vec<String>) {
    let scratch = Scratch::new();
    let proxy_path = scratch.path("proxy.sock");
    let mcp_path = scratch.path("mcp.sock");
    let proxy = gate(&proxy_path, "proxy");
    let mcp = gate(&mcp_path, "mcp");
    let mut launch = Launch::in_private_netns(door, &scratch.workdir())
        .with_env("ATELIER_GATE_SOCKET", &proxy_path.display().to_string());
    if with_mcp {
        launch = launch.with_env("ATELIER_MCP_SOCKET", &mcp_path.display().to_string());
    }
    let mut shim = launch.start();
    shim.hello().await;
    shim.send_spec(&spec_json(
        door,
        &["/usr/bin/perl", "-e", CLIENT],
        &[],
        &own_netns(),
    ))
    .await;
    let transcript = shim.transcript().await;
    assert_eq!(
        transcript.exit,
        Some(ExitRecord::exited(0)),
        "{}",
        String::from_utf8_lossy(&transcript.stderr)
    );
    let ended = shim.wait();
    assert_eq!(ended.code(), 0, "{}", ended.stderr);
    let mut received = Vec::new();
    for (handle, path) in [(proxy, &proxy_path), (mcp, &mcp_path)] {
        // Unblock a stand-in nobody reached: it accepts this empty connection. One the shim
        // reached has accepted already (it may still be writing its answer, so whether its
        // thread has finished says nothing); this connection then waits unaccepted, or is
        // refused once the thread has returned and closed its listener. What each received is
        // decided by what it read alone.
        drop(std::os::unix::net::UnixStream::connect(path));
        let got = handle.join().unwrap();
        received.push(if got.is_empty() {
            "(not reached)".to_owned()
        } else {
            got
        });
    }
    (String::from_utf8(transcript.stdout).unwrap(), received)
}

#[tokio::test]
async fn the_turn_door_forwards_both_ports_to_the_gate_sockets_both_ways() {
    let (stdout, received) = run_client("turn", true).await;
    assert_eq!(stdout, "proxy got ping-3128\nmcp got ping-3129\n");
    assert_eq!(received, ["ping-3128", "ping-3129"]);
}

#[tokio::test]
async fn the_build_door_forwards_only_the_proxy_port() {
    let (stdout, received) = run_client("build", true).await;
    assert_eq!(stdout, "proxy got ping-3128\n3129 refused\n");
    assert_eq!(received, ["ping-3128", "(not reached)"]);
}

#[tokio::test]
async fn the_git_door_forwards_nothing() {
    let (stdout, received) = run_client("git", true).await;
    assert_eq!(stdout, "3128 refused\n3129 refused\n");
    assert_eq!(received, ["(not reached)", "(not reached)"]);
}

#[tokio::test]
async fn the_turn_door_without_an_mcp_socket_forwards_only_the_proxy() {
    let (stdout, _) = run_client("turn", false).await;
    assert_eq!(stdout, "proxy got ping-3128\n3129 refused\n");
}

#[tokio::test]
async fn a_forward_that_cannot_listen_exits_71_and_runs_nothing() {
    let cases = [(
        "the port is already bound",
        // perl binds 3128 and keeps it across exec ($^F), so the shim itself holds it.
        r#"ip link set lo up && exec perl -e 'use IO::Socket::INET; $^F = 255; my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:3128", Listen => 1) or die "bind: $!"; exec @ARGV or die "exec: $!"' "$@""#,
        "cannot listen on 127.0.0.1:3128 for the proxy forward",
    )];
    for (name, wrapper, says) in cases {
        let scratch = Scratch::new();
        let marker = scratch.path("ran");
        let mut launch = Launch::in_private_netns("turn", &scratch.workdir()).with_env(
            "ATELIER_GATE_SOCKET",
            &scratch.path("proxy.sock").display().to_string(),
        );
        launch.wrapper = Some(wrapper.to_owned());
        let (shim, exit) = run_marker(launch.start(), "turn", &marker, &own_netns()).await;
        assert_eq!(exit, None, "{name}: an exit record");
        let ended = shim.wait();
        assert_eq!(ended.code(), 71, "{name}: {}", ended.stderr);
        let lines = ended.stderr_lines();
        assert_eq!(lines.len(), 1, "{name}: {lines:?}");
        assert!(lines[0].contains(says), "{name}: {}", lines[0]);
        assert!(!marker.exists(), "{name}: the argv ran");
    }
}
