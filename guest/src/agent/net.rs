//! The install phase's network in the `vm` tier: the guest side. The host gives the VM a virtio-net device on
//! QEMU user networking (`restrict=on`, one `guestfwd` to the host's dialer) only while the install phase runs;
//! the agent configures it when the install phase starts, runs the fence's own egress proxy with a
//! [`NameDialer`] that hands each allowlisted `host:port` to the host dialer, and at the end of the phase takes
//! the link down, unloads the driver and asks the host to cut its side (`Cut`/`CutDone` on the job channel).

use crate::channel::{self, FrameType};
use crate::fence::proxy::{BoxFuture, EgressProxy, NameDialer, ProxyConfig, ProxyHandle};
use crate::fence::run::{EgressProvider, EgressSession, EgressStartError};
use attestation::verdict::EgressRecord;
use job_policy::allow::AllowEntry;
use job_policy::egress::OperatorEgress;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The guest's address on QEMU's user network (its fixed default).
pub const GUEST_CIDR: &str = "10.0.2.15/24";
/// Where QEMU's `guestfwd` starts one host dialer per connection.
pub const DIALER_ADDR: &str = "10.0.2.100:3128";
/// The kernel module of the network device (unloaded at the cut).
pub const NET_MODULE: &str = "virtio_net";
/// Longest answer line the host dialer may send.
const MAX_ANSWER: usize = 1024;
/// How long the agent waits for the host's `CutDone`.
const CUT_WAIT: Duration = Duration::from_secs(30);

/// The first network interface that is not loopback (`eth0` without udev), if the host gave the VM one.
pub fn interface() -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "lo")
        .collect();
    names.sort();
    names.into_iter().next()
}

/// Runs busybox's `ip` with `args` (busybox is in the measured image).
fn ip(args: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new("/bin/busybox")
        .arg("ip")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {} {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Gives `dev` the guest address and brings it up (the subnet route comes with the address; no default route,
/// no DNS: only the dialer's address is ever dialled).
pub fn configure(dev: &str) -> Result<(), String> {
    ip(&["link", "set", "dev", "lo", "up"])?;
    ip(&["addr", "add", GUEST_CIDR, "dev", dev])?;
    ip(&["link", "set", "dev", dev, "up"])
}

/// Takes `dev` down, removes its addresses and unloads the driver, so that nothing in the guest can use the
/// device after the install phase. Returns what did not work.
pub fn take_down(dev: &str) -> Vec<String> {
    let mut notes = Vec::new();
    if let Err(e) = ip(&["link", "set", "dev", dev, "down"]) {
        notes.push(e);
    }
    if let Err(e) = ip(&["addr", "flush", "dev", dev]) {
        notes.push(e);
    }
    let name = std::ffi::CString::new(NET_MODULE).unwrap_or_default();
    if let Err(e) = nix::kmod::delete_module(&name, nix::kmod::DeleteModuleFlags::O_NONBLOCK) {
        notes.push(format!("unloading {NET_MODULE}: {e} (the link stays down)"));
    }
    notes
}

/// Connects to the host dialer and hands it `host:port`; its first line says `OK <what it connected to>`,
/// `DENY <why>` (refused by policy: final, the proxy answers 403) or `ERR <why not>` (a failure: 502); after
/// `OK` the stream is the connection.
struct HostDialer;

impl NameDialer for HostDialer {
    fn dial_name<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<(TcpStream, String)>> {
        Box::pin(async move {
            let mut s = TcpStream::connect(DIALER_ADDR).await.map_err(|e| {
                io::Error::other(format!(
                    "connecting to the host dialer at {DIALER_ADDR}: {e}"
                ))
            })?;
            s.set_nodelay(true)?;
            s.write_all(format!("{host}:{port}\n").as_bytes()).await?;
            // Byte by byte: nothing after the answer line may be consumed here.
            let mut line = Vec::new();
            loop {
                let mut b = [0u8; 1];
                if s.read(&mut b).await? == 0 {
                    return Err(io::Error::other("the host dialer closed without an answer"));
                }
                if b[0] == b'\n' {
                    break;
                }
                line.push(b[0]);
                if line.len() > MAX_ANSWER {
                    return Err(io::Error::other(
                        "the host dialer's answer line is longer than 1024 bytes",
                    ));
                }
            }
            let text = attestation::text::escape(&String::from_utf8_lossy(&line)).into_owned();
            if let Some(rest) = text.strip_prefix("OK ") {
                Ok((s, format!("the host dialer, which connected to {rest}")))
            } else if let Some(why) = text.strip_prefix("DENY ") {
                Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("the host dialer refused by policy: {why}"),
                ))
            } else if let Some(why) = text.strip_prefix("ERR ") {
                Err(io::Error::other(format!("the host dialer refused: {why}")))
            } else {
                Err(io::Error::other(format!(
                    "the host dialer answered `{text}`, not OK, DENY or ERR"
                )))
            }
        })
    }
}

/// A name dialer for a VM the host gave no network device: every allowlisted connection fails, saying why.
struct NoDevice;

impl NameDialer for NoDevice {
    fn dial_name<'a>(
        &'a self,
        _host: &'a str,
        _port: u16,
    ) -> BoxFuture<'a, io::Result<(TcpStream, String)>> {
        Box::pin(async {
            Err(io::Error::other(
                "this VM has no install-phase network device (the host launched it without one)",
            ))
        })
    }
}

