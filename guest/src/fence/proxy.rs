//! The egress proxy of the install phase: allowlist, own resolution, address policy, egress log.
