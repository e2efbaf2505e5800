//! Evidence made from the real SEV-SNP reports and TDX quotes of `$FENCED_RUN_VECTORS` (never copied into the
//! repository), for the tests and the timing example that hold the browser's result to the native one: each
//! report sealed with a verdict signed by a key of the test's (so the key binding fails, as it must, and every
//! other claim is decided by the real data), and forged ones: a flipped signature byte, a changed measurement.

use crate::Request;
use attestation::evidence::{Evidence, TeeLabel};
use attestation::verdict::{Inputs, Isolation, Outcome, Verdict};
use base64::Engine as _;
use std::path::Path;
use verifier_lib::output::ClaimContext;
use verifier_lib::EvidenceOptions;

/// The nonce of every verdict sealed here.
pub const NONCE: [u8; 32] = [0x5a; 32];

/// One evidence to verify, with the request that pins it.
#[derive(Clone, Debug)]
pub struct Case {
    /// The vector's folder name, with `+flipped-signature-byte` or `+changed-measurement` for a forgery.
    pub name: String,
    /// The evidence (CBOR).
    pub evidence: Vec<u8>,
    /// The pins: the nonce, (SEV-SNP) the original report's measurement, the check time, the collateral.
    pub request: Request,
    /// A forgery: its report signature must fail.
    pub forged: bool,
}

/// The DER of every PEM block (or the bytes as they are when there is none).
fn der_of(bytes: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(bytes);
    if !text.contains("-----BEGIN") {
        return bytes.to_vec();
    }
    let body: String = text
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body.trim())
        .unwrap_or_default()
}

fn seal(tee: TeeLabel, report: Vec<u8>, certs: Vec<Vec<u8>>) -> Vec<u8> {
    use sha2::Digest as _;
    let key = p384::ecdsa::SigningKey::from_slice(&sha2::Sha384::digest(b"verifier-wasm vectors"))
        .expect("a P-384 scalar");
    let isolation = if tee.is_snp() {
        Isolation::SevSnp
    } else {
        Isolation::Tdx
    };
    let verdict = Verdict::new(
        Outcome::TestsPassed,
        isolation,
        Inputs {
            nonce: NONCE.to_vec(),
            ..Inputs::default()
        },
        "verifier-wasm vectors",
    );
    Evidence::seal(tee, report, certs, None, &key, &verdict)
        .and_then(|e| e.to_cbor())
        .expect("sealed evidence")
}

fn read(p: &Path) -> Option<Vec<u8>> {
    std::fs::read(p).ok()
}

fn sorted_dirs(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// SEV-SNP: the report at 0x90..0xC0 is the measurement, 0x2A0 the first byte of R.
const SNP_MEASUREMENT: usize = 0x90;
const SNP_SIGNATURE: usize = 0x2A0;
/// TDX v4: header 48 bytes, MRTD at body offset 136, the quote signature after the 584-byte body and its length.
const TDX_MRTD: usize = 48 + 136;
const TDX_SIGNATURE: usize = 48 + 584 + 4;

/// Every case under `root` (`snp/*/report.bin`, `tdx/*/quote.bin`), the forgeries of the first SEV-SNP report
/// and of `tdx/dcapqvl-v4-b0c06f-uptodate` included; `at` is the check time for SEV-SNP (TDX uses the vector's
/// own reference time, when its `expected.json` has one).
pub fn cases(root: &Path, at: time::OffsetDateTime) -> Vec<Case> {
    let mut out = Vec::new();
    let mut forged_snp = false;
    for dir in sorted_dirs(&root.join("snp")) {
        let Some(report) = read(&dir.join("report.bin")) else {
            continue;
        };
        let leaf = read(&dir.join("vcek.der")).or_else(|| read(&dir.join("vlek.der")));
        let inter = read(&dir.join("ask.pem")).or_else(|| read(&dir.join("asvk.pem")));
        let ark = read(&dir.join("ark.pem"));
        let certs = match (leaf, inter, ark) {
            (Some(l), Some(i), Some(a)) => vec![der_of(&l), der_of(&i), der_of(&a)],
            _ => Vec::new(),
        };
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut opts = EvidenceOptions {
            nonce: Some(NONCE.to_vec()),
            ..EvidenceOptions::default()
        };
        opts.chain.at = at;
        if let Some(m) = report.get(SNP_MEASUREMENT..SNP_MEASUREMENT + 48) {
            let mut pin = [0u8; 48];
            pin.copy_from_slice(m);
            opts.policy.measurements = vec![attestation::hex::Hex(pin)];
        }
        let request = Request::from_options(&opts, &ClaimContext::default());
        let mut push = |suffix: &str, report: Vec<u8>, forged: bool| {
            out.push(Case {
                name: format!("snp/{name}{suffix}"),
                evidence: seal(TeeLabel::SevSnp, report, certs.clone()),
                request: request.clone(),
                forged,
            })
        };
        push("", report.clone(), false);
        if !forged_snp && !name.contains("neg") && report.len() > SNP_SIGNATURE {
            forged_snp = true;
            let mut r = report.clone();
            r[SNP_SIGNATURE] ^= 0x01;
            push("+flipped-signature-byte", r, true);
            let mut r = report.clone();
            r[SNP_MEASUREMENT] ^= 0x01;
            push("+changed-measurement", r, true);
        }
    }
    for dir in sorted_dirs(&root.join("tdx")) {
        let Some(quote) = read(&dir.join("quote.bin")) else {
            continue;
        };
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let expected: serde_json::Value = read(&dir.join("expected.json"))
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let mut opts = EvidenceOptions {
            nonce: Some(NONCE.to_vec()),
            any_measurement: true,
            tdx_collateral: read(&dir.join("collateral.json")),
            ..EvidenceOptions::default()
        };
        opts.chain.at = expected["reference_time_unix"]
            .as_i64()
            .and_then(|t| time::OffsetDateTime::from_unix_timestamp(t).ok())
            .unwrap_or(at);
        let request = Request::from_options(&opts, &ClaimContext::default());
        let mut push = |suffix: &str, quote: Vec<u8>, forged: bool| {
            out.push(Case {
                name: format!("tdx/{name}{suffix}"),
                evidence: seal(TeeLabel::Tdx, quote, Vec::new()),
                request: request.clone(),
                forged,
            })
        };
        push("", quote.clone(), false);
        if name == "dcapqvl-v4-b0c06f-uptodate" && quote.len() > TDX_SIGNATURE {
            let mut q = quote.clone();
            q[TDX_SIGNATURE] ^= 0x01;
            push("+flipped-signature-byte", q, true);
            let mut q = quote.clone();
            q[TDX_MRTD] ^= 0x01;
            push("+changed-measurement", q, true);
        }
    }
    out
}

/// One real SEV-SNP case and one real TDX case (with collateral), for timing: (name, evidence, request).
pub fn bench_cases(root: &Path) -> Vec<(String, Vec<u8>, Request)> {
    cases(root, time::OffsetDateTime::now_utc())
        .into_iter()
        .filter(|c| {
            c.name == "snp/milan-v2-virtee-sev" || c.name == "tdx/dcapqvl-v4-b0c06f-uptodate"
        })
        .map(|c| (c.name, c.evidence, c.request))
        .collect()
}
