//! "Which launch configuration produces this measurement?" (`measure-guest explain`): reads the measurement of
//! an evidence file, a raw SEV-SNP report or a TDX quote, and searches the launch parameters that decide an SNP
//! launch digest (OVMF build, kernel hashes on/off, command line variant, VMM, vCPU type, guest features, vCPU
//! count), or compares TDX MRTD per OVMF and RTMR1/RTMR2 per event.
//!
//! The SNP search is a tree over the digest chain: each OVMF's pages are hashed once, the state after the OVMF
//! and metadata pages is computed once per (OVMF, kernel hashes, VMM), and each vCPU count only adds one VMSA
//! update to the state of the count below it, so the whole search costs about one SHA-384 of 112 bytes per
//! configuration.

use std::time::Instant;

use attestation::evidence::Evidence;
use attestation::snp::AttestationReport;
use attestation::tdx::Quote;
use sha2::{Digest, Sha256, Sha384};

use crate::snp::{self, KernelHashes, LaunchDigest, Ovmf, SnpConfig, VmmType};

/// The measurement an input file carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Measured {
    /// An SEV-SNP launch digest, with the report it came from.
    Snp {
        /// MEASUREMENT.
        measurement: LaunchDigest,
        /// The parsed report, when it parses (CPUID family/model/stepping of v3+ reports hint at the vCPU type).
        report: Option<Box<AttestationReport>>,
    },
    /// A TDX quote's measurement registers.
    Tdx {
        /// MRTD.
        mrtd: [u8; 48],
        /// RTMR0-3.
        rtmr: [[u8; 48]; 4],
    },
}

/// What the input file was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InputKind {
    /// A fenced-run evidence file (CBOR).
    Evidence,
    /// A raw 1184-byte SEV-SNP ATTESTATION_REPORT.
    SnpReport,
    /// A TDX DCAP quote.
    TdxQuote,
}

impl InputKind {
    /// How the CLI names it.
    pub fn name(self) -> &'static str {
        match self {
            InputKind::Evidence => "fenced-run evidence",
            InputKind::SnpReport => "SEV-SNP report",
            InputKind::TdxQuote => "TDX quote",
        }
    }
}

/// Why the input gives no measurement.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExplainError {
    /// None of the three formats.
    #[error("neither fenced-run evidence ({evidence}), nor a {len}-byte SEV-SNP report (1184 bytes), nor a TDX quote ({quote})")]
    Unrecognised {
        /// Why it is not evidence.
        evidence: String,
        /// Its length.
        len: usize,
        /// Why it is not a quote.
        quote: String,
    },
    /// Evidence whose report does not parse.
    #[error("evidence's {tee} report: {why}")]
    EvidenceReport {
        /// The evidence's TEE label.
        tee: String,
        /// What is wrong.
        why: String,
    },
}

fn snp_from_report(bytes: &[u8]) -> Option<Measured> {
    let measurement: LaunchDigest = bytes.get(0x90..0xC0)?.try_into().ok()?;
    let report = AttestationReport::from_bytes(bytes).ok().map(Box::new);
    Some(Measured::Snp {
        measurement,
        report,
    })
}

fn tdx_from_quote(bytes: &[u8]) -> Result<Measured, attestation::tdx::QuoteError> {
    let q = Quote::parse(bytes)?;
    let b = q.body.td10();
    Ok(Measured::Tdx {
        mrtd: b.mrtd,
        rtmr: b.rtmr,
    })
}

/// Reads the measurement from evidence (CBOR), a raw SNP report (exactly 1184 bytes) or a TDX quote.
pub fn read_measured(bytes: &[u8]) -> Result<(InputKind, Measured), ExplainError> {
    let evidence = match Evidence::from_cbor(bytes) {
        Ok(ev) => {
            let bad = |why: String| ExplainError::EvidenceReport {
                tee: ev.tee.to_string(),
                why,
            };
            let m = if ev.tee.is_snp() {
                if ev.report.len() != attestation::snp::REPORT_LEN {
                    return Err(bad(format!("{} bytes, not 1184", ev.report.len())));
                }
                snp_from_report(&ev.report).ok_or_else(|| bad("too short".into()))?
            } else {
                tdx_from_quote(&ev.report).map_err(|e| bad(e.to_string()))?
            };
            return Ok((InputKind::Evidence, m));
        }
        Err(e) => e.to_string(),
    };
    if bytes.len() == attestation::snp::REPORT_LEN {
        if let Some(m) = snp_from_report(bytes) {
            return Ok((InputKind::SnpReport, m));
        }
    }
    match tdx_from_quote(bytes) {
        Ok(m) => Ok((InputKind::TdxQuote, m)),
        Err(quote) => Err(ExplainError::Unrecognised {
            evidence,
            len: bytes.len(),
            quote: quote.to_string(),
        }),
    }
}

