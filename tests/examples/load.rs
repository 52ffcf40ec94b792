//! The money path measured the way a user meets it: starts a release `reference-server` binary (and what the
//! mode needs: a facilitator instance, anvil with Circle's USDC), pre-signs distinct payments with the
//! workspace's signer, drives the server over keep-alive connections on 127.0.0.1, and reports requests/s,
//! p50/p99 latency and the server's CPU per request (user + system time from `/proc/<pid>/stat`, the
//! facilitator's added in facilitator mode), with the load average beside it; then the bytes written and,
//! from each instance's `/metrics`, the SQLite writer's commits per request and writes per commit (how many
//! writes share a commit: docs/bench/reference-server-licensing.md).
//!
//! ```text
//! cargo build --release -p reference-server
//! source scripts/test-deps.sh    # only for the onchain mode (anvil, USDC artifacts)
//! cargo run --release -p workspace-tests --example load -- [MODE ...] [--seconds 8] [--connections 32] [--payers 1] [--signed-per-second 0] [--pin]
//! ```
//!
//! Modes: `402` (unpaid requests), `verify-only` (durable SQLite file), `memory` (`--database :memory:`),
//! `facilitator` (settled through a second instance's `/facilitator`, verify-only), `onchain` (anvil +
//! FiatTokenV2_2, the server settles with `--rpc-url`); no mode: all but `onchain`. Every run is bounded:
//! `--seconds` of load and at most the pre-signed payments (each used once), loopback only.
//!
//! PostgreSQL modes (`LOAD_POSTGRES=postgres://postgres@127.0.0.1:<port>/postgres`, an admin URL; each run
//! creates a fresh database): `postgres` (verify-only purchases, one instance), `postgres-2` (two instances
//! on one database, connections split between them, CPU of both). llms.txt floods: `flood` (one SQLite
//! instance: purchases alone, then purchases while other connections flood `/serveLlmsTxt`) and
//! `postgres-flood` (two PostgreSQL instances: purchases on B alone, then while A is flooded).
//!
//! `clients` (needs `source scripts/test-deps.sh`): whole purchases (402, sign, paid request) against one
//! `:memory:` instance by the workspace's Rust client (`x402_tower::client`, reqwest-middleware adapter) and
//! then by the official `@x402/fetch` (`tests/js/buy-loop.mjs`), the same connections in flight and seconds
//! each; purchases/s and each client's own CPU per purchase.
//!
//! `--payers N` signs the payments of the modes that move no money with N accounts (keys derived from their
//! index) instead of one dev account: a buyer population, so that the indexes keyed by payer are written at
//! random places as a real server's are (one payer appends to them). `onchain` keeps its funded dev accounts.
//!
//! `--signed-per-second N` dates the pre-signed payments as clients signing N of them per second while the
//! load runs would (payment `i`'s `validBefore` is `i / N` seconds later than the first's, at most 100 s):
//! the receipts' token ids lead with `validBefore`, so how many purchases share a second decides how close
//! together their keys land (docs/bench/reference-server-licensing.md). Without it every
//! payment carries the `validBefore` of the moment it was pre-signed.
//!
//! `--pin` runs every server this tool starts on the second core (`taskset -c 1`) and the tool itself on the
//! first, as issue #15 measured: on a shared 2-core machine the server's workers and the load's threads
//! otherwise compete for both cores, and a request waits out a scheduler tick now and then (the 402's p99 sat
//! at 4.1 ms, one tick of a 250 Hz kernel, unpinned; 2.2–2.6 ms pinned). Needs `taskset` (util-linux).
//!
//! `LOAD_KEEP=1` keeps each SQLite mode's directory (databases; each server's log at `RUST_LOG`, default
//! `warn`, in `server-<n>.log`, its banner in `server-<n>.out`) for inspection, and prints its path.

use std::io::{BufRead as _, Write as _};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use workspace_tests::bench::{ARTICLE, banner_url, client, server_args, server_bin, server_log};
use workspace_tests::chain::{CHAIN_ID, Chain, DEV_KEYS, TOKEN_NAME, TOKEN_VERSION, address_of};
use workspace_tests::pay::{Knobs, decode_b64_json, pay_v2};

const TOKEN: &str = "load-facilitator-token";

