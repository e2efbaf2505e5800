//! Expected launch measurements (SEV-SNP launch digest, TDX MRTD and RTMR replay) and auditor-signed
//! measurement sets. Everything here is computed from the artifacts alone, so that an auditor can rebuild
//! a guest image and obtain, independently of any host, the values a genuine launch must report.

pub mod explain;
pub mod identity;
pub mod manifest;
pub mod pe;
pub mod set;
pub mod sim;
pub mod snp;
pub mod snp_modes;
pub mod tdx;
pub mod tdx_boot;
