//! Black-box tests of the atelier-build binary: each spawns it in a temporary workspace with a
//! plan, decodes its stdout with [`EventReader`], and checks the exit status, the events and
//! what is left on disk and in the process table.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers: a failed setup step must fail the test"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use atelier_proto::build::{BuildItem, BuildPlan, BuildReport, EventReader, VerifiedOutput};
use atelier_proto::{BuildEvent, BuildStep, StepOutcome};

const BIN: &str = env!("CARGO_BIN_EXE_atelier-build");

/// What one run of the binary produced.
struct Run {
    code: i32,
    items: Vec<BuildItem>,
    report: BuildReport,
}

impl Run {
    fn events(&self) -> Vec<&BuildEvent> {
        self.items
            .iter()
            .filter_map(|item| match item {
                BuildItem::Event(event) => Some(event),
                _ => None,
            })
            .collect()
    }

    fn stdout(&self) -> String {
        self.output(|item| match item {
            BuildItem::Stdout(b) => Some(b),
            _ => None,
        })
    }

    fn stderr(&self) -> String {
        self.output(|item| match item {
            BuildItem::Stderr(b) => Some(b),
            _ => None,
        })
    }

    fn output(&self, pick: impl Fn(&BuildItem) -> Option<&bytes::Bytes>) -> String {
        let bytes: Vec<u8> = self
            .items
            .iter()
            .filter_map(pick)
            .flat_map(|b| b.to_vec())
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn refused(&self) -> Option<String> {
        self.report.refused.clone()
    }
}

struct Workspace {
    tmp: tempfile::TempDir,
}

impl Workspace {
    fn new() -> Workspace {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("ws")).unwrap();
        std::fs::create_dir_all(tmp.path().join("home")).unwrap();
        Workspace { tmp }
    }

    fn path(&self) -> PathBuf {
        self.tmp.path().join("ws")
    }

    fn outside(&self) -> PathBuf {
        self.tmp.path().join("outside")
    }

    fn run(&self, plan: &BuildPlan) -> Run {
        let child = self.spawn(plan);
        finish(child)
    }

    fn spawn(&self, plan: &BuildPlan) -> std::process::Child {
        let argv = plan.to_argv(BIN);
        Command::new(&argv[0])
            .args(&argv[1..])
            .current_dir(self.path())
            .env("HOME", self.tmp.path().join("home"))
            .env("npm_config_update_notifier", "false")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap()
    }
}

fn finish(child: std::process::Child) -> Run {
    let out = child.wait_with_output().unwrap();
    let mut reader = EventReader::new();
    let mut items = Vec::new();
    // Odd-sized chunks, as relayed O payloads would arrive.
    for chunk in out.stdout.chunks(7) {
        reader.push(chunk, &mut items).unwrap();
    }
    reader.finish().unwrap();
    let mut report = BuildReport::new();
    for item in &items {
        report.record(item);
    }
    Run {
        code: out.status.code().unwrap_or(-1),
        items,
        report,
    }
}

fn plan(install: &[&str], build: &[&str], output: &str) -> BuildPlan {
    let argv = |words: &[&str]| words.iter().map(|w| (*w).to_owned()).collect();
    BuildPlan {
        install: argv(install),
        build: argv(build),
        output: output.to_owned(),
        install_timeout_ms: 60_000,
        build_timeout_ms: 60_000,
        lifecycle_scripts: false,
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn count_tree(dir: &Path) -> (u64, u64) {
    let mut files = 0;
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            let (f, b) = count_tree(&entry.path());
            files += f;
            bytes += b;
        } else {
            files += 1;
            bytes += entry.metadata().unwrap().len();
        }
    }
    (files, bytes)
}

/// Returns true if and only if `pid` still names a live (not zombie) process.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next());
            state != Some("Z")
        }
        Err(_) => false,
    }
}