struct Options {
    modes: Vec<String>,
    seconds: u64,
    connections: usize,
    /// `--pin`: servers on core 1, this tool on core 0.
    pin: bool,
    /// `--payers N`: the verify-only, `:memory:`, facilitator and PostgreSQL modes' payments come from N
    /// accounts (keys derived from their index) instead of one. Like the other numbers, kept within bounds;
    /// the first line of the report says what was used.
    payers: usize,
    /// `--signed-per-second N`: payment `i` is dated as a client signing it at `i / N` seconds into the
    /// run would date it; 0 (the default): every payment as signed at the start.
    signed_per_second: u64,
}

fn options() -> Options {
    let mut modes = Vec::new();
    let mut seconds = 8;
    let mut connections = 32;
    let mut pin = false;
    let mut payers = 1;
    let mut signed_per_second = 0;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--pin" => pin = true,
            "--payers" => payers = number(&a, args.next()),
            "--signed-per-second" => signed_per_second = number(&a, args.next()),
            "--seconds" => seconds = number(&a, args.next()),
            "--connections" => connections = number(&a, args.next()),
            m => modes.push(m.to_owned()),
        }
    }
    if modes.is_empty() {
        modes = ["402", "verify-only", "memory", "facilitator"]
            .map(String::from)
            .to_vec();
    }
    Options {
        modes,
        seconds: seconds.clamp(1, 120),
        connections: connections.clamp(1, 512),
        pin,
        payers: payers.clamp(1, MAX_PAYERS),
        signed_per_second,
    }
}

/// The value of the numeric option `name`, or the run stops with why (a typo must not measure the default).
fn number<T: std::str::FromStr>(name: &str, value: Option<String>) -> T {
    match value.as_deref().map(str::parse) {
        Some(Ok(v)) => v,
        _ => panic!("{name} takes a number, got {value:?}"),
    }
}

/// `--pin`: servers started on the second core (this tool pinned itself to the first).
static PIN_SERVERS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Runs `taskset` with `args`, or stops the run loudly (`--pin` needs it).
fn taskset(args: &[&str]) {
    let status = Command::new("taskset")
        .args(args)
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("--pin needs taskset (util-linux): {e}"));
    assert!(status.success(), "taskset {args:?} failed: {status}");
}

/// A server process, killed on drop; its stdout is drained so it never blocks on a full pipe.
struct Process {
    child: Child,
    url: String,
}

