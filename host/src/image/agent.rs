//! The static `guest-agent` of the image, linked from the same build as `fenced-run`: host's `fenced-run-agent`
//! binary (the source of guest's `guest-agent`) with `cargo rustc -p host --bin fenced-run-agent --profile P --
//! -C target-feature=+crt-static -C strip=symbols`, where P is the profile `fenced-run` itself was built with. The
//! two flags reach the agent's own crate only, so cargo reuses every dependency the `fenced-run` build compiled (the
//! same package, hence the same features, profile and flags) and only links the agent: static glibc, no symbols,
//! no debug info. The workspace's rustc wrapper (scripts/rustc-remap) keeps machine paths out of every crate, so
//! two builders of one commit with the same toolchain and profile get the same bytes (docs/vm.md, "Reproducing
//! the agent"); [`AgentBuild`] records what they must share.

use super::datadir::BuildTree;
pub use measurements::manifest::AgentBuild;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The target triple of the agent (the host's: the agent is linked in the host's build).
pub const TARGET: &str = "x86_64-unknown-linux-gnu";
/// The binary of host that is the agent.
pub const BIN: &str = "fenced-run-agent";
/// The flags `cargo rustc` passes to the agent's own crate only.
pub const RUSTC_FLAGS: &[&str] = &["-C", "target-feature=+crt-static", "-C", "strip=symbols"];

/// The directory of `profile`'s outputs under a target directory (`dev` writes to `debug`).
pub fn profile_dir(profile: &str) -> &str {
    match profile {
        "dev" | "test" => "debug",
        "bench" => "release",
        p => p,
    }
}

/// The command line a user would type for [`build`] in `tree` (for messages and docs).
pub fn command(profile: &str) -> String {
    format!(
        "cargo rustc --locked -p host --bin {BIN} --profile {profile} -- {}",
        RUSTC_FLAGS.join(" ")
    )
}

/// Links the static agent in the build tree `tree` with cargo (its progress on this process's stderr) and returns
/// the binary's path and its build record.
pub fn build(tree: &BuildTree) -> Result<(PathBuf, AgentBuild), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!(
        "agent       linking the static guest agent from this build in {} (`{}`; dependencies already compiled \
         are reused)",
        tree.workspace.display(),
        command(&tree.profile)
    );
    let started = std::time::Instant::now();
    let mut child = std::process::Command::new(&cargo)
        .current_dir(&tree.workspace)
        .args(["rustc", "--locked", "-p", "host", "--bin", BIN])
        .args(["--profile", tree.profile.as_str(), "--"])
        .args(RUSTC_FLAGS)
        .env("CARGO_TARGET_DIR", &tree.target)
        .stdin(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run cargo to link the guest agent: {e}"))?;
    // Cargo draws its own progress bar on a terminal; elsewhere it prints a line per crate, and linking the
    // agent alone may take a minute: a line every few seconds says it is still at work.
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for cargo (linking the guest agent): {e}")),
        }
        let waited = started.elapsed().as_secs();
        std::thread::sleep(std::time::Duration::from_millis(250));
        let now = started.elapsed().as_secs();
        if now / 5 != waited / 5 && !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            eprintln!("agent       cargo is still building the agent ({now} s)");
        }
    };
    if !status.success() {
        return Err(format!(
            "linking the guest agent in {} failed ({status}; cargo's messages are above): `{}`",
            tree.workspace.display(),
            command(&tree.profile)
        ));
    }
    let bin = tree.target.join(profile_dir(&tree.profile)).join(BIN);
    if !bin.is_file() {
        return Err(format!(
            "cargo linked the guest agent but {} is missing",
            bin.display()
        ));
    }
    eprintln!(
        "agent       {} ({:.1} s)",
        bin.display(),
        started.elapsed().as_secs_f64()
    );
    Ok((bin, record(&tree.workspace, &tree.profile)?))
}

