//! System calls made without libc, for the one process that may not use it:
//! the command's first process between its `clone` and its `execve`, which
//! shares the shim's memory (see `shim::spawn_behind_barrier`).
//!
//! # Why not libc there
//!
//! That process runs with the shim thread's thread pointer, so everything
//! libc keeps per thread is the shim's: each failing wrapper (`close` of a
//! descriptor that is already gone, a `read` interrupted by a signal) writes
//! `errno` into the shim's thread, which may be reading its own at that
//! moment; and glibc's `setuid` and friends act on "every thread of the
//! process", as glibc counts them in that shared memory. A raw system call
//! touches nothing but its arguments and answers `-errno`. (glibc's
//! `posix_spawn` makes its child's calls the same way, for the same reason;
//! rustix has them too, but only in a module it keeps unstable.)
//!
//! Every function here is async-signal-safe, allocates nothing and touches
//! no memory but its arguments.

use std::ffi::c_long;

/// One system call: `number` with up to six arguments (unused ones 0).
/// Answers the kernel's result: non-negative on success, `-errno` on
/// failure.
///
/// # Safety
///
/// The arguments must be what the kernel expects for `number`: pointers
/// valid for what the call reads or writes.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn syscall(number: c_long, arguments: [usize; 6]) -> isize {
    let result: isize;
    // SAFETY: the caller vouches for the arguments; the kernel preserves
    // every register but rax (the result), rcx and r11 (declared clobbered).
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") number as isize => result,
            in("rdi") arguments[0],
            in("rsi") arguments[1],
            in("rdx") arguments[2],
            in("r10") arguments[3],
            in("r8") arguments[4],
            in("r9") arguments[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    result
}

/// One system call (see the x86-64 version).
///
/// # Safety
///
/// As for the x86-64 version.
#[cfg(target_arch = "aarch64")]
pub(crate) unsafe fn syscall(number: c_long, arguments: [usize; 6]) -> isize {
    let result: isize;
    // SAFETY: the caller vouches for the arguments; the kernel preserves
    // every register but x0 (the result).
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") number,
            inlateout("x0") arguments[0] as isize => result,
            in("x1") arguments[1],
            in("x2") arguments[2],
            in("x3") arguments[3],
            in("x4") arguments[4],
            in("x5") arguments[5],
            options(nostack),
        );
    }
    result
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("the process driver makes raw system calls on x86-64 and aarch64 only");

/// `Ok(result)`, or `Err(errno)` for the kernel's `-errno` answers.
pub(crate) fn checked(result: isize) -> Result<usize, i32> {
    if (-4095..0).contains(&result) {
        Err(-result as i32)
    } else {
        Ok(result as usize)
    }
}

/// The kernel's `struct sigaction` (x86-64 and aarch64 alike: handler,
/// flags, restorer, mask); all zeros is `SIG_DFL` with no flags and an
/// empty mask.
const KERNEL_SIGACTION_WORDS: usize = 4;
/// The kernel's signal set: one bit per signal, 64 of them.
const KERNEL_SIGSET_BYTES: usize = 8;

/// Sets `signal`'s disposition to the default.
pub(crate) fn default_disposition(signal: i32) -> Result<(), i32> {
    let action = [0_usize; KERNEL_SIGACTION_WORDS];
    // SAFETY: rt_sigaction reads a kernel sigaction from a live local and
    // writes nothing (no old action asked for).
    let result = unsafe {
        syscall(
            libc::SYS_rt_sigaction,
            [
                signal as usize,
                action.as_ptr() as usize,
                0,
                KERNEL_SIGSET_BYTES,
                0,
                0,
            ],
        )
    };
    checked(result).map(drop)
}

/// Unblocks every signal.
pub(crate) fn unblock_all_signals() -> Result<(), i32> {
    let empty = 0_u64;
    // SAFETY: rt_sigprocmask reads a kernel signal set from a live local.
    let result = unsafe {
        syscall(
            libc::SYS_rt_sigprocmask,
            [
                libc::SIG_SETMASK as usize,
                (&raw const empty) as usize,
                0,
                KERNEL_SIGSET_BYTES,
                0,
                0,
            ],
        )
    };
    checked(result).map(drop)
}

/// A call whose arguments are integers only.
fn integers(number: c_long, arguments: [usize; 6]) -> Result<usize, i32> {
    // SAFETY: every caller passes integers for a call that takes no pointer
    // among them (or a null one).
    checked(unsafe { syscall(number, arguments) })
}

pub(crate) fn setpgid_self() -> Result<(), i32> {
    integers(libc::SYS_setpgid, [0; 6]).map(drop)
}

pub(crate) fn close(fd: i32) -> Result<(), i32> {
    integers(libc::SYS_close, [fd as usize, 0, 0, 0, 0, 0]).map(drop)
}

/// Makes `new` a copy of `old` that survives exec (`dup2`; when they are
/// already the same descriptor, only its close-on-exec flag is cleared,
/// which `dup2` would have left set).
pub(crate) fn duplicate_onto(old: i32, new: i32) -> Result<(), i32> {
    if old == new {
        integers(
            libc::SYS_fcntl,
            [new as usize, libc::F_SETFD as usize, 0, 0, 0, 0],
        )
        .map(drop)
    } else {
        integers(libc::SYS_dup3, [old as usize, new as usize, 0, 0, 0, 0]).map(drop)
    }
}

