//! Instructions per request, counted by callgrind: a measure of the money path that a noisy machine does not
//! move. The load tool (`load.rs`) reports CPU time, which on a shared 2-core machine varies by a third from
//! one run to the next; the instructions a request executes vary by about 1% (0.3% for a purchase, 0.9% for
//! a 402: docs/bench/reference-server-licensing.md). Sequential purchases of one binary spread
//! 1.9% in one measurement (likely time-based checkpoint work landing unevenly in the two phases; not traced); over
//! `--connections 32`, 0.3%. Count what a change removes (calls, allocations) when it is smaller.
//!
//! ```text
//! cargo build --release -p reference-server && cargo build --release -p workspace-tests --example instructions
//! target/release/examples/instructions [MODE ...] [--requests N] [--connections C] [--functions K] [--keep]
//! ```
//!
//! Modes: `402` (unpaid requests for an article), `verify-only` (paid purchases, durable SQLite file),
//! `memory` (paid purchases, `:memory:` database), `facilitator` (paid purchases settled through a second
//! instance's `/facilitator`, durable: both processes are counted); no mode: the first three. The server is
//! `target/release/reference-server`, or `LOAD_SERVER_BIN` (any binary that takes the load tool's arguments
//! and prints its URL first, such as the x402-axum harness of `bench/x402-axum`), started with the load
//! tool's arguments for the mode.
//!
//! How: the server runs under `valgrind --tool=callgrind`. This tool (not counted) pre-signs `3N + 1`
//! payments with the workspace's signer and sends requests one after another (reqwest, one keep-alive
//! loopback connection): one request (what is built once), then callgrind's counters are zeroed
//! (`callgrind_control -z`), `N` requests, a dump (`callgrind_control -d`), `2N` requests, a second dump.
//! The difference of the two dumps divided by `N` is one request's cost: what a zero, a dump and the idle
//! time between requests add is the same in both and cancels. Callgrind counts user-space instructions
//! only: the kernel's share (system calls, loopback, fsync) is not in these figures, and a durable commit's
//! fsync costs its wait, not instructions.
//!
//! By default requests are sequential, so a purchase commits alone and its commit's fixed costs (the WAL
//! frames' checksums, the WAL index) are all its own. `--connections C` (at most 32) sends them over `C`
//! keep-alive connections at once, each connection one request after another, as the load tool does:
//! purchases then share commits as under load, though less than natively (measured: 0.24 commits per
//! purchase under valgrind against the load tool's 0.07), so the commit costs are still an upper bound,
//! a closer one. Before the counters are zeroed, `C` requests open the
//! connections and build what is built once. A durable purchase: 1,485,000 instructions sequential,
//! 1,375,000 over 32 connections (November 2026). Work done
//! once per second of the clock (the 402 is built again every second) is counted in proportion to the
//! time the run takes under valgrind, many times longer than natively (an estimate: ~1% of a 402's count);
//! `N` is at least 200 so that it evens out between the phases.
//!
//! The per-function table (`--functions K`, default 25, 0 for none) is the same difference, function by
//! function (self cost, from `callgrind_annotate`). Functions that were running when a dump was taken (the
//! runtime's loops) are reported by callgrind with their callees' cost as their own; the table leaves out
//! any function above half a request's total, which only those reach.
//!
//! The server runs at `RUST_LOG=warn` unless `RUST_LOG` says otherwise: `RUST_LOG=info` counts the server's
//! default level, where every request also writes an access line (a 402: 70,400 instructions against 56,800
//! at `warn`).
//!
//! The figures depend on the build (compiler, dependencies), not on the machine's load: compare builds made
//! with one toolchain. `--keep` keeps the callgrind files (for `callgrind_annotate`) and prints where they
//! are. Every run is bounded: `N` at most 10,000 (3N + 1 requests per mode), and each wait (a server's
//! banner, an answer, `callgrind_control`, a dump) at most 60 s.

use std::collections::HashMap;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use workspace_tests::bench::{self, ARTICLE, banner_url, server_args, server_bin, server_log};
use workspace_tests::chain::DEV_KEYS;
use workspace_tests::pay::{Knobs, decode_b64_json, pay_v2};

