//! The whole journey of the README's demo (`deploy/demo/journey.sh`) as a test on a real PID 1:
//! provision, a site, a turn through the turn door (the agent's model reached through the gate,
//! the CMS's Publication API through the door's MCP relay), a build through the build door,
//! preview through the rendered nginx vhost, publish, production over TLS, rollback, a chat turn
//! of the CMS's editor through nginx to the socket-activated chatd, a clean stop.
//! Each of its steps checks what it claims; the script fails at the first that does not hold.
//! Atelier is the freshly built binaries, copied where the Debian package installs them
//! (`provision::package` runs the same journey from the package itself).

use atelier_systemd_tests::{journey_box, Atelier, JOURNEY_IN_BOX};

#[test]
fn the_demo_journey_passes_every_step_on_real_systemd() {
    let run = journey_box(Atelier::Built)
        .expect("putting the journey's box together")
        .run(&format!("exec bash {JOURNEY_IN_BOX}"))
        .expect("booting systemd in a container");
    run.assert_success();
    let output = &run.output;
    assert!(output.contains("== the whole journey passed"), "{output}");
    assert!(!output.contains("NOT OK"), "{output}");
    for step in [
        "ok: it searched the Publication API through the door's MCP relay (the session shows both)",
        "ok: chatd started on the first request through nginx, as its own dynamic user",
        "ok: the turn streamed NDJSON to its end",
    ] {
        assert!(output.contains(step), "{step}\n{output}");
    }
}
