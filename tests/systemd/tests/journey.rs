//! The whole journey of the README's demo (`deploy/demo/journey.sh`) as a test on a real PID 1:
//! provision, a site, a turn through the turn door, a build through the build door, preview
//! through the rendered nginx vhost, publish, production over TLS, rollback, a clean stop.
//! Each of its steps checks what it claims; the script fails at the first that does not hold.

use atelier_systemd_tests::{built_binaries_dir, real_claude, repo_root, SystemdBox};

#[test]
fn the_demo_journey_passes_every_step_on_real_systemd() {
    let bins = built_binaries_dir().expect("locating the built binaries");
    let script = std::fs::read_to_string(repo_root().join("deploy/demo/journey.sh"))
        .expect("reading deploy/demo/journey.sh");
    let mut sandbox = SystemdBox::new().timeout(std::time::Duration::from_secs(300));
    for (bin, dest) in [
        ("atelier-provision", "atelier-provision"),
        ("atelier-sited", "atelier-sited"),
        ("atelier-shim", "atelier-shim"),
        ("atelier-gate", "atelier-gate"),
        ("atelier-build", "atelier-build"),
        ("atelierctl", "atelierctl"),
        // The TEST FIXTURE standing in for the model provider.
        ("atelier-lab-model", "atelier-lab-model"),
    ] {
        sandbox = sandbox.copy(bins.join(bin), format!("/usr/local/bin/{dest}"));
    }
    // The real Claude Code, where the declaration says it is.
    sandbox = sandbox.copy(
        real_claude().expect("the real Claude Code"),
        "/usr/local/bin/claude",
    );
    let run = sandbox
        .copy(
            repo_root().join("templates"),
            "/usr/local/share/atelier/templates",
        )
        .copy(
            repo_root().join("deploy/examples/instance.json"),
            "/root/instance.example.json",
        )
        .copy(
            repo_root().join("deploy/examples/operator-setup.sh"),
            "/root/operator-setup.sh",
        )
        .run(&script)
        .expect("booting systemd in a container");
    run.assert_success();
    let output = &run.output;
    assert!(output.contains("== the whole journey passed"), "{output}");
    assert!(!output.contains("NOT OK"), "{output}");
}
