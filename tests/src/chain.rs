//! A local EVM (anvil from npm) with Circle's FiatTokenV2_2 deployed from its npm artifacts
//! (`eip3009.md` part 4).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use alloy_primitives::{Address, B256, Bytes, U256};
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{SolCall, sol};
use serde_json::{Value, json};

use crate::tools;

/// The public anvil/hardhat dev keys (mnemonic "test test ... junk"): test keys, known to everyone.
pub const DEV_KEYS: [&str; 10] = [
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
    "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba",
    "0x92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e",
    "0x4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356",
    "0xdbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97",
    "0x2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6",
];

/// anvil's chain id.
pub const CHAIN_ID: u64 = 31337;
/// The EIP-712 name the token is initialised with (as on Base mainnet).
pub const TOKEN_NAME: &str = "USD Coin";
/// The EIP-712 version.
pub const TOKEN_VERSION: &str = "2";

/// The address of a private key.
pub fn address_of(key: &str) -> Address {
    key.parse::<PrivateKeySigner>()
        .expect("a valid key")
        .address()
}

sol! {
    function initialize(string tokenName, string tokenSymbol, string tokenCurrency, uint8 tokenDecimals,
        address newMasterMinter, address newPauser, address newBlacklister, address newOwner);
    function initializeV2(string newName);
    function initializeV2_1(address lostAndFound);
    function initializeV2_2(address[] accountsToBlacklist, string newSymbol);
    function configureMinter(address minter, uint256 minterAllowedAmount);
    function mint(address to, uint256 amount);
    function balanceOf(address account) external view returns (uint256);
    function pause();
    function approve(address spender, uint256 amount) external returns (bool);
    function allowance(address owner, address spender) external view returns (uint256);
}

/// The chain id Permit2 is tested on: Permit2's runtime caches a domain separator computed for chain 31337
/// at its deployer's address, so on 31337 every signature fails (`x402-schemes.md` §2.1); 84532 is Base
/// Sepolia's, which the official clients know.
pub const PERMIT2_CHAIN_ID: u64 = 84532;

/// Permit2, the x402 proxies (runtime code) and the plain token (creation code), compiled once per process
/// by `tests/js/test-contracts.mjs`.
static TEST_CONTRACTS: tokio::sync::OnceCell<Value> = tokio::sync::OnceCell::const_new();

/// A running anvil, killed on drop.
#[derive(Debug)]
pub struct Anvil {
    child: Child,
    /// Its JSON-RPC URL.
    pub url: String,
}

impl Anvil {
    /// Starts the npm anvil binary on a free loopback port, as chain `chain_id`.
    pub fn start(chain_id: u64) -> Anvil {
        let bin = tools::anvil();
        let mut child = Command::new(&bin)
            .args([
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--chain-id",
                &chain_id.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start anvil at {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(addr) = line.trim().strip_prefix("Listening on ") {
                        break format!("http://{}", addr.trim());
                    }
                }
                _ => {
                    let _ = child.kill();
                    panic!("anvil exited before listening");
                }
            }
        };
        // Keep draining anvil's output so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
        Anvil { child, url }
    }
}

impl Drop for Anvil {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A JSON-RPC client for tests (panics on transport errors, returns node errors).
#[derive(Debug, Clone)]
pub struct Rpc {
    url: String,
    http: reqwest::Client,
}

impl Rpc {
    /// A client of `url`.
    pub fn new(url: &str) -> Rpc {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Rpc {
            url: url.to_owned(),
            http: reqwest::Client::new(),
        }
    }

    /// Calls `method`: `Ok(result)` or `Err(error object)`.
    pub async fn try_call(&self, method: &str, params: Value) -> Result<Value, Value> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let answer: Value = self
            .http
            .post(&self.url)
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method}: {e}"))
            .json()
            .await
            .unwrap_or_else(|e| panic!("{method}: {e}"));
        match answer.get("error") {
            Some(e) => Err(e.clone()),
            None => Ok(answer["result"].clone()),
        }
    }

    /// Calls `method`, panicking on an error.
    pub async fn call(&self, method: &str, params: Value) -> Value {
        self.try_call(method, params)
            .await
            .unwrap_or_else(|e| panic!("{method} failed: {e}"))
    }
}

/// anvil with FiatTokenV2_2 deployed and initialised; account #0 is its owner, master minter and pauser.
#[derive(Debug)]
pub struct Chain {
    /// The node (killed when the chain is dropped).
    pub anvil: Anvil,
    /// JSON-RPC client.
    pub rpc: Rpc,
    /// The token (FiatTokenV2_2).
    pub usdc: Address,
    /// Account #0: deployer and token admin.
    pub admin: Address,
}

