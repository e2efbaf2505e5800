//! Builds the static `guest-agent` for the image with fixed settings: the gnu target with
//! `-C target-feature=+crt-static`, the `guest-agent` profile of the workspace (fixed codegen units, no debug
//! info, stripped), and `--remap-path-prefix` for the workspace and the cargo home (with the same maps as
//! `-ffile-prefix-map` for C compiled into it, such as aws-lc's `__FILE__` strings), so that the binary embeds
//! no path of the machine that built it.

use std::path::{Path, PathBuf};

/// The target triple of the agent.
pub const TARGET: &str = "x86_64-unknown-linux-gnu";
/// The cargo profile of the agent (root Cargo.toml).
pub const PROFILE: &str = "guest-agent";

/// The workspace this `fenced-run` was built from.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Where cargo keeps its registry (the prefix remapped out of the binary).
fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from("/root/.cargo"))
}

/// The rustc flags of the agent build.
pub fn rustflags(workspace: &Path) -> Vec<String> {
    let ws = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_owned());
    let home = std::fs::canonicalize(cargo_home()).unwrap_or_else(|_| cargo_home());
    vec![
        "-C".into(),
        "target-feature=+crt-static".into(),
        format!("--remap-path-prefix={}=/fenced-run", ws.display()),
        format!("--remap-path-prefix={}=/cargo", home.display()),
    ]
}

/// The C compiler flags of the agent build: the same path maps as [`rustflags`], for C that crates compile in
/// (cc-rs reads them from `CFLAGS_<target>`).
pub fn cflags(workspace: &Path) -> String {
    let ws = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_owned());
    let home = std::fs::canonicalize(cargo_home()).unwrap_or_else(|_| cargo_home());
    format!(
        "-ffile-prefix-map={}=/fenced-run -ffile-prefix-map={}=/cargo",
        ws.display(),
        home.display()
    )
}

/// Builds the agent with cargo in `workspace` and returns the binary's path.
pub fn build(workspace: &Path) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(&cargo)
        .current_dir(workspace)
        .args([
            "build",
            "--locked",
            "--quiet",
            "--profile",
            PROFILE,
            "-p",
            "guest",
        ])
        .args(["--bin", "guest-agent", "--target", TARGET])
        .env_remove("RUSTFLAGS")
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags(workspace).join("\x1f"))
        .env(
            format!("CFLAGS_{}", TARGET.replace('-', "_")),
            cflags(workspace),
        )
        .status()
        .map_err(|e| format!("cannot run cargo to build the guest agent: {e}"))?;
    if !status.success() {
        return Err(format!(
            "building the guest agent in {} failed ({status})",
            workspace.display()
        ));
    }
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"));
    let bin = target_dir.join(TARGET).join(PROFILE).join("guest-agent");
    if !bin.is_file() {
        return Err(format!(
            "cargo built the guest agent but {} is missing",
            bin.display()
        ));
    }
    Ok(bin)
}