/// A named vCPU signature to try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VcpuType {
    /// QEMU CPU model names with this signature (e.g. "EPYC-Milan").
    pub name: String,
    /// The CPUID signature.
    pub sig: u32,
}

/// The QEMU EPYC models with distinct signatures (sev-snp-measure's table, one name per signature).
pub fn default_vcpu_types() -> Vec<VcpuType> {
    [
        "EPYC-v4",
        "EPYC-Rome",
        "EPYC-Milan",
        "EPYC-Genoa",
        "EPYC-Turin",
    ]
    .iter()
    .map(|n| VcpuType {
        name: (*n).to_owned(),
        sig: match *n {
            // The sev crate's table has no Turin; sev-snp-measure's has family 26 model 0 stepping 0.
            "EPYC-Turin" => snp::vcpu_sig(26, 0, 0),
            _ => snp::vcpu_sig_for_type(n).unwrap_or(0),
        },
    })
    .filter(|t| t.sig != 0)
    .collect()
}

/// Guest features (SEV_FEATURES) to try: SNPActive alone, with DebugSwap (bit 5, which Linux KVM turns on where
/// the host supports it), with vTOM (bit 1) and with both.
pub const DEFAULT_GUEST_FEATURES: [u64; 4] = [0x1, 0x21, 0x3, 0x23];

/// The command-line variants tried for the image's command line `c`, each with a label: exactly as given; with a
/// trailing space; trimmed; without any `console=` argument; with `console=ttyS0` appended (when it has none);
/// with `console=ttyS0` and `console=hvc0` swapped; and empty. Duplicates are dropped (first label kept).
pub fn cmdline_variants(c: &str) -> Vec<(String, String)> {
    let words: Vec<&str> = c.split_whitespace().collect();
    let no_console: Vec<&str> = words
        .iter()
        .copied()
        .filter(|w| !w.starts_with("console="))
        .collect();
    let swapped: Vec<String> = words
        .iter()
        .map(|w| match *w {
            "console=ttyS0" => "console=hvc0".to_owned(),
            "console=hvc0" => "console=ttyS0".to_owned(),
            w => w.to_owned(),
        })
        .collect();
    let mut v: Vec<(String, String)> = vec![
        ("the image's command line".into(), c.to_owned()),
        ("with a trailing space".into(), format!("{c} ")),
        ("trimmed".into(), c.trim().to_owned()),
        ("without console=".into(), no_console.join(" ")),
    ];
    if !words.iter().any(|w| w.starts_with("console=")) {
        v.push((
            "with console=ttyS0 appended".into(),
            format!("{} console=ttyS0", c.trim_end())
                .trim_start()
                .to_owned(),
        ));
    }
    v.push((
        "with console=ttyS0 and console=hvc0 swapped".into(),
        swapped.join(" "),
    ));
    v.push(("empty".into(), String::new()));
    let mut seen = std::collections::HashSet::new();
    v.retain(|(_, s)| seen.insert(s.clone()));
    v
}

/// One OVMF build to try.
#[derive(Debug, Clone)]
pub struct OvmfCandidate {
    /// How to name it (its path).
    pub name: String,
    /// The parsed image.
    pub ovmf: Ovmf,
    /// SHA-256 of the image, hex (as manifests list OVMF builds).
    pub sha256: String,
}

impl OvmfCandidate {
    /// Wraps a parsed image.
    pub fn new(name: impl Into<String>, ovmf: Ovmf) -> Self {
        let sha256 = hex::encode(Sha256::digest(ovmf.data()));
        OvmfCandidate {
            name: name.into(),
            ovmf,
            sha256,
        }
    }
}