/// # Safety
///
/// `path` must point to a NUL-terminated string.
pub(crate) unsafe fn chdir(path: *const libc::c_char) -> Result<(), i32> {
    // SAFETY: the caller vouches for the string.
    checked(unsafe { syscall(libc::SYS_chdir, [path as usize, 0, 0, 0, 0, 0]) }).map(drop)
}

/// Drops every supplementary group, then takes `gid` and `uid` (real,
/// effective and saved), in that order: the only order in which the first
/// two are still allowed.
pub(crate) fn become_user(uid: u32, gid: u32) -> Result<(), i32> {
    integers(libc::SYS_setgroups, [0; 6])?;
    integers(libc::SYS_setgid, [gid as usize, 0, 0, 0, 0, 0])?;
    integers(libc::SYS_setuid, [uid as usize, 0, 0, 0, 0, 0]).map(drop)
}

pub(crate) fn umask(mask: u32) {
    // umask cannot fail; it answers the old mask.
    let _ = integers(libc::SYS_umask, [mask as usize, 0, 0, 0, 0, 0]);
}

/// Reads one byte: `Ok(true)` for a byte, `Ok(false)` at end of file.
pub(crate) fn read_byte(fd: i32) -> Result<bool, i32> {
    let mut byte = 0_u8;
    // SAFETY: read writes at most one byte into a live local.
    let result = unsafe {
        syscall(
            libc::SYS_read,
            [fd as usize, (&raw mut byte) as usize, 1, 0, 0, 0],
        )
    };
    checked(result).map(|read| read == 1)
}

/// Writes `bytes` once (a pipe takes up to `PIPE_BUF` bytes whole).
pub(crate) fn write(fd: i32, bytes: &[u8]) -> Result<usize, i32> {
    // SAFETY: write reads `bytes.len()` bytes from a live slice.
    checked(unsafe {
        syscall(
            libc::SYS_write,
            [fd as usize, bytes.as_ptr() as usize, bytes.len(), 0, 0, 0],
        )
    })
}

/// Closes every descriptor from 3 on (`close_range`; one by one up to
/// `limit` on kernels before 5.9).
pub(crate) fn close_from_3(limit: i32) {
    if integers(libc::SYS_close_range, [3, u32::MAX as usize, 0, 0, 0, 0]).is_err() {
        for fd in 3..limit {
            let _ = close(fd);
        }
    }
}

/// Names the calling thread (`PR_SET_NAME`, what `ps` shows).
pub(crate) fn set_name(name: &'static std::ffi::CStr) {
    // SAFETY: prctl reads the NUL-terminated static name.
    let _ = checked(unsafe {
        syscall(
            libc::SYS_prctl,
            [
                libc::PR_SET_NAME as usize,
                name.as_ptr() as usize,
                0,
                0,
                0,
                0,
            ],
        )
    });
}

/// Waits until a signal is delivered (a `ppoll` of nothing, forever: what
/// `pause` does, on every architecture).
pub(crate) fn wait_for_a_signal() {
    // SAFETY: ppoll of zero descriptors, no timeout, no signal mask: it
    // reads and writes nothing.
    let _ = unsafe { syscall(libc::SYS_ppoll, [0, 0, 0, 0, KERNEL_SIGSET_BYTES, 0]) };
}

/// # Safety
///
/// `program` must be a NUL-terminated string; `argv` and `environment`
/// null-terminated arrays of them.
pub(crate) unsafe fn execve(
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    environment: *const *const libc::c_char,
) -> i32 {
    // SAFETY: the caller vouches for the strings and arrays.
    let result = unsafe {
        syscall(
            libc::SYS_execve,
            [
                program as usize,
                argv as usize,
                environment as usize,
                0,
                0,
                0,
            ],
        )
    };
    // execve only returns on failure.
    checked(result).err().unwrap_or(libc::EINVAL)
}

/// Ends the calling process with `code`.
pub(crate) fn exit(code: i32) -> ! {
    loop {
        let _ = integers(libc::SYS_exit_group, [code as usize, 0, 0, 0, 0, 0]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_answer_errno_and_leave_the_callers_errno_alone() {
        // SAFETY: sets this thread's errno.
        unsafe { *libc::__errno_location() = 0 };
        assert_eq!(close(-1), Err(libc::EBADF));
        assert_eq!(duplicate_onto(-1, 1000), Err(libc::EBADF));
        // SAFETY: reads this thread's errno.
        assert_eq!(unsafe { *libc::__errno_location() }, 0);
    }

    #[test]
    fn a_byte_and_the_end_of_file_are_told_apart() {
        let (read_end, write_end) = super::super::shim::pipe().expect("pipe");
        use std::os::fd::AsRawFd;
        assert_eq!(write(write_end.as_raw_fd(), &[7]), Ok(1));
        assert_eq!(read_byte(read_end.as_raw_fd()), Ok(true));
        drop(write_end);
        assert_eq!(read_byte(read_end.as_raw_fd()), Ok(false));
    }
}
