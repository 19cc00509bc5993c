//! The relay: hello, output byte-exact and in order, bounded frames with backpressure, exit
//! records, the program's environment and descriptors, hang-ups and process groups.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use atelier_proto::{ExitRecord, FrameKind};
use serde_json::json;

use crate::support::{
    eventually, is_dead, own_netns, pseudo_random, spec_json, Launch, Scratch, Shim,
};

/// Starts an unconfined build-door shim in `scratch`, reads the hello, sends `argv`.
async fn run_build(scratch: &Scratch, argv: &[&str]) -> Shim {
    let mut shim = Launch::unconfined("build", &scratch.workdir()).start();
    shim.hello().await;
    shim.send_spec(&spec_json("build", argv, &[], &own_netns()))
        .await;
    shim
}

#[tokio::test]
async fn hello_carries_exactly_version_door_and_unit() {
    let scratch = Scratch::new();
    let mut shim = Launch::unconfined("build", &scratch.workdir()).start();
    let hello = shim.hello().await;
    assert_eq!(
        hello,
        json!({"v": 1, "door": "build", "unit": "unconfined"})
    );
    // Nothing follows until the spec: closing now is "no spec".
    shim.close_write().await;
    assert!(shim.frame().await.is_none());
    let ended = shim.wait();
    assert_eq!(ended.code(), 65, "{}", ended.stderr);
}

#[tokio::test]
async fn the_specs_stdin_reaches_the_program_exactly_then_end_of_file() {
    let scratch = Scratch::new();
    let text = "3\n\"quoted\"  twice-spaced é\n".repeat(20_000); // well past a pipe's buffer
    let mut spec = spec_json("build", &["/bin/cat"], &[], &own_netns());
    spec["stdin"] = json!(text);
    let mut shim = Launch::unconfined("build", &scratch.workdir()).start();
    shim.hello().await;
    shim.send_spec(&spec).await;
    let transcript = shim.transcript().await;
    assert_eq!(transcript.stdout, text.as_bytes());
    assert_eq!(transcript.exit, Some(ExitRecord::exited(0)));
    // Without it, stdin is /dev/null: cat ends at once with nothing.
    let mut shim = run_build(&scratch, &["/bin/cat"]).await;
    let transcript = shim.transcript().await;
    assert!(transcript.stdout.is_empty());
    assert_eq!(transcript.exit, Some(ExitRecord::exited(0)));
}

#[tokio::test]
async fn a_program_that_never_reads_its_stdin_still_ends_the_run() {
    let scratch = Scratch::new();
    let mut spec = spec_json("build", &["/bin/true"], &[], &own_netns());
    spec["stdin"] = json!("x".repeat(512 * 1024)); // more than the pipe holds
    let mut shim = Launch::unconfined("build", &scratch.workdir()).start();
    shim.hello().await;
    shim.send_spec(&spec).await;
    let transcript = shim.transcript().await;
    assert_eq!(transcript.exit, Some(ExitRecord::exited(0)));
    assert_eq!(shim.wait().code(), 0);
}

#[tokio::test]
async fn echo_is_relayed_and_the_exit_record_is_last() {
    let scratch = Scratch::new();
    let mut shim = run_build(&scratch, &["/bin/echo", "hello world"]).await;
    let transcript = shim.transcript().await;
    assert_eq!(transcript.stdout, b"hello world\n");
    assert!(transcript.stderr.is_empty());
    assert_eq!(transcript.exit, Some(ExitRecord::exited(0)));
    assert_eq!(transcript.frames.last().unwrap().kind, FrameKind::Exit);
    assert!(
        shim.frame().await.is_none(),
        "nothing after the exit record"
    );
    let ended = shim.wait();
    assert_eq!(ended.code(), 0);
    assert_eq!(
        ended.stderr, "",
        "a successful run writes nothing to stderr"
    );
}

