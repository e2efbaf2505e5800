//! The run viewer in a real browser: headless Chromium driven through chromedriver (fantoccini). The page loads,
//! the outcome and the verification result are visible, every request the page makes goes to the viewer on
//! 127.0.0.1 (resource timing and the DevTools network log; Chromium's proxy is a recorder on loopback, so that
//! nothing, not even the browser's own background requests, leaves the machine; a control request proves it), the layout
//! fits a narrow window, and screenshots at 1280x800 and 400x800 are saved under target/ and checked non-blank.
//! Skipped with a message where Chromium or chromedriver is absent, unless FENCED_RUN_REQUIRE_CHROMIUM=1.

use attestation::verdict::Outcome;
use fantoccini::{ClientBuilder, Locator};
use fenced_run_tests::viewer::{
    evidence, find_on_path as find, founder_options, free_port, verdict, Reaped,
};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Records the request line of every connection it receives and answers 403: Chromium's proxy, so that any
/// request to anywhere but loopback (which Chromium never proxies) lands here.
struct Recorder {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Recorder {
    fn start() -> Recorder {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s2, st2) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for c in l.incoming() {
                if st2.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let Ok(mut c) = c else { continue };
                let _ = c.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let mut line = String::new();
                let _ = BufReader::new(&c).read_line(&mut line);
                if let Ok(mut v) = s2.lock() {
                    v.push(line.trim().to_string());
                }
                let _ = c.write_all(
                    b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            }
        });
        Recorder {
            port,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// Distinct pixel values in a PNG, and the share of the most common one.
fn pixel_stats(png_bytes: &[u8]) -> (usize, f64, (u32, u32)) {
    let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let bpp = info.color_type.samples()
        * if info.bit_depth == png::BitDepth::Sixteen {
            2
        } else {
            1
        };
    let mut counts = std::collections::HashMap::new();
    for px in buf[..info.buffer_size()].chunks(bpp) {
        *counts.entry(px.to_vec()).or_insert(0usize) += 1;
    }
    let total: usize = counts.values().sum();
    let top = counts.values().copied().max().unwrap_or(0);
    (
        counts.len(),
        top as f64 / total.max(1) as f64,
        (info.width, info.height),
    )
}

#[test]
fn the_page_in_headless_chromium() {
    let chromium = find(&["chromium", "chromium-browser"]);
    let driver = find(&["chromedriver"]);
    let (Some(chromium), Some(driver)) = (chromium, driver) else {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Chromium,
            "headless Chromium test: chromium or chromedriver not on PATH (apt-get install chromium chromium-driver)",
        );
        return;
    };
    let (bytes, m) = evidence(&verdict(Outcome::TestsPassed, "plain"));
    let page = viewer::Page::from_bytes("run.evidence", &bytes, &founder_options(m)).expect("page");
    let view = viewer::start(&page, viewer::ServeConfig::default()).expect("viewer");
    let recorder = Recorder::start();
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
    // Ready when it accepts connections (bounded: 300 tries, 50 ms apart).
    let ready = (0..300).any(|_| {
        TcpStream::connect(("127.0.0.1", dport)).is_ok() || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            false
        }
    });
    assert!(ready, "chromedriver did not listen on {dport}");

