//! Intake stages 1-5 (receive, unpack, structure, normalise, scan). Nothing reachable from here spawns a
//! process or loads code; a test (`tests/no_exec.rs`) walks the code to keep it so.
//! Also home of the job-file loader ([`job`]) and the address policy ([`addr`]) that the fence and its
//! egress proxy share with intake.

pub mod addr;
pub mod job;
