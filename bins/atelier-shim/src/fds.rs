//! Keeping inherited descriptors out of the program: whatever the shim was started with
//! beyond stdin, stdout and stderr is marked close-on-exec before anything is spawned.
//!
//! Everything the shim opens itself is close-on-exec already (Rust's standard library and
//! tokio open that way), and the program's 0–2 are replaced by `/dev/null` and its pipes; but a
//! parent may hand the shim more (an inherited listener, a stray file), and the program must
//! never hold a descriptor the shim did not mean to give it.

use std::io;

/// The first descriptor past stdin, stdout and stderr.
const FIRST_INHERITED_FD: u32 = 3;

/// Marks every descriptor from 3 up close-on-exec; closes none.
pub fn keep_inherited_fds_from_children() -> io::Result<()> {
    #[allow(unsafe_code)]
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on descriptors; it closes
    // none, so no descriptor owned elsewhere in the process is invalidated. It takes no
    // pointers. No safe API exists for flagging descriptors the process does not own as
    // Rust values.
    let result = unsafe { libc::close_range(FIRST_INHERITED_FD, u32::MAX, CLOEXEC_FLAG) };
    if result == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    // Kernels before 5.11 lack the flag, and a seccomp filter may refuse the call; walking
    // /proc/self/fd does the same one descriptor at a time.
    match error.raw_os_error() {
        Some(libc::ENOSYS | libc::EINVAL | libc::EPERM) => mark_each_listed_fd(),
        _ => Err(error),
    }
}

/// `CLOSE_RANGE_CLOEXEC` as the `flags` argument's type.
const CLOEXEC_FLAG: libc::c_int = libc::CLOSE_RANGE_CLOEXEC as libc::c_int;

fn mark_each_listed_fd() -> io::Result<()> {
    let listed: Vec<libc::c_int> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd: &libc::c_int| *fd >= FIRST_INHERITED_FD as libc::c_int)
        .collect();
    for fd in listed {
        #[allow(unsafe_code)]
        // SAFETY: F_SETFD only sets the descriptor's close-on-exec flag and takes no pointer;
        // on a number that is no longer open (the directory's own descriptor, closed by now)
        // it fails with EBADF, which is ignored.
        let result = unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        if result == -1 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EBADF) {
                return Err(error);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
