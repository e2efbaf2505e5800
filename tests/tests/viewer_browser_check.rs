//! The browser check in headless Chromium: for every real SEV-SNP report and TDX quote of `$FENCED_RUN_VECTORS`
//! sealed into evidence (verifier_wasm::vectors), forged ones (a flipped signature byte, a changed measurement)
//! and sim evidence, `fenced-run view`'s page runs verifier-wasm (the check library built for wasm32) in the
//! browser, and its result is the server's: every claim, every failure, every field of the JSON, and the same as
//! the test's own native `verifier_wasm::verify`. This is also the test that the wasm build and the native one
//! give the same result on every vector. Without the module the page says the browser check did not run.
//! Skipped (`skipped: chromium: ...`) without chromium, chromedriver or the built module, unless
//! FENCED_RUN_REQUIRE_CHROMIUM=1; skipped (`skipped: vectors: ...`) without the vectors.

use attestation::vectors::{skip_for, SkipKind};
use attestation::verdict::Outcome;
use fantoccini::{ClientBuilder, Locator};
use fenced_run_tests::viewer::{
    evidence, find_on_path as find, founder_options, free_port, verdict, Reaped,
};
use std::net::TcpStream;
use std::time::Duration;

/// What the page's script reports (`window.fencedRunCheck`) once it has finished.
async fn check_state(c: &fantoccini::Client, url: &str) -> serde_json::Value {
    c.goto(url).await.expect("page loads");
    c.wait()
        .at_most(Duration::from_secs(120))
        .for_element(Locator::Css(
            "html[data-browser-check='agree'], html[data-browser-check='disagree'], html[data-browser-check='not-run']",
        ))
        .await
        .expect("the browser check finishes");
    c.execute("return window.fencedRunCheck", vec![])
        .await
        .expect("the check's state")
}