/// What two builders must share for the same agent bytes: the toolchain (`rustc -vV` of `workspace`), the target,
/// the profile, and the lockfile.
pub fn record(workspace: &Path, profile: &str) -> Result<AgentBuild, String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = std::process::Command::new(&rustc)
        .current_dir(workspace)
        .arg("-vV")
        .output()
        .map_err(|e| format!("cannot run rustc -vV: {e}"))?;
    if !out.status.success() {
        return Err(format!("rustc -vV failed ({})", out.status));
    }
    let lock = workspace.join("Cargo.lock");
    let lock = std::fs::read(&lock).map_err(|e| format!("{}: {e}", lock.display()))?;
    parse_record(&String::from_utf8_lossy(&out.stdout), profile, &lock)
}

/// The record from `rustc -vV`'s output, the profile and Cargo.lock's bytes.
pub fn parse_record(
    rustc_vv: &str,
    profile: &str,
    cargo_lock: &[u8],
) -> Result<AgentBuild, String> {
    let field = |name: &str| {
        rustc_vv
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
            .map(|v| v.trim().to_string())
            .ok_or_else(|| format!("rustc -vV printed no `{name}:` line"))
    };
    Ok(AgentBuild {
        rustc_release: field("release")?,
        rustc_commit_hash: field("commit-hash")?,
        rustc_host: field("host")?,
        target: TARGET.into(),
        profile: profile.into(),
        cargo_lock_sha256: hex::encode(Sha256::digest(cargo_lock)),
    })
}

/// Why a file cannot be the guest image's `/init`: the guest runs it with no loader and no library beside it,
/// so anything but a static x86_64 ELF executable makes the kernel panic at boot.
#[non_exhaustive]
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AgentError {
    /// Not an ELF file at all.
    #[error("guest agent {path}: not an ELF executable (it starts with {start}); give the static guest-agent binary")]
    NotElf {
        /// The file.
        path: String,
        /// Its first bytes, in hex.
        start: String,
    },
    /// An ELF file, but not a 64-bit little-endian x86_64 executable.
    #[error("guest agent {path}: {what}; the guest is x86_64: build the agent for {TARGET}")]
    WrongKind {
        /// The file.
        path: String,
        /// What it is instead.
        what: String,
    },
    /// A header or table points outside the file or is inconsistent.
    #[error("guest agent {path}: malformed ELF: {what}")]
    Malformed {
        /// The file.
        path: String,
        /// What is wrong.
        what: String,
    },
    /// Dynamically linked.
    #[error(
        "guest agent {path}: dynamically linked ({why}), but the guest agent runs as /init with no loader or \
         library beside it and must be static: build it as `fenced-run image build` does without --agent \
         (`cargo rustc --locked -p host --bin fenced-run-agent --profile dev -- -C target-feature=+crt-static -C \
         strip=symbols`, or scripts/install.sh), or for x86_64-unknown-linux-musl"
    )]
    Dynamic {
        /// The file.
        path: String,
        /// The loader it asks for, or the libraries it needs.
        why: String,
    },
}

const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const PT_LOAD: u32 = 1;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const EM_X86_64: u16 = 62;
/// Most program headers read (real executables have about a dozen).
const MAX_PHNUM: usize = 256;
/// Most dynamic entries read.
const MAX_DYN: usize = 4096;

/// Little-endian reads at an offset of a byte slice, `None` past its end.
fn le<const N: usize>(b: &[u8], at: u64) -> Option<[u8; N]> {
    let at = usize::try_from(at).ok()?;
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}
fn u16_at(b: &[u8], at: u64) -> Option<u16> {
    le::<2>(b, at).map(u16::from_le_bytes)
}
fn u32_at(b: &[u8], at: u64) -> Option<u32> {
    le::<4>(b, at).map(u32::from_le_bytes)
}
fn u64_at(b: &[u8], at: u64) -> Option<u64> {
    le::<8>(b, at).map(u64::from_le_bytes)
}

/// A program header's type, file offset, virtual address and size in the file.
struct Segment {
    kind: u32,
    offset: u64,
    vaddr: u64,
    filesz: u64,
}

/// The program header at `at`, `None` when it lies past the end of `b`.
fn segment(b: &[u8], at: u64) -> Option<Segment> {
    Some(Segment {
        kind: u32_at(b, at)?,
        offset: u64_at(b, at.checked_add(8)?)?,
        vaddr: u64_at(b, at.checked_add(16)?)?,
        filesz: u64_at(b, at.checked_add(32)?)?,
    })
}

