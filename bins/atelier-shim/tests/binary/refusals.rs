//! Refusals: each is its exit code, one stderr line, no exit record, and nothing run (the
//! argv would create a marker file).

use atelier_proto::{encode, Frame, FrameKind};
use serde_json::{json, Value};

use crate::support::{own_netns, spec_frame, spec_json, Launch, Scratch};

/// What the test sends after the hello.
enum Send {
    /// A spec that runs the marker argv, edited by the function.
    Spec(fn(&mut Value)),
    /// These bytes, then nothing more.
    Raw(Vec<u8>),
    /// Two marker specs in one write.
    TwoSpecs,
    /// Nothing: the test closes its side.
    Close,
}

struct Case {
    name: &'static str,
    door: &'static str,
    unconfined: bool,
    /// Edits the shim's environment.
    env: fn(Launch) -> Launch,
    send: Send,
    code: i32,
    /// Words the stderr line must contain.
    says: &'static str,
}

fn unchanged(launch: Launch) -> Launch {
    launch
}

fn set_env(spec: &mut Value, key: &str) {
    spec["env"][key] = json!("x");
}

fn cases() -> Vec<Case> {
    let case = |name, door, send, code, says| Case {
        name,
        door,
        unconfined: true,
        env: unchanged,
        send,
        code,
        says,
    };
    vec![
        Case {
            env: |l| l.without_env("ATELIER_DOOR"),
            ..case("no door stated", "build", Send::Close, 64, "ATELIER_DOOR is not set")
        },
        Case {
            env: |l| l.with_env("ATELIER_DOOR", "deploy"),
            ..case("unknown door", "build", Send::Close, 64, "is not turn, build or git")
        },
        Case {
            env: |l| l.with_env("ATELIER_DOOR", ""),
            ..case("empty door", "build", Send::Close, 64, "is not turn, build or git")
        },
        Case {
            env: |l| l.without_env("ATELIER_UNIT_WORKDIR"),
            ..case("no workdir", "build", Send::Close, 64, "ATELIER_UNIT_WORKDIR is not set")
        },
        Case {
            env: |l| l.with_env("ATELIER_UNIT_WORKDIR", "relative/dir"),
            ..case("relative workdir", "build", Send::Close, 64, "not an absolute path")
        },
        case("end before a spec", "build", Send::Close, 65, "ended before a spec"),
        case(
            "output frame first",
            "build",
            Send::Raw(encode(&Frame::stdout(&b"hi"[..])).unwrap()),
            65,
            "not a spec",
        ),
        case(
            "hello frame back",
            "build",
            Send::Raw(
                encode(&Frame::new(
                    FrameKind::Hello,
                    &br#"{"v":1,"door":"build","unit":"x"}"#[..],
                ))
                .unwrap(),
            ),
            65,
            "not a spec",
        ),
        case("two specs", "build", Send::TwoSpecs, 65, "a second frame followed"),
        case(
            "garbage bytes",
            "build",
            Send::Raw(b"GARBAGE!".to_vec()),
            65,
            "could not be framed",
        ),
        case(
            "truncated spec",
            "build",
            Send::Raw([&b"S\x00\x00\x00\x64"[..], b"{\"v\":1"].concat()),
            65,
            "could not be framed",
        ),
        case(
            "spec over its cap",
            "build",
            Send::Raw(b"S\x00\x20\x00\x00".to_vec()),
            65,
            "exceeds its cap",
        ),
        case(
            "spec is not JSON",
            "build",
            Send::Raw(encode(&Frame::new(FrameKind::Spec, &b"{not json"[..])).unwrap()),
            65,
            "malformed",
        ),
        case(
            "duplicate env key",
            "build",
            Send::Raw(
                encode(&Frame::new(
                    FrameKind::Spec,
                    &br#"{"v":1,"door":"build","argv":["/bin/true"],"env":{"A":"1","A":"2"},"hostNetns":"net:[1]"}"#[..],
                ))
                .unwrap(),
            ),
            65,
            "duplicate env key",
        ),
        case(
            "unknown spec key",
            "build",
            Send::Spec(|s| s["extra"] = json!(1)),
            65,
            "unknown field",
        ),
        case("version 2", "build", Send::Spec(|s| s["v"] = json!(2)), 65, "version 2"),
        case("empty argv", "build", Send::Spec(|s| s["argv"] = json!([])), 65, "argv is empty"),
        case(
            "empty hostNetns",
            "build",
            Send::Spec(|s| s["hostNetns"] = json!("")),
            65,
            "hostNetns is empty",
        ),
        case(
            "spec for another door",
            "build",
            Send::Spec(|s| s["door"] = json!("git")),
            65,
            "for the git door but this unit serves the build door",
        ),
        case("HOME in env", "build", Send::Spec(|s| set_env(s, "HOME")), 65, "HOME"),
        case(
            "GIT_CONFIG_GLOBAL in env",
            "git",
            Send::Spec(|s| set_env(s, "GIT_CONFIG_GLOBAL")),
            65,
            "GIT_CONFIG_GLOBAL",
        ),
        case(
            "GIT_CONFIG_NOSYSTEM in env",
            "git",
            Send::Spec(|s| set_env(s, "GIT_CONFIG_NOSYSTEM")),
            65,
            "GIT_CONFIG_NOSYSTEM",
        ),
        case(
            "transpiler cache in env",
            "build",
            Send::Spec(|s| set_env(s, "BUN_RUNTIME_TRANSPILER_CACHE_PATH")),
            65,
            "BUN_RUNTIME_TRANSPILER_CACHE_PATH",
        ),
        case(
            "the unit's door key in env",
            "build",
            Send::Spec(|s| set_env(s, "ATELIER_DOOR")),
            65,
            "ATELIER_DOOR",
        ),
        case(
            "an ATELIER_ key in env",
            "turn",
            Send::Spec(|s| set_env(s, "ATELIER_GATE_SOCKET")),
            65,
            "ATELIER_GATE_SOCKET",
        ),
        case(
            "a DEDALO_ key in env",
            "build",
            Send::Spec(|s| set_env(s, "DEDALO_DOOR")),
            65,
            "DEDALO_DOOR",
        ),
        case(
            "turn door XDG_CONFIG_HOME",
            "turn",
            Send::Spec(|s| set_env(s, "XDG_CONFIG_HOME")),
            65,
            "XDG_CONFIG_HOME, which the turn unit fixes",
        ),
        case(
            "turn door CLAUDE_CONFIG_DIR",
            "turn",
            Send::Spec(|s| set_env(s, "CLAUDE_CONFIG_DIR")),
            65,
            "CLAUDE_CONFIG_DIR",
        ),
        case(
            "turn door XDG_DATA_HOME",
            "turn",
            Send::Spec(|s| set_env(s, "XDG_DATA_HOME")),
            65,
            "XDG_DATA_HOME",
        ),
        case(
            "turn door XDG_STATE_HOME",
            "turn",
            Send::Spec(|s| set_env(s, "XDG_STATE_HOME")),
            65,
            "XDG_STATE_HOME",
        ),
        case(
            "turn door XDG_CACHE_HOME",
            "turn",
            Send::Spec(|s| set_env(s, "XDG_CACHE_HOME")),
            65,
            "XDG_CACHE_HOME",
        ),
        Case {
            unconfined: false,
            ..case(
                "a bad spec is refused before the namespace proof",
                "build",
                Send::Spec(|s| set_env(s, "HOME")),
                65,
                "HOME",
            )
        },
    ]
}

