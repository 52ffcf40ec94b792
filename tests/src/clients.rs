//! The official x402 clients (`tests/js/pay-v1.mjs`, `tests/js/pay-v2.mjs`, `tests/py/pay.py`) and the
//! official servers (`@x402/express` v2: `tests/js/express-server.mjs`; legacy `x402-express` v1:
//! `tests/js/express-v1-server.mjs`; the Python package's Flask middleware: `tests/py/flask_server.py`), run as
//! child processes.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::tools;

/// Which official client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// Legacy `x402-fetch` 1.x + viem (x402 v1).
    JsV1,
    /// `@x402/fetch` + `@x402/evm` 2.x.
    JsV2,
    /// PyPI `x402[evm,httpx]`.
    Python,
}

/// What a client script printed: `{status, body, receipt, receiptHeader, paymentHeader}`.
#[derive(Debug, Clone)]
pub struct Purchase {
    /// HTTP status of the final answer.
    pub status: u16,
    /// Its body.
    pub body: String,
    /// The decoded receipt header (null when absent).
    pub receipt: Value,
    /// The raw payment header the client sent (null when it sent none).
    pub payment_header: Value,
}

/// Runs `program` with `args` in `cwd`; its stdout (panics with stderr when it fails).
pub async fn run(program: &Path, args: &[&str], cwd: &Path) -> String {
    let (code, stdout, stderr) = output(program, args, cwd, &[]).await;
    assert!(
        code == 0,
        "{} {args:?} failed (exit {code}):\n{stderr}\n{stdout}",
        program.display(),
    );
    stdout
}

/// Runs `program` with `args` in `cwd`, with `env` set and `PAYER_KEY` unset, within four minutes: its exit
/// code (-1 when killed by a signal), stdout and stderr.
pub async fn output(
    program: &Path,
    args: &[&str],
    cwd: &Path,
    env: &[(&str, &str)],
) -> (i32, String, String) {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(cwd)
        .env_remove("PAYER_KEY")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let out = tokio::time::timeout(Duration::from_secs(240), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{} {args:?} did not finish within 240 s", program.display()))
        .expect("client output");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the Node.js script `script` of `tests/js` with `args` and parses the last line of its stdout that is a
/// JSON object (what the check scripts print).
pub async fn run_js_json(script: &str, args: &[&str]) -> Value {
    let mut all = vec![script];
    all.extend_from_slice(args);
    let stdout = run(&tools::node(), &all, &tools::js_dir()).await;
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line in {stdout}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// Buys `url` with `client`, paying with `key`.
pub async fn buy(client: Client, url: &str, key: &str) -> Purchase {
    let stdout = match client {
        Client::JsV1 => run(&tools::node(), &["pay-v1.mjs", url, key], &tools::js_dir()).await,
        Client::JsV2 => run(&tools::node(), &["pay-v2.mjs", url, key], &tools::js_dir()).await,
        Client::Python => run(&tools::python(), &["pay.py", url, key], &tools::py_dir()).await,
    };
    purchase(&stdout)
}

/// Buys `url` with the official v2 client (`@x402/fetch` + `@x402/evm`) paying with `key`, able to read the
/// chain at `rpc_url` (it then signs an EIP-2612 permit for Permit2 when the server offers gas sponsoring
/// and the payer's allowance is short).
pub async fn buy_reading_chain(url: &str, key: &str, rpc_url: &str) -> Purchase {
    let stdout = run(
        &tools::node(),
        &["pay-v2.mjs", url, key, rpc_url],
        &tools::js_dir(),
    )
    .await;
    purchase(&stdout)
}

fn purchase(stdout: &str) -> Purchase {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line in {stdout}"));
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    Purchase {
        status: v["status"].as_u64().expect("status") as u16,
        body: v["body"].as_str().unwrap_or_default().to_owned(),
        receipt: v["receipt"].clone(),
        payment_header: v["paymentHeader"].clone(),
    }
}

/// Which official resource server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// `@x402/express` 2.x (x402 v2, `PAYMENT-REQUIRED`).
    ExpressV2,
    /// Legacy `x402-express` 1.x (x402 v1, JSON body only; the network is a v1 name).
    ExpressV1,
    /// PyPI `x402`'s Flask middleware (x402 v2).
    Flask,
}

/// A running official server, killed on drop.
#[derive(Debug)]
pub struct ExpressServer {
    _child: Child,
    /// The URL of its paid route.
    pub url: String,
}

/// What the server sells, and through which facilitator.
#[derive(Debug, Clone)]
pub struct ExpressConfig {
    /// The facilitator's base URL (`.../facilitator`).
    pub facilitator: String,
    /// CAIP-2 network (a v1 name for [`Server::ExpressV1`]).
    pub network: String,
    /// Token address.
    pub asset: String,
    /// EIP-712 name.
    pub name: String,
    /// EIP-712 version.
    pub version: String,
    /// Recipient.
    pub pay_to: String,
    /// Price in atomic units.
    pub amount: String,
    /// Bearer token for the facilitator, if it requires one.
    pub facilitator_token: Option<String>,
}

impl ExpressServer {
    /// Starts `tests/js/express-server.mjs` and waits until it listens.
    pub async fn start(c: &ExpressConfig) -> ExpressServer {
        ExpressServer::start_kind(Server::ExpressV2, c).await
    }

    /// Starts `server` and waits until it listens.
    pub async fn start_kind(server: Server, c: &ExpressConfig) -> ExpressServer {
        let (program, script, cwd) = match server {
            Server::ExpressV2 => (tools::node(), "express-server.mjs", tools::js_dir()),
            Server::ExpressV1 => (tools::node(), "express-v1-server.mjs", tools::js_dir()),
            Server::Flask => (tools::python(), "flask_server.py", tools::py_dir()),
        };
        let mut child = Command::new(program)
            .args([
                script,
                &c.facilitator,
                &c.network,
                &c.asset,
                &c.name,
                &c.version,
                &c.pay_to,
                &c.amount,
            ])
            .current_dir(cwd)
            .envs(
                c.facilitator_token
                    .as_deref()
                    .map(|t| ("X402_FACILITATOR_TOKEN", t)),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {script}: {e}"));
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("{script} did not start within 60 s"))
            .expect("server output")
            .unwrap_or_else(|| panic!("{script} exited before listening"));
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        ExpressServer {
            _child: child,
            url: v["url"].as_str().expect("url").to_owned(),
        }
    }
}
