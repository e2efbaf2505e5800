//! The evidence bundle of DESIGN.md: CBOR map carrying report, certificates, COSE_Key and the COSE_Sign1 verdict.