impl Process {
    fn start(args: &[String], dir: &std::path::Path) -> Process {
        let bin = server_bin();
        // Which server of the run (facilitator modes start two): names its kept logs.
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let mut command = if PIN_SERVERS.load(Ordering::Relaxed) {
            // taskset execs the server: the child's pid is the server's (its CPU is read from /proc).
            let mut c = Command::new("taskset");
            c.args(["-c", "1"]).arg(&bin);
            c
        } else {
            Command::new(&bin)
        };
        let mut child = command
            .args(server_args(&dir.join("media")))
            .args(args)
            .env("RUST_LOG", server_log())
            .stdout(Stdio::piped())
            .stderr(
                match std::env::var_os("LOAD_KEEP")
                    .and_then(|_| std::fs::File::create(dir.join(format!("server-{n}.log"))).ok())
                {
                    Some(f) => Stdio::from(f),
                    None => Stdio::null(),
                },
            )
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {bin} (cargo build --release -p reference-server): {e}")
            });
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = std::io::BufReader::new(stdout).lines();
        let first = lines.next().expect("banner").expect("utf-8");
        let log = std::env::var_os("LOAD_KEEP")
            .and_then(|_| std::fs::File::create(dir.join(format!("server-{n}.out"))).ok());
        std::thread::spawn(move || match log {
            Some(mut log) => lines.map_while(Result::ok).for_each(|l| {
                let _ = writeln!(log, "{l}");
            }),
            None => lines.for_each(drop),
        });
        let url = banner_url(&first)
            .expect("listen URL in the banner")
            .to_owned();
        Process { child, url }
    }

    /// Bytes passed to write system calls so far (`wchar` of `/proc/<pid>/io`: WAL, database, sockets).
    fn written(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/io", self.child.id()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("wchar:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// User + system CPU time so far.
    fn cpu(&self) -> Duration {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // Fields after the command name (which may contain spaces): utime and stime are the 12th and 13th.
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<u64> = after
            .split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        let ticks = fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
        // /proc reports in USER_HZ, 100 on Linux.
        Duration::from_millis(ticks * 10)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// User + system CPU time so far of every `postgres` process on the machine (the PostgreSQL modes add the
/// database's CPU to the server's: run them with no other PostgreSQL busy).
fn postgres_cpu() -> Duration {
    let mut ticks = 0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let Some((name, rest)) = stat.split_once(" (").and_then(|(_, r)| r.rsplit_once(')')) else {
            continue;
        };
        if name != "postgres" {
            continue;
        }
        let fields: Vec<u64> = rest
            .split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        ticks += fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
    }
    Duration::from_millis(ticks * 10)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_default()
}

/// The SQLite writer's group commits and the writes they carried so far, from a server's `/metrics`
/// (`sqlite_group_commits_total`, `sqlite_group_commit_writes_total`); zero on another backend.
async fn group_commits(client: &reqwest::Client, server: &str) -> (u64, u64) {
    let text = match client.get(format!("{server}/metrics")).send().await {
        Ok(resp) if resp.status().is_success() => resp.text().await.unwrap_or_default(),
        _ => String::new(),
    };
    let value = |name| workspace_tests::metrics::value(&text, name).unwrap_or(0);
    (
        value("sqlite_group_commits_total"),
        value("sqlite_group_commit_writes_total"),
    )
}

/// The article's PaymentRequired (v2), from an unpaid request.
async fn payment_required(client: &reqwest::Client, url: &str) -> Value {
    let resp = client.get(url).send().await.expect("GET");
    assert_eq!(resp.status(), 402, "expected a 402 from {url}");
    decode_b64_json(resp.headers()["payment-required"].to_str().expect("ascii"))
}

struct Outcome {
    ok: usize,
    other: usize,
    latencies: Vec<Duration>,
    elapsed: Duration,
}

/// Sends one request per payment (or unpaid requests when `payments` is empty, expecting `unpaid`) from
/// `connections` tasks (connection `i` to `urls[i % urls.len()]`) for at most `seconds`.
async fn drive(
    urls: &[String],
    payments: Arc<Vec<String>>,
    connections: usize,
    seconds: u64,
    unpaid: u16,
) -> Outcome {
    let client = client();
    let next = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..connections {
        let (client, url, next, payments) = (
            client.clone(),
            urls[c % urls.len()].clone(),
            next.clone(),
            payments.clone(),
        );
        tasks.spawn(async move {
            let (mut ok, mut other, mut latencies) = (0, 0, Vec::new());
            while Instant::now() < deadline {
                let mut req = client.get(&url);
                if !payments.is_empty() {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(p) = payments.get(i) else { break };
                    req = req.header("PAYMENT-SIGNATURE", p);
                }
                let t = Instant::now();
                let status = match req.send().await {
                    Ok(r) => {
                        let s = r.status().as_u16();
                        let _ = r.bytes().await;
                        s
                    }
                    Err(_) => 0,
                };
                latencies.push(t.elapsed());
                let expected = if payments.is_empty() { unpaid } else { 200 };
                if status == expected {
                    ok += 1;
                } else {
                    other += 1;
                }
            }
            (ok, other, latencies)
        });
    }
    let mut outcome = Outcome {
        ok: 0,
        other: 0,
        latencies: Vec::new(),
        elapsed: Duration::ZERO,
    };
    while let Some(r) = tasks.join_next().await {
        let (ok, other, latencies) = r.expect("load task");
        outcome.ok += ok;
        outcome.other += other;
        outcome.latencies.extend(latencies);
    }
    outcome.elapsed = start.elapsed();
    outcome.latencies.sort();
    outcome
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn report(mode: &str, o: &Outcome, cpu: Duration) {
    let n = o.ok + o.other;
    println!(
        "{mode:>12}: {:>8.0} ok/s  ({} ok, {} other)  p50 {:>7.2} ms  p99 {:>7.2} ms  server CPU {:>6.1} µs/request  load {}",
        o.ok as f64 / o.elapsed.as_secs_f64(),
        o.ok,
        o.other,
        percentile(&o.latencies, 0.50).as_secs_f64() * 1e3,
        percentile(&o.latencies, 0.99).as_secs_f64() * 1e3,
        cpu.as_secs_f64() * 1e6 / n.max(1) as f64,
        load_average(),
    );
}

/// Most accounts `--payers` takes.
const MAX_PAYERS: usize = 40_000;

/// Pre-signs `n` distinct payments for the server's article offer, cycling through `keys`. With
/// `per_second` > 0, payment `i` gets the `validBefore` a client signing it `i / per_second` seconds from now
/// would give it (now + `maxTimeoutSeconds` + that offset, at most 100 s: within every server's clock-skew
/// allowance), as payments signed while the load runs would be dated; with 0, every payment is dated now.
fn presign<K: AsRef<str>>(required: &Value, keys: &[K], n: usize, per_second: u64) -> Vec<String> {
    let horizon = required["accepts"][0]["maxTimeoutSeconds"]
        .as_u64()
        .expect("the offer's maxTimeoutSeconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    (0..n)
        .map(|i| {
            let knobs = Knobs {
                valid_before: (per_second > 0)
                    .then(|| now + horizon + (i as u64 / per_second).min(100)),
                ..Knobs::default()
            };
            pay_v2(keys[i % keys.len()].as_ref(), required, &knobs)
        })
        .collect()
}

/// The keys of the modes that move no money: the dev account the tool always used when `payers` is 1
/// (figures stay comparable with earlier runs), else `payers` keys derived from their index (a buyer
/// population: every payer-keyed index is then written at random places, as a real server's is).
fn payer_keys(payers: usize) -> Vec<String> {
    if payers <= 1 {
        return vec![DEV_KEYS[2].to_owned()];
    }
    (0..payers)
        .map(|i| {
            let key = alloy_primitives::keccak256(format!("x402 load payer {i}"));
            format!("{key}")
        })
        .collect()
}

async fn run(mode: &str, o: &Options) {
    let dir = std::env::temp_dir().join(format!("load-{mode}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let db = dir.join("db.sqlite3").display().to_string();
    let mut chain = None;
    let mut facilitator = None;
    let args: Vec<String> = match mode {
        "402" | "verify-only" => vec!["--database".into(), db],
        "memory" => vec!["--database".into(), ":memory:".into()],
        "facilitator" => {
            let f = Process::start(
                &[
                    "--database".into(),
                    dir.join("facilitator.sqlite3").display().to_string(),
                    "--facilitator-token".into(),
                    TOKEN.into(),
                ],
                &dir.join("f"),
            );
            let args = vec![
                "--database".into(),
                db,
                "--facilitator-url".into(),
                format!("{}/facilitator", f.url),
                "--facilitator-url-token".into(),
                TOKEN.into(),
            ];
            facilitator = Some(f);
            args
        }
        "onchain" => {
            let c = Chain::start().await;
            for key in &DEV_KEYS[2..] {
                c.mint(address_of(key), 1_000_000_000_000).await;
            }
            let args = vec![
                "--database".into(),
                db,
                "--network".into(),
                format!("eip155:{CHAIN_ID}"),
                "--asset".into(),
                c.usdc.to_checksum(None),
                "--asset-name".into(),
                TOKEN_NAME.into(),
                "--asset-version".into(),
                TOKEN_VERSION.into(),
                "--rpc-url".into(),
                c.anvil.url.clone(),
                "--settler-key".into(),
                DEV_KEYS[1].into(),
            ];
            chain = Some(c);
            args
        }
        "postgres" | "postgres-2" | "postgres-flood" | "flood" => {
            return run_scaled(mode, o, &dir, db).await;
        }
        other => {
            eprintln!(
                "unknown mode {other:?} (402, verify-only, memory, facilitator, onchain, postgres, \
                 postgres-2, flood, postgres-flood)"
            );
            return;
        }
    };
    let server = Process::start(&args, &dir);
    let url = format!("{}{ARTICLE}", server.url);
    let payments = if mode == "402" {
        Vec::new()
    } else {
        let required = payment_required(&client(), &url).await;
        // Enough for the whole run at a generous rate, bounded.
        let n = if mode == "onchain" { 3_000 } else { 40_000 };
        let keys: Vec<String> = if mode == "onchain" {
            if o.payers > 1 {
                eprintln!("onchain pays from its funded dev accounts; --payers is not used there");
            }
            DEV_KEYS[2..].iter().map(|k| (*k).to_owned()).collect()
        } else {
            payer_keys(o.payers)
        };
        presign(&required, &keys, n, o.signed_per_second)
    };
    let cpu = || server.cpu() + facilitator.as_ref().map_or(Duration::ZERO, Process::cpu);
    let written = || server.written() + facilitator.as_ref().map_or(0, Process::written);
    let http = client();
    let servers: Vec<&str> = std::iter::once(server.url.as_str())
        .chain(facilitator.as_ref().map(|f| f.url.as_str()))
        .collect();
    let mut commits_before = Vec::new();
    for s in &servers {
        commits_before.push(group_commits(&http, s).await);
    }
    let (before, written_before) = (cpu(), written());
    let outcome = drive(
        std::slice::from_ref(&url),
        Arc::new(payments),
        o.connections,
        o.seconds,
        402,
    )
    .await;
    report(mode, &outcome, cpu() - before);
    println!(
        "{:>12}  written {:.1} KB/request (WAL, database, responses)",
        "",
        (written() - written_before) as f64 / 1024.0 / (outcome.ok + outcome.other).max(1) as f64
    );
    let (mut commits, mut writes) = (0, 0);
    for (s, (c, w)) in servers.iter().zip(commits_before) {
        let (c2, w2) = group_commits(&http, s).await;
        commits += c2.saturating_sub(c);
        writes += w2.saturating_sub(w);
    }
    if commits > 0 {
        println!(
            "{:>12}  {:.2} SQLite commits/request, {:.1} writes per commit (every instance)",
            "",
            commits as f64 / (outcome.ok + outcome.other).max(1) as f64,
            writes as f64 / commits as f64
        );
    }
    drop(server);
    drop(facilitator);
    drop(chain);
    if std::env::var_os("LOAD_KEEP").is_some() {
        println!("    kept {} (LOAD_KEEP)", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A fresh database on the `LOAD_POSTGRES` cluster; its URL.
async fn fresh_postgres() -> String {
    let admin = std::env::var("LOAD_POSTGRES")
        .expect("LOAD_POSTGRES=postgres://postgres@127.0.0.1:<port>/postgres (an admin URL)");
    let (client, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
        .await
        .expect("connect to LOAD_POSTGRES");
    tokio::spawn(conn);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = format!("load_{}_{nanos}", std::process::id());
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create database");
    format!("{}/{name}", admin.rsplit_once('/').expect("admin URL").0)
}

/// The PostgreSQL modes and the llms.txt floods.
async fn run_scaled(mode: &str, o: &Options, dir: &std::path::Path, sqlite: String) {
    let db = if mode == "flood" {
        sqlite
    } else {
        fresh_postgres().await
    };
    let args = ["--database".to_owned(), db];
    let a = Process::start(&args, &dir.join("a"));
    let b = (mode != "postgres" && mode != "flood").then(|| Process::start(&args, &dir.join("b")));
    let buy_on = b.as_ref().unwrap_or(&a);
    let required = payment_required(&client(), &format!("{}{ARTICLE}", buy_on.url)).await;
    let payments = presign(
        &required,
        &payer_keys(o.payers),
        40_000,
        o.signed_per_second,
    );
    let cpu = || a.cpu() + b.as_ref().map_or(Duration::ZERO, Process::cpu);
    if mode == "postgres" || mode == "postgres-2" {
        let before_pg = postgres_cpu();
        let urls: Vec<String> = [Some(&a), b.as_ref()]
            .into_iter()
            .flatten()
            .map(|p| format!("{}{ARTICLE}", p.url))
            .collect();
        let before = cpu();
        let outcome = drive(&urls, Arc::new(payments), o.connections, o.seconds, 402).await;
        report(mode, &outcome, cpu() - before);
        let pg = postgres_cpu() - before_pg;
        println!(
            "{:>12}  + PostgreSQL CPU {:>6.1} µs/request",
            "",
            pg.as_secs_f64() * 1e6 / (outcome.ok + outcome.other).max(1) as f64
        );
    } else {
        // Purchases alone, then the same purchases while as many connections flood llms.txt.
        let buy = vec![format!("{}{ARTICLE}", buy_on.url)];
        let (alone, rest) = payments.split_at(payments.len() / 2);
        let outcome = drive(
            &buy,
            Arc::new(alone.to_vec()),
            o.connections / 2,
            o.seconds,
            402,
        )
        .await;
        report(&format!("{mode}: buy alone"), &outcome, Duration::ZERO);
        let flood = vec![format!("{}/serveLlmsTxt", a.url)];
        let (bought, flooded) = tokio::join!(
            drive(
                &buy,
                Arc::new(rest.to_vec()),
                o.connections / 2,
                o.seconds,
                402
            ),
            drive(
                &flood,
                Arc::new(Vec::new()),
                o.connections / 2,
                o.seconds,
                200
            ),
        );
        report(&format!("{mode}: buy"), &bought, Duration::ZERO);
        report(&format!("{mode}: llms.txt"), &flooded, Duration::ZERO);
    }
}

/// This process's user + system CPU time so far.
fn own_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let f: Vec<u64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    Duration::from_millis((f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)) * 10)
}

/// Whole purchases by the Rust client, then by `@x402/fetch`, against one `:memory:` instance.
async fn clients(o: &Options) {
    use x402_tower::client::{PaymentPolicy, reqwest::X402Middleware};
    let dir = std::env::temp_dir().join(format!("load-clients-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let server = Process::start(&["--database".into(), ":memory:".into()], &dir);
    let url = format!("{}{ARTICLE}", server.url);
    let key = DEV_KEYS[2];

    let signer: alloy_signer_local::PrivateKeySigner = key.parse().expect("key");
    let policy = PaymentPolicy::new(x402_tower::Price::from_usdc_decimal("1").expect("price"));
    let http = reqwest_middleware::ClientBuilder::new(client())
        .with(X402Middleware::new(signer, policy))
        .build();
    let deadline = Instant::now() + Duration::from_secs(o.seconds);
    let (ok, other) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (cpu0, server0, start) = (own_cpu(), server.cpu(), Instant::now());
    let tasks: Vec<_> = (0..o.connections)
        .map(|_| {
            let (http, url, ok, other) = (http.clone(), url.clone(), ok.clone(), other.clone());
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    match http.get(&url).send().await {
                        Ok(r) if r.status() == 200 => {
                            let _ = r.bytes().await;
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            other.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    let (elapsed, cpu, server_cpu) = (start.elapsed(), own_cpu() - cpu0, server.cpu() - server0);
    let ok = ok.load(Ordering::Relaxed);
    println!(
        "{:>12}: {:>8.0} purchases/s ({ok} ok, {} other)  client CPU {:>7.1} µs/purchase  server CPU {:>6.1} µs/purchase  load {}",
        "rust client",
        ok as f64 / elapsed.as_secs_f64(),
        other.load(Ordering::Relaxed),
        cpu.as_secs_f64() * 1e6 / ok.max(1) as f64,
        server_cpu.as_secs_f64() * 1e6 / ok.max(1) as f64,
        load_average(),
    );

    let server0 = server.cpu();
    let out = Command::new(workspace_tests::tools::node())
        .args([
            "buy-loop.mjs",
            &url,
            key,
            &o.seconds.to_string(),
            &o.connections.to_string(),
        ])
        .current_dir(workspace_tests::tools::js_dir())
        .stderr(Stdio::inherit())
        .output()
        .expect("node buy-loop.mjs");
    let server_cpu = server.cpu() - server0;
    let line = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line}"));
    let ok = v["ok"].as_u64().unwrap_or(0);
    println!(
        "{:>12}: {:>8.0} purchases/s ({ok} ok, {} other)  client CPU {:>7.1} µs/purchase  server CPU {:>6.1} µs/purchase  load {}",
        "@x402/fetch",
        ok as f64 / v["seconds"].as_f64().unwrap_or(1.0),
        v["other"],
        v["cpuMicros"].as_f64().unwrap_or(0.0) / ok.max(1) as f64,
        server_cpu.as_secs_f64() * 1e6 / ok.max(1) as f64,
        load_average(),
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let o = options();
    if o.pin {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        assert!(
            cores >= 2,
            "--pin needs two cores, this machine has {cores}"
        );
        // Before the runtime exists: its threads inherit the main thread's core.
        taskset(&["-p", "-c", "0", &std::process::id().to_string()]);
        PIN_SERVERS.store(true, Ordering::Relaxed);
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(load(o));
}

async fn load(o: Options) {
    println!(
        "reference-server load on 127.0.0.1: {} connections, {} s per mode, {} payer{}, {}{}",
        o.connections,
        o.seconds,
        o.payers,
        if o.payers == 1 { "" } else { "s" },
        if o.signed_per_second == 0 {
            "payments dated at pre-signing".to_owned()
        } else {
            format!("payments dated as signed {}/s", o.signed_per_second)
        },
        if o.pin {
            ", servers on core 1, load on core 0"
        } else {
            ""
        }
    );
    for mode in o.modes.clone() {
        if mode == "clients" {
            clients(&o).await;
        } else {
            run(&mode, &o).await;
        }
    }
}
