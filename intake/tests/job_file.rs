//! The job-file loader: every key of DESIGN.md, errors naming key and line, the environment deny list,
//! credential read paths, allow-entry normalisation and matching.

use intake::job::{
    check_read_path, env_name_denied, AllowEntry, AllowHost, HostName, Job, JobError, Limits,
    DEFAULT_INSTALL_TIMEOUT_SECONDS, DEFAULT_TEST_TIMEOUT_SECONDS,
};
use std::net::IpAddr;
use std::path::Path;

const FULL: &str = r#"
[repository]
path = "repo"
commit = "0123456789ABCDEF0123456789abcdef01234567"
patch = "fix.patch"

[install]
command = "sh install.sh"
allow = ["Registry.Example.:443", "*.cdn.example:443", "[2001:db8::1]:8443"]
timeout_seconds = 60

[test]
command = "sh test.sh"
timeout_seconds = 90
junit = "target/junit.xml"

[limits]
memory_mib = 1024
pids = 64
disk_mib = 512
open_files = 256

[env]
passthrough = ["TERM"]
set = { CI = "true" }

[sandbox]
read = ["~/.cargo/bin", "~/.rustup", "~/.cargo/registry", "/opt/toolchain"]
"#;

fn load(text: &str) -> Result<Job, JobError> {
    Job::from_toml_str(text, Path::new("/jobs/job.toml"))
}

#[test]
fn full_job_loads_every_key() {
    let job = load(FULL).expect("full job loads");
    assert_eq!(job.repository.path, "repo");
    assert_eq!(
        job.repository.commit.as_deref(),
        Some("0123456789abcdef0123456789abcdef01234567")
    );
    assert_eq!(
        job.repository.patch.as_deref(),
        Some(Path::new("fix.patch"))
    );
    let install = job.install.as_ref().expect("install phase");
    assert_eq!(install.command, "sh install.sh");
    assert_eq!(install.timeout_seconds, 60);
    let shown: Vec<String> = install.allow.iter().map(|a| a.to_string()).collect();
    assert_eq!(
        shown,
        [
            "registry.example:443",
            "*.cdn.example:443",
            "[2001:db8::1]:8443"
        ]
    );
    assert_eq!(job.test.command.as_deref(), Some("sh test.sh"));
    assert_eq!(job.test.timeout_seconds, 90);
    assert_eq!(
        job.test.junit.as_deref(),
        Some(Path::new("target/junit.xml"))
    );
    assert_eq!(
        (
            job.limits.memory_mib,
            job.limits.pids,
            job.limits.disk_mib,
            job.limits.open_files
        ),
        (1024, 64, 512, 256)
    );
    assert_eq!(job.env.passthrough, ["TERM"]);
    assert_eq!(job.env.set.get("CI").map(String::as_str), Some("true"));
    assert_eq!(job.sandbox.read.len(), 4);
    assert_eq!(job.base_dir, Path::new("/jobs"));
    assert_eq!(job.resolve(Path::new("repo")), Path::new("/jobs/repo"));
    // SHA-256 of the text, computed independently.
    use sha2::Digest;
    assert_eq!(
        job.sha256,
        hex::encode(sha2::Sha256::digest(FULL.as_bytes()))
    );
}

#[test]
fn minimal_job_gets_documented_defaults() {
    let job = load("[repository]\npath = \"repo\"\n").expect("minimal job loads");
    assert!(job.install.is_none());
    assert!(job.test.command.is_none());
    assert_eq!(job.test.timeout_seconds, DEFAULT_TEST_TIMEOUT_SECONDS);
    assert_eq!(job.limits, Limits::default());
    assert_eq!(job.limits.memory_mib, 4096);
    assert_eq!(job.limits.pids, 512);
    assert!(job.env.passthrough.is_empty() && job.env.set.is_empty());
    let job = load("[repository]\npath = \"r\"\n[install]\ncommand = \"true\"\n").expect("loads");
    assert_eq!(
        job.install.expect("install").timeout_seconds,
        DEFAULT_INSTALL_TIMEOUT_SECONDS
    );
}