/// Most requests of the first phase (`--requests`); the second sends twice as many.
const MAX_N: usize = 10_000;
/// Fewest: work done once per second of the clock (a 402 is built again every second) must be spread over
/// many requests, or landing in one phase and not the other moves the result (20 requests: 34,000
/// instructions per 402 instead of 56,000).
const MIN_N: usize = 200;
/// Longest wait for a server's answer, its start or a dump under callgrind.
const WAIT: Duration = Duration::from_secs(60);
const MODES: [&str; 4] = ["402", "verify-only", "memory", "facilitator"];
/// Most connections at once (`--connections`), as the load tool's default.
const MAX_CONNECTIONS: usize = 32;

fn main() {
    let mut modes = Vec::new();
    let mut requests = 500;
    let mut functions = 25;
    let mut keep = false;
    let mut connections = 1;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--requests" => requests = number(&a, args.next()),
            "--functions" => functions = number(&a, args.next()),
            "--keep" => keep = true,
            "--connections" => connections = number(&a, args.next()),
            m if MODES.contains(&m) => modes.push(m.to_owned()),
            m => panic!("unknown mode or option {m:?} (modes: {MODES:?})"),
        }
    }
    if modes.is_empty() {
        modes = MODES[..3].iter().map(|m| (*m).to_owned()).collect();
    }
    let requests: usize = requests.clamp(MIN_N, MAX_N);
    let connections: usize = connections.clamp(1, MAX_CONNECTIONS);
    let bin = server_bin();
    // `cargo build --example` builds no binary of the server's package: say how old the measured one is.
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .map_or_else(
            || "age unknown".to_owned(),
            |age| format!("built {} min ago", age.as_secs() / 60),
        );
    let sent = if connections == 1 {
        "sequential requests per mode, one keep-alive connection".to_owned()
    } else {
        format!("requests per mode over {connections} keep-alive connections at once")
    };
    println!(
        "instructions per request of {bin} ({built}; callgrind, user space): {requests} then {} {sent} \
         on 127.0.0.1",
        2 * requests
    );
    for mode in &modes {
        let dir =
            std::env::temp_dir().join(format!("x402-instructions-{mode}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let (one, two) = count(&bin, mode, requests, connections, &dir);
        let sum = |files: &[PathBuf]| files.iter().map(|f| total(f)).sum::<u64>() as f64;
        let per = (sum(&two) - sum(&one)) / requests as f64;
        println!("{mode:>12}: {per:>10.0} instructions per request");
        if functions > 0 {
            for (name, ir) in per_function(&one, &two, requests)
                .into_iter()
                .filter(|(_, ir)| *ir <= per / 2.0)
                .take(functions)
            {
                println!("{ir:>24.0}  {name}");
            }
        }
        if keep {
            for f in one.iter().chain(&two) {
                println!("{:>14}{}", "", f.display());
            }
        } else {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// The value of the numeric option `name`, or the run stops with why (a typo must not measure the default).
fn number<T: std::str::FromStr>(name: &str, value: Option<String>) -> T {
    match value.as_deref().map(str::parse) {
        Some(Ok(v)) => v,
        _ => panic!("{name} takes a number, got {value:?}"),
    }
}

/// A server under callgrind, killed on drop.
struct Server {
    child: Child,
    /// Its callgrind file's path (dumps are numbered after it).
    out: PathBuf,
    /// `host:port`, from the URL its banner prints first.
    addr: String,
}

impl Server {
    /// Starts `bin` under callgrind with the load tool's arguments and `args`, writing to `<dir>/<name>.out`.
    fn start(bin: &str, name: &str, args: &[String], dir: &Path) -> Server {
        let out = dir.join(format!("{name}.out"));
        let mut child = Command::new("valgrind")
            .args(["--tool=callgrind", "--quiet"])
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg(bin)
            .args(server_args(&dir.join(format!("{name}.media"))))
            .args(args)
            .env("RUST_LOG", server_log())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("this tool needs valgrind (apt install valgrind): {e}"));
        let stdout = child.stdout.take().expect("stdout");
        let mut server = Server {
            child,
            out,
            addr: String::new(),
        };
        // The first line is the banner; the rest is drained so that the server never blocks on a full pipe.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = std::io::BufReader::new(stdout).lines();
            let _ = tx.send(lines.next().and_then(Result::ok));
            lines.for_each(drop);
        });
        let banner = match rx.recv_timeout(WAIT) {
            Ok(Some(banner)) => banner,
            Ok(None) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                panic!("{bin} printed no banner under valgrind")
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("{bin} printed no banner under valgrind within {WAIT:?}")
            }
        };
        server.addr = banner_url(&banner)
            .and_then(|url| url.strip_prefix("http://"))
            .unwrap_or_else(|| panic!("no http:// URL in the banner {banner:?}"))
            .to_owned();
        server
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The facilitator mode's token between the server and its facilitator.
const TOKEN: &str = "instructions-facilitator-token";

/// Runs `mode` against `bin` under callgrind; returns the dumps of `requests` and of `2 * requests`
/// requests, one per process counted (the facilitator mode counts the server and its facilitator).
/// Requests go over `connections` keep-alive connections at once, each sending one after another.
fn count(
    bin: &str,
    mode: &str,
    requests: usize,
    connections: usize,
    dir: &Path,
) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let db = |name: &str| dir.join(name).display().to_string();
    let mut servers = Vec::new();
    let args: Vec<String> = match mode {
        "memory" => vec!["--database".into(), ":memory:".into()],
        "facilitator" => {
            let f = Server::start(
                bin,
                "facilitator",
                &[
                    "--database".into(),
                    db("facilitator.sqlite3"),
                    "--facilitator-token".into(),
                    TOKEN.into(),
                ],
                dir,
            );
            let args = vec![
                "--database".into(),
                db("db.sqlite3"),
                "--facilitator-url".into(),
                format!("http://{}/facilitator", f.addr),
                "--facilitator-url-token".into(),
                TOKEN.into(),
            ];
            servers.push(f);
            args
        }
        _ => vec!["--database".into(), db("db.sqlite3")],
    };
    let server = Server::start(bin, "server", &args, dir);
    let url = format!("http://{}{ARTICLE}", server.addr);
    servers.push(server);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    // One client: its pool keeps a keep-alive connection for each request in flight.
    let client = bench::client();

    let (status, headers) = runtime.block_on(get(&client, &url, None));
    assert_eq!(status, 402, "the article answers 402 unpaid");
    let required = decode_b64_json(
        headers["payment-required"]
            .to_str()
            .expect("an ASCII PAYMENT-REQUIRED header"),
    );
    let paid = mode != "402";
    let mut payments: Vec<Option<String>> = (0..3 * requests + connections)
        .map(|_| paid.then(|| pay_v2(DEV_KEYS[2], &required, &Knobs::default())))
        .collect();
    let want = if paid { 200 } else { 402 };
    // `n` requests, `connections` at once: each connection's task sends its share one after another.
    let mut send = |n: usize| {
        let mut shares = vec![Vec::new(); connections];
        for (i, payment) in payments.drain(..n).enumerate() {
            shares[i % connections].push(payment);
        }
        runtime.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for (c, share) in shares.into_iter().enumerate() {
                let (client, url, mode) = (client.clone(), url.clone(), mode.to_owned());
                tasks.spawn(async move {
                    for (i, payment) in share.iter().enumerate() {
                        let (status, headers) = get(&client, &url, payment.as_deref()).await;
                        assert_eq!(
                            status, want,
                            "request {i} of connection {c} ({mode}): {headers:?}"
                        );
                    }
                });
            }
            while let Some(done) = tasks.join_next().await {
                done.expect("a connection's requests");
            }
        });
    };
    // What is built once (the SQLite statements, each connection and its buffers), outside the count.
    send(connections);
    for s in &servers {
        callgrind_control(s.child.id(), "-z");
    }
    send(requests);
    let one = servers
        .iter()
        .map(|s| dump(s.child.id(), &s.out, 1))
        .collect();
    send(2 * requests);
    let two = servers
        .iter()
        .map(|s| dump(s.child.id(), &s.out, 2))
        .collect();
    drop(servers);
    (one, two)
}