fn artifact(relative: &str) -> Value {
    let path = tools::stablecoin_artifacts().join(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn bytecode(artifact: &Value) -> Vec<u8> {
    let hex = artifact["bytecode"].as_str().expect("bytecode");
    hex_decode(hex)
}

fn hex_decode(s: &str) -> Vec<u8> {
    let s = s.trim_start_matches("0x");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Parses a JSON-RPC hex quantity.
pub fn quantity(v: &Value) -> U256 {
    let s = v.as_str().unwrap_or_else(|| panic!("not a quantity: {v}"));
    U256::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex quantity")
}

impl Chain {
    /// Starts anvil (chain [`CHAIN_ID`]) and deploys SignatureChecker, FiatTokenV2_2 (linked) and
    /// initialises it.
    pub async fn start() -> Chain {
        Chain::start_as(CHAIN_ID).await
    }

    /// The same as [`Chain::start`] with another chain id (84532 lets legacy v1 clients, which only know
    /// network names, sign for it as `base-sepolia`).
    pub async fn start_as(chain_id: u64) -> Chain {
        let anvil = Anvil::start(chain_id);
        let rpc = Rpc::new(&anvil.url);
        let admin = address_of(DEV_KEYS[0]);
        let mut chain = Chain {
            anvil,
            rpc,
            usdc: Address::ZERO,
            admin,
        };

        let checker = chain
            .deploy(bytecode(&artifact(
                "util/SignatureChecker.sol/SignatureChecker.json",
            )))
            .await;
        let token_artifact = artifact("v2/FiatTokenV2_2.sol/FiatTokenV2_2.json");
        // Link: the 20 bytes at each link reference hold a `__$...$__` placeholder (not hex) until replaced.
        let mut code = token_artifact["bytecode"]
            .as_str()
            .expect("bytecode")
            .trim_start_matches("0x")
            .to_owned();
        let library = alloy_primitives::hex::encode(checker.as_slice());
        let links = &token_artifact["linkReferences"]["contracts/util/SignatureChecker.sol"]["SignatureChecker"];
        for link in links.as_array().expect("link references") {
            let start = 2 * link["start"].as_u64().expect("start") as usize;
            code.replace_range(start..start + 40, &library);
        }
        chain.usdc = chain.deploy(hex_decode(&code)).await;

        let max = U256::MAX;
        chain
            .send(
                initializeCall {
                    tokenName: TOKEN_NAME.into(),
                    tokenSymbol: "USDC".into(),
                    tokenCurrency: "USD".into(),
                    tokenDecimals: 6,
                    newMasterMinter: admin,
                    newPauser: admin,
                    newBlacklister: admin,
                    newOwner: admin,
                }
                .abi_encode(),
            )
            .await;
        chain
            .send(
                initializeV2Call {
                    newName: TOKEN_NAME.into(),
                }
                .abi_encode(),
            )
            .await;
        chain
            .send(
                initializeV2_1Call {
                    lostAndFound: admin,
                }
                .abi_encode(),
            )
            .await;
        chain
            .send(
                initializeV2_2Call {
                    accountsToBlacklist: vec![],
                    newSymbol: "USDC".into(),
                }
                .abi_encode(),
            )
            .await;
        chain
            .send(
                configureMinterCall {
                    minter: admin,
                    minterAllowedAmount: max,
                }
                .abi_encode(),
            )
            .await;
        chain
    }

    /// Waits (up to 30 s: anvil mines at once, a loaded machine may answer late) for the receipt of `hash`,
    /// which must have succeeded.
    async fn wait(&self, hash: &Value) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            let receipt = self
                .rpc
                .call("eth_getTransactionReceipt", json!([hash]))
                .await;
            if !receipt.is_null() {
                assert_eq!(
                    receipt["status"], "0x1",
                    "transaction {hash} reverted: {receipt}"
                );
                return receipt;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no receipt for {hash}");
    }

    /// Deploys the artifact at `relative` (under the stablecoin artifacts) with ABI-encoded constructor
    /// arguments appended.
    pub async fn deploy_artifact(&self, relative: &str, constructor_args: &[u8]) -> Address {
        let mut code = bytecode(&artifact(relative));
        code.extend_from_slice(constructor_args);
        self.deploy(code).await
    }

    /// Sends `data` to `to` from the admin and waits for success.
    pub async fn transact(&self, to: Address, data: Vec<u8>) -> Value {
        self.transact_from(self.admin, to, data).await
    }

    async fn deploy(&self, code: Vec<u8>) -> Address {
        let hash = self
            .rpc
            .call(
                "eth_sendTransaction",
                json!([{"from": self.admin, "data": Bytes::from(code), "gas": "0x1c9c380"}]),
            )
            .await;
        let receipt = self.wait(&hash).await;
        receipt["contractAddress"]
            .as_str()
            .expect("contract address")
            .parse()
            .expect("address")
    }

    /// Sends `data` to the token from the admin and waits for success.
    pub async fn send(&self, data: Vec<u8>) -> Value {
        self.transact_from(self.admin, self.usdc, data).await
    }

    /// Mints `amount` atomic units to `to`.
    pub async fn mint(&self, to: Address, amount: u64) {
        self.send(
            mintCall {
                to,
                amount: U256::from(amount),
            }
            .abi_encode(),
        )
        .await;
    }

    /// Pauses the token.
    pub async fn pause(&self) {
        self.send(pauseCall {}.abi_encode()).await;
    }

    /// The token balance of `who`, read from the chain.
    pub async fn balance(&self, who: Address) -> U256 {
        self.balance_of(self.usdc, who).await
    }

    /// Deploys `MockERC1271Wallet(owner)` and returns its runtime code (to put at a payer's address).
    pub async fn erc1271_wallet_code(&self, owner: Address) -> Value {
        let mut code = bytecode(&artifact(
            "test/MockERC1271Wallet.sol/MockERC1271Wallet.json",
        ));
        code.extend_from_slice(owner.into_word().as_slice());
        let wallet = self.deploy(code).await;
        self.rpc
            .call("eth_getCode", json!([wallet, "latest"]))
            .await
    }

    /// Gives `who` the code `code` (anvil_setCode): a payer address with code.
    pub async fn set_code(&self, who: Address, code: &Value) {
        self.rpc.call("anvil_setCode", json!([who, code])).await;
    }

    /// Mines `blocks` empty blocks.
    pub async fn mine(&self, blocks: u64) {
        self.rpc
            .call("anvil_mine", json!([format!("{blocks:#x}")]))
            .await;
    }

    /// Moves the chain's clock `seconds` ahead and mines a block.
    pub async fn advance_time(&self, seconds: u64) {
        self.rpc.call("evm_increaseTime", json!([seconds])).await;
        self.rpc.call("evm_mine", json!([])).await;
    }

    /// Puts Permit2 and the x402 exact and upto proxies at their canonical addresses (`anvil_setCode`) and
    /// deploys a plain ERC-20 without EIP-3009 (six decimals, anyone may mint): its address. The chain must
    /// not be 31337 ([`PERMIT2_CHAIN_ID`]).
    pub async fn install_permit2(&self) -> Address {
        let contracts = TEST_CONTRACTS
            .get_or_init(|| crate::clients::run_js_json("test-contracts.mjs", &[]))
            .await;
        let code = |name: &str| contracts[name].clone();
        use x402_tower::scheme::{EXACT_PERMIT2_PROXY, PERMIT2, UPTO_PERMIT2_PROXY};
        self.set_code(PERMIT2, &code("permit2")).await;
        self.set_code(EXACT_PERMIT2_PROXY, &code("exactProxy"))
            .await;
        self.set_code(UPTO_PERMIT2_PROXY, &code("uptoProxy")).await;
        self.deploy(hex_decode(
            contracts["plainToken"].as_str().expect("plain token code"),
        ))
        .await
    }

    /// `owner` (an unlocked dev account) approves Permit2 for all of its `token`.
    pub async fn approve_permit2(&self, token: Address, owner: Address) {
        let data = approveCall {
            spender: x402_tower::scheme::PERMIT2,
            amount: U256::MAX,
        }
        .abi_encode();
        self.transact_from(owner, token, data).await;
    }

    /// Sends `data` to `to` from `from` (an unlocked or impersonated account) and waits for success: the
    /// receipt.
    pub async fn transact_from(&self, from: Address, to: Address, data: Vec<u8>) -> Value {
        let hash = self
            .rpc
            .call(
                "eth_sendTransaction",
                json!([{"from": from, "to": to, "data": Bytes::from(data)}]),
            )
            .await;
        self.wait(&hash).await
    }

    /// Mints `amount` of the plain token at `token` to `to` (anyone may).
    pub async fn mint_plain(&self, token: Address, to: Address, amount: u64) {
        self.transact(
            token,
            mintCall {
                to,
                amount: U256::from(amount),
            }
            .abi_encode(),
        )
        .await;
    }

    /// The `token` balance of `who`.
    pub async fn balance_of(&self, token: Address, who: Address) -> U256 {
        let data = Bytes::from(balanceOfCall { account: who }.abi_encode());
        let out = self
            .rpc
            .call("eth_call", json!([{"to": token, "data": data}, "latest"]))
            .await;
        quantity(&out)
    }

    /// The receipt of a mined transaction, or `None`.
    pub async fn receipt(&self, hash: B256) -> Option<Value> {
        let r = self
            .rpc
            .call("eth_getTransactionReceipt", json!([hash]))
            .await;
        (!r.is_null()).then_some(r)
    }
}