#[tokio::test]
async fn stdout_and_stderr_are_relayed_byte_exact() {
    let scratch = Scratch::new();
    let out = pseudo_random(150_000, 1);
    let err = pseudo_random(90_000, 2);
    std::fs::write(scratch.path("out.bin"), &out).unwrap();
    std::fs::write(scratch.path("err.bin"), &err).unwrap();
    let out_path = scratch.path("out.bin").display().to_string();
    let err_path = scratch.path("err.bin").display().to_string();
    let mut shim = run_build(
        &scratch,
        &[
            "/bin/sh",
            "-c",
            r#"cat "$0"; cat "$1" >&2"#,
            &out_path,
            &err_path,
        ],
    )
    .await;
    let transcript = shim.transcript().await;
    assert!(transcript.stdout == out, "stdout differs");
    assert!(transcript.stderr == err, "stderr differs");
    assert_eq!(transcript.exit, Some(ExitRecord::exited(0)));
    assert_eq!(shim.wait().code(), 0);
}

#[tokio::test]
async fn output_frames_follow_the_order_the_program_wrote_in() {
    let scratch = Scratch::new();
    let script = "printf o1; sleep 0.2; printf e1 >&2; sleep 0.2; printf o2; sleep 0.2; \
                  printf e2 >&2";
    let mut shim = run_build(&scratch, &["/bin/sh", "-c", script]).await;
    let transcript = shim.transcript().await;
    let seen: Vec<(FrameKind, Vec<u8>)> = transcript
        .frames
        .iter()
        .map(|f| (f.kind, f.payload.to_vec()))
        .collect();
    assert_eq!(
        seen[..4],
        [
            (FrameKind::Stdout, b"o1".to_vec()),
            (FrameKind::Stderr, b"e1".to_vec()),
            (FrameKind::Stdout, b"o2".to_vec()),
            (FrameKind::Stderr, b"e2".to_vec()),
        ]
    );
    assert_eq!(seen.len(), 5);
    assert_eq!(seen[4].0, FrameKind::Exit);
    shim.wait();
}

#[tokio::test]
async fn ten_mib_of_output_arrives_whole_in_bounded_frames() {
    let scratch = Scratch::new();
    let data = pseudo_random(10 * 1024 * 1024, 3);
    std::fs::write(scratch.path("big.bin"), &data).unwrap();
    let path = scratch.path("big.bin").display().to_string();
    let mut shim = run_build(&scratch, &["/bin/cat", &path]).await;
    let transcript = shim.transcript().await;
    let outputs: Vec<usize> = transcript
        .frames
        .iter()
        .filter(|f| f.kind == FrameKind::Stdout)
        .map(|f| f.payload.len())
        .collect();
    assert!(
        outputs.iter().all(|&n| n > 0 && n <= 64 * 1024),
        "frame sizes {outputs:?}"
    );
    assert!(outputs.len() >= 160, "{} frames", outputs.len());
    assert!(transcript.stdout == data, "the 10 MiB differ");
    assert_eq!(transcript.exit, Some(ExitRecord::exited(0)));
    assert_eq!(shim.wait().code(), 0);
}

