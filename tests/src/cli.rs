//! Helpers of the command-line contract tests: a corpus of inputs (good, bad, wrong kind, truncated, text
//! encodings) built in a temporary directory from the sim backends and, where present, the real vectors, and a
//! runner that captures a binary's exit code, stdout and stderr.

use attestation::binding;
use attestation::evidence::Evidence;
use attestation::sim::tdx::{SimQe, SimTd, SimTdxTee};
use attestation::sim::{SimPsp, SimSnpTee};
use attestation::snp::Product;
use attestation::tee::Tee;
use attestation::verdict::{Inputs, Isolation, Outcome, Verdict};
use base64::Engine;
use sha2::{Digest, Sha384};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The nonce every corpus evidence file is bound to (hex).
pub const NONCE: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

/// What one run of a binary gave.
#[derive(Debug)]
pub struct Out {
    /// The exit code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output, lossily decoded.
    pub stdout: String,
    /// Standard error, lossily decoded.
    pub stderr: String,
}

/// Runs `bin` with `args` (and `stdin` on standard input when given), with `TMPDIR` set to `tmp`.
pub fn run(bin: &str, args: &[&str], stdin: Option<&[u8]>, tmp: &Path) -> Out {
    use std::io::Write;
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .env("TMPDIR", tmp)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .stdin(if stdin.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        });
    let mut child = cmd.spawn().expect("spawn");
    if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let _ = pipe.write_all(data);
    }
    let out = child.wait_with_output().expect("wait");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The corpus: paths of the files built in [`Corpus::dir`].
pub struct Corpus {
    /// The directory holding everything (removed when dropped).
    pub dir: tempfile::TempDir,
    /// Sim SEV-SNP evidence bound to [`NONCE`].
    pub snp_evidence: PathBuf,
    /// Sim TDX evidence bound to [`NONCE`].
    pub tdx_evidence: PathBuf,
    /// The raw sim SEV-SNP report of `snp_evidence`.
    pub snp_report: PathBuf,
    /// A directory with the sim chain of `snp_report` (`ark.pem`, `ask.pem`, `vcek.der`).
    pub snp_certs: PathBuf,
    /// The raw sim TDX quote of `tdx_evidence`.
    pub tdx_quote: PathBuf,
    /// A verdict as JSON (what `fenced-run run --json` prints).
    pub verdict_json: PathBuf,
    /// A PEM certificate (the sim ARK).
    pub pem_cert: PathBuf,
    /// Bytes of no known kind.
    pub garbage: PathBuf,
    /// An empty file.
    pub empty: PathBuf,
    /// The first 100 bytes of `snp_report`.
    pub truncated_report: PathBuf,
    /// The first half of `snp_evidence`.
    pub truncated_evidence: PathBuf,
    /// The first 300 bytes of `tdx_quote`.
    pub truncated_quote: PathBuf,
    /// `snp_report` as hex text.
    pub snp_report_hex: PathBuf,
    /// `tdx_quote` as base64 text.
    pub tdx_quote_base64: PathBuf,
    /// `snp_evidence` as base64 text.
    pub snp_evidence_base64: PathBuf,
    /// A path that does not exist.
    pub missing: PathBuf,
}

fn key(label: &str) -> p384::ecdsa::SigningKey {
    p384::ecdsa::SigningKey::from_slice(&Sha384::digest(label.as_bytes()))
        .expect("a SHA-384 digest is a P-384 scalar")
}

fn seal(tee: &dyn Tee, isolation: Isolation) -> (Vec<u8>, attestation::tee::RawEvidence) {
    let k = key("corpus guest");
    let nonce = hex::decode(NONCE).expect("hex");
    let rd = binding::report_data(&p384::PublicKey::from(k.verifying_key()), &nonce);
    let raw = tee.get_report(&rd).expect("sim report");
    let inputs = Inputs {
        nonce,
        ..Inputs::default()
    };
    let verdict = Verdict::new(Outcome::TestsPassed, isolation, inputs, "corpus");
    let ev = Evidence::seal(
        tee.label(),
        raw.report.clone(),
        raw.certs.clone(),
        raw.collateral.clone(),
        &k,
        &verdict,
    )
    .expect("seal");
    (ev.to_cbor().expect("cbor"), raw)
}

