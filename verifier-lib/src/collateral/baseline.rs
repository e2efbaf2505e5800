//! The SEV-SNP TCB baseline (`--tcb-baseline FILE`): a versioned TOML file of per-product minimum TCB
//! components (boot loader, TEE, SNP firmware, microcode, and FMC on Turin), each floor naming the AMD
//! security bulletin it comes from and whether it was verified at AMD's page. The check says, per component,
//! how far below the baseline a report's TCB is and which bulletin sets the floor.

use attestation::snp::{Product, TcbParts};
use serde::{Deserialize, Serialize};

/// Marker of the file format.
pub const BASELINE_FORMAT: &str = "fenced-run-snp-tcb-baseline-v1";
/// The baseline shipped with this verifier (`verifier-lib/data/snp-tcb-baseline.toml`), for `builtin`.
pub const BUILTIN: &str = include_str!("../../data/snp-tcb-baseline.toml");

/// One floor: the minimum components one bulletin requires on one product.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Floor {
    /// Milan, Genoa or Turin.
    pub product: String,
    /// The bulletin, `AMD-SB-NNNN`.
    pub bulletin: String,
    /// CVEs the bulletin covers.
    #[serde(default)]
    pub cves: Vec<String>,
    /// A few words on the bulletin.
    #[serde(default)]
    pub title: String,
    /// Minimum boot loader SVN.
    #[serde(default)]
    pub bootloader: Option<u8>,
    /// Minimum TEE SVN.
    #[serde(default)]
    pub tee: Option<u8>,
    /// Minimum SNP firmware SVN.
    #[serde(default)]
    pub snp: Option<u8>,
    /// Minimum microcode SVN.
    #[serde(default)]
    pub microcode: Option<u8>,
    /// Minimum FMC SVN (Turin).
    #[serde(default)]
    pub fmc: Option<u8>,
    /// Whether the values were checked on AMD's bulletin page itself.
    pub verified_at_source: bool,
    /// Where the values were read.
    #[serde(default)]
    pub source: String,
}

/// The baseline file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    /// Always [`BASELINE_FORMAT`].
    pub format: String,
    /// The data version.
    pub version: String,
    /// The floors.
    #[serde(default, rename = "floor")]
    pub floors: Vec<Floor>,
}

/// One component below the baseline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shortfall {
    /// `bootloader`, `tee`, `snp`, `microcode` or `fmc`.
    pub component: &'static str,
    /// The report's value.
    pub seen: u8,
    /// The floor.
    pub minimum: u8,
    /// `minimum - seen`.
    pub below_by: u8,
    /// The bulletin(s) setting the highest floor for this component (comma-separated when several agree).
    pub bulletin: String,
    /// Whether that floor was verified at AMD's page.
    pub verified_at_source: bool,
}

impl Shortfall {
    /// One line for humans.
    pub fn describe(&self) -> String {
        format!(
            "{} {} is {} below the baseline {} ({}{})",
            self.component,
            self.seen,
            self.below_by,
            self.minimum,
            self.bulletin,
            if self.verified_at_source {
                ""
            } else {
                ", floor not verified at AMD's page"
            }
        )
    }
}

/// Why a TCB baseline could not be had; the text names the file (or `builtin`) and what is wrong in it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BaselineError {
    /// The file could not be read.
    #[error("--tcb-baseline: {0}")]
    Read(String),
    /// The file is not UTF-8.
    #[error("{path}: not UTF-8")]
    NotUtf8 {
        /// The file.
        path: String,
    },
    /// The text is not a valid baseline: not TOML, another format, an unknown product, a floor that cites no
    /// AMD bulletin, an FMC floor on a product without one (the text names the file and the floor).
    #[error("{0}")]
    Invalid(String),
}

impl Baseline {
    /// Parses a baseline file's text; `what` names it in errors.
    pub fn from_toml(text: &str, what: &str) -> Result<Baseline, BaselineError> {
        Baseline::parse(text, what).map_err(BaselineError::Invalid)
    }

    fn parse(text: &str, what: &str) -> Result<Baseline, String> {
        let b: Baseline = toml::from_str(text).map_err(|e| format!("{what}: {}", e.message()))?;
        if b.format != BASELINE_FORMAT {
            return Err(format!(
                "{what}: format is {:?}, expected {BASELINE_FORMAT:?}",
                b.format
            ));
        }
        for (i, f) in b.floors.iter().enumerate() {
            if Product::from_name(&f.product).is_none() {
                return Err(format!(
                    "{what}: floor {} names product {:?} (Milan, Genoa, Turin)",
                    i + 1,
                    f.product
                ));
            }
            if !f.bulletin.starts_with("AMD-SB-") {
                return Err(format!(
                    "{what}: floor {} cites {:?}, not an AMD-SB-NNNN bulletin",
                    i + 1,
                    f.bulletin
                ));
            }
            if f.fmc.is_some() && Product::from_name(&f.product) != Some(Product::Turin) {
                return Err(format!(
                    "{what}: floor {} sets fmc on {}, which has no FMC",
                    i + 1,
                    f.product
                ));
            }
        }
        Ok(b)
    }

    /// The baseline compiled into this verifier.
    pub fn builtin() -> Result<Baseline, BaselineError> {
        Baseline::from_toml(BUILTIN, "builtin TCB baseline")
    }

    /// `builtin`, or a file.
    pub fn load(arg: &std::path::Path) -> Result<Baseline, BaselineError> {
        if arg.as_os_str() == "builtin" {
            return Baseline::builtin();
        }
        let bytes = attestation::cli_io::read_capped(arg, 1 << 20)
            .map_err(|e| BaselineError::Read(e.to_string()))?;
        let text = String::from_utf8(bytes).map_err(|_| BaselineError::NotUtf8 {
            path: arg.display().to_string(),
        })?;
        Baseline::from_toml(&text, &arg.display().to_string())
    }

    /// Every component of `tcb` below this baseline's floors for `product` (the highest floor per component).
    pub fn check(&self, product: Product, tcb: &TcbParts) -> Vec<Shortfall> {
        type Component = (&'static str, fn(&Floor) -> Option<u8>, Option<u8>);
        let comps: [Component; 5] = [
            ("bootloader", |f| f.bootloader, Some(tcb.bootloader)),
            ("tee", |f| f.tee, Some(tcb.tee)),
            ("snp", |f| f.snp, Some(tcb.snp)),
            ("microcode", |f| f.microcode, Some(tcb.microcode)),
            ("fmc", |f| f.fmc, tcb.fmc),
        ];
        let mut out = Vec::new();
        for (name, get, seen) in comps {
            let floors: Vec<(u8, &Floor)> = self
                .floors
                .iter()
                .filter(|f| Product::from_name(&f.product) == Some(product))
                .filter_map(|f| get(f).map(|m| (m, f)))
                .collect();
            let Some(min) = floors.iter().map(|(m, _)| *m).max() else {
                continue;
            };
            // Every bulletin that sets the highest floor is named (in file order); the floor counts as
            // verified when any of them was read at AMD's page.
            let top: Vec<&Floor> = floors
                .iter()
                .filter(|(m, _)| *m == min)
                .map(|(_, f)| *f)
                .collect();
            let seen = seen.unwrap_or(0);
            if seen < min {
                out.push(Shortfall {
                    component: name,
                    seen,
                    minimum: min,
                    below_by: min - seen,
                    bulletin: top
                        .iter()
                        .map(|f| f.bulletin.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    verified_at_source: top.iter().any(|f| f.verified_at_source),
                });
            }
        }
        out
    }
}
