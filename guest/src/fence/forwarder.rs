//! The in-namespace forwarder of the install phase: every TCP connection accepted on 127.0.0.1:<port> inside the
//! sandbox's network namespace is relayed byte for byte to the egress proxy's Unix socket outside it.
//! It decides nothing (all policy lives in the proxy) and needs neither tokio nor threads: one blocking `poll(2)`
//! loop, so that the fence's single-threaded helper can run it.

use std::io::{self, Read};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{send, MsgFlags};

/// Bytes buffered per direction per connection.
const BUF: usize = 64 * 1024;
/// Most connections relayed at once; the listener is not polled while this many are open.
pub const MAX_CONNECTIONS: usize = 512;

/// The receiving end of a stop signal (a pipe): [`serve`] returns once the [`Stopper`] fires or is dropped.
pub struct StopSignal {
    read: OwnedFd,
}

/// Fires a [`StopSignal`]; clonable and usable from any thread (the pipe is close-on-exec).
#[derive(Clone)]
pub struct Stopper {
    write: Arc<OwnedFd>,
}

impl StopSignal {
    /// A new signal and the stopper that fires it.
    pub fn new() -> io::Result<(StopSignal, Stopper)> {
        let (read, write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
        Ok((
            StopSignal { read },
            Stopper {
                write: Arc::new(write),
            },
        ))
    }
}

impl Stopper {
    /// Tells [`serve`] to return (closing every relayed connection).
    pub fn stop(&self) {
        let _ = nix::unistd::write(self.write.as_fd(), b"x");
    }
}

/// What the forwarder did, returned when it stops.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForwarderStats {
    /// Connections accepted on the TCP listener.
    pub accepted: u64,
    /// Connections for which the proxy's Unix socket could not be reached (closed at once).
    pub proxy_unreachable: u64,
    /// Bytes carried from the sandbox to the proxy.
    pub bytes_up: u64,
    /// Bytes carried from the proxy to the sandbox.
    pub bytes_down: u64,
}

/// One direction's buffer.
struct Pipe {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The reading side reached end of file.
    eof: bool,
    /// The writing side has been shut down after the EOF was flushed.
    shut: bool,
}

impl Pipe {
    fn new() -> Self {
        Self {
            buf: vec![0u8; BUF].into_boxed_slice(),
            start: 0,
            end: 0,
            eof: false,
            shut: false,
        }
    }
    fn has_data(&self) -> bool {
        self.end > self.start
    }
    fn has_room(&self) -> bool {
        !self.eof && self.end < self.buf.len()
    }
}

struct Pair {
    tcp: TcpStream,
    unix: UnixStream,
    /// Sandbox -> proxy.
    up: Pipe,
    /// Proxy -> sandbox.
    down: Pipe,
    dead: bool,
}

/// Reads into the pipe; `Ok(n)` bytes read, EOF recorded.
fn fill<R: Read>(r: &mut R, p: &mut Pipe) -> io::Result<usize> {
    if !p.has_room() {
        return Ok(0);
    }
    if p.start == p.end {
        p.start = 0;
        p.end = 0;
    }
    match r.read(&mut p.buf[p.end..]) {
        Ok(0) => {
            p.eof = true;
            Ok(0)
        }
        Ok(n) => {
            p.end += n;
            Ok(n)
        }
        Err(e)
            if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted =>
        {
            Ok(0)
        }
        Err(e) => Err(e),
    }
}

/// Writes from the pipe without ever raising SIGPIPE.
fn drain<F: AsRawFd>(w: &F, p: &mut Pipe) -> io::Result<usize> {
    if !p.has_data() {
        return Ok(0);
    }
    match send(
        w.as_raw_fd(),
        &p.buf[p.start..p.end],
        MsgFlags::MSG_NOSIGNAL,
    ) {
        Ok(n) => {
            p.start += n;
            if p.start == p.end {
                // Empty again: the whole buffer is room again (poll interest depends on it).
                p.start = 0;
                p.end = 0;
            }
            Ok(n)
        }
        Err(Errno::EAGAIN) | Err(Errno::EINTR) => Ok(0),
        Err(e) => Err(io::Error::from(e)),
    }
}

