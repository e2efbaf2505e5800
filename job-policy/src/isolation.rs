//! The isolation tiers of DESIGN.md, as one enum: the verdict records it, intake's stage 4 judges a job's
//! resources against it, and the fence runs in it.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The isolation tier a run uses (DESIGN.md "Isolation tiers"); serialised by its contract name. Exhaustive
/// on purpose: DESIGN.md fixes the tiers, and a new one must be handled wherever a tier is matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Isolation {
    /// AMD SEV-SNP confidential VM.
    #[serde(rename = "sev-snp")]
    SevSnp,
    /// Intel TDX trust domain.
    #[serde(rename = "tdx")]
    Tdx,
    /// A plain KVM or TCG VM with the same guest image (sim attestation).
    #[serde(rename = "vm")]
    Vm,
    /// Linux namespaces on the host with the same fence code (sim attestation).
    #[serde(rename = "process")]
    Process,
}

impl Isolation {
    /// All four tiers, most isolated first.
    pub const ALL: [Isolation; 4] = [
        Isolation::SevSnp,
        Isolation::Tdx,
        Isolation::Vm,
        Isolation::Process,
    ];

    /// The contract name (`sev-snp`, `tdx`, `vm`, `process`).
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::SevSnp => "sev-snp",
            Isolation::Tdx => "tdx",
            Isolation::Vm => "vm",
            Isolation::Process => "process",
        }
    }

    /// The contract name; the same as [`Isolation::as_str`] (intake's callers name it so).
    pub fn name(self) -> &'static str {
        self.as_str()
    }
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