/// (job text, key the error must name, line it must name)
const BAD: &[(&str, &str, usize)] = &[
    // unknown keys
    (
        "[repository]\npath = \"r\"\nbranch = \"main\"\n",
        "repository.branch",
        3,
    ),
    (
        "[repository]\npath = \"r\"\n\n[limits]\ncpus = 4\n",
        "limits.cpus",
        5,
    ),
    (
        "[repository]\npath = \"r\"\n[network]\nallow = true\n",
        "network",
        3,
    ),
    // wrong types
    (
        "[repository]\npath = \"r\"\n[limits]\npids = \"many\"\n",
        "limits.pids",
        4,
    ),
    (
        "[repository]\npath = \"r\"\n[limits]\nmemory_mib = -5\n",
        "limits.memory_mib",
        4,
    ),
    ("[repository]\npath = 7\n", "repository.path", 2),
    (
        "[repository]\npath = \"r\"\n[install]\ncommand = \"x\"\nallow = \"a.example:443\"\n",
        "install.allow",
        5,
    ),
    // missing required values
    ("[repository]\ncommit = \"abcdef0\"\n", "repository.path", 1),
    ("[test]\ncommand = \"x\"\n", "repository", 1),
    (
        "[repository]\npath = \"r\"\n[install]\ntimeout_seconds = 5\n",
        "install.command",
        3,
    ),
    // invalid values
    (
        "[repository]\npath = \"r\"\ncommit = \"xyz\"\n",
        "repository.commit",
        3,
    ),
    (
        "[repository]\npath = \"r\"\n[limits]\npids = 0\n",
        "limits.pids",
        4,
    ),
    (
        "[repository]\npath = \"r\"\n[install]\ncommand = \"x\"\nallow = [\"a.example\"]\n",
        "install.allow",
        5,
    ),
    (
        "[repository]\npath = \"r\"\n[test]\ncommand = \"  \"\n",
        "test.command",
        4,
    ),
    (
        "[repository]\npath = \"ftp://h.example/r\"\n",
        "repository.path",
        2,
    ),
    (
        "[repository]\nurl = \"ftp://h.example/r\"\ncommit = \"0123456789abcdef0123456789abcdef01234567\"\n",
        "repository.url",
        2,
    ),
    // environment injection
    (
        "[repository]\npath = \"r\"\n[env]\npassthrough = [\"TERM\", \"LD_PRELOAD\"]\n",
        "env.passthrough",
        4,
    ),
    (
        "[repository]\npath = \"r\"\n[env]\nset = { NODE_OPTIONS = \"--require x\" }\n",
        "env.set.NODE_OPTIONS",
        4,
    ),
    (
        "[repository]\npath = \"r\"\n[env]\n\n[env.set]\nGIT_SSH_COMMAND = \"x\"\n",
        "env.set.GIT_SSH_COMMAND",
        6,
    ),
    // toolchain sets
    (
        "[repository]\npath = \"r\"\n[image]\ntoolchains = [\"rust\", \"java\"]\n",
        "image.toolchains",
        4,
    ),
    (
        "[repository]\npath = \"r\"\n[image]\ntoolchain = [\"rust\"]\n",
        "image.toolchain",
        4,
    ),
    // credential read paths
    (
        "[repository]\npath = \"r\"\n[sandbox]\nread = [\"~/.ssh\"]\n",
        "sandbox.read",
        4,
    ),
    (
        "[repository]\npath = \"r\"\n[sandbox]\nread = [\n \"~/.rustup\",\n \"~/.cargo\",\n]\n",
        "sandbox.read",
        6,
    ),
];

