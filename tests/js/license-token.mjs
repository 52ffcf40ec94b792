// Compiles contracts/LicenseToken.sol with solc-js and OpenZeppelin from npm (offline), and prints
// {"abi": [...], "bytecode": "0x..."} as JSON on stdout. `--write` also writes contracts/LicenseToken.bin.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const solc = require("solc");
const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const source = fs.readFileSync(path.join(root, "contracts/LicenseToken.sol"), "utf8");

const input = {
  language: "Solidity",
  sources: { "LicenseToken.sol": { content: source } },
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: "cancun",
    metadata: { bytecodeHash: "none", appendCBOR: false },
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
  },
};
const findImports = (p) => {
  try {
    return { contents: fs.readFileSync(require.resolve(p), "utf8") };
  } catch (e) {
    return { error: `not found: ${p}` };
  }
};
const out = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
const errors = (out.errors || []).filter((e) => e.severity === "error");
if (errors.length) {
  console.error(errors.map((e) => e.formattedMessage).join("\n"));
  process.exit(1);
}
const c = out.contracts["LicenseToken.sol"].LicenseToken;
const bytecode = "0x" + c.evm.bytecode.object;
if (process.argv.includes("--write")) {
  fs.writeFileSync(path.join(root, "contracts/LicenseToken.bin"), bytecode + "\n");
}
console.log(JSON.stringify({ abi: c.abi, bytecode, compiler: solc.version() }));
