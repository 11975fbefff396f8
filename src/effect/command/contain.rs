//! Containing a program and everything it starts, even when carte dies.
//!
//! A process group is not enough: a descendant that calls `setsid()`
//! leaves it, and a program outlives carte killed with SIGKILL (it is
//! re-parented to init). So each program runs under a *supervisor*: the
//! child carte forks becomes, before the program is executed,
//!
//! - a child subreaper (`PR_SET_CHILD_SUBREAPER`): every descendant whose
//!   parent dies is re-parented to it, not to init, whatever group or
//!   session it moved to;
//! - told when carte dies (`PR_SET_PDEATHSIG`, SIGTERM), and by carte when
//!   the run ends early (timeout, cancel: SIGTERM too).
//!
//! It forks the program (in a group of its own, killed by the kernel if the
//! supervisor dies), waits for it, and then — or as soon as it is told to
//! stop — kills the program's group and every descendant left (its children
//! as the subreaper, until none is left), and exits as the program did. Its
//! exit therefore means that nothing of the run is left.
//!
//! Everything here runs in a child forked from a multi-threaded process:
//! only async-signal-safe calls (no allocation, no lock, no panic).

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGTERM in the supervisor: end the run now.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// The `pre_exec` of a command: makes this child the supervisor of the
/// program, which the child forked from here goes on to execute (`Ok`).
/// The supervisor itself never returns. `carte` is carte's pid.
///
/// # Safety
/// Call only between `fork` and `exec` (as `pre_exec`): it forks, and the
/// supervisor it turns into exits without returning.
pub unsafe fn supervise(carte: libc::pid_t) -> std::io::Result<()> {
    // SAFETY (whole function): only async-signal-safe libc calls, on
    // memory of this function's frame.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_stop as *const () as libc::sighandler_t;
        // No SA_RESTART: a blocked waitpid returns (EINTR) to look at STOP.
        if libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut()) != 0
            || libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0
            || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        // carte may have died before the death signal was asked for.
        if libc::getppid() != carte {
            libc::_exit(137);
        }
        let program = libc::fork();
        if program < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if program == 0 {
            // The program: a group of its own; gone if its supervisor is.
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGTERM, &default, std::ptr::null_mut());
            if libc::setpgid(0, 0) != 0 || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            return Ok(());
        }
        // The supervisor holds no descriptor but the program's standard
        // streams (carte reads them to their end, which comes when the
        // supervisor and every process of the run are gone): in particular
        // not the pipe on which the program's `exec` reports success.
        if libc::close_range(3, libc::c_uint::MAX, 0) != 0 {
            // Before Linux 5.9: one by one, up to the descriptor limit.
            let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            let most = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 { limit.rlim_cur } else { 1024 };
            for fd in 3..most.min(1 << 20) {
                libc::close(fd as libc::c_int);
            }
        }
        let status = wait_for(program);
        end_everything(program);
        exit_like(status)
    }
}

/// Waits for `program` (reaping orphans meanwhile) until it exits or the
/// supervisor is told to stop: its wait status, if it exited.
unsafe fn wait_for(program: libc::pid_t) -> Option<libc::c_int> {
    loop {
        if STOP.load(Ordering::SeqCst) {
            return None;
        }
        let mut status = 0;
        // SAFETY: waitpid writes the status into a local.
        let reaped = unsafe { libc::waitpid(-1, &mut status, 0) };
        if reaped == program {
            return Some(status);
        }
        if reaped < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) {
            return None;
        }
    }
}

/// Kills the program's group and every descendant left, reaping them,
/// until the supervisor has no child.
unsafe fn end_everything(program: libc::pid_t) {
    // SAFETY: kill and waitpid only; the group is the program's own.
    unsafe {
        libc::killpg(program, libc::SIGKILL);
        loop {
            kill_children();
            let mut status = 0;
            let reaped = libc::waitpid(-1, &mut status, 0);
            if reaped < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) {
                return;
            }
        }
    }
}

/// Sends SIGKILL to each child of this process, as the kernel lists them in
/// `/proc/thread-self/children` (read into a buffer on the stack).
unsafe fn kill_children() {
    // SAFETY: open/read/close on a buffer of this frame, and kill.
    unsafe {
        let fd = libc::open(c"/proc/thread-self/children".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return;
        }
        let mut buf = [0u8; 4096];
        let mut pid: libc::pid_t = 0;
        loop {
            let read = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            if read <= 0 {
                break;
            }
            for &byte in &buf[..read.unsigned_abs()] {
                if byte.is_ascii_digit() {
                    pid = pid.saturating_mul(10).saturating_add(libc::pid_t::from(byte - b'0'));
                } else if pid > 0 {
                    libc::kill(pid, libc::SIGKILL);
                    pid = 0;
                }
            }
        }
        if pid > 0 {
            libc::kill(pid, libc::SIGKILL);
        }
        libc::close(fd);
    }
}

/// Exits as the program did: its code, or the signal that killed it (137,
/// as a shell says SIGKILL, when it was stopped before it ended).
unsafe fn exit_like(status: Option<libc::c_int>) -> ! {
    // SAFETY: signal disposition, setrlimit, kill of this process, _exit.
    unsafe {
        match status {
            Some(status) if libc::WIFEXITED(status) => libc::_exit(libc::WEXITSTATUS(status)),
            Some(status) if libc::WIFSIGNALED(status) => {
                let signal = libc::WTERMSIG(status);
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
                // The program's core dump, if any, was its own.
                let none = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
                libc::setrlimit(libc::RLIMIT_CORE, &none);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, signal);
                libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                libc::kill(libc::getpid(), signal);
                libc::_exit(128 + signal)
            }
            _ => libc::_exit(137),
        }
    }
}