/// The SNP search space.
#[derive(Debug, Clone)]
pub struct SnpSpace {
    /// OVMF builds.
    pub ovmfs: Vec<OvmfCandidate>,
    /// SHA-256 of the kernel and of the initrd (their bytes are fixed: the image's).
    pub kernel_sha256: [u8; 32],
    /// SHA-256 of the initrd.
    pub initrd_sha256: [u8; 32],
    /// Command lines to try with kernel hashes on: (label, value).
    pub cmdlines: Vec<(String, String)>,
    /// Also try a launch without kernel hashes (firmware-only digest).
    pub without_kernel_hashes: bool,
    /// VMMs.
    pub vmms: Vec<VmmType>,
    /// vCPU types (QEMU only: EC2 and GCE put 0x600 in RDX whatever the type).
    pub vcpu_types: Vec<VcpuType>,
    /// Guest features.
    pub guest_features: Vec<u64>,
    /// vCPU counts 1..=max_vcpus.
    pub max_vcpus: u32,
}

impl SnpSpace {
    /// How many configurations the space holds (what a full search compares).
    pub fn size(&self) -> u64 {
        let kv = self.cmdlines.len() as u64 + u64::from(self.without_kernel_hashes);
        let per_vmm: u64 = self
            .vmms
            .iter()
            .map(|v| match v {
                VmmType::Qemu => self.vcpu_types.len() as u64,
                _ => 1,
            })
            .sum();
        self.ovmfs.len() as u64
            * kv
            * per_vmm
            * self.guest_features.len() as u64
            * u64::from(self.max_vcpus)
    }
}

/// A launch configuration of the search space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnpLaunch {
    /// The OVMF's name (path).
    pub ovmf: String,
    /// The OVMF's SHA-256, hex.
    pub ovmf_sha256: String,
    /// Kernel hashes: `None` without (`kernel-hashes=off`), else the command line's label and value.
    pub cmdline: Option<(String, String)>,
    /// The VMM.
    pub vmm: VmmType,
    /// The vCPU type (`None` for EC2/GCE, where it does not enter the digest).
    pub vcpu_type: Option<VcpuType>,
    /// SEV_FEATURES.
    pub guest_features: u64,
    /// vCPU count.
    pub vcpus: u32,
}

/// What a search found.
#[derive(Debug, Clone, Default)]
pub struct SnpOutcome {
    /// Every configuration whose digest is the measurement.
    pub matches: Vec<SnpLaunch>,
    /// Configurations compared.
    pub compared: u64,
    /// Whether the time bound stopped the search before the end.
    pub timed_out: bool,
    /// Parts of the space that could not be measured (e.g. an OVMF that cannot measure a kernel), with why.
    pub unusable: Vec<String>,
}

/// Searches `space` for launches whose digest is `target`, stopping at `deadline`. `progress(done, total)` is
/// called after each (OVMF, kernel hashes, VMM) prefix with configurations compared so far.
pub fn search_snp(
    target: &LaunchDigest,
    space: &SnpSpace,
    deadline: Option<Instant>,
    progress: &mut dyn FnMut(u64, u64),
) -> SnpOutcome {
    let mut out = SnpOutcome::default();
    let total = space.size();
    let mut kernel_variants: Vec<Option<&(String, String)>> = Vec::new();
    if space.without_kernel_hashes {
        kernel_variants.push(None);
    }
    kernel_variants.extend(space.cmdlines.iter().map(Some));
    for cand in &space.ovmfs {
        let ovmf = &cand.ovmf;
        let ap_eip = match ovmf.sev_es_reset_eip() {
            Ok(e) => u64::from(e),
            Err(e) => {
                out.unusable.push(format!("OVMF {}: {e}", cand.name));
                continue;
            }
        };
        let ovmf_digest = snp::ovmf_hash(ovmf);
        for kv in &kernel_variants {
            let hashes = kv.map(|(_, c)| KernelHashes {
                cmdline: crate::sim::cmdline_sha256(c),
                initrd: space.initrd_sha256,
                kernel: space.kernel_sha256,
            });
            for &vmm in &space.vmms {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    out.timed_out = true;
                    return out;
                }
                let prefix = match snp::launch_prefix(ovmf, &ovmf_digest, hashes.as_ref(), vmm) {
                    Ok(g) => g,
                    Err(e) => {
                        let m = format!("OVMF {}: {e}", cand.name);
                        if !out.unusable.contains(&m) {
                            out.unusable.push(m);
                        }
                        break;
                    }
                };
                let types: Vec<Option<&VcpuType>> = match vmm {
                    VmmType::Qemu => space.vcpu_types.iter().map(Some).collect(),
                    _ => vec![None],
                };
                for t in types {
                    for &features in &space.guest_features {
                        let cfg = SnpConfig {
                            vcpus: 1,
                            vcpu_sig: t.map_or(0, |t| t.sig),
                            guest_features: features,
                            vmm,
                            ovmf_hash: None,
                        };
                        let bsp: [u8; 48] =
                            Sha384::digest(&snp::vmsa_page(snp::BSP_RESET_EIP, &cfg)[..]).into();
                        let ap: [u8; 48] = Sha384::digest(&snp::vmsa_page(ap_eip, &cfg)[..]).into();
                        let mut g = prefix;
                        for n in 1..=space.max_vcpus {
                            if n > 1 && ap_eip == 0 {
                                break;
                            }
                            g.update_vmsa_hash(if n == 1 { &bsp } else { &ap });
                            out.compared += 1;
                            if g.ld() == *target {
                                out.matches.push(SnpLaunch {
                                    ovmf: cand.name.clone(),
                                    ovmf_sha256: cand.sha256.clone(),
                                    cmdline: kv.cloned(),
                                    vmm,
                                    vcpu_type: t.cloned(),
                                    guest_features: features,
                                    vcpus: n,
                                });
                            }
                        }
                    }
                }
                progress(out.compared, total);
            }
        }
    }
    out
}

