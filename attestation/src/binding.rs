//! The key binding: report_data = SHA-512("fenced-run/v1/key-binding" || SEC1(key) || nonce).
