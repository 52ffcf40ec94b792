// Compiles Solidity with solc-js from npm (offline), resolving imports from node_modules, with the settings
// every contract of the workspace is built with.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const solc = require("solc");

/// Compiles the files at `paths`; returns {name: {abi, bytecode, runtime}} for every contract they define,
/// and the compiler's version. Exits the process with the compiler's errors.
export function compile(paths) {
  const sources = {};
  for (const p of paths) sources[path.basename(p)] = { content: fs.readFileSync(p, "utf8") };
  const input = {
    language: "Solidity",
    sources,
    settings: {
      optimizer: { enabled: true, runs: 200 },
      evmVersion: "cancun",
      metadata: { bytecodeHash: "none", appendCBOR: false },
      outputSelection: { "*": { "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] } },
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
  const contracts = {};
  for (const file of Object.keys(sources)) {
    for (const [name, c] of Object.entries(out.contracts[file] || {})) {
      contracts[name] = {
        abi: c.abi,
        bytecode: "0x" + c.evm.bytecode.object,
        runtime: "0x" + c.evm.deployedBytecode.object,
      };
    }
  }
  return { contracts, compiler: solc.version() };
}
