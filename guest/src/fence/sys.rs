//! The few system calls of the fence that have no safe wrapper: fork, `_exit`, pidfd_open, bringing loopback
//! up, dropping the capability bounding set, closing inherited descriptors and joining a fresh session keyring. Every `unsafe` block of the fence lives here, each with the
//! reason it is sound; the rest of the fence calls these safe functions.
#![allow(unsafe_code)]

use nix::errno::Errno;
use std::os::fd::{FromRawFd, OwnedFd};

/// Which side of a fork the caller is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forked {
    /// The parent, with the child's pid.
    Parent(nix::unistd::Pid),
    /// The child.
    Child,
}

/// Forks the calling process.
///
/// Callers must be single-threaded (the fence helper and its PID 1 are): the child then owns the only thread
/// and may allocate, as the parent could.
pub fn fork_single_threaded() -> Result<Forked, Errno> {
    // SAFETY: the fence helper is a freshly exec'd process that starts no thread before it forks (checked by
    // `helper::dispatch` being the first statement of `main`), so the child cannot inherit a lock held by
    // another thread; after the fork the child continues with ordinary Rust code exactly as a single-threaded
    // process would.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child)),
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
    }
}

/// Ends the calling process at once with `code`, without running exit handlers or flushing stdio buffers
/// (which belong to the parent's copy after a fork).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` takes no pointers and never returns; skipping destructors is the point.
    unsafe { libc::_exit(code) }
}

/// Opens a pidfd for `pid` (a process this process can see), readable when the process exits.
pub fn pidfd_open(pid: nix::unistd::Pid) -> Result<OwnedFd, Errno> {
    // SAFETY: pidfd_open takes two integers and returns a new file descriptor or -1; no memory is shared.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if fd < 0 {
        return Err(Errno::last());
    }
    let fd = i32::try_from(fd).map_err(|_| Errno::EBADF)?;
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets the `IFF_UP` flag of the loopback interface of the caller's network namespace.
pub fn loopback_up() -> Result<(), Errno> {
    let sock = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Inet,
        nix::sys::socket::SockType::Datagram,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // SAFETY: `ifreq` is plain old data for which all-zero bytes are a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    use std::os::fd::AsRawFd;
    // SAFETY: SIOCGIFFLAGS reads the name and writes the flags member of the `ifreq` we own, which lives for
    // the whole call; the socket is a valid descriptor.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the flags member is the active member after SIOCGIFFLAGS.
    unsafe {
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: as above; SIOCSIFFLAGS reads the name and flags of our `ifreq`.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// Drops every capability from the bounding set of the calling thread (needs CAP_SETPCAP, so call it before
/// giving up root), and clears the ambient set.
pub fn drop_capability_bounding_set() -> Result<(), Errno> {
    for cap in 0..=63 {
        // SAFETY: prctl(PR_CAPBSET_DROP, cap) takes integers only.
        let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if r < 0 {
            let e = Errno::last();
            // EINVAL: no such capability on this kernel (the list ends); anything else is a failure.
            if e == Errno::EINVAL {
                break;
            }
            return Err(e);
        }
    }
    // SAFETY: integers only.
    let r = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if r < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

static TIMEOUT_REQUESTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_timeout_signal(_: libc::c_int) {
    TIMEOUT_REQUESTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Installs a handler for `SIGUSR1` (without `SA_RESTART`, so that a blocked `waitpid` returns `EINTR`) that
/// records a timeout request, read back with [`timeout_requested`].
pub fn install_timeout_handler() -> Result<(), Errno> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_timeout_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe; no other handler for SIGUSR1
    // exists in this process.
    unsafe { sigaction(Signal::SIGUSR1, &action) }?;
    Ok(())
}

/// Whether the timeout signal has arrived.
pub fn timeout_requested() -> bool {
    TIMEOUT_REQUESTED.load(std::sync::atomic::Ordering::SeqCst)
}

/// `keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)`: a new anonymous session keyring (uapi `linux/keyctl.h`).
const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;

/// Makes the caller (and what it execs) the only member of a new, empty, anonymous session keyring, so that no
/// key of the session it came from is reachable by the keyring search (`@s`); returns the new keyring's serial.
pub fn join_fresh_session_keyring() -> Result<i64, Errno> {
    // SAFETY: keyctl(JOIN_SESSION_KEYRING, NULL) takes an integer and a null name pointer (anonymous
    // keyring); the kernel reads no memory of ours.
    let r = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_JOIN_SESSION_KEYRING,
            std::ptr::null::<libc::c_char>(),
        )
    };
    if r < 0 {
        return Err(Errno::last());
    }
    Ok(r)
}

/// Marks every descriptor from `first` up close-on-exec (`close_range(first, ~0, CLOSE_RANGE_CLOEXEC)`), so
/// that the next `execve` leaves only the descriptors below `first`; where the kernel lacks that call (before
/// 5.11) each open descriptor listed in `/proc/self/fd` is marked one by one.
pub fn cloexec_from(first: u32) -> Result<(), Errno> {
    // SAFETY: close_range takes three integers; marking descriptors close-on-exec frees no memory.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = Errno::last();
    if e != Errno::ENOSYS && e != Errno::EINVAL {
        return Err(e);
    }
    let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map_err(|_| Errno::ENOENT)?
        .filter_map(Result::ok)
        .filter_map(|d| d.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|fd| u32::try_from(*fd).is_ok_and(|fd| fd >= first))
        .collect();
    for fd in fds {
        match nix::fcntl::fcntl(
            fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        ) {
            // The listing's own descriptor is closed by now.
            Ok(_) | Err(Errno::EBADF) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Closes every descriptor from `first` up (`close_range(first, ~0, 0)`), for a process that must hold
/// nothing it inherited; where the kernel lacks that call (before 5.9) each descriptor listed in
/// `/proc/self/fd` is closed.
pub fn close_from(first: u32) -> Result<(), Errno> {
    // SAFETY: close_range takes three integers. No Rust object of this process owns a descriptor at or
    // above `first` when it is called (the helper calls it before opening anything).
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0) };
    if r == 0 {
        return Ok(());
    }
    let e = Errno::last();
    if e != Errno::ENOSYS {
        return Err(e);
    }
    let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map_err(|_| Errno::ENOENT)?
        .filter_map(Result::ok)
        .filter_map(|d| d.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|fd| u32::try_from(*fd).is_ok_and(|fd| fd >= first))
        .collect();
    for fd in fds {
        // SAFETY: as above: nothing of ours owns these descriptors; EBADF (the listing's own) is harmless.
        unsafe { libc::close(fd) };
    }
    Ok(())
}
