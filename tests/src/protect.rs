//! The attacks on protected tests (issue 33), shared by the process tier (fence_protect_test_phase.rs) and the
//! vm tier (vm_protect.rs): each is a tiny repository, a patch, a test command and the globs it protects; the
//! attack scripts report each attempt as `BLOCKED what` or `DONE what`.

use std::process::Command;

/// The protected suite: it fails, as the repository has it.
pub const SUITE: &str = "echo '0 passed, 1 failed'\nexit 1\n";

/// A TOML basic string holding `s`.
pub fn toml(s: &str) -> String {
    serde_json::to_string(s).expect("string")
}

/// A patch (git's format) creating each `(path, text)`.
pub fn new_files_patch(files: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (path, text) in files {
        let lines: Vec<&str> = text.lines().collect();
        out.push_str(&format!(
            "diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{} @@\n",
            lines.len()
        ));
        for l in lines {
            out.push('+');
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// The job file of an attack: `[repository]` (with `patch = "fix.patch"` when `patch`), `[test]` with
/// `command` and `protect`, `[install]` when given, then `extra` (more tables, such as `[image]`).
pub fn job_toml(
    command: &str,
    protect: &[&str],
    patch: bool,
    install: Option<&str>,
    extra: &str,
) -> String {
    let mut job = String::from("[repository]\npath = \"repo\"\n");
    if patch {
        job.push_str("patch = \"fix.patch\"\n");
    }
    let globs: Vec<String> = protect.iter().map(|g| toml(g)).collect();
    job.push_str(&format!(
        "[test]\ncommand = {}\ntimeout_seconds = 120\nprotect = [{}]\n",
        toml(command),
        globs.join(", ")
    ));
    if let Some(i) = install {
        job.push_str(&format!(
            "[install]\ncommand = {}\ntimeout_seconds = 120\n",
            toml(i)
        ));
    }
    job.push_str(extra);
    job
}

/// The git tree of `files` alone, computed by git itself.
pub fn git_tree(files: &[(&str, &str)]) -> String {
    let d = tempfile::tempdir().expect("tempdir");
    for (rel, text) in files {
        let p = d.path().join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(d.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["write-tree"])
}

/// The names of the attempts [`attack_script`] makes, in its order.
pub const ATTEMPTS: [&str; 12] = [
    "rewrite",
    "append",
    "rename",
    "unlink",
    "chmod",
    "new-file",
    "mkdir",
    "replace-dir",
    "truncate",
    "hardlink",
    "umount",
    "unshare-umount",
];

/// Every attempt the attack script makes on the protected `dir`, each reported as `BLOCKED what` or
/// `DONE what` (shell).
pub fn attack_script(dir: &str, file: &str) -> String {
    let attempts = [
        format!("printf 'echo 3 passed, 0 failed\\nexit 0\\n' > {dir}/{file}"),
        format!("echo 'exit 0' >> {dir}/{file}"),
        format!("mv {dir}/{file} {dir}/moved.sh"),
        format!("rm -f {dir}/{file}"),
        format!("chmod 777 {dir}/{file}"),
        format!("echo 'exit 0' > {dir}/new.sh"),
        format!("mkdir {dir}/newdir"),
        format!("mv {dir} {dir}.old"),
        format!("truncate -s 0 {dir}/{file}"),
        // A writable name for the protected bytes (then written through) must not exist either.
        format!("ln {dir}/{file} alias.sh"),
        // The bind cannot be taken away to reveal the writable directory below it, nor from a new mount
        // namespace.
        format!("umount -l /work/repo/{dir} && echo 'exit 0' > {dir}/{file}"),
        format!("unshare -m sh -c 'umount -l /work/repo/{dir} && echo \"exit 0\" > {dir}/{file}'"),
    ];
    let mut s = String::new();
    for (name, cmd) in ATTEMPTS.iter().zip(attempts) {
        s.push_str(&format!(
            "if {cmd} 2>/dev/null; then echo DONE {name}; else echo BLOCKED {name}; fi\n"
        ));
    }
    s
}

/// `None` when the test output `tail` shows every attempt of [`attack_script`] blocked, else what is wrong.
pub fn not_all_blocked(tail: &str) -> Option<String> {
    if tail.contains("DONE ") {
        return Some("an attempt succeeded".into());
    }
    ATTEMPTS
        .iter()
        .find(|name| !tail.contains(&format!("BLOCKED {name}")))
        .map(|name| format!("{name} not attempted"))
}

/// One attack: the repository's files, the patch (`fix.patch`), the test command, the protected globs and
/// the install command.
pub struct Attack {
    /// `(path, text)` of each repository file.
    pub files: Vec<(&'static str, String)>,
    /// The patch, when the attack comes with one.
    pub patch: Option<String>,
    /// The test command.
    pub command: &'static str,
    /// `[test] protect`.
    pub protect: Vec<&'static str>,
    /// The install command, when there is one.
    pub install: Option<&'static str>,
}

impl Attack {
    /// The job file, with `extra` tables appended.
    pub fn job(&self, extra: &str) -> String {
        job_toml(
            self.command,
            &self.protect,
            self.patch.is_some(),
            self.install,
            extra,
        )
    }

    /// The git tree of the protected files as the repository has them (what `inputs.test_tree` must be when
    /// nothing could change them).
    pub fn pristine_tree(&self, protected: &[&str]) -> String {
        let files: Vec<(&str, &str)> = self
            .files
            .iter()
            .filter(|(p, _)| protected.contains(p))
            .map(|(p, t)| (*p, t.as_str()))
            .collect();
        git_tree(&files)
    }
}

/// The cargo attack without cargo: the test command runs a repository script (a `build.rs` stand-in, added
/// by the patch) that tries every way to change `tests/test.sh`, then the protected suite.
pub fn build_script_attack() -> Attack {
    Attack {
        files: vec![
            ("tests/test.sh", SUITE.into()),
            ("src/code.sh", "echo code\n".into()),
        ],
        patch: Some(new_files_patch(&[(
            "build.sh",
            &attack_script("tests", "test.sh"),
        )])),
        command: "sh build.sh; sh tests/test.sh",
        protect: vec!["tests/**"],
        install: None,
    }
}

/// A protected `tests/test.sh` that calls the project's `./build.sh`, which the patch makes edit
/// `tests/cases/*` (printing `DONE edit` / `DONE add` where it can). The suite prints `P passed, F failed`.
pub fn build_sh_attack() -> Attack {
    Attack {
        files: vec![
            (
                "tests/test.sh",
                "sh ./build.sh\np=0; f=0\nfor t in tests/cases/*.sh; do if sh \"$t\"; then p=$((p+1)); else f=$((f+1)); fi; done\n\
                 echo \"$p passed, $f failed\"\n[ \"$f\" = 0 ]\n"
                    .into(),
            ),
            ("tests/cases/one.sh", "exit 1\n".into()),
            ("tests/cases/two.sh", "exit 1\n".into()),
            ("build.sh", "echo building\n".into()),
        ],
        patch: Some(
            "diff --git a/build.sh b/build.sh\n--- a/build.sh\n+++ b/build.sh\n@@ -1 +1,3 @@\n echo building\n\
             +for f in tests/cases/*.sh; do echo 'exit 0' > \"$f\" && echo DONE edit; done\n\
             +echo 'exit 0' > tests/cases/three.sh && echo DONE add\n"
                .into(),
        ),
        command: "sh tests/test.sh",
        protect: vec!["tests/**"],
        install: None,
    }
}

/// The protected pytest suite of [`conftest_attack`]: two failing tests.
pub const PYTEST_SUITE: &str =
    "def test_one():\n    assert False\n\n\ndef test_two():\n    assert False\n";

/// The root `conftest.py` the patch adds: it tries to rewrite, unlink, rename and add protected test files,
/// printing `BLOCKED what ERRNO` or `DONE what`.
pub const CONFTEST: &str = "import os\n\
    for what, act in [\n\
    \x20   ('rewrite', lambda: open('tests/test_suite.py', 'w').write('def test_one():\\n    pass\\n')),\n\
    \x20   ('unlink', lambda: os.unlink('tests/test_suite.py')),\n\
    \x20   ('rename', lambda: os.rename('tests/test_suite.py', 'tests/x.py')),\n\
    \x20   ('new-file', lambda: open('tests/test_new.py', 'w').write('def test_n():\\n    pass\\n')),\n\
    ]:\n\
    \x20   try:\n\
    \x20       act()\n\
    \x20       print('DONE', what)\n\
    \x20   except OSError as e:\n\
    \x20       print('BLOCKED', what, e.errno)\n";

/// The attempts of [`CONFTEST`].
pub const CONFTEST_ATTEMPTS: [&str; 4] = ["rewrite", "unlink", "rename", "new-file"];

/// A root `conftest.py` (added by the patch) rewriting the protected `tests/test_suite.py`; pytest runs with
/// `-s` so that its report reaches the output.
pub fn conftest_attack() -> Attack {
    Attack {
        files: vec![("tests/test_suite.py", PYTEST_SUITE.into())],
        patch: Some(new_files_patch(&[("conftest.py", CONFTEST)])),
        command: "python3 -m pytest -s -p no:cacheprovider tests",
        protect: vec!["tests/**"],
        install: None,
    }
}

/// The install phase's script (`install.sh`) planting start-up hooks in HOME: a `usercustomize.py` and a
/// `sitecustomize.py` and a `.pth` in the user site (then running python, which runs them: `USERCUSTOMIZE-RAN`,
/// `SITECUSTOMIZE-RAN`, `PTH-RAN`), `~/.npmrc`, `~/.gitconfig`, `~/.bashrc`, `~/.profile`,
/// `~/.cargo/config.toml` (a test runner), `~/.pytest.ini` (addopts), a pip cache file (`CACHE-CARRIED`) and a
/// file in /var/tmp. (The scripts are repository files: intake refuses a job command that names a credential
/// path such as ~/.npmrc.)
pub const HOME_HOOKS_INSTALL: &str = "set -e\n\
     site=$(python3 -c 'import site; print(site.getusersitepackages())')\n\
     mkdir -p \"$site\" ~/.cache/pip\n\
     echo 'print(\"USERCUSTOMIZE-RAN\")' > \"$site/usercustomize.py\"\n\
     echo 'import sys; sys.stdout.write(\"PTH-RAN\\n\")' > \"$site/zz-hook.pth\"\n\
     echo 'print(\"SITECUSTOMIZE-RAN\")' > \"$site/sitecustomize.py\"\n\
     mkdir -p ~/.cargo\n\
     printf '[target.x86_64-unknown-linux-gnu]\\nrunner = \"/work/repo/fake-runner\"\\n# CARGO-CONFIG-SEEN\\n' > ~/.cargo/config.toml\n\
     printf '[pytest]\\naddopts = -p no:terminal\\n# PYTEST-INI-SEEN\\n' > ~/.pytest.ini\n\
     echo 'echo PROFILE-SEEN' > ~/.profile\n\
     printf 'node-options=--require /work/repo/hook.js\\nmarker=NPMRC-SEEN\\n' > ~/.npmrc\n\
     printf '[core]\\n\\thooksPath = /work/repo/hooks\\n[marker]\\n\\tseen = GITCONFIG-SEEN\\n' > ~/.gitconfig\n\
     echo 'echo BASHRC-SEEN' > ~/.bashrc\n\
     echo cached > ~/.cache/pip/CACHE-CARRIED\n\
     echo left > /var/tmp/install-left\n\
     python3 -c 'print(1)'\n";

/// The test phase's look at what the install phase left (`check.sh`, before the suite runs): python, the
/// hooks' files, git's global configuration, the pip cache, /var/tmp.
pub const HOME_HOOKS_CHECK: &str = "python3 -c 'print(\"python ran\")'\n\
     cat ~/.npmrc ~/.gitconfig ~/.bashrc ~/.profile ~/.cargo/config.toml ~/.pytest.ini 2>/dev/null\n\
     git config --global --get marker.seen\n\
     ls ~/.cache/pip\n\
     echo \"var-tmp: [$(ls -A /var/tmp)]\"\n\
     d=$(mktemp -d /var/tmp/t.XXXXXX) && echo var-tmp-writable && rmdir \"$d\"\n";

/// The marker each hook of [`HOME_HOOKS_INSTALL`] prints where it is seen.
pub const HOOK_MARKERS: [&str; 9] = [
    "USERCUSTOMIZE-RAN",
    "SITECUSTOMIZE-RAN",
    "PTH-RAN",
    "CARGO-CONFIG-SEEN",
    "PYTEST-INI-SEEN",
    "PROFILE-SEEN",
    "NPMRC-SEEN",
    "GITCONFIG-SEEN",
    "BASHRC-SEEN",
];

/// The install phase writes the hooks of [`HOME_HOOKS_INSTALL`]; the test phase runs [`HOME_HOOKS_CHECK`],
/// then `suite` (a shell command).
pub fn home_hooks_attack(suite: &str) -> Attack {
    Attack {
        files: vec![
            ("install.sh", HOME_HOOKS_INSTALL.into()),
            ("check.sh", format!("{HOME_HOOKS_CHECK}{suite}")),
        ],
        patch: None,
        command: "sh check.sh",
        protect: vec!["tests/**"],
        install: Some("sh install.sh"),
    }
}

/// The `home-not-carried` finding of a verdict (`Null` when there is none).
pub fn home_not_carried(verdict: &serde_json::Value) -> serde_json::Value {
    verdict["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["kind"] == "home-not-carried"))
        .cloned()
        .unwrap_or_default()
}