#[test]
fn errors_name_key_and_line() {
    let mut wrong = Vec::new();
    for (text, key, line) in BAD {
        match load(text) {
            Ok(_) => wrong.push(format!("accepted: {text:?}")),
            Err(e) => {
                let msg = e.to_string();
                if e.key() != Some(*key) || e.line() != Some(*line) {
                    wrong.push(format!(
                        "{text:?}: got key {:?} line {:?} ({msg}); want {key} line {line}",
                        e.key(),
                        e.line()
                    ));
                }
                if !msg.contains(key) || !msg.starts_with("/jobs/job.toml:") {
                    wrong.push(format!("message does not name file and key: {msg}"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn deny_list_covers_the_design_names() {
    for name in [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "ld_preload",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "NODE_OPTIONS",
        "NODE_PATH",
        "RUSTC_WRAPPER",
        "RUSTC",
        "RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_BUILD_RUSTC_WRAPPER",
        "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER",
        "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER",
        "GIT_SSH_COMMAND",
        "GIT_CONFIG_GLOBAL",
        "GIT_EXEC_PATH",
        "BASH_ENV",
        "ENV",
        "BASH_FUNC_ls%%",
        "PERL5LIB",
        "PERL5OPT",
        "RUBYOPT",
        "RUBYLIB",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "GCONV_PATH",
        "npm_config_script_shell",
        "PATH",
        "HTTPS_PROXY",
        "",
        "1ABC",
        "A=B",
    ] {
        assert!(env_name_denied(name).is_some(), "{name} should be denied");
    }
    for name in [
        "TERM",
        "CI",
        "LANG",
        "RUST_BACKTRACE",
        "CARGO_TARGET_DIR",
        "CARGO_TERM_COLOR",
        "PYTHONUNBUFFERED",
        "NODE_ENV",
    ] {
        assert_eq!(env_name_denied(name), None, "{name} should be allowed");
    }
}

#[test]
fn read_paths() {
    for bad in [
        "~/.ssh",
        "~/.ssh/id_ed25519",
        "~/.aws/credentials",
        "~/.config/gcloud",
        "~/.config",
        "~/.cargo/credentials",
        "~/.cargo/credentials.toml",
        "~/.cargo",
        "~/.netrc",
        "~/.docker",
        "~/.kube/config",
        "~/.gnupg",
        "~",
        "~/",
        "~root/.rustup",
        "/run",
        "/run/user/1000/bus",
        "/var/run/docker.sock",
        "/srv/docker.sock",
        "/",
        "/home",
        "/home/alice/.rustup",
        "/proc/1/environ",
        "/etc/ssh",
        "relative/path",
        "~/.rustup/../.ssh",
        "/usr/../run",
    ] {
        let text = format!("[repository]\npath = \"r\"\n[sandbox]\nread = [\"{bad}\"]\n");
        let e = load(&text).expect_err(bad);
        assert_eq!(e.key(), Some("sandbox.read"), "{bad}: {e}");
    }
    for good in [
        "~/.rustup",
        "~/.cargo/bin",
        "~/.cargo/registry",
        "/opt/toolchain",
        "/usr/lib/jvm",
    ] {
        let text = format!("[repository]\npath = \"r\"\n[sandbox]\nread = [\"{good}\"]\n");
        load(&text).unwrap_or_else(|e| panic!("{good}: {e}"));
    }
    // After expansion against a real home.
    let job = load(FULL).expect("loads");
    let paths = job
        .sandbox
        .resolve(Path::new("/home/alice"))
        .expect("resolves");
    assert_eq!(paths[0], Path::new("/home/alice/.cargo/bin"));
    let home = Some(Path::new("/home/alice"));
    assert!(check_read_path(Path::new("/home/alice/.ssh/id_rsa"), home).is_err());
    assert!(check_read_path(Path::new("/home/alice"), home).is_err());
    assert!(check_read_path(Path::new("/home/bob/.rustup"), home).is_err());
    assert!(check_read_path(Path::new("/home/alice/.rustup"), home).is_ok());
    assert!(check_read_path(Path::new("/root/.rustup"), Some(Path::new("/root"))).is_ok());
}

#[test]
fn allow_entries_normalise_and_match() {
    let e = AllowEntry::parse("Registry.EXAMPLE.:443").expect("parses");
    assert_eq!(e.host, AllowHost::Exact("registry.example".into()));
    assert!(e.matches("registry.example", 443));
    assert!(e.matches("REGISTRY.example.", 443));
    assert!(!e.matches("registry.example", 80));
    assert!(!e.matches("x.registry.example", 443));
    assert!(!e.matches("registry.example.evil.example", 443));

    let w = AllowEntry::parse("*.cdn.example:443").expect("parses");
    assert_eq!(w.host, AllowHost::Suffix("cdn.example".into()));
    assert!(w.matches("a.cdn.example", 443));
    assert!(w.matches("a.b.cdn.example", 443));
    assert!(
        !w.matches("cdn.example", 443),
        "wildcard never matches the suffix itself"
    );
    assert!(!w.matches("evilcdn.example", 443), "label boundary");
    assert!(!w.matches(".cdn.example", 443));
    assert!(!w.matches("a.cdn.example", 80));

    // IDNA: a Unicode name and its punycode are the same entry.
    let u = AllowEntry::parse("bücher.example:443").expect("parses");
    assert_eq!(u.host, AllowHost::Exact("xn--bcher-kva.example".into()));
    assert!(u.matches("xn--bcher-kva.example", 443));
    assert!(u.matches("BÜCHER.example", 443));

    // IP literals are marked as such and only match themselves.
    let ip = AllowEntry::parse("[::1]:8080").expect("parses");
    assert_eq!(ip.host, AllowHost::Ip("::1".parse::<IpAddr>().expect("ip")));
    assert!(ip.matches("[::1]", 8080));
    assert!(ip.matches("::1", 8080));
    assert!(!ip.matches("localhost", 8080));
    let ip4 = AllowEntry::parse("127.0.0.1:9000").expect("parses");
    assert!(ip4.matches("127.0.0.1", 9000));
    assert!(!AllowEntry::parse("127.0.0.1:9000")
        .expect("p")
        .matches("127.1", 9000));

    for bad in [
        "registry.example",
        "registry.example:0",
        "registry.example:99999",
        "*:443",
        "*.example:443",
        "a.*.example:443",
        "*.1.2.3.4:443",
        "::1:443",
        "reg istry.example:443",
        ":443",
        "a..b.example:443",
        "127.1:80",
        "0x7f.1:80",
    ] {
        assert!(AllowEntry::parse(bad).is_err(), "{bad} should be refused");
    }
    assert_eq!(
        HostName::parse("Example.COM.").expect("parses"),
        HostName::Name("example.com".into())
    );
}

#[test]
fn repository_url_is_parsed() {
    let pin = "0123456789abcdef0123456789abcdef01234567";
    let job = load(&format!(
        "[repository]\nurl = \"https://Git.Example:8443/org/repo.git\"\ncommit = \"{pin}\"\n\
         [install]\ncommand = \"true\"\nallow = [\"git.example:8443\"]\n"
    ))
    .expect("loads");
    assert_eq!(
        job.repository.url.as_deref(),
        Some("https://Git.Example:8443/org/repo.git")
    );
    assert_eq!(job.repository.path, "");
    let url = job.repository.url().expect("is a url").expect("parses");
    assert_eq!(url.host, HostName::Name("git.example".into()));
    assert_eq!(url.port, 8443);
    let job = load(&format!(
        "[repository]\nurl = \"http://[::1]/repo\"\ncommit = \"{pin}\"\n\
         [install]\ncommand = \"true\"\nallow = [\"[::1]:80\"]\n"
    ))
    .expect("loads");
    let url = job.repository.url().expect("is a url").expect("parses");
    assert_eq!(url.host, HostName::Ip("::1".parse().expect("ip")));
    assert_eq!(url.port, 80);
    assert!(load("[repository]\npath = \"repo\"\n")
        .expect("loads")
        .repository
        .url()
        .is_none());
}

#[test]
fn repository_url_refusals_name_the_key() {
    let pin = "0123456789abcdef0123456789abcdef01234567";
    let install = "[install]\ncommand = \"true\"\nallow = [\"git.example:443\"]\n";
    let cases: Vec<(String, &str, &str)> = vec![
        (
            format!("[repository]\npath = \"https://git.example/r\"\ncommit = \"{pin}\"\n{install}"),
            "repository.path",
            "name it as `repository.url`",
        ),
        (
            format!("[repository]\npath = \"r\"\nurl = \"https://git.example/r\"\ncommit = \"{pin}\"\n{install}"),
            "repository.url",
            "exclusive",
        ),
        (
            format!("[repository]\nurl = \"https://user:pw@git.example/r\"\ncommit = \"{pin}\"\n{install}"),
            "repository.url",
            "user information",
        ),
        (
            format!("[repository]\nurl = \"https://git.example/r?x=1\"\ncommit = \"{pin}\"\n{install}"),
            "repository.url",
            "query",
        ),
        (
            format!("[repository]\nurl = \"ssh://git.example/r\"\ncommit = \"{pin}\"\n{install}"),
            "repository.url",
            "only `https://` and `http://`",
        ),
        (
            format!("[repository]\nurl = \"https://git.example\"\ncommit = \"{pin}\"\n{install}"),
            "repository.url",
            "no repository path",
        ),
        (
            format!("[repository]\nurl = \"https://git.example/r\"\ncommit = \"abcdef0\"\n{install}"),
            "repository.commit",
            "full commit id",
        ),
        (
            format!("[repository]\nurl = \"https://git.example/r\"\n{install}"),
            "repository.commit",
            "missing",
        ),
        (
            format!("[repository]\nurl = \"https://git.example:8443/r\"\ncommit = \"{pin}\"\n{install}"),
            "repository.url",
            "`git.example:8443` are not on `[install] allow`",
        ),
        (
            format!("[repository]\nurl = \"https://git.example/r\"\ncommit = \"{pin}\"\n"),
            "repository.url",
            "not on `[install] allow`",
        ),
    ];
    for (text, key, why) in cases {
        let e = load(&text).expect_err(&text);
        let msg = e.to_string();
        assert!(msg.contains(key) && msg.contains(why), "{text}\n{msg}");
    }
}

#[test]
fn non_utf8_and_oversized_files_are_errors() {
    let e = Job::from_bytes(b"[repository]\npath = \"\xff\"\n", Path::new("j.toml"))
        .expect_err("not utf-8");
    assert_eq!(e.line(), Some(2));
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("job.toml");
    std::fs::write(&p, vec![b'#'; 2 * 1024 * 1024]).expect("write");
    assert!(matches!(Job::load(&p), Err(JobError::TooLarge { .. })));
    assert!(matches!(
        Job::load(&dir.path().join("none.toml")),
        Err(JobError::Read { .. })
    ));
}

#[test]
fn image_toolchains_are_sorted_and_deduplicated() {
    let job = Job::from_toml_str(
        "[repository]\npath = \"r\"\n[image]\ntoolchains = [\"rust\", \"python\", \"rust\"]\n",
        Path::new("job.toml"),
    )
    .expect("load");
    assert_eq!(job.image.toolchains, ["python", "rust"]);
    let none =
        Job::from_toml_str("[repository]\npath = \"r\"\n", Path::new("job.toml")).expect("load");
    assert!(none.image.toolchains.is_empty());
}
