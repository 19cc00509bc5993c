//! Builds, preview, publish, releases and rollback through the binary against a real sited
//! whose builds run the real `atelier-build` through the real shim: `build start --wait`
//! exits by the build's outcome, every command's `--json` is the daemon's body, refusals are
//! sited's problems.

use serde_json::Value;

use crate::ctl::support;

fn json_line(out: &support::Ctl) -> Value {
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.matches('\n').count(), 1, "one line: {out:?}");
    serde_json::from_str(out.stdout.trim_end()).unwrap()
}

/// Builds alpha and returns the build's record: `--wait`'s `--json` lines are the started
/// answer (its id), then the record.
async fn build(instance: &support::Instance) -> Value {
    let out = instance
        .ctl(&["--json", "build", "start", "alpha", "--wait"])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{out:?}");
    assert_eq!(lines[0]["build_id"], lines[1]["id"], "{out:?}");
    lines[1].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_preview_publish_and_rollback_through_the_binary() {
    let instance = support::instance().await;
    let created = create_alpha(&instance).await;
    assert!(created.stdout.starts_with("created alpha\n"), "{created:?}");

    let nothing = instance.ctl(&["publish", "alpha", "--confirm"]).await;
    assert_eq!(nothing.code, 1, "{nothing:?}");
    assert!(
        nothing.stderr.starts_with("error: no_build (409): "),
        "{nothing:?}"
    );

    let waited = instance.ctl(&["build", "start", "alpha", "--wait"]).await;
    assert_eq!(waited.code, 0, "{waited:?}");
    let mut lines = waited.stdout.lines();
    assert!(lines.next().unwrap().starts_with("build "), "{waited:?}");
    assert!(
        waited.stdout.contains("\noutcome   success\n"),
        "{waited:?}"
    );
    // The log was shown as the build went, before the final record.
    let promote = waited.stdout.find("\n| # promote to preprod\n");
    let outcome = waited.stdout.find("\noutcome   success\n");
    assert!(promote.is_some() && promote < outcome, "{waited:?}");
    let first = build(&instance).await;
    assert_eq!(first["outcome"], "success", "{first}");
    let first_release = first["release"].as_str().unwrap().to_owned();
    let build_id = first["id"].as_str().unwrap().to_owned();

    let shown = instance
        .ctl(&["build", "show", "alpha", &build_id, "--log"])
        .await;
    assert_eq!(shown.code, 0, "{shown:?}");
    assert!(shown.stdout.contains("\n--- log ---\n"), "{shown:?}");
    let record = json_line(
        &instance
            .ctl(&["--json", "build", "show", "alpha", &build_id])
            .await,
    );
    assert_eq!(record["id"], build_id.as_str());
    assert!(record["log"].is_string());

    let preview = json_line(&instance.ctl(&["--json", "preview", "alpha"]).await);
    assert_eq!(preview["release"], first_release.as_str());
    assert_eq!(preview["url"], "http://pre.alpha.example.org/");

    let published = json_line(
        &instance
            .ctl(&[
                "--json",
                "publish",
                "alpha",
                "--note",
                "spring",
                "--confirm",
            ])
            .await,
    );
    let prod_one = published["release"].as_str().unwrap().to_owned();
    assert_eq!(published["url"], "https://alpha.example.org/");
    build(&instance).await;
    let again = json_line(
        &instance
            .ctl(&["--json", "publish", "alpha", "--confirm"])
            .await,
    );
    let prod_two = again["release"].as_str().unwrap().to_owned();
    assert_ne!(prod_one, prod_two);

    let releases = json_line(&instance.ctl(&["--json", "releases", "alpha"]).await);
    assert_eq!(releases["current"], prod_two.as_str());
    assert_eq!(releases["releases"][0], prod_two.as_str(), "newest first");
    let table = instance.ctl(&["releases", "alpha"]).await;
    assert_eq!(
        table.stdout,
        format!("* {prod_two}\n  {prod_one}\n"),
        "{table:?}"
    );

    let rolled = instance
        .ctl(&["rollback", "alpha", &prod_one, "--confirm"])
        .await;
    assert_eq!(rolled.code, 0, "{rolled:?}");
    assert!(
        rolled.stdout.starts_with(&format!("release  {prod_one}\n")),
        "{rolled:?}"
    );
    let releases = json_line(&instance.ctl(&["--json", "releases", "alpha"]).await);
    assert_eq!(releases["current"], prod_one.as_str());

    let unknown = instance
        .ctl(&[
            "rollback",
            "alpha",
            "20990101T000000000Z-000000",
            "--confirm",
        ])
        .await;
    assert_eq!(unknown.code, 1, "{unknown:?}");
    assert!(unknown.stderr.starts_with("error: "), "{unknown:?}");

    let site = json_line(&instance.ctl(&["--json", "sites", "show", "alpha"]).await);
    assert_eq!(site["published"]["release"], prod_one.as_str());
    assert_eq!(site["published"]["by"], "ops");

    let audit = json_line(&instance.ctl(&["--json", "audit", "--site", "alpha"]).await);
    let actions: Vec<&str> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    for want in ["create_site", "build", "publish", "rollback"] {
        assert!(actions.contains(&want), "{want}: {actions:?}");
    }
    let table = instance
        .ctl(&["audit", "--site", "alpha", "--limit", "1"])
        .await;
    let rows: Vec<&str> = table.stdout.lines().collect();
    assert_eq!(rows.len(), 2, "header and one entry: {table:?}");
    assert!(
        rows[1].contains("ops (7)") && rows[1].contains("rollback"),
        "{table:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_build_exits_4_with_its_error() {
    let instance = support::instance().await;
    create_alpha(&instance).await;
    set_build_command(&instance, "build", "false");

    let out = instance.ctl(&["build", "start", "alpha", "--wait"]).await;
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stdout.contains("\noutcome   failed\n"), "{out:?}");
    assert!(out.stderr.starts_with("error: build_failed: "), "{out:?}");
    let json = instance
        .ctl(&["--json", "build", "start", "alpha", "--wait"])
        .await;
    assert_eq!(json.code, 4, "{json:?}");
    // The started answer and the record as sited sent them, then the failure with its
    // reason: one JSON line each.
    let lines: Vec<Value> = json
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{json:?}");
    assert_eq!(lines[0]["build_id"], lines[1]["id"], "{json:?}");
    assert_eq!(lines[1]["outcome"], "failed");
    assert_eq!(lines[2]["reason"], "build_failed", "{json:?}");
    assert_eq!(lines[2]["exit"], "unsuccessful", "{json:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_wait_asks_again_while_sited_cannot_be_reached_and_ends_by_the_outcome() {
    let instance = support::instance().await;
    create_alpha(&instance).await;
    // Long enough to outlast the outage below.
    set_build_command(&instance, "install", "sleep 5");
    let relay = support::Relay::start(instance.socket.clone(), instance.root.join("relay.sock"));
    let argv = instance.argv_via(&relay.path, &["build", "start", "alpha", "--wait"]);
    let outage = async {
        // The build is running and polled; then sited cannot be reached for over two polls.
        relay.wait_for("\"outcome\":\"running\"").await;
        relay.set_down(true);
        relay.cut();
        tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
        relay.set_down(false);
    };
    let (out, ()) = tokio::join!(support::ctl(argv), outage);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("\noutcome   success\n"), "{out:?}");
    assert_eq!(
        out.stderr.matches("; asking for the build again").count(),
        1,
        "one note for the outage: {out:?}"
    );
}

/// Creates the site alpha; returns what the binary printed.
async fn create_alpha(instance: &support::Instance) -> support::Ctl {
    let created = instance
        .ctl(&[
            "sites",
            "create",
            "alpha",
            "--name",
            "Alpha",
            "--domain",
            "alpha.example.org",
        ])
        .await;
    assert_eq!(created.code, 0, "{created:?}");
    created
}

/// Sets alpha's manifest's `step` (`install` or `build`) to `command`.
fn set_build_command(instance: &support::Instance, step: &str, command: &str) {
    let manifest_path = instance.root.join("sites/alpha/site.json");
    let mut manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest_path).unwrap()).unwrap();
    manifest["build"][step] = command.into();
    std::fs::write(
        &manifest_path,
        serde_json::to_string_pretty(&manifest).unwrap() + "\n",
    )
    .unwrap();
}

