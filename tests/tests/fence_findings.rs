//! The verdict points a reviewer at what the patch makes run around the tests: a patch adding a cargo
//! `build.rs` and a root `conftest.py`, renaming a file to a nested `conftest.py` and giving `package.json` a
//! `pretest` script gets one `runs-at-test-time` finding (stage `patch`) for each of those files and none for
//! the ordinary source file it also changes; the findings show in the JSON, in the human summary and in the
//! viewer.

use fenced_run_tests::fence::{skip, Case};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");

const PATCH: &str = "\
diff --git a/build.rs b/build.rs
new file mode 100644
--- /dev/null
+++ b/build.rs
@@ -0,0 +1,3 @@
+fn main() {
+    std::fs::write(\"tests/t.rs\", \"\").ok();
+}
diff --git a/conftest.py b/conftest.py
new file mode 100644
--- /dev/null
+++ b/conftest.py
@@ -0,0 +1 @@
+import os
diff --git a/helpers/hook.py b/sub/conftest.py
similarity index 100%
rename from helpers/hook.py
rename to sub/conftest.py
diff --git a/package.json b/package.json
--- a/package.json
+++ b/package.json
@@ -1 +1 @@
-{\"name\": \"x\"}
+{\"name\": \"x\", \"scripts\": {\"pretest\": \"node rewrite.js\"}}
diff --git a/src/code.sh b/src/code.sh
--- a/src/code.sh
+++ b/src/code.sh
@@ -1 +1 @@
-echo code
+echo fixed
";

fn case() -> Case {
    let c = Case::new(BIN);
    c.repo_file("tests/test.sh", "echo '1 passed, 0 failed'\n");
    c.repo_file("src/code.sh", "echo code\n");
    c.repo_file("package.json", "{\"name\": \"x\"}\n");
    c.repo_file("helpers/hook.py", "print('hook')\n");
    std::fs::write(c.path().join("fix.patch"), PATCH).expect("patch");
    c.job(
        "[repository]\npath = \"repo\"\npatch = \"fix.patch\"\n[test]\ncommand = \"sh tests/test.sh\"\n\
         timeout_seconds = 60\n",
    );
    c
}

#[test]
fn a_patch_adding_a_build_script_a_conftest_and_a_pretest_is_flagged() {
    if skip() {
        return;
    }
    let c = case();
    let r = c.run();
    assert_eq!(r.outcome(), "tests_passed", "{}", r.dump());
    let found: Vec<(String, String, String)> = r.verdict["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["kind"] == "runs-at-test-time")
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or_default().to_owned();
            (s("stage"), s("path"), s("detail"))
        })
        .collect();
    let paths: Vec<&str> = found.iter().map(|(_, p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        vec!["build.rs", "conftest.py", "package.json", "sub/conftest.py"],
        "{}",
        r.dump()
    );
    for (stage, path, detail) in &found {
        assert_eq!(stage, "patch", "{}", r.dump());
        assert!(detail.starts_with(&format!("{path}: ")), "{detail}");
    }
    assert!(
        found[0].2.contains("cargo compiles and runs it"),
        "{found:?}"
    );
    assert!(found[1].2.contains("pytest imports"), "{found:?}");
    assert!(found[2].2.contains("pretest"), "{found:?}");
    c.assert_clean(&r, &[]);

    // The human summary lists them.
    let out = Command::new(BIN)
        .arg("run")
        .arg(c.path().join("job.toml"))
        .env("TMPDIR", c.tmp())
        .output()
        .expect("run fenced-run");
    let text = String::from_utf8_lossy(&out.stdout);
    for p in ["build.rs", "conftest.py", "package.json", "sub/conftest.py"] {
        let line = format!("finding [patch] runs-at-test-time {p}: {p}: ");
        assert!(text.contains(&line), "{line:?} missing from:\n{text}");
    }
    assert!(!text.contains("runs-at-test-time src/code.sh"), "{text}");

    // The viewer shows them.
    let page = viewer::Page::from_verdict_json("v.json", r.verdict.to_string().as_bytes())
        .expect("the viewer reads the verdict");
    let html = viewer::render::Renderer::new(&page, &viewer::docs::Docs::verification()).page();
    assert!(html.matches("runs-at-test-time").count() >= 4, "{html}");
    assert!(html.contains("sub/conftest.py"), "{html}");
}
