// fenced-run view: the browser check. Runs verifier-wasm (served beside this script) on the evidence the page
// shows, with the request the server verified it with, and shows claim by claim whether the browser's result
// agrees with the server's. Everything is written with textContent: nothing from the evidence is parsed as HTML.
// Without WebAssembly, or when the module or the input cannot be had, the page says the check did not run.
"use strict";
(function () {
  var state = { state: "running", browser: null, server: null, ms: null, why: null };
  window.fencedRunCheck = state;
  var status = document.getElementById("browser-status");
  var body = document.getElementById("browser-claims");
  function finish(kind, text) {
    state.state = kind;
    document.documentElement.setAttribute("data-browser-check", kind);
    if (status) {
      status.textContent = text;
      status.className = "browser " + kind;
    }
  }
  function notRun(why) {
    state.why = why;
    finish("not-run", "The browser check did not run: " + why + ". The result above is the server's alone.");
  }
  if (!status || !body) return;
  if (typeof WebAssembly !== "object" || typeof fetch !== "function") {
    notRun("this browser has no WebAssembly");
    return;
  }
  // Keys sorted at every level, so that equal results compare equal as text.
  function canon(v) {
    if (Array.isArray(v)) return "[" + v.map(canon).join(",") + "]";
    if (v && typeof v === "object") {
      return "{" + Object.keys(v).sort().map(function (k) { return JSON.stringify(k) + ":" + canon(v[k]); }).join(",") + "}";
    }
    return JSON.stringify(v);
  }
  function unb64(s) {
    var bin = atob(s), out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  function cell(row, text, cls) {
    var td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    row.appendChild(td);
  }
  function claimText(c) {
    if (!c) return "absent";
    return c.status + (c.anchor ? " (" + c.anchor + ")" : "");
  }
  Promise.all([fetch("check-input.json"), fetch("verifier.wasm")]).then(function (rs) {
    if (!rs[0].ok) throw new Error("no evidence to check (HTTP " + rs[0].status + " for the input)");
    if (!rs[1].ok) throw new Error("the viewer has no verifier module (HTTP " + rs[1].status + "; build it with cargo build -p verifier-wasm --target wasm32-unknown-unknown --release)");
    return Promise.all([rs[0].json(), rs[1].arrayBuffer()]);
  }).then(function (got) {
    var input = got[0];
    return WebAssembly.instantiate(got[1], {}).then(function (m) { return [input, m.instance.exports]; });
  }).then(function (got) {
    var input = got[0], e = got[1];
    var evidence = unb64(input.evidence);
    var request = new TextEncoder().encode(JSON.stringify(input.request));
    function run() {
      var n = evidence.length + request.length;
      var ptr = e.input(n);
      var mem = new Uint8Array(e.memory.buffer, ptr, n);
      mem.set(evidence, 0);
      mem.set(request, evidence.length);
      if (e.verify(evidence.length, request.length) !== 0) throw new Error("the module refused its input");
      var out = new Uint8Array(e.memory.buffer, e.output_ptr(), e.output_len());
      return JSON.parse(new TextDecoder().decode(out));
    }
    var t0 = performance.now();
    var browser = run();
    state.ms = performance.now() - t0;
    // For measurements: the time of one verification, averaged over n runs (docs/benchmarks.md).
    window.fencedRunBench = function (n) {
      var t = performance.now();
      for (var i = 0; i < n; i++) run();
      return (performance.now() - t) / n;
    };
    var server = input.server;
    state.browser = browser;
    state.server = server;
    var rows = [["verified", String(server.verified), String(browser.verified)]];
    var sc = server.claims || [], bc = browser.claims || [];
    var names = sc.map(function (c) { return c.claim; });
    bc.forEach(function (c) { if (names.indexOf(c.claim) < 0) names.push(c.claim); });
    names.forEach(function (name) {
      var s = sc.filter(function (c) { return c.claim === name; })[0];
      var b = bc.filter(function (c) { return c.claim === name; })[0];
      rows.push([name, claimText(s), claimText(b), canon(s) === canon(b)]);
    });
    var fs = (server.failures || []).map(function (f) { return f.check; }).join(", ") || "none";
    var fb = (browser.failures || []).map(function (f) { return f.check; }).join(", ") || "none";
    rows.push(["failed checks", fs, fb, canon(server.failures) === canon(browser.failures)]);
    if (server.error || browser.error) {
      rows.push(["error", canon(server.error), canon(browser.error), canon(server.error) === canon(browser.error)]);
    }
    body.textContent = "";
    rows.forEach(function (r) {
      var agree = r.length > 3 ? r[3] : r[1] === r[2];
      var tr = document.createElement("tr");
      tr.className = agree ? "agree" : "disagree";
      cell(tr, r[0]);
      cell(tr, r[1]);
      cell(tr, r[2]);
      cell(tr, agree ? "agree" : "DISAGREE", agree ? "mark ok" : "mark bad");
      body.appendChild(tr);
    });
    var all = canon(server) === canon(browser);
    finish(all ? "agree" : "disagree", all
      ? "Your browser verified the evidence itself (verifier-wasm, " + state.ms.toFixed(1) + " ms) and agrees with the server on every claim."
      : "Your browser verified the evidence itself and DISAGREES with the server: do not trust this page's result.");
  }).catch(function (err) {
    notRun(String(err && err.message ? err.message : err));
  });
})();
