//! `[repository] url`: the pinned commit fetched **in the fence**, never by the host or the trusted runner.
//!
//! The fetch is a phase of its own in the install sandbox (the same namespaces, seccomp filter, cgroup and
//! limits as the install phase, the toolchain root's `git`), with the job's install allowlist through the
//! same egress proxy session as the install phase: its connections open the install phase's egress log.
//! The sandbox sees an empty directory at the repository's place; [`script`] runs `git init` there and
//! `git fetch --depth 1 URL <pin>` (falling back to a full fetch of the branches and tags when the server
//! refuses a fetch by commit id), with no hooks, no credential helper, no configuration but ours,
//! `protocol.allow` limited to `http`/`https` and no prompt. The runner then reads what was written **as
//! data** ([`super::repo::prepare_fetched`]): nothing of the fetched repository is executed.

/// The exit code of [`script`] when the shallow fetch of the pinned commit was refused and a full fetch of the
/// branches and tags succeeded.
pub const FULL_FETCH_EXIT: i32 = 10;

/// How the commit came: `shallow` (the one commit) or `full` (the server refused a fetch by commit id).
pub fn mode_of(exit_code: Option<i32>) -> Option<&'static str> {
    match exit_code {
        Some(0) => Some("shallow"),
        Some(FULL_FETCH_EXIT) => Some("full"),
        _ => None,
    }
}

/// Whether git's own output says the disk ran out (`No space left on device`, `File size limit exceeded`, a
/// helper that `died of signal 25`: SIGXFSZ, the RLIMIT_FSIZE limit): a line the server sent (`remote: ...`)
/// never counts.
pub fn out_of_disk(output: &[u8]) -> bool {
    String::from_utf8_lossy(output).lines().any(|l| {
        let l = l.trim_start();
        !l.starts_with("remote:")
            && (l.contains("No space left on device")
                || l.contains("File size limit exceeded")
                || l.contains("died of signal 25"))
    })
}

/// Why a pin cannot be fetched at all: a 64-hex id names a commit of a SHA-256 repository
/// (`git init --object-format=sha256`), and the runner reads only SHA-1 object stores (`gitdir`), so nothing is
/// fetched (the run is `refused` at stage `commit`). `None` for a 40-hex pin.
pub fn object_format_refusal(pin: &str) -> Option<String> {
    (pin.len() == 64).then(|| {
        "the pin is a SHA-256 commit id (64 hex digits): the repository's object format is sha256, and the runner \
         reads only SHA-1 repositories (object format sha1); nothing was fetched"
            .to_owned()
    })
}

/// The server's object format when git's own output says it differs from ours (`fatal: mismatched
/// algorithms: client sha1; server sha256`, a 40-hex pin sent to a SHA-256 repository); a line the server sent
/// (`remote: ...`) never counts.
pub fn server_object_format(output: &[u8]) -> Option<String> {
    String::from_utf8_lossy(output).lines().find_map(|l| {
        let l = l.trim_start();
        if l.starts_with("remote:") {
            return None;
        }
        let rest = l.split_once("mismatched algorithms:")?.1;
        let server = rest.split_once("server ")?.1;
        let name: String = server
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .take(16)
            .collect();
        (!name.is_empty()).then_some(name)
    })
}

/// Whether git's own output says the server's TLS certificate was not trusted (curl's GnuTLS and OpenSSL
/// wordings); a line the server sent (`remote: ...`) never counts. The environment did not provide the trust
/// anchor: the operator gives a private CA through `[egress] ca_certificates`.
pub fn untrusted_certificate(output: &[u8]) -> bool {
    String::from_utf8_lossy(output).lines().any(|l| {
        let l = l.trim_start();
        !l.starts_with("remote:")
            && (l.contains("server certificate verification failed")
                || l.contains("SSL certificate problem")
                || l.contains("certificate verify failed"))
    })
}

