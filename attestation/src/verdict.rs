//! The verdict (run document) of DESIGN.md, in CBOR and JSON.