/// The `vm` tier's egress provider: the fence's proxy with the host dialer, and the cut at the end.
pub struct VmEgress {
    port: Mutex<Option<File>>,
    notes: Arc<Mutex<Vec<String>>>,
}

impl VmEgress {
    /// A provider speaking on the job channel `port`; what went wrong with the network is added to `notes`.
    pub fn new(port: File, notes: Arc<Mutex<Vec<String>>>) -> VmEgress {
        VmEgress {
            port: Mutex::new(Some(port)),
            notes,
        }
    }
}

fn note(notes: &Mutex<Vec<String>>, n: String) {
    match notes.lock() {
        Ok(mut g) => g.push(n),
        Err(p) => p.into_inner().push(n),
    }
}

impl EgressProvider for VmEgress {
    fn start(
        &self,
        allow: &[AllowEntry],
        socket: &Path,
    ) -> Result<Box<dyn EgressSession>, EgressStartError> {
        self.start_with(allow, socket, &OperatorEgress::default())
    }

    /// The operator's `allow_networks` apply here to IP literals (names are resolved and checked by the host
    /// dialer, which applies the same settings); its upstream proxy is the host dialer's to use.
    fn start_with(
        &self,
        allow: &[AllowEntry],
        socket: &Path,
        operator: &OperatorEgress,
    ) -> Result<Box<dyn EgressSession>, EgressStartError> {
        let mut port = match self.port.lock() {
            Ok(mut g) => g.take(),
            Err(p) => p.into_inner().take(),
        }
        .ok_or(EgressStartError::AlreadyUsed)?;
        super::progress::send(&mut port, FrameType::InstallStart, b"")
            .map_err(|e| EgressStartError::Channel(e.to_string()))?;
        for n in super::init::network_modules() {
            note(&self.notes, n);
        }
        let dev = interface();
        let dialer: Arc<dyn NameDialer> = match &dev {
            Some(d) => match configure(d) {
                Ok(()) => Arc::new(HostDialer),
                Err(e) => {
                    note(&self.notes, format!("configuring {d}: {e}"));
                    Arc::new(NoDevice)
                }
            },
            None => Arc::new(NoDevice),
        };
        let proxy = EgressProxy::start(
            ProxyConfig::new(allow.to_vec(), socket)
                .with_name_dialer(dialer)
                .with_operator_egress(operator.clone()),
        )?;
        Ok(Box::new(VmEgressSession {
            proxy: Some(proxy),
            dev,
            port,
            notes: self.notes.clone(),
        }))
    }
}

struct VmEgressSession {
    proxy: Option<ProxyHandle>,
    dev: Option<String>,
    port: File,
    notes: Arc<Mutex<Vec<String>>>,
}

impl VmEgressSession {
    /// The cut: the link down and the driver gone here, then the host's side (`Cut`, bounded wait for `CutDone`).
    fn cut(&mut self) {
        if let Some(d) = &self.dev {
            for n in take_down(d) {
                note(&self.notes, format!("cut: {n}"));
            }
        }
        if let Err(e) = super::progress::send(&mut self.port, FrameType::Cut, b"") {
            note(&self.notes, format!("cut: telling the host: {e}"));
            return;
        }
        use std::os::fd::AsFd;
        let mut fds = [nix::poll::PollFd::new(
            self.port.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        let ms = u16::try_from(CUT_WAIT.as_millis()).unwrap_or(u16::MAX);
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)) {
            Ok(0) => note(
                &self.notes,
                format!(
                    "cut: no answer from the host within {} s (the guest's link is down either way)",
                    CUT_WAIT.as_secs()
                ),
            ),
            Ok(_) => {
                if let Err(e) = channel::expect_frame(&mut self.port, FrameType::CutDone, "CutDone")
                {
                    note(&self.notes, format!("cut: the host's answer: {e}"));
                }
            }
            Err(e) => note(&self.notes, format!("cut: poll: {e}")),
        }
    }
}

impl EgressSession for VmEgressSession {
    fn finish(mut self: Box<Self>) -> Vec<EgressRecord> {
        let log = self.proxy.take().map(|p| p.shutdown()).unwrap_or_default();
        self.cut();
        log
    }
}
