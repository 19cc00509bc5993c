//! Ending a child process a test started the way its supervisor would: a signal it handles
//! gracefully, a bounded wait, then SIGKILL, so a test never leaves a process behind and never
//! hangs on one that does not stop.

use std::process::Child;
use std::time::{Duration, Instant};

pub use rustix::process::Signal;

/// Sends `signal` to `child`, waits up to `patience` for it to exit, then kills it; it is
/// always reaped.
pub fn stop(child: &mut Child, signal: Signal, patience: Duration) {
    if let Some(pid) = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, signal);
    }
    let deadline = Instant::now() + patience;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}