fn failed_checks(v: &serde_json::Value) -> Vec<String> {
    v["failures"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["check"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_browser_and_the_server_agree_on_every_vector_and_forgery() {
    let (Some(chromium), Some(driver)) = (
        find(&["chromium", "chromium-browser"]),
        find(&["chromedriver"]),
    ) else {
        skip_for(
            SkipKind::Chromium,
            "browser check: chromium or chromedriver not on PATH (apt-get install chromium chromium-driver)",
        );
        return;
    };
    let Some((module_path, module)) = viewer::browser::find_module() else {
        skip_for(
            SkipKind::Chromium,
            "browser check: verifier-wasm not built (cargo rustc -p verifier-wasm --target wasm32-unknown-unknown --release --crate-type cdylib)",
        );
        return;
    };
    let root = attestation::vectors::root();
    if !root.join("snp").is_dir() || !root.join("tdx").is_dir() {
        skip_for(
            SkipKind::Vectors,
            &format!("browser check: no vectors at {}", root.display()),
        );
        return;
    }
    eprintln!("module {} ({} bytes)", module_path.display(), module.len());
    // The real vectors and the forgeries, then sim evidence that verifies (SIMULATED).
    let mut cases: Vec<(String, Vec<u8>, verifier_wasm::Request, bool)> =
        verifier_wasm::vectors::cases(&root, time::OffsetDateTime::now_utc())
            .into_iter()
            .map(|c| (c.name, c.evidence, c.request, c.forged))
            .collect();
    let snp = cases.iter().filter(|c| c.0.starts_with("snp/")).count();
    let tdx = cases.iter().filter(|c| c.0.starts_with("tdx/")).count();
    assert!(snp >= 20 && tdx >= 9, "{snp} SEV-SNP and {tdx} TDX cases");
    assert_eq!(cases.iter().filter(|c| c.3).count(), 4, "four forgeries");
    let (sim, m) = evidence(&verdict(Outcome::TestsFailed, "plain"));
    let sim_request = verifier_wasm::Request::from_options(
        &founder_options(m),
        &verifier_lib::output::ClaimContext::default(),
    );
    cases.push(("sim".into(), sim, sim_request, false));

    let profile = tempfile::tempdir().expect("profile dir");
    let dport = free_port();
    let _driver = Reaped(
        std::process::Command::new(&driver)
            .arg(format!("--port={dport}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("chromedriver starts"),
    );
    let ready = (0..300).any(|_| {
        TcpStream::connect(("127.0.0.1", dport)).is_ok() || {
            std::thread::sleep(Duration::from_millis(50));
            false
        }
    });
    assert!(ready, "chromedriver did not listen on {dport}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run",
                    "--disable-dev-shm-usage", "--window-size=1280,800",
                    // Nothing but loopback is reachable: any other request would fail at this proxy.
                    "--proxy-server=http://127.0.0.1:9",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let c = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{dport}"))
            .await
            .expect("a WebDriver session");
        let mut originals: std::collections::HashMap<String, Vec<String>> = Default::default();
        for (name, ev, request, forged) in &cases {
            let (opts, _) = request.to_options().expect("options");
            let page = viewer::Page::from_bytes(name, ev, &opts).expect("page");
            let view = viewer::start_with_module(&page, viewer::ServeConfig::default(), Some(module.clone()))
                .expect("viewer");
            let state = check_state(&c, view.url()).await;
            let native = verifier_wasm::verify(ev, request);
            assert_eq!(state["state"], "agree", "{name}: {state}");
            assert_eq!(state["browser"], state["server"], "{name}");
            assert_eq!(state["server"], native, "{name}: the page's server result is the library's");
            // Every claim row agrees, and there is one per claim.
            let disagree = c.find_all(Locator::Css("#browser-claims tr.disagree")).await.expect("rows");
            let agree = c.find_all(Locator::Css("#browser-claims tr.agree")).await.expect("rows");
            assert!(disagree.is_empty() && agree.len() >= 17, "{name}: {} agree, {} disagree", agree.len(), disagree.len());
            let failures = failed_checks(&native);
            assert_eq!(native["verified"], serde_json::json!(name == "sim"), "{name}: {failures:?}");
            if name.starts_with("snp/") || name.starts_with("tdx/") {
                // The verdict is sealed with the test's key, which no real report binds.
                assert!(failures.iter().any(|f| f == "key-binding"), "{name}: {failures:?}");
            }
            if *forged {
                let base = name.split('+').next().unwrap_or_default();
                let orig = originals.get(base).cloned().unwrap_or_default();
                assert!(
                    failures.iter().any(|f| !orig.contains(f)),
                    "{name}: the forgery fails no check its original passed: {failures:?} vs {orig:?}"
                );
            } else {
                originals.insert(name.clone(), failures);
            }
            eprintln!("{name}: agree ({} ms in the browser)", state["ms"]);
            view.stop().expect("stop");
        }

        // Time per verification in Chromium for one SEV-SNP and one TDX vector (docs/benchmarks.md).
        for (name, ev, request, _) in cases
            .iter()
            .filter(|c| c.0 == "snp/milan-v2-virtee-sev" || c.0 == "tdx/dcapqvl-v4-b0c06f-uptodate")
        {
            let (opts, _) = request.to_options().expect("options");
            let page = viewer::Page::from_bytes(name, ev, &opts).expect("page");
            let view = viewer::start_with_module(&page, viewer::ServeConfig::default(), Some(module.clone()))
                .expect("viewer");
            let state = check_state(&c, view.url()).await;
            assert_eq!(state["state"], "agree", "{name}");
            let ms = c.execute("return fencedRunBench(20)", vec![]).await.expect("bench");
            let t = std::time::Instant::now();
            for _ in 0..20 {
                std::hint::black_box(verifier_wasm::verify(ev, request));
            }
            let native = t.elapsed().as_secs_f64() * 1000.0 / 20.0;
            eprintln!("timing {name}: {ms} ms per verification in Chromium, {native:.2} ms natively (this test's build)");
            view.stop().expect("stop");
        }

        // Without the module the page says the browser check did not run, and still shows the server's result.
        let (name, ev, request, _) = &cases[0];
        let (opts, _) = request.to_options().expect("options");
        let page = viewer::Page::from_bytes(name, ev, &opts).expect("page");
        let view = viewer::start_with_module(&page, viewer::ServeConfig::default(), None).expect("viewer");
        let state = check_state(&c, view.url()).await;
        assert_eq!(state["state"], "not-run", "{state}");
        let status = c.find(Locator::Css("#browser-status")).await.expect("status");
        assert!(status.text().await.expect("text").contains("The browser check did not run"));
        let verification = c.find(Locator::Css("#verification")).await.expect("#verification");
        assert!(verification.text().await.expect("text").contains("REJECTED"));
        view.stop().expect("stop");
        c.close().await.expect("close");
    });
}