/// The launch parameters an image's manifest expects (its `sev_snp` entries: QEMU, kernel hashes on, the
/// manifest's command line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedSnp {
    /// OVMF SHA-256, hex.
    pub ovmf_sha256: String,
    /// vCPU count.
    pub vcpus: u32,
    /// vCPU type name.
    pub vcpu_type: String,
    /// Guest features.
    pub guest_features: u64,
}

/// The parameters in which `found` differs from `expected` (empty when it is the expected launch), each as
/// "parameter: found X, expected Y".
pub fn differences(found: &SnpLaunch, expected: &ExpectedSnp) -> Vec<String> {
    let mut d = Vec::new();
    if found.ovmf_sha256 != expected.ovmf_sha256 {
        d.push(format!(
            "OVMF: {} (sha256 {}), the manifest's has sha256 {}",
            found.ovmf, found.ovmf_sha256, expected.ovmf_sha256
        ));
    }
    match &found.cmdline {
        None => d.push(
            "kernel hashes: off (firmware-only digest), the image boots with kernel-hashes=on"
                .into(),
        ),
        Some((label, value)) if label != "the image's command line" => d.push(format!(
            "command line: {label} ({value:?}), not the manifest's exactly"
        )),
        Some(_) => {}
    }
    if found.vmm != VmmType::Qemu {
        d.push(format!(
            "VMM: {}, the manifest's digests are for QEMU",
            found.vmm
        ));
    }
    let expected_sig = snp::vcpu_sig_for_type(&expected.vcpu_type)
        .or_else(|| (expected.vcpu_type == "EPYC-Turin").then(|| snp::vcpu_sig(26, 0, 0)));
    match &found.vcpu_type {
        Some(t) if Some(t.sig) != expected_sig => d.push(format!(
            "vCPU type: {} (signature {:#x}), expected {}",
            t.name, t.sig, expected.vcpu_type
        )),
        _ => {}
    }
    if found.guest_features != expected.guest_features {
        d.push(format!(
            "guest features: {:#x}, expected {:#x}",
            found.guest_features, expected.guest_features
        ));
    }
    if found.vcpus != expected.vcpus {
        d.push(format!(
            "vCPUs: {}, expected {}",
            found.vcpus, expected.vcpus
        ));
    }
    d
}

/// The expected entry `found` is closest to (fewest differing parameters), with the differences.
pub fn nearest_expected<'a>(
    found: &SnpLaunch,
    expected: &'a [ExpectedSnp],
) -> Option<(&'a ExpectedSnp, Vec<String>)> {
    expected
        .iter()
        .map(|e| (e, differences(found, e)))
        .min_by_key(|(_, d)| d.len())
}

