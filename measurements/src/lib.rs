//! Expected launch measurements (SEV-SNP launch digest, TDX MRTD and RTMR replay) and auditor-signed
//! measurement sets.