#[tokio::test]
async fn a_slow_daemon_slows_the_program_and_memory_stays_bounded() {
    const TOTAL: usize = 64 * 1024 * 1024;
    let scratch = Scratch::new();
    let marker = scratch.path("finished");
    let marker_arg = marker.display().to_string();
    let mut shim = run_build(
        &scratch,
        &[
            "/bin/sh",
            "-c",
            r#"head -c 67108864 /dev/zero; touch "$0""#,
            &marker_arg,
        ],
    )
    .await;
    // Read nothing for a while: a shim that buffered without bound would let the program
    // write all 64 MiB and finish.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !marker.exists(),
        "the program finished while nobody read its output"
    );
    let peak_while_stalled = peak_rss_kib(shim.pid());
    let mut received = 0usize;
    let mut exit = None;
    let mut peak_midway = 0;
    while let Some(frame) = shim.frame().await {
        match frame.kind {
            FrameKind::Stdout => {
                assert!(frame.payload.len() <= 64 * 1024);
                received += frame.payload.len();
                if peak_midway == 0 && received >= TOTAL / 2 {
                    peak_midway = peak_rss_kib(shim.pid());
                }
            }
            FrameKind::Exit => {
                exit = Some(ExitRecord::from_frame(&frame).unwrap());
                break;
            }
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(received, TOTAL);
    assert_eq!(exit, Some(ExitRecord::exited(0)));
    assert!(marker.exists());
    for peak in [peak_while_stalled, peak_midway] {
        assert!(peak > 0 && peak < 32 * 1024, "shim peak RSS {peak} KiB");
    }
    shim.wait();
}

/// The process's peak resident set (VmHWM) in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test]
async fn exit_codes_and_signals_reach_the_exit_record_and_the_shim_status() {
    let cases: [(&str, &str, ExitRecord, i32); 4] = [
        ("exits 0", "exit 0", ExitRecord::exited(0), 0),
        ("exits 3", "exit 3", ExitRecord::exited(3), 3),
        (
            "kills itself with SIGKILL",
            "kill -KILL $$",
            ExitRecord::signaled("SIGKILL"),
            137,
        ),
        (
            "kills itself with SIGTERM",
            "kill -TERM $$",
            ExitRecord::signaled("SIGTERM"),
            143,
        ),
    ];
    for (name, script, record, code) in cases {
        let scratch = Scratch::new();
        let mut shim = run_build(&scratch, &["/bin/sh", "-c", script]).await;
        let transcript = shim.transcript().await;
        assert_eq!(transcript.exit.as_ref(), Some(&record), "{name}");
        let ended = shim.wait();
        assert_eq!(ended.code(), code, "{name}: {}", ended.stderr);
    }
}

#[tokio::test]
async fn a_program_that_cannot_start_is_exit_127_in_the_record_and_the_status() {
    let scratch = Scratch::new();
    let missing_workdir = scratch.path("no-such-dir");
    let cases = [
        ("missing program", scratch.workdir(), "/nonexistent/program"),
        ("missing workdir", missing_workdir, "/bin/true"),
    ];
    for (name, workdir, program) in cases {
        let mut shim = Launch::unconfined("build", &workdir).start();
        shim.hello().await;
        shim.send_spec(&spec_json("build", &[program], &[], &own_netns()))
            .await;
        let transcript = shim.transcript().await;
        assert_eq!(
            transcript.exit,
            Some(ExitRecord {
                code: Some(127),
                signal: None
            }),
            "{name}"
        );
        assert!(transcript.stdout.is_empty() && transcript.stderr.is_empty());
        let ended = shim.wait();
        assert_eq!(ended.code(), 127, "{name}");
        let lines = ended.stderr_lines();
        assert_eq!(lines.len(), 1, "{name}: {lines:?}");
        assert!(lines[0].contains("cannot start"), "{name}: {lines:?}");
    }
}

/// Runs `/usr/bin/env` through `door` with `unit_env` added to the shim's environment and
/// `spec_env` in the spec; returns the program's environment.
async fn program_env(
    door: &str,
    unit_env: &[(&str, &str)],
    spec_env: &[(&str, &str)],
) -> BTreeMap<String, String> {
    let scratch = Scratch::new();
    let mut launch = Launch::unconfined(door, &scratch.workdir())
        .with_env("SHIM_ONLY", "must not reach the program");
    for (key, value) in unit_env {
        launch = launch.with_env(key, value);
    }
    let mut shim = launch.start();
    shim.hello().await;
    shim.send_spec(&spec_json(door, &["/usr/bin/env"], spec_env, &own_netns()))
        .await;
    let transcript = shim.transcript().await;
    assert_eq!(transcript.exit, Some(ExitRecord::exited(0)));
    shim.wait();
    String::from_utf8(transcript.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let (k, v) = line.split_once('=').unwrap();
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

#[tokio::test]
async fn the_program_gets_exactly_the_spec_env_and_the_units_fixed_keys() {
    let spec_env = [("LANG", "C.UTF-8"), ("SPEC_KEY", "a b=c")];

    let build = program_env("build", &[], &spec_env).await;
    let keys: BTreeSet<&str> = build.keys().map(String::as_str).collect();
    assert_eq!(keys, BTreeSet::from(["HOME", "LANG", "SPEC_KEY"]));
    assert_eq!(build["SPEC_KEY"], "a b=c");
    assert!(build["HOME"].ends_with("/work/home"), "{}", build["HOME"]);

    let git = program_env(
        "git",
        &[
            ("GIT_CONFIG_GLOBAL", "/dev/null"),
            ("GIT_CONFIG_NOSYSTEM", "1"),
        ],
        &spec_env,
    )
    .await;
    let keys: BTreeSet<&str> = git.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        BTreeSet::from([
            "GIT_CONFIG_GLOBAL",
            "GIT_CONFIG_NOSYSTEM",
            "HOME",
            "LANG",
            "SPEC_KEY"
        ])
    );
    assert_eq!(git["GIT_CONFIG_GLOBAL"], "/dev/null");

    // The turn unit's own configuration directories reach the program; on the build door the
    // same key is just part of the shim's environment and does not.
    let turn = program_env("turn", &[("XDG_CONFIG_HOME", "/unit/config")], &spec_env).await;
    assert_eq!(
        turn.get("XDG_CONFIG_HOME").map(String::as_str),
        Some("/unit/config")
    );
    let build = program_env("build", &[("XDG_CONFIG_HOME", "/unit/config")], &spec_env).await;
    assert!(!build.contains_key("XDG_CONFIG_HOME"));
}

#[tokio::test]
async fn the_program_holds_no_descriptor_beyond_its_stdio() {
    let scratch = Scratch::new();
    // The shim inherits a stray descriptor 7 and, confined, holds the forward's listener.
    let mut launch = Launch::in_private_netns("build", &scratch.workdir()).with_env(
        "ATELIER_GATE_SOCKET",
        &scratch.path("gate.sock").display().to_string(),
    );
    launch.wrapper = Some(r#"ip link set lo up && exec 7</etc/hostname && exec "$@""#.to_owned());
    let mut shim = launch.start();
    shim.hello().await;
    let shim_fds = fd_targets(shim.pid());
    assert!(
        shim_fds.contains_key(&7),
        "the shim did not inherit fd 7: {shim_fds:?}"
    );
    shim.send_spec(&spec_json(
        "build",
        &["/bin/sh", "-c", "echo $$; exec sleep 30"],
        &[],
        &own_netns(),
    ))
    .await;
    let frame = shim.frame().await.unwrap();
    assert_eq!(frame.kind, FrameKind::Stdout);
    let pid: u32 = std::str::from_utf8(&frame.payload)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Once the program is sleep and its dynamic loader has closed the libraries it opened
    // (read too early, libc.so.6 was fd 3), its descriptors are final: a leaked one never
    // closes, so it fails this after the wait.
    let settled = eventually(Duration::from_secs(5), || {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
            && fd_targets(pid).keys().copied().eq([0, 1, 2])
    });
    let fds = fd_targets(pid);
    assert!(settled, "{fds:?}");
    assert_eq!(fds[&0], "/dev/null");
    assert!(
        fds[&1].starts_with("pipe:") && fds[&2].starts_with("pipe:"),
        "{fds:?}"
    );
    let shim_fds = fd_targets(shim.pid());
    let connection = &shim_fds[&0];
    assert!(connection.starts_with("socket:"), "{shim_fds:?}");
    assert!(!fds.values().any(|target| target == connection));
    let ended = shim.hang_up_and_wait();
    assert_eq!(ended.code(), 74, "{}", ended.stderr);
    assert!(eventually(Duration::from_secs(5), || is_dead(pid)));
}

/// The open descriptors of `pid` and what they point at.
fn fd_targets(pid: u32) -> BTreeMap<u32, String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let fd = entry.file_name().to_str()?.parse().ok()?;
            let target = std::fs::read_link(entry.path()).ok()?;
            Some((fd, target.display().to_string()))
        })
        .collect()
}