fn read_pid(path: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_basic_template_builds_and_its_output_is_counted() {
    let ws = Workspace::new();
    let template = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates/basic");
    copy_tree(&template, &ws.path());
    let manifest = BuildPlan::from_manifest("", "sh build.sh", "dist", 60_000, 60_000, false);
    let run = ws.run(&manifest.unwrap());

    assert_eq!(run.code, 0, "stderr: {}", run.stderr());
    let (files, bytes) = count_tree(&template.join("src"));
    assert!(files > 0);
    assert_eq!(run.report.outcome(), Ok(VerifiedOutput { files, bytes }));
    let events = run.events();
    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(
        events[0],
        &BuildEvent::StepStarted {
            step: BuildStep::Build,
            argv: vec!["sh".into(), "build.sh".into()],
        }
    );
    assert!(matches!(
        events[1],
        BuildEvent::StepFinished {
            step: BuildStep::Build,
            outcome: StepOutcome::Ok,
            code: Some(0),
            ..
        }
    ));
    assert_eq!(
        events[2],
        &BuildEvent::OutputVerified {
            output: "dist".into(),
            files,
            bytes
        }
    );
    assert_eq!(
        std::fs::read(ws.path().join("dist/index.html")).unwrap(),
        std::fs::read(template.join("src/index.html")).unwrap()
    );
}

#[test]
fn a_failing_step_is_named_and_its_output_relayed() {
    let ws = Workspace::new();
    let run = ws.run(&plan(
        &["sh", "-c", "echo to-out; echo to-err >&2; exit 3"],
        &["sh", "-c", "mkdir dist"],
        "dist",
    ));
    assert_eq!(run.code, 21);
    assert_eq!(run.refused().as_deref(), Some("install failed"));
    assert_eq!(run.stdout(), "to-out\n");
    assert!(run.stderr().starts_with("to-err\n"), "{}", run.stderr());
    assert!(
        run.stderr()
            .contains("atelier-build: sh exited with code 3"),
        "{}",
        run.stderr()
    );
    assert!(matches!(
        run.events()[1],
        BuildEvent::StepFinished {
            step: BuildStep::Install,
            outcome: StepOutcome::Failed,
            code: Some(3),
            ..
        }
    ));
    assert_eq!(
        run.report.started,
        [BuildStep::Install],
        "the build step never ran"
    );
    assert!(!ws.path().join("dist").exists());
}

#[test]
fn a_program_that_cannot_start_fails_its_step() {
    let ws = Workspace::new();
    let run = ws.run(&plan(&[], &["/nonexistent/bun", "run", "build"], "dist"));
    assert_eq!(run.code, 23);
    assert_eq!(run.refused().as_deref(), Some("build failed"));
    assert!(
        run.stderr().contains("cannot start /nonexistent/bun"),
        "{}",
        run.stderr()
    );
}

#[test]
fn a_timeout_kills_the_whole_tree_including_an_escaped_grandchild() {
    let ws = Workspace::new();
    let script = "sh -c 'echo $$ > grouped.pid; exec sleep 300' & \
                  setsid sh -c 'echo $$ > escaped.pid; exec sleep 300' & \
                  exec sleep 300";
    let mut timed = plan(&[], &["sh", "-c", script], "dist");
    timed.build_timeout_ms = 1_500;
    let child = ws.spawn(&timed);
    let grouped = read_pid(&ws.path().join("grouped.pid"));
    let escaped = read_pid(&ws.path().join("escaped.pid"));
    assert!(alive(grouped) && alive(escaped));
    let run = finish(child);

    assert_eq!(run.code, 22);
    assert_eq!(run.refused().as_deref(), Some("build timed out"));
    assert!(matches!(
        run.events()[1],
        BuildEvent::StepFinished {
            step: BuildStep::Build,
            outcome: StepOutcome::TimedOut,
            code: None,
            ..
        }
    ));
    assert!(
        !alive(grouped),
        "the grandchild in the step's group survived"
    );
    assert!(
        !alive(escaped),
        "the grandchild that left the group survived"
    );
}

#[test]
fn a_finished_step_leaves_no_process_behind() {
    let ws = Workspace::new();
    let script = "mkdir dist; sh -c 'echo $$ > lingering.pid; exec sleep 300' & \
                  setsid sh -c 'echo $$ > escaped.pid; exec sleep 300' & \
                  while [ ! -s lingering.pid ] || [ ! -s escaped.pid ]; do sleep 0.01; done";
    let run = ws.run(&plan(&[], &["sh", "-c", script], "dist"));
    assert_eq!(run.code, 0, "{}", run.stderr());
    for file in ["lingering.pid", "escaped.pid"] {
        let pid = read_pid(&ws.path().join(file));
        assert!(!alive(pid), "{file}: {pid} outlived its step");
    }
}

#[test]
fn sigterm_interrupts_the_step_and_kills_it() {
    let ws = Workspace::new();
    let child = ws.spawn(&plan(
        &["sh", "-c", "echo $$ > step.pid; exec sleep 300"],
        &[],
        "dist",
    ));
    let step = read_pid(&ws.path().join("step.pid"));
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let run = finish(child);
    assert_eq!(run.code, 24);
    assert_eq!(run.refused().as_deref(), Some("build interrupted"));
    assert!(!alive(step));
}

#[test]
fn output_refusals_are_named_and_exit_with_their_status() {
    // (case, build script, output, exit status, reason)
    let cases: [(&str, &str, &str, i32, &str); 7] = [
        (
            "missing",
            "true",
            "dist",
            30,
            "build produced no dist/ directory",
        ),
        (
            "output is a symlink",
            "mkdir real && ln -s real dist",
            "dist",
            31,
            "build output 'dist' is a symbolic link",
        ),
        (
            "output is a file",
            "echo x > dist",
            "dist",
            32,
            "build output 'dist' is not a directory",
        ),
        (
            "escape via a symlinked parent",
            "ln -s \"$OUTSIDE\" out",
            "out/dist",
            33,
            "build output 'out/dist' resolves outside the workspace",
        ),
        (
            "escape by dot dot",
            "mkdir dist",
            "../outside/dist",
            33,
            "build output '../outside/dist' resolves outside the workspace",
        ),
        (
            "contains a symlink",
            "mkdir -p dist/a && ln -s /etc/passwd dist/a/passwd",
            "dist",
            35,
            "build output 'dist' contains a symbolic link",
        ),
        (
            "contains a fifo",
            "mkdir dist && mkfifo dist/pipe",
            "dist",
            36,
            "build output 'dist' contains a special file",
        ),
    ];
    for (name, script, output, code, reason) in cases {
        let ws = Workspace::new();
        std::fs::create_dir_all(ws.outside().join("dist")).unwrap();
        std::fs::write(ws.outside().join("dist/index.html"), "not the site").unwrap();
        let script = format!("OUTSIDE='{}'; {script}", ws.outside().display());
        let run = ws.run(&plan(&[], &["sh", "-c", &script], output));
        assert_eq!(run.code, code, "case {name}: {}", run.stderr());
        assert_eq!(run.refused().as_deref(), Some(reason), "case {name}");
        assert_eq!(run.report.verified, None, "case {name}");
        assert!(
            run.stderr().contains("atelier-build: "),
            "case {name}: the log names what was found"
        );
    }
}

#[test]
fn a_bad_plan_is_refused_before_anything_runs() {
    let ws = Workspace::new();
    let out = Command::new(BIN)
        .args(["--plan", r#"{"install":["touch","ran"]}"#])
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let mut reader = EventReader::new();
    let mut items = Vec::new();
    reader.push(&out.stdout, &mut items).unwrap();
    assert!(items.contains(&BuildItem::Event(BuildEvent::Refused {
        reason: "build error".into()
    })));
    assert!(!ws.path().join("ran").exists());
}

/// A real npm: `npm install` runs the project's own preinstall/postinstall scripts and
/// `npm run build` its prebuild/postbuild, unless lifecycle scripts are off.
#[test]
fn lifecycle_scripts_are_off_unless_the_plan_allows_them() {
    let package = r#"{
  "name": "lifecycle-probe",
  "version": "1.0.0",
  "private": true,
  "scripts": {
    "preinstall": "touch ran-preinstall",
    "postinstall": "touch ran-postinstall",
    "prebuild": "touch ran-prebuild",
    "build": "mkdir -p dist && echo built > dist/index.html",
    "postbuild": "touch ran-postbuild"
  }
}
"#;
    let markers = [
        "ran-preinstall",
        "ran-postinstall",
        "ran-prebuild",
        "ran-postbuild",
    ];
    for scripts_on in [false, true] {
        let ws = Workspace::new();
        std::fs::write(ws.path().join("package.json"), package).unwrap();
        let mut npm = plan(
            &["npm", "install", "--offline", "--no-audit", "--no-fund"],
            &["npm", "run", "build"],
            "dist",
        );
        npm.lifecycle_scripts = scripts_on;
        let run = ws.run(&npm);
        assert_eq!(run.code, 0, "scripts {scripts_on}: {}", run.stderr());
        assert_eq!(
            std::fs::read_to_string(ws.path().join("dist/index.html")).unwrap(),
            "built\n"
        );
        for marker in markers {
            assert_eq!(
                ws.path().join(marker).exists(),
                scripts_on,
                "scripts {scripts_on}: {marker}"
            );
        }
        let BuildEvent::StepStarted { argv, .. } = run.events()[0] else {
            panic!("first event is not the install's start");
        };
        assert_eq!(argv.iter().any(|a| a == "--ignore-scripts"), !scripts_on);
    }
}
