//! The accepted bundle: intake's one result, with the job parsed once from intake's copy, its hash that of the
//! job file's bytes, and intake's work directory owned by it.

use sha2::Digest;
use std::fs;

#[test]
fn an_accepted_directory_bundle_becomes_one_value() {
    let d = tempfile::tempdir().expect("tmp");
    let bundle = d.path().join("bundle");
    fs::create_dir_all(bundle.join("repo")).expect("mkdir");
    fs::write(bundle.join("repo/README"), "x\n").expect("write");
    let job = b"[repository]\npath = \"repo\"\n[test]\ncommand = \"true\"\n";
    fs::write(bundle.join("job.toml"), job).expect("write");
    let work = d.path().join("work");
    fs::create_dir(&work).expect("mkdir");
    let report = intake::run_stages(
        &bundle,
        &intake::IntakeOptions::default().with_work_parent(&work),
    );
    assert!(report.accepted, "{:?}", report.refusal);
    let mut accepted = report.into_accepted().expect("accepted");
    assert_eq!(
        accepted.job_sha256(),
        hex::encode(sha2::Sha256::digest(job)),
        "the hash of the bytes intake read"
    );
    // The job was parsed from intake's copy: its paths resolve there, not in the upload.
    assert_eq!(accepted.job.base_dir, accepted.root);
    assert!(accepted.root.starts_with(&work));
    let repo = accepted.repository_dir.clone().expect("repository");
    assert_eq!(repo, accepted.root.join("repo"));
    assert_eq!(fs::read(repo.join("README")).expect("copy"), b"x\n");
    let wd = accepted.work_dir().expect("work dir").to_path_buf();
    accepted.cleanup().expect("cleanup");
    assert!(!wd.exists());
}

#[test]
fn a_refused_bundle_keeps_the_hash_of_the_job_file_it_read() {
    let d = tempfile::tempdir().expect("tmp");
    let bundle = d.path().join("bundle");
    fs::create_dir(&bundle).expect("mkdir");
    let job = b"[repository]\npath = \"repo\"\nunknown = 1\n";
    fs::write(bundle.join("job.toml"), job).expect("write");
    let work = d.path().join("work");
    fs::create_dir(&work).expect("mkdir");
    let report = intake::run_stages(
        &bundle,
        &intake::IntakeOptions::default().with_work_parent(&work),
    );
    assert!(!report.accepted);
    assert_eq!(
        report.refusal.as_ref().map(|r| r.stage),
        Some(intake::Stage::Structure)
    );
    assert_eq!(
        report.job_sha256.as_deref(),
        Some(hex::encode(sha2::Sha256::digest(job)).as_str())
    );
    assert!(report.into_accepted().is_err());
}
