//! Shared helpers of the SEV-SNP tests: locating the real vectors (skip or require) and reading expected.json.

#![allow(dead_code)]

use attestation::snp::SigningKey;
use std::path::{Path, PathBuf};

/// The `snp` vectors directory, or `None` (after printing "skipped: ...") when absent and not required.
pub fn snp_vectors() -> Option<PathBuf> {
    attestation::vectors::dir("snp")
}

/// One report vector folder.
pub struct Vector {
    /// Folder name.
    pub name: String,
    /// Folder path.
    pub dir: PathBuf,
    /// report.bin bytes.
    pub report: Vec<u8>,
    /// expected.json.
    pub expected: serde_json::Value,
}

impl Vector {
    /// The signing key expected.json names.
    pub fn signing_key(&self) -> SigningKey {
        match self.expected["signing_key"].as_str() {
            Some("VLEK") => SigningKey::Vlek,
            _ => SigningKey::Vcek,
        }
    }

    /// A time inside the leaf's validity: one day after its not_before.
    pub fn at(&self) -> time::OffsetDateTime {
        at_inside(&self.expected)
    }

    /// Whether this is a synthetic negative.
    pub fn is_negative(&self) -> bool {
        self.expected.get("negative").is_some()
    }
}

/// One day after `key_cert.not_before` of an expected.json.
pub fn at_inside(expected: &serde_json::Value) -> time::OffsetDateTime {
    let nb = expected["key_cert"]["not_before"]
        .as_str()
        .expect("not_before");
    time::OffsetDateTime::parse(nb, &time::format_description::well_known::Rfc3339)
        .expect("rfc3339")
        + time::Duration::days(1)
}

/// Every folder that holds a report.bin, sorted by name.
pub fn report_vectors(snp: &Path) -> Vec<Vector> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(snp).expect("read vectors") {
        let dir = entry.expect("entry").path();
        let rp = dir.join("report.bin");
        if !rp.is_file() {
            continue;
        }
        let expected: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.join("expected.json")).expect("expected.json"),
        )
        .expect("json");
        out.push(Vector {
            name: dir
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned(),
            report: std::fs::read(&rp).expect("report"),
            dir,
            expected,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}