/// Runs `argv` with stderr on a fresh pseudo-terminal; returns stdout and everything the
/// terminal was sent.
fn ctl_on_a_terminal(argv: Vec<String>) -> (i32, String, String) {
    use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
    use std::io::Read as _;
    use std::os::unix::ffi::OsStrExt as _;

    // Close-on-exec: the other tests of this binary spawn processes meanwhile, which must not
    // inherit the terminal.
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let name = ptsname(&master, Vec::new()).unwrap();
    let terminal = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(std::ffi::OsStr::from_bytes(name.as_bytes()))
        .unwrap();
    let reader = std::thread::spawn(move || {
        let mut master = std::fs::File::from(master);
        let mut seen = Vec::new();
        let mut buf = [0; 4096];
        // Reading ends in EIO once the last descriptor of the terminal side closes.
        while let Ok(n @ 1..) = master.read(&mut buf) {
            seen.extend_from_slice(&buf[..n]);
        }
        String::from_utf8(seen).unwrap()
    });
    let output = {
        let mut command = std::process::Command::new(crate::support::workspace_bin("atelierctl"));
        command
            .args(&argv)
            .env_clear()
            .env("TERM", "xterm")
            .stderr(std::process::Stdio::from(terminal));
        command.output().unwrap()
    };
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        reader.join().unwrap(),
    )
}