#[tokio::test]
async fn every_refusal_is_its_code_one_line_and_nothing_run() {
    let mut failures = Vec::new();
    for case in cases() {
        if let Err(failure) = run_case(&case).await {
            failures.push(format!("{}: {failure}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "failed cases:\n{}",
        failures.join("\n")
    );
}

async fn run_case(case: &Case) -> Result<(), String> {
    let scratch = Scratch::new();
    let marker = scratch.path("ran");
    let marker_arg = marker.display().to_string();
    let mut launch = Launch::unconfined(case.door, &scratch.workdir());
    launch.unconfined = case.unconfined;
    let mut shim = (case.env)(launch).start();
    let spec = || {
        spec_json(
            case.door,
            &["/bin/sh", "-c", r#"touch "$0""#, &marker_arg],
            &[],
            &own_netns(),
        )
    };

    if case.code == 64 {
        if let Some(frame) = shim.frame().await {
            return Err(format!("a {} frame before refusing", frame.kind));
        }
    } else {
        let hello = shim.hello().await;
        if hello["door"] != json!(case.door) {
            return Err(format!("hello {hello}"));
        }
        match &case.send {
            Send::Spec(edit) => {
                let mut spec = spec();
                edit(&mut spec);
                shim.send_spec(&spec).await;
            }
            Send::Raw(bytes) => shim.send_raw(bytes).await,
            Send::TwoSpecs => {
                let one = encode(&spec_frame(&spec())).unwrap();
                shim.send_raw(&[one.clone(), one].concat()).await;
            }
            Send::Close => {}
        }
        if matches!(case.send, Send::Close | Send::Raw(_)) {
            shim.close_write().await;
        }
        if let Some(frame) = shim.frame().await {
            return Err(format!("a {} frame after the hello", frame.kind));
        }
    }
    let ended = shim.wait();
    let lines = ended.stderr_lines();
    if ended.code() != case.code {
        return Err(format!(
            "exit {} (want {}): {lines:?}",
            ended.code(),
            case.code
        ));
    }
    if lines.len() != 1 || !lines[0].starts_with("[confinement] ") {
        return Err(format!("stderr is not one [confinement] line: {lines:?}"));
    }
    if !lines[0].contains(case.says) {
        return Err(format!("stderr does not say {:?}: {}", case.says, lines[0]));
    }
    if marker.exists() {
        return Err("the argv ran".to_owned());
    }
    Ok(())
}

#[tokio::test]
async fn a_key_fixed_only_on_the_turn_door_runs_on_the_build_door() {
    let scratch = Scratch::new();
    let marker = scratch.path("ran");
    let marker_arg = marker.display().to_string();
    let mut shim = Launch::unconfined("build", &scratch.workdir()).start();
    shim.hello().await;
    shim.send_spec(&spec_json(
        "build",
        &["/bin/sh", "-c", r#"touch "$0""#, &marker_arg],
        &[
            ("XDG_CONFIG_HOME", "/tmp/x"),
            ("CLAUDE_CONFIG_DIR", "/tmp/y"),
        ],
        &own_netns(),
    ))
    .await;
    let transcript = shim.transcript().await;
    assert_eq!(transcript.exit.and_then(|x| x.code), Some(0));
    assert_eq!(shim.wait().code(), 0);
    assert!(marker.exists());
}