fn pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).expect("ascii"));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

impl Corpus {
    /// Builds the corpus in a fresh temporary directory (under `TMPDIR`).
    pub fn new() -> Corpus {
        let dir = tempfile::Builder::new()
            .prefix("cli-corpus-")
            .tempdir()
            .expect("corpus dir");
        let d = dir.path();
        let psp = SimPsp::new(&d.join("psp-state"), Product::Milan).expect("sim psp");
        let snp_tee = SimSnpTee::new(psp, [0x11; 48]);
        let (snp_ev, snp_raw) = seal(&snp_tee, Isolation::Process);
        let qe = SimQe::new(&d.join("qe-state")).expect("sim qe");
        let tdx_tee = SimTdxTee::new(
            qe,
            SimTd {
                mrtd: [0x3c; 48],
                ..SimTd::default()
            },
        );
        let (tdx_ev, tdx_raw) = seal(&tdx_tee, Isolation::Vm);
        let w = |name: &str, bytes: &[u8]| -> PathBuf {
            let p = d.join(name);
            fs::write(&p, bytes).expect("write corpus file");
            p
        };
        let certs = d.join("certs");
        fs::create_dir(&certs).expect("certs dir");
        if let [vcek, ask, ark] = snp_raw.certs.as_slice() {
            fs::write(certs.join("vcek.der"), vcek).expect("vcek");
            fs::write(certs.join("ask.pem"), pem(ask)).expect("ask");
            fs::write(certs.join("ark.pem"), pem(ark)).expect("ark");
        }
        let verdict = Verdict::new(
            Outcome::TestsPassed,
            Isolation::Process,
            Inputs::default(),
            "corpus",
        );
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        Corpus {
            snp_evidence: w("snp.evidence", &snp_ev),
            tdx_evidence: w("tdx.evidence", &tdx_ev),
            snp_report: w("report.bin", &snp_raw.report),
            snp_certs: certs,
            tdx_quote: w("quote.bin", &tdx_raw.report),
            verdict_json: w("verdict.json", verdict.to_json_pretty().as_bytes()),
            pem_cert: w(
                "ark.pem",
                pem(snp_raw.certs.last().expect("ark")).as_bytes(),
            ),
            garbage: w(
                "garbage.bin",
                b"\x00\x01\x02 definitely not attestation \xff\xfe",
            ),
            empty: w("empty", b""),
            truncated_report: w("report-truncated.bin", &snp_raw.report[..100]),
            truncated_evidence: w("truncated.evidence", &snp_ev[..snp_ev.len() / 2]),
            truncated_quote: w("quote-truncated.bin", &tdx_raw.report[..300]),
            snp_report_hex: w("report.hex", hex::encode(&snp_raw.report).as_bytes()),
            tdx_quote_base64: w(
                "quote.b64",
                format!("{}\n", b64(&tdx_raw.report)).as_bytes(),
            ),
            snp_evidence_base64: w("snp.evidence.b64", b64(&snp_ev).as_bytes()),
            missing: d.join("no-such-file"),
            dir,
        }
    }

    /// The corpus directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A scratch directory inside the corpus for runs' `TMPDIR`.
    pub fn tmp(&self) -> PathBuf {
        let t = self.path().join("tmp");
        fs::create_dir_all(&t).expect("tmp");
        t
    }
}

impl Default for Corpus {
    fn default() -> Self {
        Corpus::new()
    }
}

/// A path as `&str` (the corpus lives under a UTF-8 temporary directory).
pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The Rust `Debug` patterns no user-facing message may contain.
pub const DEBUG_PATTERNS: &[&str] = &[
    "Some(",
    "None,",
    "Error {",
    "kind:",
    "UnexpectedTag",
    "Der(",
    "Os {",
    "Custom {",
];

/// The Debug patterns found in `text`, if any.
pub fn debug_text_in(text: &str) -> Vec<&'static str> {
    DEBUG_PATTERNS
        .iter()
        .copied()
        .filter(|p| text.contains(p))
        .collect()
}