    let out = target_dir().join("viewer-screenshots");
    std::fs::create_dir_all(&out).expect("screenshot dir");
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
                    format!("--user-data-dir={}", profile.path().display()),
                    format!("--proxy-server=http://127.0.0.1:{}", recorder.port),
                ],
            }),
        );
        caps.insert("goog:loggingPrefs".into(), serde_json::json!({ "performance": "ALL" }));
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let c = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{dport}"))
            .await
            .expect("a WebDriver session");
        c.goto(view.url()).await.expect("page loads");
        let outcome = c.find(Locator::Css("#outcome")).await.expect("#outcome");
        assert!(outcome.is_displayed().await.expect("displayed"));
        assert!(outcome.text().await.expect("text").contains("tests_passed"));
        let verification = c.find(Locator::Css("#verification")).await.expect("#verification");
        assert!(verification.is_displayed().await.expect("displayed"));
        assert!(verification.text().await.expect("text").contains("SIMULATED"));
        // The stylesheet applied (CSP allows it by hash): the badge has its colour.
        let bg = c
            .execute("return getComputedStyle(document.querySelector('.badge.big')).backgroundColor", vec![])
            .await
            .expect("style");
        assert_eq!(bg.as_str(), Some("rgb(154, 103, 0)"), "the embedded stylesheet is applied");
        // Every request of the page went to the viewer.
        let names = c
            .execute(
                "return performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource')).map(e => e.name)",
                vec![],
            )
            .await
            .expect("resource timing");
        let names: Vec<String> = serde_json::from_value(names).expect("names");
        let origin = format!("http://127.0.0.1:{}/", view.port());
        assert!(!names.is_empty() && names.iter().all(|n| n.starts_with(&origin)), "{names:?}");

        let shot = c.screenshot().await.expect("screenshot");
        std::fs::write(out.join("page-1280x800.png"), &shot).expect("save");
        let (distinct, top, (w, h)) = pixel_stats(&shot);
        assert!(w >= 1000 && h >= 600, "{w}x{h}");
        assert!(distinct >= 16 && top < 0.98, "blank screenshot: {distinct} values, top {top}");

        // Narrow: nothing wider than the window.
        c.set_window_size(400, 800).await.expect("resize");
        let fits = c
            .execute("return document.documentElement.scrollWidth <= window.innerWidth + 1", vec![])
            .await
            .expect("layout");
        assert_eq!(fits.as_bool(), Some(true), "the page overflows a narrow window");
        let shot = c.screenshot().await.expect("screenshot");
        std::fs::write(out.join("page-400x800.png"), &shot).expect("save");
        let (distinct, top, _) = pixel_stats(&shot);
        assert!(distinct >= 16 && top < 0.98, "blank narrow screenshot");

        // The docs the check links point to are served by the viewer too.
        c.find(Locator::Css("a[href='docs/verification']")).await.expect("docs link").click().await.expect("click");
        let h = c.find(Locator::Css("#authenticity-checks-verifier-lib-snp-chain")).await.expect("section anchor");
        assert!(h.text().await.expect("text").contains("Authenticity checks"));

        // Every request the page and the docs page made (the DevTools network events of the performance log)
        // went to the viewer's origin.
        let sid = c.session_id().await.expect("session").expect("a session id");
        let log = ureq::post(&format!("http://127.0.0.1:{dport}/session/{sid}/se/log"))
            .set("Content-Type", "application/json")
            .send_string(r#"{"type":"performance"}"#)
            .expect("the performance log")
            .into_string()
            .expect("log text");
        let log: serde_json::Value = serde_json::from_str(&log).expect("log JSON");
        let mut urls = Vec::new();
        for entry in log["value"].as_array().expect("log entries") {
            let m: serde_json::Value =
                serde_json::from_str(entry["message"].as_str().unwrap_or("{}")).unwrap_or_default();
            if m["message"]["method"] == "Network.requestWillBeSent" {
                urls.push(m["message"]["params"]["request"]["url"].as_str().unwrap_or("").to_string());
            }
        }
        // Browser-internal loads (the start tab's chrome:// pages, data: URLs) are not network requests.
        let net: Vec<&String> = urls
            .iter()
            .filter(|u| !["chrome:", "data:", "about:", "blob:"].iter().any(|p| u.starts_with(p)))
            .collect();
        assert!(net.len() >= 2, "the page and the docs page: {urls:?}");
        assert!(net.iter().all(|u| u.starts_with(&origin)), "a page request left the viewer: {net:?}");
        // Chromium's own background requests (not the page's) went to the recording proxy, never out.
        let before = recorder.seen();
        println!("browser background requests caught by the recording proxy: {}", before.len());
        // Control: a request elsewhere would have been seen.
        let _ = c.goto("http://elsewhere.example/").await;
        let after = recorder.seen();
        assert!(after.iter().any(|l| l.contains("elsewhere.example")), "the recording proxy saw nothing: {after:?}");
        c.close().await.expect("close");
    });
    view.stop().expect("stop");
}
