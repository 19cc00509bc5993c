//! Inherited descriptors end up close-on-exec, and stay open.

use rustix::fs::{Mode, OFlags};
use rustix::io::{fcntl_getfd, FdFlags};

use super::*;

/// Marking walks the whole process's table, so one test's marking would flip the descriptor
/// another test has just opened and is about to check: the tests that mark take turns.
static FD_TABLE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn fd_table() -> std::sync::MutexGuard<'static, ()> {
    FD_TABLE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A descriptor opened without close-on-exec, as a parent would hand one down.
fn inheritable() -> std::os::fd::OwnedFd {
    let fd = rustix::fs::open("/dev/null", OFlags::RDONLY, Mode::empty()).unwrap();
    assert!(!fcntl_getfd(&fd).unwrap().contains(FdFlags::CLOEXEC));
    fd
}

#[test]
fn inherited_descriptors_become_close_on_exec_and_stay_open() {
    let _turn = fd_table();
    let fd = inheritable();
    keep_inherited_fds_from_children().unwrap();
    assert!(fcntl_getfd(&fd).unwrap().contains(FdFlags::CLOEXEC));
    // Still open and usable.
    assert!(rustix::fs::fstat(&fd).is_ok());
}

#[test]
fn the_proc_walk_does_the_same() {
    let _turn = fd_table();
    let fd = inheritable();
    mark_each_listed_fd().unwrap();
    assert!(fcntl_getfd(&fd).unwrap().contains(FdFlags::CLOEXEC));
    assert!(rustix::fs::fstat(&fd).is_ok());
}

#[test]
fn stdio_is_left_alone() {
    // The range starts at 3: stdin, stdout and stderr keep whatever flags they came with.
    let _turn = fd_table();
    keep_inherited_fds_from_children().unwrap();
    let stderr = std::io::stderr();
    let flags = fcntl_getfd(std::os::fd::AsFd::as_fd(&stderr)).unwrap();
    assert!(!flags.contains(FdFlags::CLOEXEC));
}
