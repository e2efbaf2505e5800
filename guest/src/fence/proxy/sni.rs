//! The server name a TLS client asks for in its ClientHello, read from the first bytes of a CONNECT tunnel so that
//! the proxy can check it against the CONNECT host (no domain fronting through an allowed address). Only the
//! unencrypted ClientHello is read; nothing is decrypted or changed.

/// The most bytes read while looking for a complete ClientHello.
pub const MAX_HELLO_BYTES: usize = 64 * 1024;

/// What the first bytes of a tunnel say.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Hello {
    /// More bytes are needed to decide.
    NeedMore,
    /// The stream does not start with a TLS handshake record: not TLS, nothing to check.
    NotTls,
    /// A complete ClientHello with this server name (`None`: no `server_name` extension).
    ServerName(Option<String>),
    /// A TLS handshake record that is not a well-formed ClientHello.
    Malformed(String),
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.b.len());
        match end {
            Some(e) => {
                let s = &self.b[self.at..e];
                self.at = e;
                Ok(s)
            }
            None => Err(format!("ClientHello truncated in {what}")),
        }
    }
    fn u8(&mut self, what: &str) -> Result<usize, String> {
        Ok(usize::from(self.take(1, what)?[0]))
    }
    fn u16(&mut self, what: &str) -> Result<usize, String> {
        let s = self.take(2, what)?;
        Ok(usize::from(u16::from_be_bytes([s[0], s[1]])))
    }
    fn vec8(&mut self, what: &str) -> Result<&'a [u8], String> {
        let n = self.u8(what)?;
        self.take(n, what)
    }
    fn vec16(&mut self, what: &str) -> Result<&'a [u8], String> {
        let n = self.u16(what)?;
        self.take(n, what)
    }
}

/// Inspects the first bytes a client sent into a tunnel.
pub fn inspect(bytes: &[u8]) -> Hello {
    if bytes.is_empty() {
        return Hello::NeedMore;
    }
    if bytes[0] != 0x16 {
        return Hello::NotTls;
    }
    if bytes.len() >= 2 && bytes[1] != 0x03 {
        return Hello::NotTls;
    }
    // Reassemble the handshake layer from consecutive handshake records.
    let mut handshake = Vec::new();
    let mut at = 0usize;
    loop {
        if bytes.len() < at + 5 {
            return Hello::NeedMore;
        }
        let rec = &bytes[at..at + 5];
        if rec[0] != 0x16 {
            return Hello::Malformed(format!("record of type {} inside the ClientHello", rec[0]));
        }
        if rec[1] != 0x03 {
            return Hello::Malformed("record version is not 3.x".into());
        }
        let len = usize::from(u16::from_be_bytes([rec[3], rec[4]]));
        if len == 0 || len > 16384 + 256 {
            return Hello::Malformed(format!("record length {len}"));
        }
        if bytes.len() < at + 5 + len {
            return Hello::NeedMore;
        }
        handshake.extend_from_slice(&bytes[at + 5..at + 5 + len]);
        at += 5 + len;
        if handshake.len() >= 4 {
            if handshake[0] != 0x01 {
                return Hello::Malformed(format!(
                    "first handshake message is type {}, not ClientHello",
                    handshake[0]
                ));
            }
            let body_len = (usize::from(handshake[1]) << 16)
                | (usize::from(handshake[2]) << 8)
                | usize::from(handshake[3]);
            if body_len + 4 > MAX_HELLO_BYTES {
                return Hello::Malformed(format!("ClientHello of {body_len} bytes"));
            }
            if handshake.len() >= body_len + 4 {
                return match server_name(&handshake[4..4 + body_len]) {
                    Ok(n) => Hello::ServerName(n),
                    Err(e) => Hello::Malformed(e),
                };
            }
        }
        if at >= MAX_HELLO_BYTES {
            return Hello::Malformed("no complete ClientHello in the first 64 KiB".into());
        }
    }
}

/// The `server_name` of a ClientHello body (RFC 8446 section 4.1.2, RFC 6066 section 3).
fn server_name(body: &[u8]) -> Result<Option<String>, String> {
    let mut c = Cursor { b: body, at: 0 };
    c.take(2, "legacy_version")?;
    c.take(32, "random")?;
    c.vec8("legacy_session_id")?;
    c.vec16("cipher_suites")?;
    c.vec8("legacy_compression_methods")?;
    if c.at == body.len() {
        return Ok(None);
    }
    let exts = c.vec16("extensions")?;
    if c.at != body.len() {
        return Err("bytes after the extensions".into());
    }
    let mut e = Cursor { b: exts, at: 0 };
    let mut found = None;
    while e.at < exts.len() {
        let ty = e.u16("extension type")?;
        let data = e.vec16("extension data")?;
        if ty != 0 {
            continue;
        }
        if found.is_some() {
            return Err("two server_name extensions".into());
        }
        let mut s = Cursor { b: data, at: 0 };
        let list = s.vec16("server_name_list")?;
        if s.at != data.len() {
            return Err("bytes after server_name_list".into());
        }
        let mut l = Cursor { b: list, at: 0 };
        while l.at < list.len() {
            let name_type = l.u8("name_type")?;
            let name = l.vec16("host_name")?;
            if name_type == 0 {
                if found.is_some() {
                    return Err("two host names in server_name".into());
                }
                let text = std::str::from_utf8(name)
                    .map_err(|_| "server name is not ASCII".to_string())?;
                if text.is_empty() || !text.is_ascii() {
                    return Err("server name is empty or not ASCII".into());
                }
                found = Some(text.to_string());
            }
        }
    }
    Ok(found)
}