/// Reads the first `O` frame as whitespace-separated pids.
async fn first_pids(shim: &mut Shim) -> Vec<u32> {
    let frame = shim.frame().await.unwrap();
    assert_eq!(frame.kind, FrameKind::Stdout);
    std::str::from_utf8(&frame.payload)
        .unwrap()
        .split_whitespace()
        .map(|pid| pid.parse().unwrap())
        .collect()
}

#[tokio::test]
async fn a_daemon_hang_up_ends_the_whole_process_group() {
    let scratch = Scratch::new();
    // The grandchild ignores SIGTERM: only the kill after the program's exit ends it.
    let script = r#"(trap "" TERM; exec sleep 1000) & echo $$ $!; exec sleep 1000"#;
    let mut shim = run_build(&scratch, &["/bin/sh", "-c", script]).await;
    let pids = first_pids(&mut shim).await;
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|&pid| !is_dead(pid)));
    let ended = shim.hang_up_and_wait();
    assert_eq!(ended.code(), 74, "{}", ended.stderr);
    assert_eq!(ended.stderr_lines().len(), 1, "{}", ended.stderr);
    assert!(ended.stderr.contains("connection"), "{}", ended.stderr);
    for pid in pids {
        assert!(
            eventually(Duration::from_secs(5), || is_dead(pid)),
            "pid {pid} survived"
        );
    }
}