/// git's own fsck error when it refused an object the server sent (`error: object ID: msgId: ...`), cut to 200
/// characters; a line the server sent (`remote: ...`) never counts.
pub fn fsck_error(output: &[u8]) -> Option<String> {
    String::from_utf8_lossy(output).lines().find_map(|l| {
        let l = l.trim_start();
        let rest = l.strip_prefix("error: object ")?;
        rest.contains(": ").then(|| {
            l.chars()
                .take(200)
                .collect::<String>()
                .escape_debug()
                .to_string()
        })
    })
}

/// `text` as one single-quoted shell word.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The shell script the fetch phase runs in the sandbox (its working directory is the empty repository
/// directory; `proxy_port` is the in-namespace relay to the egress proxy). `url` is the job's
/// `repository.url` (the loader accepted it: `http(s)://`, no credentials, query, fragment or whitespace)
/// and `pin` its full commit id (hex).
pub fn script(url: &str, pin: &str, proxy_port: u16) -> String {
    let proxy = format!("http://127.0.0.1:{proxy_port}");
    // Every setting on the command line: no system or global configuration is read, and the repository
    // directory's own config is the one `git init --template=` writes.
    let settings = [
        "core.hooksPath=/dev/null",
        "core.fsmonitor=false",
        "core.askPass=",
        "credential.helper=",
        "protocol.allow=never",
        "protocol.http.allow=always",
        "protocol.https.allow=always",
        "fetch.recurseSubmodules=false",
        "submodule.recurse=false",
        "fetch.fsckObjects=true",
        "transfer.fsckObjects=true",
        // A `.gitmodules` whose `update` is `!command` is data here (nothing runs submodule commands: no
        // recursion in the sandbox, none by the runner), and a bundled repository with it is run with a
        // `contained` stage-5 finding: the fetched one gets the same finding, not a refusal. Every other fsck
        // check stays fatal.
        "fetch.fsck.gitmodulesUpdate=warn",
        "fetch.writeCommitGraph=false",
        "gc.auto=0",
        "maintenance.auto=false",
        "http.lowSpeedLimit=1",
        "http.lowSpeedTime=60",
        // git's default, written out: a redirect of the first request is followed (hosting services answer
        // `/repo` with `/repo.git/`), and the new host is one more connection the egress proxy judges by the
        // job's allowlist; no later request is redirected.
        "http.followRedirects=initial",
    ];
    let mut g = String::from("git");
    for s in settings {
        g.push_str(" -c ");
        g.push_str(&quote(s));
    }
    g.push_str(" -c ");
    g.push_str(&quote(&format!("http.proxy={proxy}")));
    let url = quote(url);
    let pin = quote(pin);
    format!(
        "export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0 GIT_ASKPASS=/bin/false \
         SSH_ASKPASS=/bin/false GIT_NO_LAZY_FETCH=1 GIT_NO_REPLACE_OBJECTS=1 GIT_ATTR_NOSYSTEM=1 \
         GIT_LFS_SKIP_SMUDGE=1 GIT_PROTOCOL_FROM_USER=0\n\
         command -v git >/dev/null 2>&1 || {{ echo 'fenced-run fetch: git is not in the sandbox (the system or toolchain root has none)' >&2; exit 127; }}\n\
         [ -x \"$(git --exec-path)/git-remote-http\" ] || {{ echo 'fenced-run fetch: git has no HTTP transport here (git-remote-http is missing: use a toolchain image)' >&2; exit 127; }}\n\
         {g} init -q --template= . || exit $?\n\
         if {g} fetch --quiet --no-tags --no-write-fetch-head --depth=1 {url} {pin}; then exit 0; fi\n\
         echo 'fenced-run fetch: the shallow fetch of the pinned commit failed; fetching the branches and tags in full' >&2\n\
         {g} fetch --quiet --no-tags --no-write-fetch-head {url} '+refs/heads/*:refs/fetched/heads/*' '+refs/tags/*:refs/fetched/tags/*' || exit $?\n\
         exit {FULL_FETCH_EXIT}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_quotes_the_url_and_pins_the_proxy() {
        let s = script("https://git.example/a'b.git", &"a".repeat(40), 3128);
        assert!(s.contains(r"'https://git.example/a'\''b.git'"), "{s}");
        assert!(s.contains("'http.proxy=http://127.0.0.1:3128'"), "{s}");
        assert!(s.contains("'protocol.allow=never'"), "{s}");
        assert!(s.contains("'core.hooksPath=/dev/null'"), "{s}");
        assert!(s.contains("--depth=1"), "{s}");
        for setting in [
            "'credential.helper='",
            "'protocol.http.allow=always'",
            "'protocol.https.allow=always'",
            "'fetch.fsckObjects=true'",
            "'fetch.fsck.gitmodulesUpdate=warn'",
            "'fetch.recurseSubmodules=false'",
            "'http.lowSpeedLimit=1'",
            "'http.lowSpeedTime=60'",
            "'http.followRedirects=initial'",
            "GIT_CONFIG_NOSYSTEM=1",
            "GIT_CONFIG_GLOBAL=/dev/null",
            "GIT_TERMINAL_PROMPT=0",
            "git-remote-http",
        ] {
            assert!(s.contains(setting), "{setting}: {s}");
        }
        assert!(s.contains(&format!("exit {FULL_FETCH_EXIT}")), "{s}");
    }

    #[test]
    fn running_out_of_disk_is_read_from_git_not_from_the_server() {
        assert!(out_of_disk(
            b"error: index-pack: write error: No space left on device\nfatal: fetch-pack: invalid index-pack output\n"
        ));
        assert!(!out_of_disk(
            b"remote: No space left on device\nfatal: not our ref\n"
        ));
        assert!(!out_of_disk(
            b"fatal: remote error: upload-pack: not our ref\n"
        ));
    }

    #[test]
    fn object_formats_are_named_from_the_pin_and_from_git_not_the_server() {
        assert!(object_format_refusal(&"a".repeat(40)).is_none());
        let why = object_format_refusal(&"a".repeat(64)).expect("sha256 pin");
        assert!(why.contains("sha256") && why.contains("SHA-1"), "{why}");
        assert_eq!(
            server_object_format(b"fatal: mismatched algorithms: client sha1; server sha256\n"),
            Some("sha256".into())
        );
        assert_eq!(
            server_object_format(b"remote: mismatched algorithms: client sha1; server sha256\n"),
            None
        );
        assert_eq!(server_object_format(b"fatal: not our ref\n"), None);
    }

    #[test]
    fn an_untrusted_certificate_is_read_from_git_not_from_the_server() {
        assert!(untrusted_certificate(
            b"fatal: unable to access 'https://localhost:1/r.git/': server certificate verification failed. CAfile: /etc/ssl/certs/ca-certificates.crt CRLfile: none\n"
        ));
        assert!(untrusted_certificate(
            b"fatal: unable to access 'https://x.example/': SSL certificate problem: unable to get local issuer certificate\n"
        ));
        assert!(!untrusted_certificate(
            b"remote: SSL certificate problem\nfatal: not our ref\n"
        ));
    }

    #[test]
    fn fsck_errors_are_read_from_git_not_from_the_server() {
        let out = b"error: object 6c56cb: gitmodulesUrl: disallowed submodule url: -x\nfatal: fsck error in packed object\n";
        assert_eq!(
            fsck_error(out).as_deref(),
            Some("error: object 6c56cb: gitmodulesUrl: disallowed submodule url: -x")
        );
        assert_eq!(fsck_error(b"remote: error: object 1: x: y\n"), None);
        assert_eq!(fsck_error(b"fatal: not our ref\n"), None);
    }

    #[test]
    fn exit_codes_name_the_mode() {
        assert_eq!(mode_of(Some(0)), Some("shallow"));
        assert_eq!(mode_of(Some(FULL_FETCH_EXIT)), Some("full"));
        assert_eq!(mode_of(Some(128)), None);
        assert_eq!(mode_of(None), None);
    }
}
