//! Verification of a fenced-run evidence bundle: report, key binding, COSE signature, nonce, measurement.
