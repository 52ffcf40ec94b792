// Compiles contracts/LicenseToken.sol with solc-js and OpenZeppelin from npm (offline), and prints
// {"abi": [...], "bytecode": "0x..."} as JSON on stdout. `--write` also writes contracts/LicenseToken.bin.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { compile } from "./solidity.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const { contracts, compiler } = compile([path.join(root, "contracts/LicenseToken.sol")]);
const c = contracts.LicenseToken;
if (process.argv.includes("--write")) {
  fs.writeFileSync(path.join(root, "contracts/LicenseToken.bin"), c.bytecode + "\n");
}
console.log(JSON.stringify({ abi: c.abi, bytecode: c.bytecode, compiler }));