impl Pair {
    /// Moves what can be moved without blocking; marks the pair dead on error or when both directions are done.
    fn step(&mut self, stats: &mut ForwarderStats) {
        let r: io::Result<()> = (|| {
            fill(&mut self.tcp, &mut self.up)?;
            stats.bytes_up += drain(&self.unix, &mut self.up)? as u64;
            fill(&mut self.unix, &mut self.down)?;
            stats.bytes_down += drain(&self.tcp, &mut self.down)? as u64;
            if self.up.eof && !self.up.has_data() && !self.up.shut {
                let _ = self.unix.shutdown(Shutdown::Write);
                self.up.shut = true;
            }
            if self.down.eof && !self.down.has_data() && !self.down.shut {
                let _ = self.tcp.shutdown(Shutdown::Write);
                self.down.shut = true;
            }
            Ok(())
        })();
        if r.is_err() || (self.up.shut && self.down.shut) {
            self.dead = true;
        }
    }
}

/// Relays every connection accepted on `listener` to the Unix socket at `unix_path` until `stop` fires; returns
/// what was relayed. Blocking, single-threaded; the listener is switched to non-blocking mode.
pub fn serve(
    listener: TcpListener,
    unix_path: &Path,
    stop: &StopSignal,
) -> io::Result<ForwarderStats> {
    listener.set_nonblocking(true)?;
    let mut stats = ForwarderStats::default();
    let mut pairs: Vec<Pair> = Vec::new();
    loop {
        // Interest: what each socket is waiting for. A socket with no interest is not polled at all, so that a
        // hang-up on it cannot spin the loop.
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(2 + 2 * pairs.len());
        fds.push(PollFd::new(stop.read.as_fd(), PollFlags::POLLIN));
        let accepting = pairs.len() < MAX_CONNECTIONS;
        if accepting {
            fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
        }
        for p in &pairs {
            let mut tcp = PollFlags::empty();
            let mut unix = PollFlags::empty();
            if p.up.has_room() {
                tcp |= PollFlags::POLLIN;
            }
            if p.down.has_data() {
                tcp |= PollFlags::POLLOUT;
            }
            if p.down.has_room() {
                unix |= PollFlags::POLLIN;
            }
            if p.up.has_data() {
                unix |= PollFlags::POLLOUT;
            }
            if !tcp.is_empty() {
                fds.push(PollFd::new(p.tcp.as_fd(), tcp));
            }
            if !unix.is_empty() {
                fds.push(PollFd::new(p.unix.as_fd(), unix));
            }
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(io::Error::from(e)),
        }
        let stop_now = fds[0].revents().is_some_and(|r| !r.is_empty());
        let listener_ready = accepting && fds[1].revents().is_some_and(|r| !r.is_empty());
        drop(fds);
        if stop_now {
            // Returning drops every pair: both sockets of each are closed.
            return Ok(stats);
        }
        if listener_ready {
            loop {
                match listener.accept() {
                    Ok((tcp, _)) => {
                        stats.accepted += 1;
                        match connect_proxy(unix_path) {
                            Ok(unix) => {
                                if tcp.set_nonblocking(true).is_ok() {
                                    let _ = tcp.set_nodelay(true);
                                    pairs.push(Pair {
                                        tcp,
                                        unix,
                                        up: Pipe::new(),
                                        down: Pipe::new(),
                                        dead: false,
                                    });
                                }
                            }
                            Err(_) => stats.proxy_unreachable += 1,
                        }
                        if pairs.len() >= MAX_CONNECTIONS {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    // ECONNABORTED and friends concern one connection only.
                    Err(_) => break,
                }
            }
        }
        for p in &mut pairs {
            p.step(&mut stats);
        }
        pairs.retain(|p| !p.dead);
    }
}

fn connect_proxy(path: &Path) -> io::Result<UnixStream> {
    let s = UnixStream::connect(path)?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// Convenience for the runner and tests: binds `127.0.0.1:port` (0 for any) and runs [`serve`] on a new thread;
/// returns the bound address, the stopper and the thread's handle.
pub fn spawn(
    port: u16,
    unix_path: &Path,
) -> io::Result<(
    std::net::SocketAddr,
    Stopper,
    std::thread::JoinHandle<io::Result<ForwarderStats>>,
)> {
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    let addr = listener.local_addr()?;
    let (signal, stopper) = StopSignal::new()?;
    let path = unix_path.to_path_buf();
    let handle = std::thread::Builder::new()
        .name("forwarder".into())
        .spawn(move || serve(listener, &path, &signal))?;
    Ok((addr, stopper, handle))
}
