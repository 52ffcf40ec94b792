// The contracts a local test chain needs besides USDC, as JSON on stdout:
// {"permit2": "<runtime hex>", "exactProxy": "...", "uptoProxy": "...", "plainToken": "<creation hex>"}.
// Permit2's runtime is the one `@uniswap/v4-periphery` ships for tests (`DeployPermit2.sol`); the x402
// proxies and the plain token are this project's (`tests/contracts/`), compiled with solc-js.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { compile } from "./solidity.mjs";

const require = createRequire(import.meta.url);
const here = path.dirname(fileURLToPath(import.meta.url));
const dir = path.resolve(here, "../contracts");

const deployer = fs.readFileSync(
  require.resolve("@uniswap/v4-periphery/lib/permit2/test/utils/DeployPermit2.sol"),
  "utf8",
);
const found = deployer.match(/hex"([0-9a-fA-F]+)"/);
if (!found) {
  console.error("no Permit2 runtime in DeployPermit2.sol");
  process.exit(1);
}
const { contracts } = compile([path.join(dir, "Permit2Proxies.sol"), path.join(dir, "PlainToken.sol")]);
console.log(
  JSON.stringify({
    permit2: "0x" + found[1],
    exactProxy: contracts.x402ExactPermit2Proxy.runtime,
    uptoProxy: contracts.x402UptoPermit2Proxy.runtime,
    plainToken: contracts.PlainToken.bytecode,
  }),
);
