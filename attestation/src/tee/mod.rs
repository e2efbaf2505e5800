//! The `Tee` trait and its backends: configfs-tsm, /dev/sev-guest, /dev/tdx_guest, and sim.