/// The NUL-terminated string at `at` (at most 4 KiB), lossily decoded; `None` past the end of `b`.
fn c_string(b: &[u8], at: u64) -> Option<String> {
    let start = usize::try_from(at).ok()?;
    let rest = b.get(start..)?;
    let rest = &rest[..rest.len().min(4096)];
    let end = rest.iter().position(|&c| c == 0)?;
    Some(String::from_utf8_lossy(&rest[..end]).into_owned())
}

/// Checks that `bytes` (the file `path`) is a static x86_64 ELF executable: 64-bit little-endian, type EXEC
/// or DYN (a static PIE), no `PT_INTERP` program header and no `DT_NEEDED` entry in its dynamic section.
pub fn check_static(path: &Path, bytes: &[u8]) -> Result<(), AgentError> {
    let p = path.display().to_string();
    let malformed = |what: &str| AgentError::Malformed {
        path: p.clone(),
        what: what.to_string(),
    };
    if bytes.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err(AgentError::NotElf {
            path: p.clone(),
            start: hex::encode(&bytes[..bytes.len().min(4)]),
        });
    }
    let wrong = |what: String| AgentError::WrongKind {
        path: p.clone(),
        what,
    };
    match (bytes.get(4), bytes.get(5)) {
        (Some(2), Some(1)) => {}
        (Some(1), _) => return Err(wrong("a 32-bit ELF".into())),
        (_, Some(2)) => return Err(wrong("a big-endian ELF".into())),
        _ => return Err(malformed("the ELF identification is cut short or unknown")),
    }
    let header = |at: u64, what: &str| u16_at(bytes, at).ok_or_else(|| malformed(what));
    let e_type = header(16, "no e_type")?;
    let machine = header(18, "no e_machine")?;
    if machine != EM_X86_64 {
        return Err(wrong(format!(
            "an ELF for machine {machine}, not x86_64 (62)"
        )));
    }
    if !matches!(e_type, 2 | 3) {
        return Err(wrong(format!(
            "an ELF of type {e_type}, not an executable (2) or a position-independent one (3)"
        )));
    }
    let phoff = u64_at(bytes, 32).ok_or_else(|| malformed("no e_phoff"))?;
    let phentsize = u64::from(header(54, "no e_phentsize")?);
    let phnum = usize::from(header(56, "no e_phnum")?);
    if phnum == 0 {
        return Err(malformed("no program headers"));
    }
    if phentsize < 56 || phnum > MAX_PHNUM {
        return Err(malformed(&format!(
            "{phnum} program headers of {phentsize} bytes"
        )));
    }
    let mut segments = Vec::with_capacity(phnum);
    for i in 0..phnum as u64 {
        let at = phentsize
            .checked_mul(i)
            .and_then(|o| o.checked_add(phoff))
            .ok_or_else(|| malformed("program header offset overflows"))?;
        let seg = segment(bytes, at).ok_or_else(|| {
            malformed(&format!("program header {i} lies past the end of the file"))
        })?;
        segments.push(seg);
    }
    if let Some(interp) = segments.iter().find(|s| s.kind == PT_INTERP) {
        let loader = c_string(bytes, interp.offset).unwrap_or_else(|| "an unreadable path".into());
        return Err(AgentError::Dynamic {
            path: p,
            why: format!("it asks for the loader {loader}"),
        });
    }
    let Some(dynamic) = segments.iter().find(|s| s.kind == PT_DYNAMIC) else {
        return Ok(());
    };
    // The dynamic section of a static PIE holds relocation entries only; a DT_NEEDED names a library.
    let mut needed = Vec::new();
    let mut strtab = None;
    let entries = (dynamic.filesz / 16).min(MAX_DYN as u64);
    for i in 0..entries {
        let at = dynamic
            .offset
            .checked_add(i * 16)
            .ok_or_else(|| malformed("dynamic entry offset overflows"))?;
        let (Some(tag), Some(val)) = (
            u64_at(bytes, at),
            at.checked_add(8).and_then(|a| u64_at(bytes, a)),
        ) else {
            return Err(malformed(
                "the dynamic section lies past the end of the file",
            ));
        };
        match tag {
            DT_NULL => break,
            DT_NEEDED => needed.push(val),
            DT_STRTAB => strtab = Some(val),
            _ => {}
        }
    }
    if needed.is_empty() {
        return Ok(());
    }
    // DT_STRTAB is an address: the file offset is found through the PT_LOAD segment that maps it.
    let strtab_offset = strtab.and_then(|addr| {
        segments
            .iter()
            .filter(|s| s.kind == PT_LOAD)
            .find(|s| addr >= s.vaddr && addr - s.vaddr < s.filesz)
            .and_then(|s| (addr - s.vaddr).checked_add(s.offset))
    });
    let names: Vec<String> = needed
        .iter()
        .map(|&off| {
            strtab_offset
                .and_then(|base| base.checked_add(off))
                .and_then(|at| c_string(bytes, at))
                .unwrap_or_else(|| "an unnamed library".into())
        })
        .collect();
    Err(AgentError::Dynamic {
        path: p,
        why: format!("it needs the shared libraries {}", names.join(", ")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_record_names_the_toolchain_target_profile_and_lockfile() {
        let vv = "rustc 1.95.0 (59807616e 2026-04-14)\nbinary: rustc\ncommit-hash: \
                  59807616e1fa2540724bfbac14d7976d7e4a3860\ncommit-date: 2026-04-14\nhost: \
                  x86_64-unknown-linux-gnu\nrelease: 1.95.0\nLLVM version: 22.1.2\n";
        let r = parse_record(vv, "dev", b"lock").expect("record");
        assert_eq!(
            r,
            AgentBuild {
                rustc_release: "1.95.0".into(),
                rustc_commit_hash: "59807616e1fa2540724bfbac14d7976d7e4a3860".into(),
                rustc_host: "x86_64-unknown-linux-gnu".into(),
                target: TARGET.into(),
                profile: "dev".into(),
                cargo_lock_sha256: hex::encode(Sha256::digest(b"lock")),
            }
        );
        // A rustc that prints no commit hash (a local build) is named, not recorded half.
        let e = parse_record("release: 1.95.0\nhost: x\n", "dev", b"").expect_err("no hash");
        assert_eq!(e, "rustc -vV printed no `commit-hash:` line");
    }

    #[test]
    fn the_agent_is_linked_in_the_profile_fenced_run_was_built_with() {
        assert_eq!(profile_dir("dev"), "debug");
        assert_eq!(profile_dir("release"), "release");
        assert_eq!(
            command("dev"),
            "cargo rustc --locked -p host --bin fenced-run-agent --profile dev -- -C target-feature=+crt-static \
             -C strip=symbols"
        );
    }

    fn file(p: &str) -> Option<Vec<u8>> {
        std::fs::read(p).ok()
    }

    #[test]
    fn a_dynamic_executable_is_refused_naming_the_file_and_the_fix() {
        // Debian's /bin/true is dynamically linked (coreutils).
        let Some(b) = file("/bin/true") else {
            panic!("/bin/true is missing");
        };
        let e = check_static(Path::new("/bin/true"), &b).expect_err("dynamic");
        assert!(matches!(e, AgentError::Dynamic { .. }), "{e:?}");
        let m = e.to_string();
        assert!(
            m.starts_with("guest agent /bin/true: dynamically linked (it asks for the loader /"),
            "{m}"
        );
        assert!(
            m.contains("must be static")
                && m.contains("+crt-static")
                && m.contains("x86_64-unknown-linux-musl"),
            "{m}"
        );
    }

    #[test]
    fn a_static_executable_is_accepted() {
        // busybox-static's busybox (.ci/run installs it; the image includes it).
        let Some(b) = file("/bin/busybox") else {
            attestation::vectors::skip_for(
                attestation::vectors::SkipKind::Vm,
                "no /bin/busybox (busybox-static, which the vm tier's image includes)",
            );
            return;
        };
        assert_eq!(check_static(Path::new("/bin/busybox"), &b), Ok(()));
    }

    /// A minimal ELF64 x86_64 header with `phnum` program headers of 56 bytes right after it.
    fn elf(e_type: u16, segments: &[(u32, u64, u64, u64)]) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[6] = 1;
        b[16..18].copy_from_slice(&e_type.to_le_bytes());
        b[18..20].copy_from_slice(&EM_X86_64.to_le_bytes());
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&(segments.len() as u16).to_le_bytes());
        for &(kind, offset, vaddr, filesz) in segments {
            let mut ph = vec![0u8; 56];
            ph[..4].copy_from_slice(&kind.to_le_bytes());
            ph[8..16].copy_from_slice(&offset.to_le_bytes());
            ph[16..24].copy_from_slice(&vaddr.to_le_bytes());
            ph[32..40].copy_from_slice(&filesz.to_le_bytes());
            b.extend(ph);
        }
        b
    }

    #[test]
    fn a_needed_library_is_named_and_a_static_pie_passes() {
        // PT_LOAD mapping the whole file at 0x1000, PT_DYNAMIC at 232 with DT_NEEDED(1), DT_STRTAB, DT_NULL.
        let dyn_at = 64 + 56 * 2;
        let strtab_at = dyn_at + 16 * 3;
        let mut b = elf(
            3,
            &[
                (PT_LOAD, 0, 0x1000, 4096),
                (PT_DYNAMIC, dyn_at as u64, 0, 48),
            ],
        );
        for (tag, val) in [
            (DT_NEEDED, 1u64),
            (DT_STRTAB, 0x1000 + strtab_at as u64),
            (DT_NULL, 0),
        ] {
            b.extend(tag.to_le_bytes());
            b.extend(val.to_le_bytes());
        }
        b.extend(b"\0libc.so.6\0");
        let e = check_static(Path::new("a"), &b).expect_err("needs libc");
        assert_eq!(
            e,
            AgentError::Dynamic {
                path: "a".into(),
                why: "it needs the shared libraries libc.so.6".into()
            }
        );
        // The same without DT_NEEDED: a static PIE's dynamic section.
        let mut b = elf(
            3,
            &[
                (PT_LOAD, 0, 0x1000, 4096),
                (PT_DYNAMIC, dyn_at as u64, 0, 48),
            ],
        );
        for (tag, val) in [(8u64, 24u64), (DT_STRTAB, 0x1000), (DT_NULL, 0)] {
            b.extend(tag.to_le_bytes());
            b.extend(val.to_le_bytes());
        }
        assert_eq!(check_static(Path::new("a"), &b), Ok(()));
    }

    #[test]
    fn what_is_not_an_x86_64_executable_is_named() {
        let e = check_static(Path::new("s.sh"), b"#!/bin/sh\n").expect_err("script");
        assert_eq!(e.to_string(), "guest agent s.sh: not an ELF executable (it starts with 23212f62); give the static guest-agent binary");
        let mut b = elf(2, &[(PT_LOAD, 0, 0, 64)]);
        b[18..20].copy_from_slice(&183u16.to_le_bytes());
        assert!(matches!(
            check_static(Path::new("x"), &b),
            Err(AgentError::WrongKind { .. })
        ));
        let b = elf(1, &[(PT_LOAD, 0, 0, 64)]);
        assert!(matches!(
            check_static(Path::new("x"), &b),
            Err(AgentError::WrongKind { .. })
        ));
        let mut b = elf(2, &[(PT_LOAD, 0, 0, 64)]);
        b[4] = 1;
        assert!(matches!(
            check_static(Path::new("x"), &b),
            Err(AgentError::WrongKind { .. })
        ));
        // Cut short: the program header table and the dynamic section past the end are named, never a panic.
        let b = elf(2, &[(PT_LOAD, 0, 0, 64)]);
        for cut in 0..b.len() {
            let _ = check_static(Path::new("x"), &b[..cut]);
        }
        assert!(matches!(
            check_static(Path::new("x"), &b[..100]),
            Err(AgentError::Malformed { .. })
        ));
        let b = elf(3, &[(PT_DYNAMIC, 1 << 40, 0, 48)]);
        assert!(matches!(
            check_static(Path::new("x"), &b),
            Err(AgentError::Malformed { .. })
        ));
        let b = elf(3, &[(PT_INTERP, u64::MAX, 0, 8)]);
        assert!(matches!(
            check_static(Path::new("x"), &b),
            Err(AgentError::Dynamic { .. })
        ));
    }
}
