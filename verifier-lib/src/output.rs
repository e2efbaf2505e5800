//! The JSON object and the aligned human table that `verify-attestation` prints.
