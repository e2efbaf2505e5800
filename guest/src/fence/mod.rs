//! The fence: two phases (install behind an allowlisting proxy, then tests with no network), limits, teardown,
//! outcome classification.

pub mod cgroup;
pub mod classify;
pub mod counts;
pub mod fetch;
pub mod forwarder;
pub mod gitdir;
pub mod helper;
pub mod home;
pub mod input;
pub mod protect;
pub mod proxy;
pub mod repo;
pub mod run;
pub mod rundir;
pub mod seccomp;
pub mod spec;
pub mod sys;
pub mod test_time;
pub mod toolchain_pins;
