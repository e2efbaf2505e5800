//! The browser check: the viewer hands the founder's browser the evidence bytes, the request the server verified
//! them with ([`verifier_wasm::Request`]: pins, policies, collateral, time) and the server's own result, and
//! serves `verifier-wasm` built for wasm32 and a small script (`check.js`). The script runs the same check in
//! the browser and shows, claim by claim, whether its result agrees with the server's. Without JavaScript or
//! WebAssembly, or when the module was not built, the page says that the browser check did not run and shows the
//! server's result alone.
//!
//! The module is found at run time ([`find_module`]): `$FENCED_RUN_VERIFIER_WASM`, else `verifier_wasm.wasm`
//! beside the running program, else where `cargo rustc -p verifier-wasm --target wasm32-unknown-unknown
//! --release --crate-type cdylib` puts it relative to the program's target directory.

use base64::Engine as _;
use std::path::{Path, PathBuf};
use verifier_lib::output::ClaimContext;
use verifier_lib::EvidenceOptions;

/// The script the page loads (`check.js`), allowed by `script-src 'self'`.
pub const SCRIPT: &str = include_str!("check.js");

/// The variable naming the module file (`FENCED_RUN_VERIFIER_WASM=PATH`; an empty value: no module).
pub const MODULE_VAR: &str = "FENCED_RUN_VERIFIER_WASM";

/// The module's file name, as cargo writes it.
pub const MODULE_FILE: &str = "verifier_wasm.wasm";

/// What the browser needs to check the evidence itself, and the server's result to compare with.
#[derive(Clone, Debug)]
pub struct BrowserCheck {
    /// The evidence, as given to the viewer.
    pub evidence: Vec<u8>,
    /// The options the server verified with.
    pub request: verifier_wasm::Request,
    /// The server's result: `verifier_wasm::verify` of the same evidence and request, run natively.
    pub server: serde_json::Value,
}

impl BrowserCheck {
    /// The browser check of `evidence` verified with `opts` (the viewer's own options, no command context).
    pub fn new(evidence: &[u8], opts: &EvidenceOptions) -> BrowserCheck {
        let request = verifier_wasm::Request::from_options(opts, &ClaimContext::default());
        let server = verifier_wasm::verify(evidence, &request);
        BrowserCheck {
            evidence: evidence.to_vec(),
            request,
            server,
        }
    }

    /// `check-input.json`: `{"evidence": BASE64, "request": {...}, "server": {...}}`.
    pub fn input_json(&self) -> String {
        serde_json::json!({
            "evidence": base64::engine::general_purpose::STANDARD.encode(&self.evidence),
            "request": self.request,
            "server": self.server,
        })
        .to_string()
    }
}

/// Whether `bytes` is a WebAssembly binary module (magic and version 1).
pub fn is_module(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\0asm\x01\0\0\0")
}

/// Where the module is looked for, in order: `$FENCED_RUN_VERIFIER_WASM` alone when it is set, else beside the
/// program, then `wasm32-unknown-unknown/release/` of the program's target directory (the program in
/// `target/PROFILE/` or, for tests, `target/PROFILE/deps/`).
pub fn module_candidates() -> Vec<PathBuf> {
    if let Some(p) = std::env::var_os(MODULE_VAR) {
        return if p.is_empty() {
            Vec::new()
        } else {
            vec![PathBuf::from(p)]
        };
    }
    let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    else {
        return Vec::new();
    };
    let mut out = vec![dir.join(MODULE_FILE)];
    for up in [dir.parent(), dir.parent().and_then(Path::parent)]
        .into_iter()
        .flatten()
    {
        out.push(
            up.join("wasm32-unknown-unknown")
                .join("release")
                .join(MODULE_FILE),
        );
    }
    out
}

/// The first candidate that is a WebAssembly module, with its path; `None` when none is (the page then says
/// the browser check did not run).
pub fn find_module() -> Option<(PathBuf, Vec<u8>)> {
    module_candidates().into_iter().find_map(|p| {
        // A module is a few MiB; anything far larger is not ours.
        let meta = std::fs::metadata(&p).ok()?;
        if !meta.is_file() || meta.len() > 64 << 20 {
            return None;
        }
        let bytes = std::fs::read(&p).ok()?;
        is_module(&bytes).then_some((p, bytes))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_magic() {
        assert!(is_module(b"\0asm\x01\0\0\0rest"));
        assert!(!is_module(b"\0asm\x02\0\0\0"));
        assert!(!is_module(b"<html>"));
    }

    #[test]
    fn the_input_carries_evidence_request_and_server_result() {
        let opts = EvidenceOptions::default();
        let c = BrowserCheck::new(b"not evidence", &opts);
        assert_eq!(c.server["error"]["check"], "evidence-format");
        let v: serde_json::Value = serde_json::from_str(&c.input_json()).expect("json");
        assert_eq!(v["evidence"], "bm90IGV2aWRlbmNl");
        assert_eq!(v["server"], c.server);
        let back: verifier_wasm::Request =
            serde_json::from_value(v["request"].clone()).expect("request");
        assert_eq!(back, c.request);
    }
}