#[tokio::test]
async fn a_program_ignoring_sigterm_is_killed_after_the_grace() {
    let scratch = Scratch::new();
    let script = r#"trap "" TERM; echo $$; exec sleep 1000"#;
    let mut shim = run_build(&scratch, &["/bin/sh", "-c", script]).await;
    let pid = first_pids(&mut shim).await[0];
    shim.hang_up();
    // SIGTERM went out at once and was ignored; SIGKILL waits for the 5 s grace.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!is_dead(pid), "killed before the grace ran out");
    let ended = shim.wait();
    assert_eq!(ended.code(), 74, "{}", ended.stderr);
    assert!(eventually(Duration::from_secs(2), || is_dead(pid)));
}

#[tokio::test]
async fn what_the_program_leaves_in_its_group_is_killed_when_it_exits() {
    let cases = [
        ("holding the output pipe", "sleep 1000 & echo $!"),
        (
            "detached from the pipes",
            "sleep 1000 >/dev/null 2>&1 & echo $!",
        ),
    ];
    for (name, script) in cases {
        let scratch = Scratch::new();
        let mut shim = run_build(&scratch, &["/bin/sh", "-c", script]).await;
        let transcript = shim.transcript().await;
        assert_eq!(transcript.exit, Some(ExitRecord::exited(0)), "{name}");
        let grandchild: u32 = std::str::from_utf8(&transcript.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(shim.wait().code(), 0, "{name}");
        assert!(
            eventually(Duration::from_secs(5), || is_dead(grandchild)),
            "{name}: grandchild {grandchild} survived"
        );
    }
}

#[tokio::test]
async fn sigterm_to_the_shim_reaches_the_program_which_ends_with_an_exit_record() {
    let scratch = Scratch::new();
    let mut shim = run_build(&scratch, &["/bin/sh", "-c", "echo $$; exec sleep 1000"]).await;
    let pid = first_pids(&mut shim).await[0];
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(shim.pid() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let transcript = shim.transcript().await;
    assert_eq!(transcript.exit, Some(ExitRecord::signaled("SIGTERM")));
    let ended = shim.wait();
    assert_eq!(ended.code(), 143, "{}", ended.stderr);
    assert!(is_dead(pid));
}

#[tokio::test]
async fn a_daemon_closing_right_after_the_spec_is_a_hang_up() {
    let scratch = Scratch::new();
    let mut shim = Launch::unconfined("build", &scratch.workdir()).start();
    shim.hello().await;
    shim.send_spec(&spec_json(
        "build",
        &["/bin/sleep", "1000"],
        &[],
        &own_netns(),
    ))
    .await;
    shim.close_write().await;
    let ended = shim.wait();
    assert_eq!(ended.code(), 74, "{}", ended.stderr);
    assert_eq!(ended.stderr_lines().len(), 1, "{}", ended.stderr);
}
