//! Nonces issued for a key (the hosted pool, docs/pool.md): the run makes its ephemeral evidence key first,
//! announces the key's SHA-256 ([`attestation::pool_ledger::key_sha256`]) and only then receives the nonce, from
//! a [`NonceSource`]. A direct `fenced-run run --nonce HEX` uses [`Fixed`]; `fenced-run run --nonce-exchange`
//! uses [`StdioExchange`]: one line `key-sha256 HEX` on stdout, one line of nonce hex back on stdin.

use std::io::{BufRead, Write};

/// The first word of the line `--nonce-exchange` writes on stdout.
pub const KEY_LINE_PREFIX: &str = "key-sha256 ";

/// Gives the nonce for a key whose hash is announced.
pub trait NonceSource: Send {
    /// The nonce for the key whose SHA-256 is `key_sha256`, or why there is none.
    fn nonce_for(&mut self, key_sha256: &[u8; 32]) -> Result<Vec<u8>, String>;
}

/// A nonce fixed in advance (the founder's `--nonce`): the key hash is not looked at.
#[derive(Debug, Clone)]
pub struct Fixed(pub Vec<u8>);

impl NonceSource for Fixed {
    fn nonce_for(&mut self, _key_sha256: &[u8; 32]) -> Result<Vec<u8>, String> {
        Ok(self.0.clone())
    }
}

/// The `--nonce-exchange` protocol over this process's stdout and stdin (the pool's worker is at the other end).
#[derive(Debug, Default)]
pub struct StdioExchange;

/// Longest line of nonce hex read back (64 bytes as hex, whitespace and a `0x` allowed).
const MAX_LINE: u64 = 256;

/// The exchange over any writer and reader: writes `key-sha256 HEX\n`, flushes, reads one line and parses it
/// as a nonce of 16 to 64 bytes.
pub fn exchange(
    out: &mut dyn Write,
    input: &mut dyn BufRead,
    key_sha256: &[u8; 32],
) -> Result<Vec<u8>, String> {
    writeln!(out, "{KEY_LINE_PREFIX}{}", hex::encode(key_sha256))
        .and_then(|()| out.flush())
        .map_err(|e| format!("--nonce-exchange: writing the key hash: {e}"))?;
    let mut line = String::new();
    let n = std::io::Read::take(input, MAX_LINE)
        .read_line(&mut line)
        .map_err(|e| format!("--nonce-exchange: reading the nonce: {e}"))?;
    if n == 0 {
        return Err("--nonce-exchange: stdin closed before a nonce arrived".into());
    }
    if !line.ends_with('\n') {
        return Err(format!(
            "--nonce-exchange: the nonce line is not one line of at most {MAX_LINE} bytes"
        ));
    }
    attestation::binding::parse_nonce_hex(line.trim())
        .map_err(|e| format!("--nonce-exchange: the nonce received: {e}"))
}

impl NonceSource for StdioExchange {
    fn nonce_for(&mut self, key_sha256: &[u8; 32]) -> Result<Vec<u8>, String> {
        let stdout = std::io::stdout();
        let stdin = std::io::stdin();
        exchange(&mut stdout.lock(), &mut stdin.lock(), key_sha256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announces_then_reads_one_nonce() {
        let mut out = Vec::new();
        let mut input: &[u8] = b"00112233445566778899aabbccddeeff\nrest";
        let n = exchange(&mut out, &mut input, &[0xab; 32]).expect("nonce");
        assert_eq!(
            n,
            hex::decode("00112233445566778899aabbccddeeff").expect("hex")
        );
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            format!("key-sha256 {}\n", "ab".repeat(32))
        );
    }

    #[test]
    fn refuses_what_is_not_a_nonce() {
        for bad in [
            &b""[..],
            b"0011\n",
            b"zz\n",
            b"00112233445566778899aabbccddeeff",
        ] {
            let mut input: &[u8] = bad;
            assert!(exchange(&mut Vec::new(), &mut input, &[0; 32]).is_err());
        }
        let long = vec![b'0'; 400];
        let mut input: &[u8] = &long;
        assert!(exchange(&mut Vec::new(), &mut input, &[0; 32]).is_err());
    }
}
