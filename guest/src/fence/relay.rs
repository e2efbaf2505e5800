//! A minimal relay used by the fence helper inside the install phase's network namespace: each TCP
//! connection accepted on 127.0.0.1 is carried byte for byte to the egress proxy's Unix socket outside.
//! It makes no decision of its own; every policy lives in the proxy.

use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

/// Accepts connections forever and relays each one on its own threads.
pub fn serve(listener: TcpListener, socket: PathBuf) {
    for conn in listener.incoming() {
        let Ok(tcp) = conn else { continue };
        let socket = socket.clone();
        std::thread::spawn(move || {
            let _ = relay_one(tcp, &socket);
        });
    }
}

fn relay_one(tcp: TcpStream, socket: &std::path::Path) -> io::Result<()> {
    let unix = UnixStream::connect(socket)?;
    let (mut tcp_r, mut unix_w) = (tcp.try_clone()?, unix.try_clone()?);
    let up = std::thread::spawn(move || {
        let _ = io::copy(&mut tcp_r, &mut unix_w);
        let _ = unix_w.shutdown(Shutdown::Write);
    });
    let (mut unix_r, mut tcp_w) = (unix, tcp);
    let _ = io::copy(&mut unix_r, &mut tcp_w);
    let _ = tcp_w.shutdown(Shutdown::Write);
    let _ = up.join();
    Ok(())
}