/// One event of a TDX RTMR comparison that differs from the image's expectation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDifference {
    /// RTMR index (1 or 2).
    pub rtmr: usize,
    /// Position among that RTMR's events (0-based).
    pub index: usize,
    /// The logged event's offset in the log, type name and digest (hex); `None` when the log has fewer events.
    pub logged: Option<(usize, &'static str, String)>,
    /// The expected event's description and digest (hex); `None` when the manifest lists fewer events.
    pub expected: Option<(String, String)>,
    /// Why it differs, when known (e.g. QEMU's kernel-header patch).
    pub why: String,
}

/// Compares the RTMR1/RTMR2 events of a replayed log with the manifest's expected direct-boot events, returning
/// the first difference of each RTMR. `rtmr1_qemu_10_1` (the manifest's RTMR1 under QEMU 10.1) explains a
/// differing kernel event when the log's RTMR1 equals it.
pub fn compare_rtmr_events(
    replay: &crate::tdx::Replay,
    expected: &[crate::manifest::RtmrEvent],
    rtmr1_qemu_10_1: Option<&str>,
) -> Vec<EventDifference> {
    let mut out = Vec::new();
    for r in [1usize, 2] {
        let logged: Vec<&crate::tdx::Event> = replay
            .events
            .iter()
            .filter(|e| e.rtmr == Some(r) && e.sha384.is_some())
            .collect();
        let want: Vec<&crate::manifest::RtmrEvent> = expected
            .iter()
            .filter(|e| usize::from(e.rtmr) == r)
            .collect();
        for i in 0..logged.len().max(want.len()) {
            let l = logged.get(i).map(|e| {
                (
                    e.offset,
                    e.type_name(),
                    e.sha384.map(hex::encode).unwrap_or_default(),
                )
            });
            let w = want
                .get(i)
                .map(|e| (e.what.clone(), e.digest.to_ascii_lowercase()));
            let same = matches!((&l, &w), (Some(l), Some(w)) if l.2 == w.1);
            if same {
                continue;
            }
            let why = match (&l, &w) {
                (Some(_), None) => "the log has more events than a direct boot of the image".to_owned(),
                (None, Some(_)) => "the log ends before this event".to_owned(),
                (Some(_), Some((what, _)))
                    if r == 1
                        && what.contains("Authenticode")
                        && rtmr1_qemu_10_1
                            .is_some_and(|v| v.eq_ignore_ascii_case(&hex::encode(replay.rtmrs[1]))) =>
                {
                    "the log's RTMR1 is the image's under QEMU 10.1: QEMU before 10.2 patches the kernel's setup header before TDVF measures it".to_owned()
                }
                _ => "a different digest: the measured bytes differ (another kernel, initramfs, command line or boot path)".to_owned(),
            };
            out.push(EventDifference {
                rtmr: r,
                index: i,
                logged: l,
                expected: w,
                why,
            });
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_variants_are_distinct_and_start_with_the_given_one() {
        let v = cmdline_variants("console=ttyS0 quiet");
        assert_eq!(v[0].1, "console=ttyS0 quiet");
        let values: Vec<&str> = v.iter().map(|(_, s)| s.as_str()).collect();
        assert!(values.contains(&"console=ttyS0 quiet "));
        assert!(values.contains(&"quiet"));
        assert!(values.contains(&"console=hvc0 quiet"));
        assert!(values.contains(&""));
        let mut u = values.clone();
        u.sort();
        u.dedup();
        assert_eq!(u.len(), values.len());
        let w = cmdline_variants("quiet");
        assert!(w.iter().any(|(_, s)| s == "quiet console=ttyS0"));
    }

    #[test]
    fn garbage_is_not_a_measurement() {
        let e = read_measured(b"not evidence").expect_err("must refuse");
        assert!(e.to_string().contains("12-byte"), "{e}");
        // Any 1184 bytes are read as a report (the measurement is at 0x90).
        let mut r = vec![0u8; 1184];
        r[0x90] = 7;
        match read_measured(&r).expect("report") {
            (InputKind::SnpReport, Measured::Snp { measurement, .. }) => {
                assert_eq!(measurement[0], 7)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn default_types_have_distinct_signatures() {
        let t = default_vcpu_types();
        assert_eq!(t.len(), 5, "{t:?}");
        let mut s: Vec<u32> = t.iter().map(|t| t.sig).collect();
        s.sort();
        s.dedup();
        assert_eq!(s.len(), 5);
    }
}
