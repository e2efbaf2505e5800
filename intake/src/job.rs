//! The job file (DESIGN.md "Contracts/Job file") and its one loader, which live in [`job_policy::job`] so that
//! the fence and its egress proxy share them without depending on intake; re-exported here under intake's
//! own path (`intake::job::Job::load`), since stage 3 is where a bundle's job file is judged.

pub use job_policy::job::*;