/// The `| # ...` lines of a build's shown log: the steps, the same in every build of a site.
fn step_lines(stdout: &str) -> Vec<&str> {
    stdout.lines().filter(|l| l.starts_with("| #")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_wait_draws_a_progress_line_only_on_a_terminal() {
    let instance = support::instance().await;
    create_alpha(&instance).await;
    // An install step that sleeps makes the build take a while.
    set_build_command(&instance, "install", "sleep 1.5");
    let args = ["build", "start", "alpha", "--wait"];

    let plain = instance.ctl(&args).await;
    assert_eq!(plain.code, 0, "{plain:?}");
    assert_eq!(plain.stderr, "", "a pipe gets no progress line: {plain:?}");
    assert!(
        !plain.stdout.contains(['\r', '\x1b']),
        "plain lines only: {plain:?}"
    );

    let argv = instance.argv(&args);
    let (code, stdout, terminal) = tokio::task::spawn_blocking(move || ctl_on_a_terminal(argv))
        .await
        .unwrap();
    assert_eq!(code, 0, "{stdout}");
    assert!(
        !stdout.contains(['\r', '\x1b']),
        "stdout keeps its plain lines: {stdout:?}"
    );
    assert_eq!(step_lines(&stdout), step_lines(&plain.stdout), "{stdout}");
    assert!(stdout.contains("\noutcome   success\n"), "{stdout}");

    assert!(
        terminal.contains("s building: install: sleep 1.5\x1b[K"),
        "the last step and the time are shown: {terminal:?}"
    );
    let frames: Vec<&str> = terminal.split('\r').skip(1).collect();
    assert!(frames.len() >= 3, "{terminal:?}");
    assert!(
        frames.iter().all(|f| f.ends_with("\x1b[K")),
        "every frame clears its row: {terminal:?}"
    );
    assert!(
        terminal.ends_with("\r\x1b[K"),
        "the line is erased at the end: {terminal:?}"
    );
    assert!(
        !terminal.contains('\n'),
        "no lines on the terminal: {terminal:?}"
    );
}