/// One request for the article (with a payment, if given): its status and headers, its body read whole.
async fn get(
    client: &reqwest::Client,
    url: &str,
    payment: Option<&str>,
) -> (u16, reqwest::header::HeaderMap) {
    let mut rb = client.get(url).timeout(WAIT);
    if let Some(p) = payment {
        rb = rb.header("PAYMENT-SIGNATURE", p);
    }
    let resp = rb.send().await.expect("an answer");
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    resp.bytes().await.expect("the answer's body");
    (status, headers)
}

/// Runs `callgrind_control <option> <pid>`, waiting at most [`WAIT`] for it.
fn callgrind_control(pid: u32, option: &str) {
    let mut child = Command::new("callgrind_control")
        .arg(option)
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("callgrind_control (valgrind) is needed: {e}"));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for callgrind_control") {
            break status;
        }
        if started.elapsed() > WAIT {
            let _ = child.kill();
            panic!("callgrind_control {option} {pid} did not finish within {WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "callgrind_control {option} {pid} failed");
}

/// Asks callgrind for its `n`th dump and waits until the file is whole (its `totals:` line written).
fn dump(pid: u32, out: &Path, n: usize) -> PathBuf {
    callgrind_control(pid, "-d");
    let file = PathBuf::from(format!("{}.{n}", out.display()));
    let started = Instant::now();
    loop {
        if std::fs::read_to_string(&file).is_ok_and(|t| t.lines().any(|l| l.starts_with("totals:")))
        {
            return file;
        }
        assert!(
            started.elapsed() < WAIT,
            "no dump {} after {WAIT:?}",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The total instruction count of a callgrind dump (its `summary:` line).
fn total(file: &Path) -> u64 {
    let text = std::fs::read_to_string(file).expect("the callgrind file");
    text.lines()
        .find_map(|l| l.strip_prefix("summary:"))
        .and_then(|n| n.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no summary line in {}", file.display()))
}

/// Each function's self instructions per request (summed over the processes counted): the difference
/// between the dumps, largest first.
fn per_function(one: &[PathBuf], two: &[PathBuf], requests: usize) -> Vec<(String, f64)> {
    let costs = |files: &[PathBuf]| {
        let mut sum = HashMap::new();
        for f in files {
            for (name, ir) in self_costs(f) {
                *sum.entry(name).or_insert(0) += ir;
            }
        }
        sum
    };
    let (a, b) = (costs(one), costs(two));
    let mut diff: Vec<(String, f64)> = b
        .iter()
        .map(|(name, ir)| {
            let before = a.get(name).copied().unwrap_or(0);
            (name.clone(), (*ir as f64 - before as f64) / requests as f64)
        })
        .collect();
    diff.sort_by(|x, y| y.1.total_cmp(&x.1));
    diff
}

/// Self cost per function, from `callgrind_annotate` (every function: threshold 100%), summed over the
/// source files a function's inlined lines come from.
fn self_costs(file: &Path) -> HashMap<String, u64> {
    let out = Command::new("callgrind_annotate")
        .args(["--threshold=100", "--inclusive=no", "--auto=no"])
        .arg(file)
        .stderr(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("callgrind_annotate (valgrind) is needed: {e}"));
    assert!(
        out.status.success(),
        "callgrind_annotate failed on {}",
        file.display()
    );
    let mut costs = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let line = line.trim_start();
        let Some((count, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(count) = count.replace(',', "").parse::<u64>() else {
            continue;
        };
        // `1,234 (0.5%)  file:function [object]` (the percentage only in some versions).
        let rest = rest.trim_start();
        let rest = match rest.strip_prefix('(') {
            Some(r) => r.split_once(')').map_or(r, |(_, r)| r).trim_start(),
            None => rest,
        };
        if rest.is_empty() || rest.starts_with("PROGRAM TOTALS") {
            continue;
        }
        let name = rest.rsplit_once(" [").map_or(rest, |(n, _)| n);
        let name = name.split_once(':').map_or(name, |(_, f)| f).to_owned();
        *costs.entry(name).or_insert(0) += count;
    }
    costs
}
